"""Write the workbench notebooks (run ``python notebooks/build_notebooks.py``).

The notebooks are generated so that they stay reproducible and reviewable as code;
the generated ``.ipynb`` files are committed next to this script. Their runs follow the
mode (`widgets.modes`): seconds in ``demo`` (tests), about two minutes with folding and
unfolding in ``laptop`` (the default without a GPU), full length on a GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the ablation's table and order, from the repository
from benchmarks.ablation import DOC, doc_table  # noqa: E402
from workbench.model.ablation import BEYOND_PAPER, CUMULATIVE, TURNS_ON, WALK  # noqa: E402

SHORT_NOTE = (
    "Runs follow the mode: `laptop` without a GPU (CLN025 × 8 with its trained model at "
    "340 K, half the replicas started unfolded, about two minutes), `full` on a GPU, "
    "`demo` for a few seconds (`WORKBENCH_MODE=demo|laptop|full`)."
)


def quickstart() -> list:
    """01: the whole workbench, ready to start."""
    return [
        new_markdown_cell(
            "# CG workbench: quickstart\n\n"
            "Press **Start** to launch replicas of the chosen protein. Throughput, GPU memory, "
            "RMSD and Q update live; the 3-D view follows one replica. **Pause**, **Resume** "
            "and **Stop** act on the running simulation, and the kernel toggles switch fused "
            "techniques on and off while it runs (the throughput plot marks each switch).\n\n"
            + SHORT_NOTE
        ),
        new_code_cell("from widgets import Workbench\n\nworkbench = Workbench()\nworkbench"),
        new_markdown_cell(
            "The same run can be driven from code: `workbench.start()`, then "
            "`workbench.controller.pause()`, `.resume()`, `.stop()`, and "
            "`workbench.controller.snapshot()` for the recorded data."
        ),
    ]


def explore_folding() -> list:
    """02: run, then free-energy surface, largest metastable Q and GDT-TS."""
    return [
        new_markdown_cell(
            "# Explore folding\n\n"
            "Run replicas, then look at the free-energy surface over RMSD × Q, the largest "
            "metastable Q and the GDT-TS of the final structures. " + SHORT_NOTE
        ),
        new_code_cell(
            "import ipywidgets as ipw\n"
            "import numpy as np\n"
            "import plotly.graph_objects as go\n"
            "import torch\n"
            "\n"
            "from widgets import (\n"
            "    LivePlots,\n"
            "    SimulationController,\n"
            "    Structure3D,\n"
            "    default_settings,\n"
            "    run_mode,\n"
            ")\n"
            "from workbench.analysis import free_energy_surface, gdt_ts, largest_metastable_q\n"
            "from workbench.teacher import state_thresholds\n"
            "from workbench.training.validate import count_transitions\n"
            "\n"
            "mode = run_mode()\n"
            "settings = default_settings()\n"
            "settings"
        ),
        new_code_cell(
            "controller = SimulationController(settings, max_seconds=mode.seconds)\n"
            "ipw.VBox([LivePlots(controller), Structure3D(controller)])"
        ),
        new_code_cell(
            "controller.start()\n"
            "controller.wait()\n"
            "snapshot = controller.snapshot()\n"
            "if snapshot.error:\n"
            "    raise RuntimeError(snapshot.error)\n"
            'print(f"{snapshot.state.value}: {snapshot.step} steps of {snapshot.replicas} '
            'replicas, "\n'
            '      f"{snapshot.mean_timestep_mol_per_s:.1f} timestep·mol/s")'
        ),
        new_markdown_cell(
            "## Folding and unfolding events\n\n"
            "A replica is folded once its Q passes the protein's folded threshold and "
            "unfolded once Q falls below the unfolded one; every change between the two is "
            "an event."
        ),
        new_code_cell(
            "folded, unfolded = state_thresholds(settings.protein)\n"
            "q_series = torch.as_tensor(snapshot.metrics['q']).T  # (replicas, saves)\n"
            "folding, unfolding = count_transitions(q_series, folded, unfolded)\n"
            "time_ps = snapshot.step * settings.timestep_fs / 1000\n"
            'print(f"{folding} folding and {unfolding} unfolding events in {time_ps:.1f} ps "\n'
            '      f"of {snapshot.replicas} replicas (folded: Q > {folded}, unfolded: Q < '
            '{unfolded})")'
        ),
        new_markdown_cell("## Free-energy surface over RMSD × Q"),
        new_code_cell(
            "rmsd = snapshot.metrics['rmsd'].ravel()\n"
            "q = snapshot.metrics['q'].ravel()\n"
            "bins = (15, 15) if mode.name == 'demo' else (40, 40)\n"
            "free_energy, rmsd_edges, q_edges = free_energy_surface(rmsd, q, "
            "settings.temperature, bins=bins)\n"
            "figure = go.Figure(go.Heatmap(\n"
            "    x=0.5 * (rmsd_edges[1:] + rmsd_edges[:-1]),\n"
            "    y=0.5 * (q_edges[1:] + q_edges[:-1]),\n"
            "    z=np.where(np.isfinite(free_energy), free_energy, np.nan).T,\n"
            "    colorscale='Viridis', colorbar={'title': 'kcal/mol'},\n"
            "))\n"
            "figure.update_layout(title='Free energy −k_B T ln p(RMSD, Q)', "
            "xaxis_title='RMSD (Å)',\n"
            "                     yaxis_title='Q', height=420)\n"
            "figure"
        ),
        new_markdown_cell("## Largest metastable Q and GDT-TS"),
        new_code_cell(
            "metastable_q = largest_metastable_q(q)\n"
            "step, positions = controller.frames()[-1]\n"
            "system = snapshot.system\n"
            "ca_index = system.ca_index.cpu()\n"
            "final_ca = torch.as_tensor(positions)[:, ca_index]\n"
            "native_ca = system.native_positions.cpu()[ca_index]\n"
            "scores = gdt_ts(final_ca, native_ca).numpy()\n"
            'print(f"largest metastable Q: {metastable_q:.3f}")\n'
            'print(f"GDT-TS at step {step}, per replica:", np.round(scores, 3))'
        ),
    ]


def ablation_text() -> str:
    """The ablation's chart (docs/images/ablation.png) and table (docs/kernels.md, written by
    ``python -m benchmarks.ablation --docs``), as Markdown."""
    table = doc_table(DOC.read_text()) or "(no ablation table in docs/kernels.md yet)"
    return (
        "## The ablation\n\n"
        "The speedups behind the demo, as the paper shows them: the baseline, each "
        "technique alone, then the techniques added one at a time (FP32, then FP16 MLPs), "
        "captured steps and, beyond the paper, the tabulated filters, on five proteins "
        "(`make ablation` on a GPU regenerates the chart and the table; "
        "[docs/kernels.md](../docs/kernels.md#ablation) says what each technique is).\n\n"
        "![Speedup of each ablation step against the baseline, per protein]"
        "(../docs/images/ablation.png)\n\n" + table
    )


def walk_text() -> str:
    """The live-switch section's introduction: the walk's steps, in the ablation's order,
    each with what it turns on."""
    lines = [
        "## Switching kernels in a running simulation\n",
        "Switch the kernels by hand while the run goes on, or press **Walk through the "
        "techniques** (the cell after the panel starts the walk from code): one technique "
        "at a time in the ablation's order, each held 15 s (1 s in `demo` mode); the "
        "status line says what "
        "each step turns on and the throughput plot marks it. Off a GPU the fused kernels "
        "cannot run and the panel says so at each step.\n",
        "1. `baseline`: the PyTorch reference path",
    ]
    for number, name in enumerate(WALK, start=2):
        label = "fp32→fp16" if name == "mlp_fp16" else f"+{name}"
        note = (" (with the steps before it: `all`)" if name == CUMULATIVE[-1] else
                " (beyond the paper)" if name in BEYOND_PAPER else "")
        lines.append(f"{number}. `{label}`: {TURNS_ON[name]}{note}")
    return "\n".join(lines)


def speedup_demo() -> list:
    """03: the A/B race and the live switches, in projector mode."""
    return [
        new_markdown_cell(
            "# Speedup demo\n\n"
            "Made for a projector (the **Projector mode** switch scales every text, control "
            "and plot; turn it off at a desk). First a race of the PyTorch baseline (A) "
            "against the fastest path (B: tabulated filters in captured CUDA-graph steps; "
            "pick others in the B menu) on the same system, seeds and device; then one "
            "running simulation whose kernels are switched on and off while the throughput "
            "plot runs, by hand or by **Walk through the techniques**, which turns them on "
            "one after another as in an ablation. Where a configuration cannot run as asked "
            "(no GPU: B then keeps only the tabulated filters, in PyTorch), the panels say so "
            "instead of showing a speedup. " + SHORT_NOTE
        ),
        new_code_cell(
            "import ipywidgets as ipw\n"
            "\n"
            "from widgets import (\n"
            "    ComparePanel,\n"
            "    LiveSwitchPanel,\n"
            "    ProjectorSwitch,\n"
            "    default_settings,\n"
            "    run_mode,\n"
            ")\n"
            "\n"
            "mode = run_mode()\n"
            "settings = default_settings(\n"
            "    protein='1enh' if mode.name == 'full' else 'cln025',\n"
            "    steps=mode.race_steps,\n"
            "    denatured_fraction=0.0,\n"
            ")\n"
            "compare = ComparePanel(settings=settings)\n"
            "live = LiveSwitchPanel(settings, hold_seconds=1 if mode.name == 'demo' else 15)\n"
            "projector = ProjectorSwitch(\n"
            "    [compare, live], figures=lambda: {**compare.figures(), **live.figures()}, "
            "value=True\n"
            ")\n"
            "ipw.VBox([projector, compare])"
        ),
        new_code_cell(
            "runner = compare.run()\n"
            "runner.wait()\n"
            "race = runner.snapshot()\n"
            "if race.error:\n"
            "    raise RuntimeError(race.error)\n"
            "if race.speedup is None:\n"
            "    print(race.fallback_note)\n"
            "else:\n"
            '    print(f"speedup B/A: {race.speedup:.2f}x")\n'
            "for side in (race.a, race.b):\n"
            '    print(f"{side.name} ({side.label}): {side.mean_rate:.1f} timestep·mol/s, "\n'
            '          f"peak memory {side.peak_memory_gb} GB")\n'
            'print("largest force deviation A-B:", race.deviation_end)'
        ),
        new_markdown_cell(ablation_text()),
        new_markdown_cell(walk_text()),
        new_code_cell("live"),
        new_code_cell(
            "live.walk_through()\n"
            "live.wait_walk()\n"
            "live.stop()\n"
            "for event in live.controller.snapshot().events:\n"
            '    print(f"step {event.step}: {event.label}", event.message or "")'
        ),
    ]


def topology_changes() -> list:
    """04: the neighbour graph of an unfolding protein, recorded and live."""
    return [
        new_markdown_cell(
            "# Topology changes during unfolding\n\n"
            "A recorded run that ships with the workbench: the engrailed homeodomain (1ENH) "
            "with its trained CGSchNet model at 450 K, four replicas over 400 ps. Move the "
            "**frame** slider (or press play) and every panel follows: the adjacency heatmap "
            "of one replica with its native contacts marked formed or broken, the edges "
            "added (green) and removed (red) since the previous frame, the edge count over "
            "time and the 3-D structure. Any folder written by `workbench run` opens the "
            "same way (`replay_panel.open_folder('runs/...')`), finished or still running."
        ),
        new_code_cell(
            "import ipywidgets as ipw\n"
            "from plotly.subplots import make_subplots\n"
            "\n"
            "from widgets import (\n"
            "    AdjacencyPanel,\n"
            "    LivePlots,\n"
            "    ReplayPanel,\n"
            "    SimulationController,\n"
            "    Structure3D,\n"
            "    default_settings,\n"
            "    run_mode,\n"
            ")\n"
            "from widgets.adjacency_frames import diff_codes, edge_counts, frame_adjacency\n"
            "from workbench.run_folder import recorded_run\n"
            "\n"
            "replay_panel = ReplayPanel()\n"
            "adjacency, structure, plots = AdjacencyPanel(), Structure3D(), LivePlots()\n"
            "\n"
            "\n"
            "def follow(replay):\n"
            "    for panel in (adjacency, structure, plots):\n"
            "        panel.attach(replay)\n"
            "\n"
            "\n"
            "replay_panel.on_open(follow)\n"
            "replay = replay_panel.open_folder(recorded_run('1enh-unfolding'))\n"
            "ipw.VBox([replay_panel, adjacency, ipw.HBox([structure, plots])])"
        ),
        new_markdown_cell("## First frame, last frame and what changed (replica 0, residues)"),
        new_code_cell(
            "run = replay.run\n"
            "steps = run.frame_steps\n"
            "adjacency_stack = frame_adjacency(run.frames[:, 0], run.system, run.cutoff, "
            "level='residue')\n"
            "codes = diff_codes(adjacency_stack[0], adjacency_stack[-1])\n"
            "figure = make_subplots(rows=1, cols=3, subplot_titles=(\n"
            "    f'step {steps[0]:,}', f'step {steps[-1]:,}', 'added (green) / removed (red)'))\n"
            "for col, matrix in ((1, adjacency_stack[0]), (2, adjacency_stack[-1])):\n"
            "    figure.add_heatmap(z=matrix.astype(int), row=1, col=col, showscale=False,\n"
            "                       colorscale='Blues')\n"
            "figure.add_heatmap(z=codes, row=1, col=3, showscale=False, zmin=-0.5, zmax=3.5,\n"
            "                   colorscale=[[0, 'white'], [0.25, 'white'], [0.25, 'lightgrey'],\n"
            "                               [0.5, 'lightgrey'], [0.5, 'green'], [0.75, 'green'],\n"
            "                               [0.75, 'red'], [1, 'red']])\n"
            "figure.update_yaxes(autorange='reversed')\n"
            "figure.update_layout(height=380)\n"
            "figure"
        ),
        new_code_cell(
            "time_ps = steps * run.manifest['settings']['timestep_fs'] / 1000\n"
            "figure = make_subplots(specs=[[{'secondary_y': True}]])\n"
            "figure.add_scatter(x=time_ps, y=edge_counts(adjacency_stack),\n"
            "                   name='residue contacts (directed)')\n"
            "figure.add_scatter(x=run.metrics['time_ps'][:, 0], y=run.metrics['q'][:, 0],\n"
            "                   name='Q', secondary_y=True)\n"
            "figure.update_layout(title='Replica 0 unfolding at 450 K', xaxis_title='time (ps)', "
            "height=340)\n"
            "figure.update_yaxes(title_text='Q', secondary_y=True)\n"
            "figure"
        ),
        new_markdown_cell(
            "## A run of your own\n\n"
            "Heat a protein here and watch its neighbour graph change live. " + SHORT_NOTE
        ),
        new_code_cell(
            "mode = run_mode()\n"
            "settings = default_settings(\n"
            "    temperature=800.0,\n"
            "    denatured_fraction=0.0,\n"
            "    replicas=2 if mode.name == 'demo' else 8,\n"
            "    steps=20 if mode.name == 'demo' else 50000,\n"
            ")\n"
            "controller = SimulationController(settings, max_seconds=mode.seconds)\n"
            "live_adjacency = AdjacencyPanel(controller)\n"
            "controller.start()\n"
            "live_adjacency"
        ),
        new_code_cell(
            "controller.wait()\n"
            "snapshot = controller.snapshot()\n"
            "if snapshot.error:\n"
            "    raise RuntimeError(snapshot.error)\n"
            'print(f"{len(controller.frames())} frames up to step {snapshot.step}")'
        ),
    ]


NOTEBOOKS = {
    "01-quickstart.ipynb": quickstart,
    "02-explore-folding.ipynb": explore_folding,
    "03-speedup-demo.ipynb": speedup_demo,
    "04-topology-changes.ipynb": topology_changes,
}


def build(folder: Path = HERE) -> list[Path]:
    """Write every notebook into ``folder``; returns the paths."""
    paths = []
    for name, cells in NOTEBOOKS.items():
        notebook = new_notebook(cells=cells())
        for index, cell in enumerate(notebook.cells):
            cell.id = f"{Path(name).stem}-{index}"
        notebook.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
        }
        notebook.metadata["language_info"] = {"name": "python"}
        path = folder / name
        nbformat.write(notebook, path)
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in build():
        print(written)
