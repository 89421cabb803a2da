"""Shared look of the workbench figures (font size is raised for talks)."""

from __future__ import annotations

import plotly.graph_objects as go

#: Colours of configuration A and B, and of the replica band.
COLORS = {"A": "#1f77b4", "B": "#d62728", "band": "rgba(31, 119, 180, 0.2)"}


def new_figure(
    title: str, xaxis: str, yaxis: str, height: int = 260, font_size: int = 12
) -> go.FigureWidget:
    """An empty live figure with the workbench layout.

    Parameters
    ----------
    title, xaxis, yaxis : str
        Figure title and axis titles.
    height : int
        Pixels.
    font_size : int
        Base font size; 18–24 reads well on a projector.
    """
    figure = go.FigureWidget()
    figure.update_layout(
        title={"text": title, "font": {"size": font_size + 2}},
        font={"size": font_size},
        height=height,
        margin={"l": 60, "r": 60, "t": 40 + font_size, "b": 40 + font_size},
        xaxis_title=xaxis,
        yaxis_title=yaxis,
        template="plotly_white",
        legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0, "yanchor": "bottom"},
        uirevision="keep",
    )
    return figure
