"""Projector mode: one switch that makes every text, control and plot readable from the
back of a lecture hall, without clipping any of them.

The controls are restyled by a style sheet that applies inside an element of class
:data:`PROJECTOR_CLASS` (the switch adds the class to the panels it governs): larger fonts,
controls as wide as their labels, rows that wrap instead of overflowing. The plotly
figures are restyled through their layouts (:func:`style_figure`): larger fonts and
margins, the legend under the plot instead of over its title, and a width that fits a
1280-pixel screen beside JupyterLab's side bar.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import ipywidgets as ipw

#: CSS class that switches the style sheet on.
PROJECTOR_CLASS = "cgw-projector"
#: Base font size of figures and controls, px: normal and projector.
NORMAL_FONT, PROJECTOR_FONT = 12, 20
#: Figure width in projector mode, px: fits 1280×720 with the file browser open.
PROJECTOR_WIDTH = 820

_CSS = f"""
<style>
.{PROJECTOR_CLASS} {{ font-size: {PROJECTOR_FONT}px; }}
.{PROJECTOR_CLASS} .widget-label,
.{PROJECTOR_CLASS} .widget-label-basic,
.{PROJECTOR_CLASS} .widget-html,
.{PROJECTOR_CLASS} .widget-html-content,
.{PROJECTOR_CLASS} .widget-button,
.{PROJECTOR_CLASS} .widget-toggle-button,
.{PROJECTOR_CLASS} .widget-readout,
.{PROJECTOR_CLASS} .widget-checkbox label,
.{PROJECTOR_CLASS} input,
.{PROJECTOR_CLASS} select,
.{PROJECTOR_CLASS} .lm-TabBar-tab {{
  font-size: {PROJECTOR_FONT}px !important;
  line-height: 1.35 !important;
}}
.{PROJECTOR_CLASS} .widget-label,
.{PROJECTOR_CLASS} .widget-html-content,
.{PROJECTOR_CLASS} .widget-button,
.{PROJECTOR_CLASS} .widget-toggle-button {{
  overflow: visible !important;
  text-overflow: clip !important;
  white-space: normal !important;
}}
.{PROJECTOR_CLASS} .widget-html-content {{ overflow-wrap: anywhere; }}
.{PROJECTOR_CLASS} .widget-label {{ width: auto !important; min-width: max-content; }}
.{PROJECTOR_CLASS} .widget-button,
.{PROJECTOR_CLASS} .widget-toggle-button {{
  width: auto !important;
  min-width: max-content;
  height: auto !important;
  padding: 6px 14px !important;
}}
.{PROJECTOR_CLASS} .widget-inline-hbox {{ width: auto !important; max-width: 100%; }}
.{PROJECTOR_CLASS} .widget-inline-hbox input,
.{PROJECTOR_CLASS} .widget-inline-hbox select {{
  height: auto !important;
  min-width: 6em;
}}
.{PROJECTOR_CLASS} .widget-hbox,
.{PROJECTOR_CLASS} .widget-toggle-buttons {{ flex-wrap: wrap; max-width: 100%; }}
.{PROJECTOR_CLASS} .widget-slider .noUi-target {{ min-width: 10em; }}
</style>
"""


def style_figure(figure, projector: bool) -> None:
    """Set a workbench figure's fonts, margins, legend and size for one mode.

    Parameters
    ----------
    figure : plotly.graph_objects.FigureWidget
    projector : bool
        Talk-sized (fonts :data:`PROJECTOR_FONT`, width :data:`PROJECTOR_WIDTH`, 1.5 times
        the height, legend under the axis title) or the figure's own look.
    """
    size = PROJECTOR_FONT if projector else NORMAL_FONT
    meta = dict(figure.layout.meta or {})
    if "normal_size" not in meta:  # the figure's own size (None: the container's)
        meta["normal_size"] = [figure.layout.width, figure.layout.height]
        figure.layout.meta = meta
    width, height = meta["normal_size"]
    if projector:
        width, height = PROJECTOR_WIDTH, round(1.5 * (height or 300))
        legend = {"orientation": "h", "x": 0, "xanchor": "left", "y": -0.32,
                  "yanchor": "top"}
    else:
        legend = {"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0,
                  "yanchor": "bottom"}
    with figure.batch_update():
        figure.update_layout(
            font={"size": size},
            title={"font": {"size": size + 4}},
            margin={"l": 40 + 2 * size, "r": 40 + size, "t": 40 + 2 * size,
                    "b": 40 + (6 if projector else 2) * size},
            legend=legend,
        )
        figure.update_xaxes(automargin=True, title_standoff=size // 2)
        figure.update_yaxes(automargin=True, title_standoff=size // 2)
        figure.update_annotations(font={"size": size})
        figure.layout.width = width
        figure.layout.height = height


class ProjectorSwitch(ipw.VBox):
    """The projector-mode toggle and the style sheet it governs.

    Display it once next to the panels it governs. Turning it on adds
    :data:`PROJECTOR_CLASS` to each of ``targets`` and restyles every figure that
    ``figures()`` returns; turning it off restores them.

    Parameters
    ----------
    targets : iterable of ipywidgets.DOMWidget
        The panels (or one box around them) whose controls are restyled.
    figures : callable
        Returns the figures to restyle (``{name: FigureWidget}`` or an iterable of them);
        called at every switch, so figures made later are included.
    value : bool
        Start in projector mode.
    """

    def __init__(
        self,
        targets: Iterable[ipw.DOMWidget],
        figures: Callable[[], dict | Iterable],
        value: bool = False,
    ):
        self.targets = list(targets)
        self.figures = figures
        self.toggle = ipw.ToggleButton(
            value=False,
            description="Projector mode",
            icon="television",
            tooltip="large text, controls and plots for a talk",
        )
        super().__init__([ipw.HTML(_CSS), self.toggle])
        self.toggle.observe(lambda change: self._apply(change["new"]), names="value")
        self.toggle.value = value

    @property
    def on(self) -> bool:
        """True in projector mode."""
        return self.toggle.value

    def set(self, on: bool) -> None:
        """Switch projector mode on or off (the toggle follows)."""
        if self.toggle.value != on:
            self.toggle.value = on  # its observer applies the mode
        else:
            self._apply(on)

    def _apply(self, on: bool) -> None:
        for target in (*self.targets, self):
            if on:
                target.add_class(PROJECTOR_CLASS)
            else:
                target.remove_class(PROJECTOR_CLASS)
        figures = self.figures()
        for figure in figures.values() if isinstance(figures, dict) else figures:
            style_figure(figure, on)
