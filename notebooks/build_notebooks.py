"""Write the workbench notebooks (run ``python notebooks/build_notebooks.py``).

The notebooks are generated so that they stay reproducible and reviewable as code;
the generated ``.ipynb`` files are committed next to this script. Every notebook
runs short (cln025, a few replicas and steps; about two minutes on a CPU) when
``WORKBENCH_SHORT=1`` is set or no GPU is present, and full length on a GPU.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

SHORT_NOTE = (
    "Runs are short (cln025, a few replicas and steps) when `WORKBENCH_SHORT=1` is set or "
    "no GPU is present; on a GPU they run full length."
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
            "from widgets import LivePlots, SimulationController, Structure3D, "
            "default_settings, short_mode\n"
            "from workbench.analysis import free_energy_surface, gdt_ts, largest_metastable_q\n"
            "\n"
            "short = short_mode()\n"
            "settings = default_settings(replicas=2 if short else 64)\n"
            "settings"
        ),
        new_code_cell(
            "controller = SimulationController(settings)\n"
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
        new_markdown_cell("## Free-energy surface over RMSD × Q"),
        new_code_cell(
            "rmsd = snapshot.metrics['rmsd'].ravel()\n"
            "q = snapshot.metrics['q'].ravel()\n"
            "bins = (15, 15) if short else (50, 50)\n"
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


def speedup_demo() -> list:
    """03: the A/B race in large fonts, and a live kernel switch."""
    return [
        new_markdown_cell(
            "# Speedup demo\n\n"
            "Large fonts for a projector. First a race of the PyTorch baseline (A) against "
            "the fastest path (B: tabulated filters in captured CUDA-graph steps; pick "
            "others in the B menu) on the same system, seeds and device; then one running "
            "simulation whose kernels are switched on and off while the throughput plot "
            "runs. Without a GPU the fused kernels cannot run: the panels say so and B "
            "keeps only the tabulated filters, in PyTorch. " + SHORT_NOTE
        ),
        new_code_cell(
            "import time\n"
            "\n"
            "import ipywidgets as ipw\n"
            "\n"
            "from widgets import ComparePanel, KernelsPanel, LivePlots, SimulationController, "
            "default_settings, short_mode\n"
            "from workbench.model.options import KernelOptions\n"
            "\n"
            "short = short_mode()\n"
            "settings = default_settings(\n"
            "    protein='cln025' if short else '1enh',\n"
            "    replicas=2 if short else 64,\n"
            "    steps=4 if short else 1000,\n"
            ")\n"
            "compare = ComparePanel(settings=settings, font_size=20)\n"
            "compare"
        ),
        new_code_cell(
            "runner = compare.run()\n"
            "runner.wait()\n"
            "race = runner.snapshot()\n"
            "if race.error:\n"
            "    raise RuntimeError(race.error)\n"
            'print(f"speedup B/A: {race.speedup:.2f}x")\n'
            "for side in (race.a, race.b):\n"
            '    print(f"{side.name} ({side.label}): {side.mean_rate:.1f} timestep·mol/s, "\n'
            '          f"peak memory {side.peak_memory_gb} GB")\n'
            'print("largest force deviation A-B:", race.deviation_end)'
        ),
        new_markdown_cell("## Switching kernels in a running simulation"),
        new_code_cell(
            "live = SimulationController(settings, until_stopped=True)\n"
            "ipw.VBox([KernelsPanel(live), LivePlots(live, font_size=20)])"
        ),
        new_code_cell(
            "hold = 1 if short else 15\n"
            "fastest = KernelOptions(tabulated_filter=True, cuda_graph=True)\n"
            "live.start()\n"
            "for options in (fastest, KernelOptions.baseline(), fastest):\n"
            "    time.sleep(hold)\n"
            "    live.set_options(options)\n"
            "time.sleep(hold)\n"
            "live.stop()\n"
            "live.wait()\n"
            "switches = live.snapshot().events\n"
            "for event in switches:\n"
            '    print(f"step {event.step}: {event.label}", event.message or "")'
        ),
    ]


def topology_changes() -> list:
    """04: the neighbour graph of a heated protein."""
    return [
        new_markdown_cell(
            "# Topology changes during unfolding\n\n"
            "Heat the protein and watch its neighbour graph: the adjacency heatmap of one "
            "replica per recorded frame, the edges added (green) and removed (red) since the "
            "previous frame, and the edge count over time. " + SHORT_NOTE
        ),
        new_code_cell(
            "import ipywidgets as ipw\n"
            "import numpy as np\n"
            "import plotly.graph_objects as go\n"
            "from plotly.subplots import make_subplots\n"
            "\n"
            "from widgets import AdjacencyPanel, SimulationController, Structure3D, "
            "default_settings, short_mode\n"
            "from widgets.adjacency_frames import diff_codes, edge_counts, frame_adjacency\n"
            "\n"
            "short = short_mode()\n"
            "settings = default_settings(\n"
            "    temperature=800.0,\n"
            "    replicas=2 if short else 8,\n"
            "    steps=20 if short else 50000,\n"
            "    save_interval=2 if short else 500,\n"
            ")\n"
            "controller = SimulationController(settings)\n"
            "ipw.VBox([AdjacencyPanel(controller), Structure3D(controller)])"
        ),
        new_code_cell(
            "controller.start()\n"
            "controller.wait()\n"
            "snapshot = controller.snapshot()\n"
            "if snapshot.error:\n"
            "    raise RuntimeError(snapshot.error)\n"
            "frames = controller.frames()\n"
            'print(f"{len(frames)} frames up to step {snapshot.step}")'
        ),
        new_markdown_cell("## First frame, last frame and what changed (replica 0, residues)"),
        new_code_cell(
            "system, cutoff = snapshot.system, snapshot.cutoff\n"
            "stack = np.stack([positions[0] for _, positions in frames])\n"
            "adjacency = frame_adjacency(stack, system, cutoff, level='residue')\n"
            "codes = diff_codes(adjacency[0], adjacency[-1])\n"
            "figure = make_subplots(rows=1, cols=3, subplot_titles=(\n"
            "    f'step {frames[0][0]}', f'step {frames[-1][0]}',\n"
            "    'added (green) / removed (red)'))\n"
            "figure.add_heatmap(z=adjacency[0].astype(int), row=1, col=1, showscale=False, "
            "colorscale='Blues')\n"
            "figure.add_heatmap(z=adjacency[-1].astype(int), row=1, col=2, showscale=False, "
            "colorscale='Blues')\n"
            "figure.add_heatmap(z=codes, row=1, col=3, showscale=False, zmin=-0.5, zmax=3.5,\n"
            "                   colorscale=[[0, 'white'], [0.25, 'white'], [0.25, 'lightgrey'],\n"
            "                               [0.5, 'lightgrey'], [0.5, 'green'], [0.75, 'green'],\n"
            "                               [0.75, 'red'], [1, 'red']])\n"
            "figure.update_yaxes(autorange='reversed')\n"
            "figure.update_layout(height=380)\n"
            "figure"
        ),
        new_code_cell(
            "steps = [step for step, _ in frames]\n"
            "counts = edge_counts(adjacency)\n"
            "go.Figure(go.Scatter(x=steps, y=counts, mode='lines+markers')).update_layout(\n"
            "    title='Residue contacts of replica 0 while heated', xaxis_title='step',\n"
            "    yaxis_title='directed edges', height=320)"
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
