"""Projector mode: one switch restyles controls (a CSS class) and every figure."""

from __future__ import annotations

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from widgets.projector import (  # noqa: E402
    NORMAL_FONT,
    PROJECTOR_CLASS,
    PROJECTOR_FONT,
    PROJECTOR_WIDTH,
    ProjectorSwitch,
)


def test_one_switch_scales_every_panel_and_figure_and_back(fake_run):
    from widgets import Workbench
    from workbench.runner import RunSettings

    prepare, _ = fake_run()
    bench = Workbench(RunSettings(replicas=2, steps=4), prepare=prepare)
    figures = bench.figures()
    widths = {name: figure.layout.width for name, figure in figures.items()}
    heights = {name: figure.layout.height for name, figure in figures.items()}
    assert PROJECTOR_CLASS not in bench._dom_classes
    bench.projector.toggle.value = True
    assert PROJECTOR_CLASS in bench._dom_classes
    for figure in figures.values():
        assert figure.layout.font.size == PROJECTOR_FONT
        assert figure.layout.width == PROJECTOR_WIDTH
        assert figure.layout.legend.y < 0  # under the plot, clear of the title
    bench.projector.set(False)
    assert PROJECTOR_CLASS not in bench._dom_classes and not bench.projector.toggle.value
    for name, figure in figures.items():
        assert figure.layout.font.size == NORMAL_FONT
        assert figure.layout.width == widths[name] and figure.layout.height == heights[name]


def test_a_panel_made_in_projector_mode_starts_there():
    from widgets.panels.compare import ComparePanel

    compare = ComparePanel()
    switch = ProjectorSwitch([compare], figures=compare.figures, value=True)
    assert switch.on and PROJECTOR_CLASS in compare._dom_classes
    assert compare.race.layout.font.size == PROJECTOR_FONT
