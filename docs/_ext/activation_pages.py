"""Sphinx extension: one page per activation, written from the registry at build time.

On ``builder-inited`` it writes ``docs/activations/`` (git-ignored): ``index.rst`` listing
every activation with its formula, one ``<name>.rst`` per activation and its plot. A page
holds the activation's docstring (autodoc: summary, formula, parameters with defaults and
domains, derivatives, notes, references, example, all generated from the spec), a plot of
f, f' and each parameter derivative, the measured accuracy read from
``docs/data/accuracy.json`` and the backends. Nothing here restates a spec: a new
activation gets its page with no edit.

The extension also moves the docstrings' "Derivatives" section (``iglu_np._docs``; not a
numpydoc section, which numpydoc would drop) ahead of the parameters, as a rubric.
"""

from __future__ import annotations

import io
import json
import re
import warnings
from pathlib import Path

from sphinx.errors import ExtensionError

OUT = "activations"
ACCURACY = "data/accuracy.json"
X_PLOT = (-4.0, 4.0)  # where every activation's shape shows (kinks, gates, tails' onset)

# kind -> (plot label, table label); d_<param> kinds get theirs from the parameter name.
_KIND = {"fwd": ("f(x)", "f"), "dx": ("f′(x)", "df/dx")}


def _kind_labels(kind: str) -> tuple:
    if kind in _KIND:
        return _KIND[kind]
    p = kind[2:]
    return f"∂f/∂{p}", f"df/d{p}"


def _write_if_changed(path: Path, data) -> None:
    """Rewrite only on change, so Sphinx re-reads only the pages whose source moved."""
    mode = "b" if isinstance(data, bytes) else ""
    if path.exists() and path.read_bytes() == (data if mode else data.encode()):
        return
    path.write_bytes(data if mode else data.encode())


# --------------------------------------------------------------------------- accuracy
def load_accuracy(path: Path) -> dict:
    if not path.exists():
        raise ExtensionError(
            f"{path} is missing: the activation pages quote the measured accuracy from it. "
            "Write it with `python tools/accuracy_sweep.py --out docs/data/accuracy.json` "
            "(see the Accuracy page)."
        )
    data = json.loads(path.read_text())
    if data.get("schema") != 1 or not isinstance(data.get("rows"), list):
        raise ExtensionError(f"{path}: expected schema 1 with a 'rows' list")
    return data


def _fmt(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _where(at: dict) -> str:
    ps = "".join(f", {k} = {_fmt(v)}" for k, v in at.get("params", {}).items())
    return f"x = {_fmt(at['x'])}{ps}"


def accuracy_section(name: str, acc: dict) -> list:
    rows = [r for r in acc["rows"] if r["activation"] == name]
    lines = ["Measured accuracy", "-----------------", ""]
    if not rows:
        return lines + [f"``{name}`` has no rows in ``docs/data/accuracy.json`` yet.", ""]
    # columns whose value is the same in every row go into the sentence above the table
    cols = {
        "backend": lambda r: r["backend"],
        "x swept": lambda r: "[{:g}, {:g}]".format(*r["domain"]),
        "points": lambda r: f"{r['points']:,}",
    }
    same = {k: f(rows[0]) for k, f in cols.items() if len({f(r) for r in rows}) == 1}
    facts = []
    if "backend" in same:
        facts.append(f"backend {same['backend']}")
    if "x swept" in same:
        facts.append(f"x swept over {same['x swept']}")
    if "points" in same:
        facts.append(f"{same['points']} points (x values times parameter sets) per row")
    lines += [
        f"Error in ulp of the result against mpmath, from the sweep of {acc['date'][:10]} "
        f"on {acc['machine']}: "
        + "; ".join(facts + ["±0, ±inf and NaN always included"])
        + ". The :doc:`/accuracy` page has every activation, the command and the versions.",
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "",
    ]
    head = (
        ["kind", "dtype"]
        + [k for k in cols if k not in same]
        + ["worst ulp", "worst at", "rms ulp", "bound"]
    )
    lines += [f"   {'*' if i == 0 else ' '} - {h}" for i, h in enumerate(head)]
    for r in rows:
        cells = (
            [_kind_labels(r["kind"])[1], r["dtype"]]
            + [f(r) for k, f in cols.items() if k not in same]
            + [_fmt(r["worst_ulp"]), _where(r["worst_at"]), _fmt(r["rms_ulp"]), _fmt(r["bound"])]
        )
        lines += [f"   {'*' if i == 0 else ' '} - {c}" for i, c in enumerate(cells)]
    return lines + [""]


# --------------------------------------------------------------------------- plots
def plot(act, path: Path) -> None:
    """f, f' and each parameter derivative at the defaults on X_PLOT.

    Evaluated with the spec's scalar kernels as plain Python (the code every backend
    compiles), so the build compiles nothing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    spec = act.spec
    x = np.linspace(*X_PLOT, 801)
    params = [float(v) for v in spec.defaults.values()]

    def curve(fn):
        return np.array([fn(float(v), *params) for v in x])

    panels = [[("fwd", spec.f), ("dx", spec.dx)]]
    if spec.params:
        panels.append([("d_" + p, spec.dparams[p]) for p in spec.param_names])
    plt.rcParams.update({"font.size": 12, "axes.titlesize": 12, "legend.fontsize": 11})
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.4 * len(panels) + 0.4, 3.6), squeeze=False, layout="constrained"
    )
    styles = ["-", "--", ":", "-."]
    for ax, panel in zip(axes[0], panels):
        ys = []
        for i, (kind, fn) in enumerate(panel):
            y = curve(fn)
            ys.append(y)
            ax.plot(x, y, styles[i % 4], lw=2, label=_kind_labels(kind)[0])
        y = np.concatenate(ys)
        y = y[np.isfinite(y)]
        lo, hi = float(y.min()), float(y.max())
        pad = 0.08 * (hi - lo) if hi > lo else 0.5
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_xlim(*X_PLOT)
        ax.axhline(0, color="0.6", lw=0.8, zorder=0)
        ax.axvline(0, color="0.6", lw=0.8, zorder=0)
        ax.grid(alpha=0.3)
        ax.set_xlabel("x")
        ax.legend(loc="best", frameon=True)
    axes[0][0].set_ylabel("value")
    axes[0][0].set_title(f"{spec.name} and its derivative in x")
    if spec.params:
        axes[0][1].set_ylabel("derivative")
        axes[0][1].set_title("derivatives in the parameters")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    _write_if_changed(path, buf.getvalue())


# --------------------------------------------------------------------------- backends
def backends_section(act) -> list:
    spec, n = act.spec, act.name
    bulk = ", ".join(
        _kind_labels("fwd" if k == "f" else k if k == "dx" else "d_" + k)[1] for k in spec.bulk
    )
    cpu = (
        f"**CPU** (numpy arrays): compiled loops over contiguous memory, threaded from "
        f"65,536 elements, and the numpy ufuncs ``iglu_np.{n}.ufunc``, "
        f"``iglu_np.{n}.dx.ufunc``, ``iglu_np.{n}.backward.ufunc``"
        + (f", ``iglu_np.{n}.dparams.ufuncs``" if spec.params else "")
        + " for every other layout (:doc:`/user_guide/cpu`)."
    )
    if bulk:
        cpu += (
            f" Bulk kernels for {bulk}: cheaper forms with the same bits inside their "
            "domain, taken per block of elements."
        )
    lines = [
        "Backends",
        "--------",
        "",
        "- " + cpu,
        "- **CuPy** (CuPy arrays, and torch/JAX CUDA arrays through their memory): C++ "
        "translated from the same kernels, equal to the CPU bit for bit "
        "(:doc:`/user_guide/gpu`).",
        '- **Numba CUDA** (Numba device arrays, or ``backend="numba_cuda"``): the same '
        "kernels compiled by Numba for the GPU.",
        "- **Dask / xarray**: lazy, chunk by chunk, with the kernels above "
        "(:doc:`/user_guide/dask`).",
    ]
    if spec.torch:
        if isinstance(spec.torch, str):
            t = f"``torch.nn.functional.{spec.torch}`` at the default parameters"
        else:
            t = (spec.torch.__doc__ or "a torch expression").strip().split("\n")[0].rstrip(".")
        lines.append(
            f"- **torch equivalent** (timed by ``iglu-np bench``, checked by the tests): {t}."
        )
    if spec.jax:
        lines.append(
            f"- **JAX equivalent** (timed by ``iglu-np bench --device gpu``): "
            f"``{spec.jax}`` in ``jax.nn`` (else ``jax.numpy``)."
        )
    return lines + [""]


# --------------------------------------------------------------------------- pages
_HEADER = ".. Generated from the registry by docs/_ext/activation_pages.py: do not edit.\n\n"


def page(act, acc: dict) -> str:
    n, spec = act.name, act.spec
    title = n
    pdesc = ", ".join(f"{p.name} = {p.default!r}" for p in spec.params)
    lines = [
        _HEADER + f".. _activation-{n}:",
        "",
        title,
        "=" * len(title),
        "",
        f".. figure:: _plots/{n}.png",
        f"   :alt: {n}, its derivative in x"
        + (" and in its parameters" if spec.params else "")
        + f" on {list(X_PLOT)}",
        f"   :width: {100 if spec.params else 55}%",
        "",
        f"   On [{X_PLOT[0]:g}, {X_PLOT[1]:g}]"
        + (f" at the defaults ({pdesc})" if pdesc else "")
        + ".",
        "",
        "Reference",
        "---------",
        "",
        f".. autofunction:: iglu_np.{n}",
        "",
    ]
    lines += accuracy_section(n, acc)
    lines += backends_section(act)
    return "\n".join(lines)


def index(acts) -> str:
    lines = [
        _HEADER + "Activations",
        "===========",
        "",
        "Every activation ``iglu_np.<name>``, its formula and its parameters with defaults "
        "and domains. Each page holds the docstring, a plot, the measured accuracy and "
        "the backends.",
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: 14 28 58",
        "",
        "   * - name",
        "     - parameters (default, domain)",
        "     - formula",
    ]
    for n, a in acts.items():
        ps = "; ".join(f"``{p.name}={p.default!r}`` ({p.domain})" for p in a.params) or "—"
        lines += [f"   * - :doc:`{n}`", f"     - {ps}", f"     - :math:`{a.formula}`"]
    lines += [""] + aliases_section()
    lines += ["", ".. toctree::", "   :hidden:", ""] + [f"   {n}" for n in acts]
    return "\n".join(lines) + "\n"


def aliases_section() -> list:
    """The aliases (``iglu_np.ALIASES``) and how Hugging Face transformers' ``ACT2FN``
    names map, from ``iglu_np._aliases``."""
    from iglu_np._aliases import ALIASES, HF_NOT_PROVIDED, HF_SAME_NAME, NOTES

    lines = [
        ".. _activation-aliases:",
        "",
        "Aliases",
        "-------",
        "",
        "Other names in use for these activations: the names of Hugging Face "
        "transformers' ``ACT2FN`` that are an activation here under another name. "
        "``iglu_np.get(alias)`` and ``iglu_np.<alias>`` give an activation object with "
        "the listed parameter values as its defaults (a parameter passed to the call "
        "overrides them); ``iglu_np.ALIASES`` maps each alias to ``(activation, "
        "parameters)``.",
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: 18 30 52",
        "",
        "   * - alias",
        "     - activation",
        "     - what the name computes",
    ]
    for a, (t, fixed) in ALIASES.items():
        ps = ", ".join(f"{k}={v!r}" for k, v in fixed.items())
        lines += [
            f"   * - ``{a}``",
            f"     - :doc:`{t}`" + (f" ``({ps})``" if ps else ""),
            f"     - {NOTES[a]}",
        ]
    lines += [
        "",
        "``ACT2FN`` names that are activations here under the same name, at their "
        "defaults: " + ", ".join(f":doc:`{n}`" for n in HF_SAME_NAME) + ".",
        "",
        "Not provided (no activation here computes them):",
        "",
    ]
    lines += [f"- ``{n}``: {what}" for n, what in HF_NOT_PROVIDED.items()]
    return lines


def generate(app) -> None:
    import iglu_np

    src = Path(app.srcdir)
    acc = load_accuracy(src / ACCURACY)
    out = src / OUT
    (out / "_plots").mkdir(parents=True, exist_ok=True)
    acts = iglu_np.ACTIVATIONS
    for stale in out.glob("*.rst"):
        if stale.stem != "index" and stale.stem not in acts:
            stale.unlink()
    _write_if_changed(out / "index.rst", index(acts))
    for n, a in acts.items():
        _write_if_changed(out / f"{n}.rst", page(a, acc))
        plot(a, out / "_plots" / f"{n}.png")


# --------------------------------------------------------------------------- docstrings
def move_derivatives(app, what, name, obj, options, lines) -> None:
    """Turn the activation docstrings' "Derivatives" section into a rubric before the
    parameters (numpydoc knows no such section and would drop it)."""
    for i in range(len(lines) - 1):
        if lines[i] == "Derivatives" and set(lines[i + 1]) == {"-"}:
            break
    else:
        return
    j = i + 2
    while j < len(lines) - 1 and not (
        lines[j] and set(lines[j + 1]) == {"-"} and len(lines[j + 1]) == len(lines[j])
    ):
        j += 1
    if j == len(lines) - 1:
        j = len(lines)
    block = [".. rubric:: Derivatives", ""] + lines[i + 2 : j]
    del lines[i:j]
    at = lines.index("Parameters") if "Parameters" in lines else i
    lines[at:at] = block + [""]


_LITERAL = re.compile(r"(``.*?``|:math:`.*?`)")


def escape_bars(app, what, name, obj, options, lines) -> None:
    """Escape ``|`` in iglu_np's plain-text docstrings (the specs' notes write ``|x|``,
    which reStructuredText reads as a substitution), outside literals, math and examples."""
    if not name.startswith("iglu_np"):
        return
    block = None  # indentation of the directive (math, code) being skipped
    for i, ln in enumerate(lines):
        indent = len(ln) - len(ln.lstrip())
        if block is not None:
            if ln.strip() and indent <= block:
                block = None
            else:
                continue
        if ln.lstrip().startswith(".. ") and "::" in ln:
            block = indent
            continue
        if ln.strip() == "Examples":
            return
        if ln.lstrip().startswith((">>>", "...")) or "|" not in ln:
            continue
        parts = _LITERAL.split(ln)
        lines[i] = "".join(p if k % 2 else p.replace("|", r"\|") for k, p in enumerate(parts))


def setup(app):
    # numpydoc's signature pass also parses the raw docstring, before move_derivatives has
    # run for the content: its "Unknown section Derivatives" is about text shown correctly.
    warnings.filterwarnings("ignore", "Unknown section Derivatives", UserWarning)
    app.connect("builder-inited", generate)
    app.connect("autodoc-process-docstring", escape_bars, priority=400)
    # before numpydoc's handler (priority 500), which parses the sections
    app.connect("autodoc-process-docstring", move_derivatives, priority=400)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
