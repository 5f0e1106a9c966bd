"""Docstrings generated from the specs (numpydoc layout, formulas in ``.. math::``)."""

from __future__ import annotations

import textwrap


def _param_lines(spec) -> list:
    lines = [
        "x : array_like",
        "    Input. float32 stays float32 and float64 stays float64; integers and booleans",
        "    compute in float64; float16 and bfloat16 (``ml_dtypes``) compute in float32",
        "    and return their own dtype.",
    ]
    for p in spec.params:
        lines.append(f"{p.name} : float or array_like, default {p.default!r}")
        body = (p.doc + " " if p.doc else "") + (
            f"Domain: ``{p.domain}``. Broadcasts against ``x`` (e.g. one value per "
            "channel); cast to the computation dtype, so it never changes the result dtype."
        )
        lines += ["    " + ln for ln in textwrap.wrap(body, 84)]
    return lines


def _sig(spec, data="x") -> str:
    ps = "".join(f", {p.name}={p.default!r}" for p in spec.params)
    return f"{data}, /, *{ps}, out=None"


def activation_doc(spec) -> str:
    n = spec.name
    pnames = ", ".join(f"{p}=..." for p in spec.param_names)
    pk = (", " + pnames) if pnames else ""
    lines = [f"{n}({_sig(spec)})", "", spec.summary, "", ".. math::", "", "    " + spec.formula, ""]
    lines += ["Parameters", "----------"] + _param_lines(spec)
    lines += [
        "out : ndarray, optional",
        "    Where to write the result (numpy ufunc semantics; ``out=x`` works in place).",
        "",
        "Returns",
        "-------",
        "ndarray or scalar",
        "    Same shape as ``x`` broadcast with the parameters.",
        "",
        "Raises",
        "------",
        "TypeError",
        "    For complex, object, string or other non-real input, naming the activation.",
        "ValueError",
        "    For a parameter outside its domain, mismatched shapes or a read-only ``out``.",
        "",
        "Derivatives",
        "-----------",
    ]
    if spec.derivative_formula:
        lines += [".. math::", "", "    " + spec.derivative_formula, ""]
    lines += [
        f"- ``{n}.dx(x{pk}, out=None)``: df/dx.",
        f"- ``{n}.backward(x, grad_out{pk}, out=None)``: ``grad_out * df/dx`` in one pass.",
        f"- ``{n}.dparams(x{pk})``: dict parameter -> elementwise df/dparameter.",
        f"- ``{n}.backward_params(x, grad_out{pk})``: those times ``grad_out``, summed to each "
        "parameter's shape.",
        f"- ``{n}.ufunc``, ``{n}.dx.ufunc``, ``{n}.backward.ufunc``, ``{n}.dparams.ufuncs``: "
        "the raw numpy ufuncs (parameters positional).",
        "",
    ]
    if spec.notes:
        lines += ["Notes", "-----"] + textwrap.wrap(spec.notes, 88) + [""]
    if spec.references:
        lines += ["References", "----------"] + [f"- {r}" for r in spec.references] + [""]
    if spec.example:
        lines += ["Examples", "--------", ">>> import numpy as np, iglu_np"]
        lines += spec.example.strip().splitlines()
    return "\n".join(lines).rstrip() + "\n"


def op_doc(spec, kind: str) -> str:
    n = spec.name
    pk = "".join(f", {p}=..." for p in spec.param_names)
    if kind == "dx":
        head = f"{n}.dx(x{pk}, out=None)\n\nDerivative of ``{n}`` in x (elementwise)."
    else:
        head = (
            f"{n}.backward(x, grad_out{pk}, out=None)\n\n"
            f"Fused backward pass of ``{n}``: ``grad_out * d{n}/dx`` in one pass over memory. "
            "The dtype follows x and grad_out (promoted)."
        )
    if spec.derivative_formula:
        head += "\n\n.. math::\n\n    " + spec.derivative_formula
    return head + "\n"
