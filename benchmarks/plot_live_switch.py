"""Redraw the workbench's live throughput plot from benchmarks/live_switch_check.py's JSON.

    python -m benchmarks.plot_live_switch live_switch.json docs/live-switch.html [PNG]

The figure is the one :class:`~widgets.panels.LivePlots` shows (same panel, fed the
recorded throughput rows and kernel events); with a PNG path, headless Chromium (through
Playwright) takes a picture of the HTML.
"""

import json
import sys
from pathlib import Path

import numpy as np

from widgets.kernel_switches import KernelEvent
from widgets.panels.live_plots import LivePlots
from widgets.snapshot import RunState, Snapshot
from workbench.model.options import KernelOptions
from workbench.units import ns_per_day

record = json.loads(Path(sys.argv[1]).read_text())
html = Path(sys.argv[2])
events = tuple(
    KernelEvent(e["step"], e["wall_s"], *[KernelOptions.parse(e["label"])] * 2)
    for e in record["events"]
    if e["message"] is None  # switches only, not the engine's notes about them
)
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
                     f"{record['gpu']}: a kernel switched on and off in a running simulation")
figure.write_html(html, include_plotlyjs="cdn" if len(sys.argv) < 4 else True)
if len(sys.argv) > 3:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium")
        page = browser.new_page(viewport={"width": 940, "height": 330})
        page.goto(html.resolve().as_uri())
        page.wait_for_timeout(1500)
        page.screenshot(path=sys.argv[3])
        browser.close()
