"""JupyterLab workbench: launch replicas (optionally on a temperature ladder), watch
throughput, memory, RMSD, Q and replica exchanges live, follow the neighbour graph and the
3-D structure, switch kernels on and off, race two configurations, and replay any run
folder with a time slider.

``Workbench()`` shows everything; each panel also works on its own with a
:class:`SimulationController`, which holds no widgets and can drive runs from code, or a
:class:`ShardedController` (one run over several GPUs or CPU processes).
"""

#: Public name -> module that defines it. Loaded on first use (PEP 562), so the
#: controller and the headless helpers import without the UI libraries (ipywidgets, plotly,
#: nglview), e.g. on a GPU machine that drives runs from a script.
_EXPORTS = {
    "AdjacencyPanel": "widgets.panels.adjacency",
    "ComparePanel": "widgets.panels.compare",
    "CompareRunner": "widgets.comparison",
    "ExportPanel": "widgets.panels.export",
    "InvalidTransition": "widgets.controller",
    "KernelsPanel": "widgets.panels.kernels",
    "LaunchPanel": "widgets.panels.launch",
    "LivePlots": "widgets.panels.live_plots",
    "LiveSwitchPanel": "widgets.panels.live_switch",
    "ProjectorSwitch": "widgets.projector",
    "ReplayPanel": "widgets.panels.replay",
    "RunReplay": "widgets.replay",
    "RunState": "widgets.snapshot",
    "ShardedController": "widgets.sharded",
    "SimulationController": "widgets.controller",
    "Snapshot": "widgets.snapshot",
    "Structure3D": "widgets.panels.structure3d",
    "TemperingPanel": "widgets.panels.tempering",
    "Workbench": "widgets.workbench",
    "default_settings": "widgets.modes",
    "run_mode": "widgets.modes",
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'widgets' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "AdjacencyPanel",
    "ComparePanel",
    "CompareRunner",
    "ExportPanel",
    "InvalidTransition",
    "KernelsPanel",
    "LaunchPanel",
    "LivePlots",
    "LiveSwitchPanel",
    "ProjectorSwitch",
    "ReplayPanel",
    "RunReplay",
    "RunState",
    "ShardedController",
    "SimulationController",
    "Snapshot",
    "Structure3D",
    "TemperingPanel",
    "Workbench",
    "default_settings",
    "run_mode",
]
