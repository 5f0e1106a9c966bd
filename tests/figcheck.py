"""Layout checks for matplotlib figures: text that runs out of the figure or out of its
axes, legends drawn over data, annotation arrows that cross a curve, axes without a
y-label, and log axes spanning so many decades that the curves flatten into a strip.

:func:`layout_problems` draws a figure and returns a list of problems (empty = fine);
:func:`checking_savefig` wraps ``Figure.savefig`` so that every figure a piece of code
saves is checked first (use with ``monkeypatch``).
"""

from __future__ import annotations

import numpy as np

TOL = 1.0  # pixels
#: most decades a log-scaled y-axis may span: beyond it, tick labels go down to 1e-100 and
#: below while the curves that matter are pressed into a strip at the top
MAX_DECADES = 40
#: an arrow may touch curves this close to the point it marks (pixels)
ARROW_END = 6.0


def _inside(inner, outer, tol=TOL):
    return (
        inner.x0 >= outer.x0 - tol
        and inner.y0 >= outer.y0 - tol
        and inner.x1 <= outer.x1 + tol
        and inner.y1 <= outer.y1 + tol
    )


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


def _segments_cross(a, b, p):
    """Whether segment a-b crosses any segment of the polyline p (n x 2 points)."""
    if len(p) < 2:
        return False
    c, d = p[:-1], p[1:]

    def orient(u, v, w):
        return np.sign(
            (v[..., 0] - u[..., 0]) * (w[..., 1] - u[..., 1])
            - (v[..., 1] - u[..., 1]) * (w[..., 0] - u[..., 0])
        )

    o1, o2 = orient(a, b, c), orient(a, b, d)
    o3, o4 = orient(c, d, a), orient(c, d, b)
    return bool(((o1 * o2 < 0) & (o3 * o4 < 0)).any())


def _arrow_crossings(ax, r) -> list[str]:
    """Annotations whose arrow crosses a data line before it reaches its point."""
    out = []
    lines = [
        np.asarray(ax.transData.transform(np.asarray(ln.get_xydata(), float)))
        for ln in ax.lines
        if ln.get_visible()
        and ln.get_transform() == ax.transData
        and len(ln.get_xydata()) > 1
        and ln.get_linestyle() not in ("None", "", " ")
    ]
    for t in ax.texts:
        arrow = getattr(t, "arrow_patch", None)
        if arrow is None or not t.get_visible():
            continue
        v = np.asarray(arrow.get_path().vertices, float)  # display coordinates
        tip = np.asarray(ax.transData.transform(np.asarray(t.xy, float)), float)
        # the shaft, from its start to the point where it comes within ARROW_END of the tip
        d = np.hypot(*(v - tip).T)
        shaft = v[: int(np.argmax(d < ARROW_END)) or len(v)]
        for i in range(len(shaft) - 1):
            if any(
                _segments_cross(shaft[i], shaft[i + 1], ln[np.isfinite(ln).all(axis=1)])
                for ln in lines
            ):
                out.append(f"the arrow of {t.get_text()!r} crosses a curve ({ax.get_title()!r})")
                break
    return out


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
        if not ax.get_ylabel().strip():
            problems.append(f"axes {ax.get_title()!r} has no y-label")
        if ax.get_yscale() == "log":
            lo, hi = sorted(ax.get_ylim())
            span = np.log10(hi / lo) if lo > 0 else np.inf
            if span > MAX_DECADES:
                problems.append(
                    f"log y-axis of {ax.get_title()!r} spans {span:.0f} decades "
                    f"(at most {MAX_DECADES})"
                )
        problems += _arrow_crossings(ax, r)
        abox = ax.get_window_extent(r)
        for t in ax.texts:  # annotations and ax.text: inside their axes
            if t.get_visible() and t.get_text().strip():
                tb = t.get_window_extent(r)
                if not _inside(tb, abox):
                    problems.append(
                        f"text {t.get_text()!r} {tb.bounds} leaves its axes "
                        f"{abox.bounds} ({ax.get_title()!r})"
                    )
    for leg, axes in legends:
        lb = leg.get_window_extent(r)
        for ax in axes:
            p = _data_points(ax)
            inside = (p[:, 0] > lb.x0) & (p[:, 0] < lb.x1) & (p[:, 1] > lb.y0) & (p[:, 1] < lb.y1)
            if inside.any():
                problems.append(
                    f"legend {lb.bounds} covers {int(inside.sum())} data points "
                    f"of axes {ax.get_title()!r}"
                )
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
