"""Figure scaffolding: matplotlib, sizes, colours, the shared legend, title
and footer."""

import math
import os
import sys
from pathlib import Path

from .results import (
    InputError, Skip, VENV_PYTHON, footer_parts, params_parts, series_names, wrap_parts)


# --------------------------------------------------------------------------
# Figure scaffolding: sizes, colours, shared legend, title and footer.
# --------------------------------------------------------------------------

def import_matplotlib():
    """Returns pyplot (Agg); re-runs under .venv/bin/python if it is missing."""
    try:
        import matplotlib
    except ImportError:
        here = Path(sys.executable).absolute()
        if VENV_PYTHON.exists() and here != VENV_PYTHON.absolute():
            os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), *sys.argv])
        raise InputError("matplotlib is not installed: run "
                         "scripts/bootstrap-plot.sh, then "
                         ".venv/bin/python bench/plot ...") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


# What surrounds the panels, in inches: the title's first line, each line
# of parameters under it, each footer line, each legend row, and padding.
TITLE_H, PARAMS_LINE_H, FOOTER_LINE_H, LEGEND_ROW_H, LEGEND_PAD_H = \
    0.45, 0.22, 0.14, 0.2, 0.15
# Inches per character of the parameter line (11 pt) and footer (7 pt).
PARAMS_CHAR_IN, FOOTER_CHAR_IN = 0.088, 0.058
# Narrower figures cannot hold the title and legend.
MIN_FIGURE_W = 7.0


def legend_shape(width, labels):
    """(columns, rows) of a legend of labels that fits in width inches."""
    labels = list(labels)
    if not labels:
        return 1, 0
    longest = max(len(s) for s in labels)
    cols = max(1, min(len(labels), int(width / (0.06 * longest + 0.7))))
    return cols, math.ceil(len(labels) / cols)


class Canvas:
    """Builds figures with consistent engine colours, legend and footer."""

    def __init__(self, plt, docs, runs, size_properties=()):
        self.plt = plt
        self.docs = docs
        self.runs = runs
        # "<engine>.<property>" names of the structure count open_time
        # plots open time against (--size-property).
        self.size_properties = list(size_properties)
        self.series = series_names(runs)
        palette = plt.get_cmap("tab10" if len(self.series) <= 10 else "tab20")
        self.colour = {e: palette(i % palette.N)
                       for i, e in enumerate(self.series)}
        self.label = {}
        for r in runs:
            self.label.setdefault(r["series"],
                                  f"{r['series']} ({r['kind']}) — {r['durability']}")

    def wrapped(self, width):
        """(parameter lines, footer lines) for a figure width inches wide."""
        return (wrap_parts(params_parts(self.docs), width, PARAMS_CHAR_IN),
                wrap_parts(footer_parts(self.docs), width, FOOTER_CHAR_IN))

    def grid(self, n, panel_w, panel_h, sharey=False, max_w=24.0, cols=None):
        """A figure with n panels, cols per row (default: as many as fit in
        max_w inches)."""
        if cols is None:
            cols = max(1, min(n, int(max_w // panel_w)))
        rows = math.ceil(n / cols)
        width = max(MIN_FIGURE_W, panel_w * cols)
        params, footer = self.wrapped(width)
        _, legend_rows = legend_shape(width, self.label.values())
        extra = (TITLE_H + PARAMS_LINE_H * len(params)
                 + FOOTER_LINE_H * len(footer) + LEGEND_PAD_H
                 + LEGEND_ROW_H * legend_rows)
        fig, axes = self.plt.subplots(
            rows, cols, figsize=(width, panel_h * rows + extra),
            sharey=sharey, squeeze=False, layout="constrained")
        flat = list(axes.flat)
        for ax in flat[n:]:
            ax.set_visible(False)
        return fig, flat[:n]

    def finish(self, fig, title, shown):
        """Adds the title, the engine legend below the panels, and footer.

        The bottom of the figure is reserved in inches (footer line, then
        legend rows) and the constrained layout gets the rest."""
        params, footer = self.wrapped(fig.get_figwidth())
        fig.suptitle("\n".join([title, *params]), fontsize=11)
        handles = [self.plt.Line2D([], [], color=self.colour[e], lw=6)
                   for e in shown]
        labels = [self.label[e] for e in shown]
        cols, rows = legend_shape(fig.get_figwidth(), labels)
        height = fig.get_figheight()
        footer_h = (FOOTER_LINE_H * len(footer) + 0.08) / height
        legend_h = (LEGEND_ROW_H * rows + LEGEND_PAD_H) / height
        if labels:
            fig.legend(handles, labels, loc="lower center", ncols=cols,
                       bbox_to_anchor=(0.5, footer_h), fontsize=8,
                       frameon=False, borderaxespad=0.2)
        fig.get_layout_engine().set(rect=(0, footer_h + legend_h, 1,
                                          1 - footer_h - legend_h))
        fig.text(0.005, 0.04 / height, "\n".join(footer), fontsize=7,
                 color="0.35", ha="left", va="bottom")
        return fig


def rotate_if_crowded(ax, labels, limit=6):
    longest = max(len(line) for s in labels for line in s.split("\n"))
    if len(labels) > limit or longest > 12:
        ax.tick_params(axis="x", labelrotation=30)
        for text in ax.get_xticklabels():
            text.set_horizontalalignment("right")
            text.set_rotation_mode("anchor")


def thread_word(n):
    return f"{n} thread" + ("" if n == 1 else "s")


# --------------------------------------------------------------------------
# The figures.  Each returns a finished Figure or raises Skip.
# --------------------------------------------------------------------------

def bar_panel_layout(panels, groups, bars_per_group, max_w=24.0):
    """(panel width, columns) for grouped-bar panels: side by side at a
    comfortable width, else side by side squeezed, else one per row."""
    comfortable = min(12.0, max(4.5, 1.0 + groups * (0.3 + 0.12 * bars_per_group)))
    if panels * comfortable <= max_w:
        return comfortable, panels
    tightest = 1.0 + groups * (0.15 + 0.07 * bars_per_group)
    if panels * tightest <= max_w:
        return max_w / panels, panels
    return comfortable, 1
