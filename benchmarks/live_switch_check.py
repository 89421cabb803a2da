"""Switch kernels in a running GPU simulation as the Kernels panel does, and keep what the
live throughput plot receives.

    python -m benchmarks.live_switch_check OUT.json [protein] [replicas] [seconds/phase] [device]

The run (until stopped, headless :class:`~widgets.controller.SimulationController`) starts on
the PyTorch reference path, switches to the fastest path, then back. The JSON holds the
controller's throughput rows and kernel events (what :class:`~widgets.panels.LivePlots`
draws); the median throughput of each phase is printed. Redraw the plot with
``benchmarks/plot_live_switch.py``.
"""

import json
import statistics
import sys
import time

import torch

from widgets.controller import SimulationController
from widgets.snapshot import RunState
from workbench.model.options import KernelOptions
from workbench.runner import RunSettings

out = sys.argv[1]
protein = sys.argv[2] if len(sys.argv) > 2 else "1enh"
replicas = int(sys.argv[3]) if len(sys.argv) > 3 else 64
seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 12.0
device = sys.argv[5] if len(sys.argv) > 5 else "cuda"
phases = [
    ("baseline", KernelOptions.baseline()),
    ("tables+graph", KernelOptions.parse("tables+graph")),
    ("baseline", KernelOptions.baseline()),
]
settings = RunSettings(protein=protein, replicas=replicas, device=device, save_interval=500,
                       options=phases[0][1])
controller = SimulationController(settings, until_stopped=True)
controller.start()
while controller.snapshot().step == 0 and controller.state == RunState.RUNNING:
    time.sleep(0.2)
for _, options in phases[1:]:
    time.sleep(seconds)
    controller.set_options(options)
time.sleep(seconds)
controller.stop()
controller.wait(60)
snap = controller.snapshot()
rows = {k: [float(x) for x in v] for k, v in snap.throughput.items()}
events = [{"step": e.step, "wall_s": e.wall_s, "label": e.label, "message": e.message}
          for e in snap.events]
# phases end at the switches (not at the engine's notes about them, nor the start)
switches = [e["step"] for e in events if e["message"] is None and e["step"] > 0]
bounds = [0, *switches, float("inf")]
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
