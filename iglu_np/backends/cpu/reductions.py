"""The loops' operands and their reductions: parameters and data as the njit loops take
them (:func:`_param`, :func:`_flat_in`), and the parameter gradients summed in the loops
(fixed float64 blocks, so the result does not depend on the thread count) for
``backward_params`` and the fused ``backward_all`` of :mod:`.backend`.
"""

from __future__ import annotations

import numpy as np

from ..._dtypes import F32 as _F32
from ..._dtypes import F64 as _F64
from ..._kinds import BWD_ALL
from . import tiers
from . import ufuncs as cpu


def _param(v, dt, shape, order=None):
    """A parameter as the loop takes it: a numpy scalar of dtype ``dt``, a flat
    contiguous array of x's shape (in x's memory order ``order``), or None when the loops
    do not apply."""
    tv = type(v)
    if tv is float or tv is int:
        return dt.type(v)
    if isinstance(v, np.generic):
        return dt.type(v)
    if isinstance(v, np.ndarray):
        if v.ndim == 0:
            return dt.type(v[()])
        if v.shape == shape:
            if order is not None and order != tuple(range(len(shape))):
                v = v.transpose(order)
            return np.ascontiguousarray(v, dtype=dt).reshape(-1)
    return None


def _flat_in(a, dt, shape, order=None):
    """``a`` as a 1-d view over its memory when it is a ``dt`` array of ``shape`` laid out
    in the axis ``order`` (default: its own, if it has one), else None."""
    if type(a) is not np.ndarray or a.dtype != dt or a.shape != shape:
        return None
    loops = tiers._loops()
    if order is None:
        order = loops.axis_order(a)
        if order is None:
            return None
    return loops.mem_flat(a, order)


def _reduction_operands(vals: list, cdt):
    """``(x, grad_out, params, shape, order)`` flat over x's memory for the reductions
    (every parameter a scalar, x and grad_out laid out alike), else None. Summed in
    memory order (like numpy's order='K' reductions): a Fortran-ordered x may round
    differently from its C-ordered copy."""
    if cdt != _F32 and cdt != _F64:
        return None
    x = vals[0]
    if type(x) is not np.ndarray:
        return None
    shape = x.shape
    order = tiers._loops().axis_order(x)
    if order is None:
        return None
    xf = _flat_in(x, cdt, shape, order)
    gf = _flat_in(vals[1], cdt, shape, order)
    if xf is None or gf is None:
        return None
    ps = []
    for v in vals[2:]:
        if isinstance(v, np.ndarray) and v.ndim > 0:
            return None
        pv = _param(v, cdt, ())
        if pv is None:
            return None
        ps.append(pv)
    return xf, gf, ps, shape, order


def _laid_out_alike(vals: list, cdt):
    """``vals`` with x (strided, reversed) copied to a contiguous array in its own axis
    order and grad_out (strided, broadcast, another layout) copied to x's layout, for
    the reductions; None where they would not take the copies (an array parameter, a
    grad_out that does not broadcast to x's shape, few elements). The copies cost ~0.5-1
    ns/el, several times less than the ufunc and numpy's sum on such operands; the sum is
    then the loops' (float64 blocks in memory order), where numpy's sums float32 in
    float32."""
    x, g = vals[0], vals[1]
    if (
        type(x) is not np.ndarray
        or x.dtype != cdt
        or x.size < tiers.MIN_SIZE
        or not isinstance(g, (np.ndarray, np.generic, float, int))
        or any(isinstance(v, np.ndarray) and v.ndim > 0 for v in vals[2:])
    ):
        return None
    try:
        shape = np.broadcast_shapes(np.shape(g), x.shape)
    except ValueError:
        return None
    if shape != x.shape:
        return None
    loops = tiers._loops()
    xc = x if loops.axis_order(x) is not None else np.copy(x, order="K")
    gc = np.empty_like(xc)
    np.copyto(gc, g, casting="same_kind")
    return [xc, gc, *vals[2:]]


def _reduce_params(act, vals: list, cdt):
    """dict param -> 0-d gradient when every parameter is a scalar (else None): fixed
    blocks of ``cpu_fast.REDUCE_BLOCK`` elements summed in float64 (see cpu_fast), so the
    result does not depend on the thread count."""
    ops = _reduction_operands(vals, cdt)
    if ops is None:
        return None
    loops = tiers._loops()
    xf, gf, ps, shape, order = ops
    n = xf.size
    if n < tiers.MIN_SIZE:
        # small: the ufunc's elementwise gradient, summed in float64 like the blocks below
        res = {}
        with np.errstate(all="ignore"):
            for p in act.param_names:
                full = cpu.get_ufunc(act.name, "bwd_" + p)(xf, gf, *ps)
                res[p] = np.asarray(cdt.type(np.sum(full, dtype=np.float64)))
        return res
    part = np.empty(max(1, -(-n // loops.REDUCE_BLOCK)), np.float64)
    res = {}
    for p in act.param_names:
        if n == 0:
            part[:] = 0.0
        elif tiers._parallel(n):
            k = loops.kernel(act.name, "sum_" + p, True)
            tiers._ready(k, (xf, gf, part, True, *ps))
            loops.launch(
                k,
                n,
                lambda: k(xf, gf, part, True, *ps),
                lambda: loops.kernel(act.name, "sum_" + p, False)(xf, gf, part, False, *ps),
                xf.dtype.char,
            )
        else:
            loops.kernel(act.name, "sum_" + p, False)(xf, gf, part, False, *ps)
        res[p] = np.asarray(cdt.type(part.sum()))
    return res


def _fused_backward(act, vals: list, cdt, out):
    """``(grad_x, {param: 0-d gradient})`` from one pass over x and grad_out when every
    parameter is a scalar and the operands fit the loops, else None. grad_x and the
    gradients equal those of the ``bwd`` loop and :func:`_reduce_params` bit for bit
    (the same per-element values, block sums and order)."""
    ops = _reduction_operands(vals, cdt)
    loops = tiers._loops()
    if ops is None or ops[0].size < tiers.MIN_SIZE:
        return None
    xf, gf, ps, shape, order = ops
    if out is None:
        o = loops.empty_like_layout(shape, cdt, order)
    else:
        if type(out) is not np.ndarray or out.dtype != cdt or out.shape != shape:
            return None
        if loops.mem_flat(out, order) is None or any(np.may_share_memory(a, out) for a in vals[:2]):
            return None  # overlap: the two-pass path buffers it
        o = out
    n = xf.size
    part = np.empty((len(ps), max(1, -(-n // loops.REDUCE_BLOCK))), np.float64)
    of = loops.mem_flat(o, order)
    if tiers._parallel(n):
        k = loops.kernel(act.name, BWD_ALL, True)
        tiers._ready(k, (xf, gf, of, part, True, *ps))
        loops.launch(
            k,
            n,
            lambda: k(xf, gf, of, part, True, *ps),
            lambda: loops.kernel(act.name, BWD_ALL, False)(xf, gf, of, part, False, *ps),
            xf.dtype.char,
        )
    else:
        loops.kernel(act.name, BWD_ALL, False)(xf, gf, of, part, False, *ps)
    grads = {p: np.asarray(cdt.type(part[i].sum())) for i, p in enumerate(act.param_names)}
    return o, grads
