"""The gated forms on Numba CUDA device arrays: one grid-stride kernel per op, layout and
compute dtype, generated from the spec's device functions.

The kernels take the flat memory of a C-contiguous ``x`` (or of a gate and an up of one
shape) with the CPU loops' geometry (:func:`iglu_np.backends.cpu.gated.geometry`): element
``j`` of row ``r`` of the gate at ``goff + r * rs + j`` (layout "s1"), or the pairs of the
last axis ("s2": the gate even, "s2r": odd), and compute in the CPU loops' order (the
clamps, ``(grad_out * up) * act'(gate)``, ``grad_out * act(gate)``), so that the results
equal the CPU's bit for bit.
"""

from __future__ import annotations

import numpy as np

from ...._dtypes import fused_dtype, typed
from ...._spec import REGISTRY
from . import _discovery
from ._device_functions import device_function
from ._discovery import _lock, _state

__all__ = ["backward", "forward", "kernel", "python", "source"]


def _at(lay: str, what: str) -> str:
    """The flat index of element ``i``'s gate or up (``what``: "g" / "u")."""
    if lay == "s1":
        return f"{what}off + r * rs + j"
    k = ("0" if what == "g" else "1") if lay == "s2" else ("1" if what == "g" else "0")
    return f"2 * i + {k}"


def source(spec, op: str, lay: str) -> tuple:
    """``(function name, Python source)`` of gated op ``op`` ("fwd" / "bwd") of ``spec``
    for layout ``lay``."""
    pn = [f"p{k}" for k in range(len(spec.param_names))]
    pa = "".join(", " + p for p in pn)
    fname = f"iglu_np_{spec.name}_glu{op}_{lay}"
    ins = "xg, xu, go, og, ou" if op == "bwd" else "xg, xu, out"
    lines = [
        f"def {fname}(n, C, goff, uoff, rs, {ins}, lim, shift{pa}):",
        "    i = cuda.grid(1)",
        "    st = cuda.gridsize(1)",
        "    while i < n:",
        "        r = i // C",
        "        j = i - r * C",
        f"        gv = _COMPUTE(xg[{_at(lay, 'g')}])",
        f"        uv = _COMPUTE(xu[{_at(lay, 'u')}])",
        "        gc = lim if gv > lim else gv",
        "        uc = lim if uv > lim else uv",
        "        uc = -lim if uc < -lim else uc",
        "        if shift != _COMPUTE(0.0):",
        "            uc = uc + shift",
    ]
    if op == "fwd":
        lines.append(f"        out[i] = _f(gc{pa}) * uc")
    else:
        lines += [
            "        gr = _COMPUTE(go[i])",
            "        gu = gr * uc",
            f"        dg = gu * _dx(gc{pa})",
            f"        du = gr * _f(gc{pa})",
            f"        og[{_at(lay, 'g')}] = _COMPUTE(0.0) if gv > lim else dg",
            f"        ou[{_at(lay, 'u')}] = _COMPUTE(0.0) if (uv > lim or uv < -lim) else du",
        ]
    lines.append("        i += st")
    return fname, "\n".join(lines) + "\n"


def python(name: str, op: str, lay: str, compute):
    """The plain-Python kernel with its device functions bound (for ``cuda.jit`` or
    ``cuda.compile_ptx``)."""
    spec = REGISTRY[name]
    fname, src = source(spec, op, lay)
    g = {"cuda": _discovery._cuda(), "_COMPUTE": np.dtype(compute).type}
    g["_f"] = device_function(name, "f")
    g["_dx"] = device_function(name, "dx")
    exec(compile(src, f"<iglu_np.backends.cuda.numba_cuda {fname}>", "exec"), g)
    fn = g[fname]
    fn.__iglu_np_source__ = src
    return fn


def kernel(name: str, op: str, lay: str, compute):
    """The memoised ``cuda.jit`` kernel."""
    key = ("gated", name, op, lay, np.dtype(compute).name)
    k = _state.get(key)
    if k is None:
        with _lock:
            k = _state.get(key)
            if k is None:
                k = _state[key] = _discovery._cuda().jit(python(name, op, lay, compute))
    return k


def _launch(name, op, lay, dt, n, geo, arrays, lim, shift, vals):
    from ._arrays import _launch_dims

    blocks, threads = _launch_dims(_discovery._cuda(), n)
    k = kernel(name, op, lay, dt)
    k[blocks, threads](n, *geo, *arrays, *typed(dt, lim, shift, *vals))


def _fits(arrays, vals):
    """The dtype the kernels compute in, or None where they do not apply (operands not
    C-contiguous, or what :func:`iglu_np._dtypes.fused_dtype` refuses: mixed or other
    dtypes, array parameters, float32 with a parameter beyond float32's range)."""
    if not all(a.is_c_contiguous() for a in arrays):
        return None
    return fused_dtype([a.dtype for a in arrays], vals)


def _geometry(x, up, axis, layout, gate_first):
    """The CPU loops' geometry of the operands (:func:`iglu_np.backends.cpu.gated.geometry`;
    gate and up given: one row of all the elements)."""
    from ...cpu.gated import geometry

    if up is None:
        return geometry(tuple(x.shape), axis, layout, gate_first)
    return 1, x.size, 0, 0, 0, "s1", tuple(x.shape)


def forward(name, x, up, axis, layout, gate_first, lim, shift, vals):
    """``act(gate) * up`` of C-contiguous device arrays (a new device array), or None
    where the kernel does not apply."""
    cuda = _discovery._cuda()
    dt = _fits((x,) if up is None else (x, up), vals)
    if dt is None or (up is not None and tuple(up.shape) != tuple(x.shape)):
        return None
    r, c, goff, uoff, rs, lay, oshape = _geometry(x, up, axis, layout, gate_first)
    out = cuda.device_array(r * c, dt)
    xf = x.reshape(x.size)
    uf = xf if up is None else up.reshape(up.size)
    _launch(name, "fwd", lay, dt, r * c, (c, goff, uoff, rs), (xf, uf, out), lim, shift, vals)
    return out.reshape(oshape)


def backward(name, x, up, go, axis, layout, gate_first, lim, shift, vals):
    """The gradient for x (or the pair for gate and up) as new device arrays, or None."""
    cuda = _discovery._cuda()
    dt = _fits((x, go) if up is None else (x, up, go), vals)
    if dt is None or (up is not None and tuple(up.shape) != tuple(x.shape)):
        return None
    r, c, goff, uoff, rs, lay, oshape = _geometry(x, up, axis, layout, gate_first)
    if tuple(go.shape) != tuple(oshape):
        return None
    xf = x.reshape(x.size)
    uf = xf if up is None else up.reshape(up.size)
    og = cuda.device_array(x.size, dt)
    ou = og if up is None else cuda.device_array(x.size, dt)
    arrays = (xf, uf, go.reshape(go.size), og, ou)
    _launch(name, "bwd", lay, dt, r * c, (c, goff, uoff, rs), arrays, lim, shift, vals)
    if up is None:
        return og.reshape(tuple(x.shape))
    return og.reshape(tuple(x.shape)), ou.reshape(tuple(x.shape))
