"""CuPy elementwise kernels of the gated forms, from the spec's generated C++.

``act(gate) * up`` and its backward as one ElementwiseKernel each over the gate and up
operands (CuPy takes strided views, so the halves or pairs of ``x`` are read where they
lie and the gradients written to their positions of ``dx``). The body calls the same
``iglu_np::<name>_fwd`` / ``_dx`` entry points as the activations' kernels, with the clamp
and the products in the CPU loops' order (:mod:`iglu_np.backends.cpu.gated_source`): the
gate's gradient is ``(grad_out * up) * act'(gate)``, up's ``grad_out * act(gate)``, so the
results equal the CPU's bit for bit under the same NVRTC options.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cxx import C_TYPES, preamble

__all__ = ["GatedKernelSource", "OPS", "gated_kernel_source"]

OPS = ("fwd", "bwd")


@dataclass(frozen=True)
class GatedKernelSource:
    name: str
    in_params: str
    out_params: str
    body: str
    preamble: str
    data: tuple  # the data operands, in order
    outs: tuple  # the outputs, in order
    params: tuple  # the scalar arguments after the data: lim, shift, p_<name>...
    compute: str


def _clamped(ct: str) -> str:
    # the CPU's _gclamp / _uclamp: NaN stays NaN (every comparison with it is false); a
    # shift of 0 leaves up as it is (-0.0 + 0.0 would be +0.0)
    return (
        f"const {ct} gv = ({ct})g; const {ct} uv = ({ct})u; "
        f"const {ct} gc = gv > lim ? lim : gv; "
        f"{ct} uc = uv > lim ? lim : uv; uc = uc < -lim ? -lim : uc; "
        f"if (shift != ({ct})0) uc = uc + shift; "
    )


def gated_kernel_source(spec, op: str, compute) -> GatedKernelSource:
    """The ElementwiseKernel of gated op ``op`` ("fwd" or "bwd") of ``spec`` computing in
    ``compute`` (float32 or float64)."""
    compute = np.dtype(compute)
    try:
        ct = C_TYPES[compute]
    except KeyError:
        raise TypeError(f"compute dtype must be float32 or float64, got {compute}") from None
    if op not in OPS:
        raise KeyError(f"no gated op {op!r}; expected one of {OPS}")
    pnames = tuple("p_" + p for p in spec.param_names)
    args = ", ".join(["gc", *pnames])

    def call(which):
        return f"iglu_np::{spec.name}_{which}<{ct}>({args})"

    scalars = ("lim", "shift", *pnames)
    sparams = ", ".join(f"{compute.name} {s}" for s in scalars)
    if op == "fwd":
        data, outs = ("g", "u"), ("y",)
        body = _clamped(ct) + f"y = (Y)({call('fwd')} * uc);"
        out_params = "Y y"
    else:
        data, outs = ("g", "u", "go"), ("dg", "du")
        body = (
            _clamped(ct)
            + f"const {ct} gu = ({ct})go * uc; "
            + f"dg = (DG)(gv > lim ? ({ct})0 : gu * {call('dx')}); "
            + f"du = (DU)((uv > lim || uv < -lim) ? ({ct})0 : ({ct})go * {call('fwd')});"
        )
        out_params = "DG dg, DU du"
    types = {"g": "G", "u": "U", "go": "O"}
    in_params = ", ".join([f"{types[d]} {d}" for d in data] + [sparams])
    return GatedKernelSource(
        name=f"iglu_np_{spec.name}_glu{op}",
        in_params=in_params,
        out_params=out_params,
        body=body,
        preamble=preamble(spec),
        data=data,
        outs=outs,
        params=scalars,
        compute=ct,
    )
