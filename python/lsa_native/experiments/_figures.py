"""The figure helper shared by the reproductions: a grid of panels (matplotlib, Agg) and one way to
finish it — the title, a legend that does not hide the curves, integer ticks where an axis counts
layers or examples, the layout and the PNG in the output folder."""
from __future__ import annotations

import numpy as np

__all__ = ["pyplot", "panels", "finish", "legend_below", "integer_ticks", "log_or_nan"]


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def panels(rows: int, cols: int, *, size=(5.0, 4.3), min_width: float = 7.0):
    """(figure, axes [rows, cols]) with panels of ``size`` inches (the figure at least
    ``min_width`` wide)."""
    plt = pyplot()
    fig, axes = plt.subplots(rows, cols, figsize=(max(min_width, size[0] * cols), size[1] * rows),
                             squeeze=False)
    return fig, axes


def legend_below(ax, *, fontsize: float = 7, ncol: int = 2) -> None:
    """The legend under the panel, outside the plotting area (it never covers a curve)."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, fontsize=fontsize, ncol=ncol, loc="upper center",
                  bbox_to_anchor=(0.5, -0.18), frameon=False)


def integer_ticks(ax, values, axis: str = "x") -> None:
    """Ticks at the integers ``values`` only (numbers of layers or examples are whole)."""
    values = sorted({int(v) for v in values})
    getattr(ax, f"set_{axis}ticks")(values, [str(v) for v in values])
    getattr(ax, f"{axis}axis").set_minor_locator(_null_locator())


def _null_locator():
    from matplotlib.ticker import NullLocator

    return NullLocator()


def finish(ctx, fig, title: str, name: str = "figure.png", *, fontsize: float = 10) -> None:
    """Title (wrapped to the figure's width), layout (room for legends placed below panels),
    save as ``<id>_<name>`` in the output folder (nothing written without one), close."""
    import textwrap

    width = int(fig.get_figwidth() * 120 / fontsize)  # characters that fit across the figure
    lines = [w for line in title.split("\n") for w in textwrap.wrap(line, width) or [""]]
    fig.suptitle("\n".join(lines), fontsize=fontsize)
    fig.tight_layout()
    ctx.save_figure(fig, name)


def log_or_nan(values) -> np.ndarray:
    """log of positive values, NaN elsewhere (a diverged training's loss is not plotted)."""
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(v > 0, np.log(np.where(v > 0, v, 1.0)), np.nan)
