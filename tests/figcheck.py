"""Layout checks for matplotlib figures: text that runs out of the figure or out of its
axes, and legends drawn over data.

:func:`layout_problems` draws a figure and returns a list of problems (empty = fine);
:func:`checking_savefig` wraps ``Figure.savefig`` so that every figure a piece of code
saves is checked first (use with ``monkeypatch``).
"""
from __future__ import annotations

import numpy as np

TOL = 1.0  # pixels


def _inside(inner, outer, tol=TOL):
    return (inner.x0 >= outer.x0 - tol and inner.y0 >= outer.y0 - tol
            and inner.x1 <= outer.x1 + tol and inner.y1 <= outer.y1 + tol)


def _data_points(ax):
    """Display coordinates of the data drawn in ax: vertices of lines and collections in
    data coordinates (not axhline/axvline, which span the axes by construction)."""
    pts = []
    for line in ax.lines:
        if line.get_transform() != ax.transData or not line.get_visible():
            continue
        xy = np.asarray(line.get_xydata(), float)
        if xy.size:
            pts.append(ax.transData.transform(xy))
    for c in ax.collections:
        if c.get_transform() != ax.transData or not c.get_visible():
            continue
        for path in c.get_paths():
            if len(path.vertices):
                pts.append(ax.transData.transform(np.asarray(path.vertices, float)))
        offs = c.get_offsets()
        if len(offs) and c.get_offset_transform() == ax.transData:
            pts.append(ax.transData.transform(np.asarray(offs, float)))
    if not pts:
        return np.empty((0, 2))
    p = np.concatenate(pts)
    return p[np.isfinite(p).all(axis=1)]


def layout_problems(fig) -> list[str]:
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    problems = []
    fbox = fig.bbox
    tight = fig.get_tightbbox(r).transformed(fig.dpi_scale_trans)
    if not _inside(tight, fbox):
        problems.append(f"content {tight.bounds} runs past the figure {fbox.bounds}")
    legends = [(leg, [leg.axes]) for ax in fig.axes if (leg := ax.get_legend()) is not None]
    legends += [(leg, fig.axes) for leg in fig.legends]
    for ax in fig.axes:
        abox = ax.get_window_extent(r)
        for t in ax.texts:  # annotations and ax.text: inside their axes
            if t.get_visible() and t.get_text().strip():
                tb = t.get_window_extent(r)
                if not _inside(tb, abox):
                    problems.append(f"text {t.get_text()!r} {tb.bounds} leaves its axes "
                                    f"{abox.bounds} ({ax.get_title()!r})")
    for leg, axes in legends:
        lb = leg.get_window_extent(r)
        for ax in axes:
            p = _data_points(ax)
            inside = ((p[:, 0] > lb.x0) & (p[:, 0] < lb.x1) & (p[:, 1] > lb.y0) & (p[:, 1] < lb.y1))
            if inside.any():
                problems.append(f"legend {lb.bounds} covers {int(inside.sum())} data points "
                                f"of axes {ax.get_title()!r}")
    return problems


def checking_savefig(record: dict):
    """A replacement for Figure.savefig that records each saved figure's problems
    (``record[path] = [...]``) and then saves as usual."""
    import matplotlib.figure

    original = matplotlib.figure.Figure.savefig

    def savefig(self, fname, *args, **kwargs):
        record[str(fname)] = layout_problems(self)
        return original(self, fname, *args, **kwargs)

    return savefig
