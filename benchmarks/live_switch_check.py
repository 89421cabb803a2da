"""Switch kernels, or a network's backend, in a running GPU simulation as the Kernels panel
does, keep what the live throughput plot receives, and redraw that plot from the record.

    python -m benchmarks.live_switch_check OUT.json [protein] [replicas] [seconds/phase] [device]
    python -m benchmarks.live_switch_check --backends e3nn,openequivariance OUT.json [protein]
        [replicas] [seconds/phase] [device]
    python -m benchmarks.live_switch_check --plot OUT.json docs/live-switch.html [PNG]

The run (until stopped, headless :class:`~widgets.controller.SimulationController`) starts on
the PyTorch reference path, switches to the fastest path, then back. With ``--backends`` it
runs the protein's shipped NequIP model (`workbench run --arch nequip`'s default) with the
kernels of its long run (`BACKEND_KERNELS`) on the first backend and switches the
convolution backend to each next one, as the Kernels panel's selector does. The JSON holds
the controller's throughput rows and kernel events (what :class:`~widgets.panels.LivePlots`
draws); the median throughput of each phase is printed.

``--plot`` redraws the figure :class:`~widgets.panels.LivePlots` shows (same panel, fed the
recorded throughput rows and kernel events) as HTML; with a PNG path, headless Chromium
(through Playwright) takes a picture of it.
"""

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from widgets.controller import SimulationController
from widgets.kernel_switches import KernelEvent
from widgets.panels.live_plots import LivePlots
from widgets.snapshot import RunState, Snapshot
from workbench.model.options import KernelOptions
from workbench.runner import RunSettings
from workbench.units import ns_per_day

#: The kernels of a NequIP run whose backend is switched: those of the shipped model's long
#: run (captured on OpenEquivariance; eager, with a notice, on the other backends).
BACKEND_KERNELS = "tabulated_filter+cuda_graph+fused_pair_search+fused_integrator"


def switches(events: list[dict]) -> list[dict]:
    """The recorded events after the start that changed the switches or the backend (not
    the engine's notes about them, nor refused requests)."""
    return [event for before, event in zip(events, events[1:], strict=False)
            if event["step"] > 0 and (event["label"], event.get("backend"))
            != (before["label"], before.get("backend"))]


def record(argv: list[str], backends: list[str] | None = None) -> None:
    """Run the switches and write the record (arguments: OUT.json [protein] [replicas]
    [seconds/phase] [device]; ``backends``: switch a NequIP network's backend through these
    instead of the kernels)."""
    out = argv[0]
    protein = argv[1] if len(argv) > 1 else ("cln025" if backends else "1enh")
    replicas = int(argv[2]) if len(argv) > 2 else 64
    seconds = float(argv[3]) if len(argv) > 3 else 12.0
    device = argv[4] if len(argv) > 4 else "cuda"
    if backends:
        phases = [(backend, backend) for backend in backends]
        settings = RunSettings(protein=protein, replicas=replicas, device=device,
                               save_interval=500, architecture="nequip", tp_backend=backends[0],
                               options=KernelOptions.parse(BACKEND_KERNELS))
    else:
        phases = [
            ("baseline", KernelOptions.baseline()),
            ("tables+graph", KernelOptions.parse("tables+graph")),
            ("baseline", KernelOptions.baseline()),
        ]
        settings = RunSettings(protein=protein, replicas=replicas, device=device,
                               save_interval=500, options=phases[0][1])
    controller = SimulationController(settings, until_stopped=True)
    controller.start()
    while controller.snapshot().step == 0 and controller.state == RunState.RUNNING:
        time.sleep(0.2)
    for _, change in phases[1:]:
        time.sleep(seconds)
        if backends:
            controller.set_backend(change)
        else:
            controller.set_options(change)
    time.sleep(seconds)
    controller.stop()
    controller.wait(60)
    snap = controller.snapshot()
    rows = {k: [float(x) for x in v] for k, v in snap.throughput.items()}
    events = [{"step": e.step, "wall_s": e.wall_s, "label": e.label, "message": e.message,
               "backend": e.backend} for e in snap.events]
    bounds = [0, *(e["step"] for e in switches(events)), float("inf")]
    medians = []
    for k in range(len(bounds) - 1):
        rates = [r for s, r in zip(rows["step"], rows["timestep_mol_per_s"], strict=True)
                 if bounds[k] < s <= bounds[k + 1]]
        medians.append(statistics.median(rates[1:]) if len(rates) > 1 else float("nan"))
    result = {
        "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
        "protein": protein, "replicas": replicas,
        "state": snap.state.value, "error": snap.error, "phases": [p for p, _ in phases],
        "median_timestep_mol_per_s": medians, "events": events, "throughput": rows,
    }
    with open(out, "w") as handle:
        json.dump(result, handle, indent=1)
    for (name, _), median in zip(phases, medians, strict=False):
        print(f"{name:>14}: {median:,.0f} timestep·mol/s")
    print(f"state {snap.state.value}, error {snap.error}, events {[e['label'] for e in events]}")


def plot(argv: list[str]) -> None:
    """Draw the live throughput plot of a record (arguments: OUT.json HTML [PNG])."""
    record = json.loads(Path(argv[0]).read_text())
    html = Path(argv[1])
    events = tuple(
        KernelEvent(e["step"], e["wall_s"], *[KernelOptions.parse(e["label"])] * 2, None,
                    e.get("backend"))
        for e in [record["events"][0], *switches(record["events"])]
    )
    what = ("the convolution backend switched" if len({e.backend for e in events}) > 1
            else "a kernel switched on and off")
    throughput = {k: np.asarray(v) for k, v in record["throughput"].items()}
    mean = float(np.average(throughput["timestep_mol_per_s"], weights=throughput["seconds"]))
    snapshot = Snapshot(
        state=RunState(record["state"]), replicas=record["replicas"], timestep_fs=4.0,
        device=record["gpu"] or "cpu", throughput=throughput, events=events,
        mean_timestep_mol_per_s=mean, mean_ns_per_day=ns_per_day(mean, 4.0),
    )
    panel = LivePlots(width=900)
    panel._draw_throughput(snapshot)
    figure = panel.throughput_figure
    figure.update_layout(title_text=f"{record['protein'].upper()} × {record['replicas']} on "
                         f"{record['gpu']}: {what} in a running simulation")
    figure.write_html(html, include_plotlyjs="cdn" if len(argv) < 3 else True)
    if len(argv) > 2:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium")
            page = browser.new_page(viewport={"width": 940, "height": 330})
            page.goto(html.resolve().as_uri())
            page.wait_for_timeout(1500)
            page.screenshot(path=argv[2])
            browser.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--plot"]:
        plot(sys.argv[2:])
    elif sys.argv[1:2] == ["--backends"]:
        record(sys.argv[3:], sys.argv[2].split(","))
    else:
        record(sys.argv[1:])
