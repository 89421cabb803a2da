"""JupyterLab workbench: launch replicas (optionally on a temperature ladder), watch
throughput, memory, RMSD, Q and replica exchanges live, follow the neighbour graph and the
3-D structure, switch kernels on and off, and race two configurations.

``Workbench()`` shows everything; each panel also works on its own with a
:class:`SimulationController`, which holds no widgets and can drive runs from code.
"""

from widgets.comparison import CompareRunner
from widgets.controller import InvalidTransition, SimulationController
from widgets.modes import default_settings, short_mode
from widgets.panels.adjacency import AdjacencyPanel
from widgets.panels.compare import ComparePanel
from widgets.panels.export import ExportPanel
from widgets.panels.kernels import KernelsPanel
from widgets.panels.launch import LaunchPanel
from widgets.panels.live_plots import LivePlots
from widgets.panels.structure3d import Structure3D
from widgets.panels.tempering import TemperingPanel
from widgets.snapshot import RunState, Snapshot
from widgets.workbench import Workbench

__all__ = [
    "AdjacencyPanel",
    "ComparePanel",
    "CompareRunner",
    "ExportPanel",
    "InvalidTransition",
    "KernelsPanel",
    "LaunchPanel",
    "LivePlots",
    "RunState",
    "SimulationController",
    "Snapshot",
    "Structure3D",
    "TemperingPanel",
    "Workbench",
    "default_settings",
    "short_mode",
]
