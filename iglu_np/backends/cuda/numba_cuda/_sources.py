"""Python source of the generated CUDA kernels (general, vector and one-pass backward
forms) and the plain-Python kernel bound to its device functions."""

from __future__ import annotations

import numpy as np

from ...._kinds import BWD_ALL, Kind, kinds
from ...._spec import REGISTRY
from . import _discovery
from ._device_functions import _rebinder, device_function
from ._discovery import SIM_THREADS, THREADS, _lock, _state


# --------------------------------------------------------------------------- kernel generation
def _kinds(spec) -> list:
    return kinds(spec.param_names, sums=True)


def _index(ndim):
    """(index expression, statements that compute it from the flat i) for ``ndim`` dims."""
    if ndim == 1:
        return "i", []
    js = [f"j{k}" for k in range(ndim)]
    decomp = ["r = i"]
    for k in range(ndim - 1, 0, -1):
        decomp += [f"j{k} = r % x.shape[{k}]", f"r = r // x.shape[{k}]"]
    decomp.append("j0 = r")
    return ", ".join(js), decomp


def _block_sum(value: str, slot: int) -> list:
    """Kernel lines that add ``value`` over the block (a tree in the shared ``buf``) and
    the block's sum to ``acc[slot]`` with one atomic."""
    return [
        f"buf[t] = {value}",
        "cuda.syncthreads()",
        "w = _BLOCK // 2",
        "while w > 0:",
        "    if t < w:",
        "        buf[t] += buf[t + w]",
        "    cuda.syncthreads()",
        "    w //= 2",
        "if t == 0:",
        f"    cuda.atomic.add(acc, {slot}, buf[0])",
    ]


def _source(spec, kind, arrays, ndim, scalar_sum):
    """Python source of the kernel; ``arrays[k]`` says whether parameter k is an array."""
    params = spec.param_names
    kd = Kind.parse(kind)
    two = kd.times_grad
    data = ["x", "g"] if two else ["x"]
    pn = [f"p{k}" for k in range(len(params))]
    idx, decomp = _index(ndim)
    hs = _prep_names(spec, kd.scalar, arrays)
    pv = [f"_COMPUTE({p}[{idx}])" if a else p for p, a in zip(pn, arrays)] + hs
    call = f"_fn(_COMPUTE(x[{idx}]), {', '.join(pv)})" if pv else f"_fn(_COMPUTE(x[{idx}]))"
    val = f"_COMPUTE(g[{idx}]) * {call}" if two else call
    sig = ["n", *data, *pn]
    body = []
    if kd.op == "sum" and scalar_sum:
        sig.append("acc")
        body = [
            "s = _ACC(0.0)",
            "while i < n:",
            *["    " + d for d in decomp],
            f"    s += _ACC({val})",
            "    i += st",
            "buf = cuda.shared.array(_BLOCK, _ACC)",
            "t = cuda.threadIdx.x",
            *_block_sum("s", 0),
        ]
    elif kd.op == "sum":
        sig.append("acc")
        aidx = idx if ndim == 1 else f"({idx})"
        body = [
            "while i < n:",
            *["    " + d for d in decomp],
            f"    cuda.atomic.add(acc, {aidx}, _ACC({val}))",
            "    i += st",
        ]
    elif ndim == 1:
        # Four independent elements per thread and step, all loaded before any is
        # computed or stored: out may alias x for all the compiler knows, so it could not
        # hoist a later load above an earlier store itself. On an H100 (float32, 2^26
        # elements) a one-element grid-stride Numba kernel takes 1.9x the copy limit, four
        # independent elements per thread 1.5x (``iglu-np bench --device gpu``
        # re-measures).
        sig.append("out")
        q = [f"i + {k} * st" if k else "i" for k in range(4)]
        loads = [f"    x{k} = _COMPUTE(x[{q[k]}])" for k in range(4)]
        if two:
            loads += [f"    g{k} = _COMPUTE(g[{q[k]}])" for k in range(4)]
        calls = []
        for k in range(4):
            pk = [f"_COMPUTE({p}[{q[k]}])" if a else p for p, a in zip(pn, arrays)] + hs
            calls.append(f"_fn({', '.join([f'x{k}', *pk])})")
        vals = [f"g{k} * {c}" if two else c for k, c in enumerate(calls)]
        body = [
            "while i + 3 * st < n:",
            *loads,
            *[f"    y{k} = {v}" for k, v in enumerate(vals)],
            *[f"    out[{q[k]}] = y{k}" for k in range(4)],
            "    i += 4 * st",
            "while i < n:",
            f"    out[i] = {val}",
            "    i += st",
        ]
    else:
        sig.append("out")
        body = [
            "while i < n:",
            *["    " + d for d in decomp],
            f"    out[{idx}] = {val}",
            "    i += st",
        ]
    fname = f"iglu_np_{spec.name}_{kd.compact}"
    lines = [f"def {fname}({', '.join(sig)}):", "    i = cuda.grid(1)", "    st = cuda.gridsize(1)"]
    lines += ["    " + b for b in _prep_lines("_prep", hs, pn) + body]
    return fname, "\n".join(lines) + "\n"


def _prep_names(spec, which, arrays):
    """Names of the prepared values (the spec's ``prepared`` part of kernel ``which``,
    computed once per thread) when every parameter is a scalar, else []."""
    pr = spec.prepared_for(which)
    if pr is None or any(arrays):
        return []
    return [f"_pre_{which}_{j}" for j in range(pr[2])]


def _prep_lines(fn, hs, pn):
    if not hs:
        return []
    return [
        f"_prepared = {fn}({', '.join(pn)})",
        *(f"{h} = _prepared[{j}]" for j, h in enumerate(hs)),
    ]


# --------------------------------------------------------------------------- vector form
VECTOR_BYTES = 16  # one 128-bit load or store per operand and step


def lanes(data_dtype) -> int:
    """Elements per vector load and store of the vector form for data of ``data_dtype``:
    16 bytes (4 float32, 2 float64, 8 float16), except float16 under numba-cuda-mlir,
    whose vector types hold at most four elements (8 bytes)."""
    size = np.dtype(data_dtype).itemsize
    if size == 2 and _discovery._mlir():
        return 4
    return VECTOR_BYTES // size


def _source_vec(spec, kind, nlanes, align, mlir):
    """Python source of the vector form of an elementwise kernel (1-D, C-contiguous data
    and output of one dtype whose pointers are 16-byte aligned, scalar parameters): each
    thread loads ``nlanes`` adjacent elements of every operand with one vector load,
    computes them, stores them with one vector store, and strides over the grid; the last
    ``n % nlanes`` elements go to one thread each. ``x``, ``g`` and ``out`` are 1-D
    arrays or raw pointers (:func:`pointer_signature`)."""
    params = spec.param_names
    kd = Kind.parse(kind)
    two = kd.times_grad
    data = ["x", "g"] if two else ["x"]
    pn = [f"p{k}" for k in range(len(params))]
    hs = _prep_names(spec, kd.scalar, (False,) * len(params))
    rest = "".join(", " + a for a in [*pn, *hs])

    def val(xe, ge):
        call = f"_fn(_COMPUTE({xe}){rest})"
        return f"_COMPUTE({ge}) * {call}" if two else call

    L = nlanes
    if mlir:
        # numba-cuda-mlir's aligned vector load and store (llvm.load/store of a vector);
        # its vectors give their elements as attributes
        loads = [f"    _{d}v = cuda.vector.load({d}, j * {L}, {L}, {align})" for d in data]
        elems = [f"_{{}}v.{'xyzw'[k]}" for k in range(L)]
        store = f"    cuda.vector.store(out, j * {L}, _OUTVEC({', '.join(f'y{k}' for k in range(L))}), {align})"
    else:
        loads = [f"    _{d}v = _vload({d}, j)" for d in data]
        elems = [f"_{{}}v[{k}]" for k in range(L)]
        store = f"    _vstore(out, j, ({', '.join(f'y{k}' for k in range(L))}))"
    ys = [f"    y{k} = {val(e.format('x'), e.format('g'))}" for k, e in enumerate(elems)]
    body = [
        f"nv = n // {L}",
        "j = i",
        "while j < nv:",
        *loads,
        *ys,
        store,
        "    j += st",
        f"t = nv * {L} + i",
        "if t < n:",
        f"    out[t] = {val('x[t]', 'g[t]')}",
    ]
    fname = f"iglu_np_{spec.name}_{kd.compact}_v{L}"
    lines = [
        f"def {fname}({', '.join(['n', *data, *pn, 'out'])}):",
        "    i = cuda.grid(1)",
        "    st = cuda.gridsize(1)",
    ]
    lines += ["    " + b for b in _prep_lines("_prep", hs, pn) + body]
    return fname, "\n".join(lines) + "\n"


def _sim_vload(a, j):
    """The simulator's vector load: the elements as a tuple."""
    w = VECTOR_BYTES // np.dtype(a.dtype).itemsize
    return tuple(a[j * w + k] for k in range(w))


def _sim_vstore(a, j, vals):
    w = len(vals)
    for k in range(w):
        a[j * w + k] = vals[k]


def _vector_intrinsics():
    """(vload, vstore) for numba-cuda: ``vload(a, j)`` reads elements ``[w*j, w*j + w)`` of
    a 1-D C-contiguous array or a pointer as one 16-byte-aligned vector load (a tuple of
    ``w = 16 // itemsize`` elements); ``vstore(a, j, values)`` casts the values to the
    element type and writes them with one vector store. The host guarantees the alignment
    and the extent. Numba's own element access cannot give this: it knows only the
    element's alignment, and wraps a negative index around, per element."""
    got = _state.get("vector_intrinsics")
    if got is not None:
        return got
    if _discovery.simulator():
        got = _state["vector_intrinsics"] = (_sim_vload, _sim_vstore)
        return got
    from llvmlite import ir
    from numba.core import types
    from numba.core.extending import intrinsic

    def operand(ty):
        if isinstance(ty, types.Array) and ty.ndim == 1 and ty.layout == "C":
            return ty.dtype
        if isinstance(ty, types.CPointer):
            return ty.dtype
        return None

    def vector_pointer(context, builder, ty, val, j, jty):
        """(pointer to the j-th 16-byte vector, its memory type, the element vector
        type, lanes). Elements narrower than 32 bits move as 32-bit words: NVVM splits
        a vector of eight halves into two 8-byte accesses."""
        dt = operand(ty)
        w = VECTOR_BYTES // (dt.bitwidth // 8)
        vt = ir.VectorType(context.get_data_type(dt), w)
        mt = vt if dt.bitwidth >= 32 else ir.VectorType(ir.IntType(32), VECTOR_BYTES // 4)
        data = (
            val
            if isinstance(ty, types.CPointer)
            else context.make_array(ty)(context, builder, val).data
        )
        idx = context.cast(builder, j, jty, types.intp)
        return builder.gep(builder.bitcast(data, mt.as_pointer()), [idx], inbounds=True), mt, vt, w

    @intrinsic
    def vload(typingctx, a, j):
        dt = operand(a)
        if dt is None or not isinstance(dt, types.Float) or not isinstance(j, types.Integer):
            return None
        w = VECTOR_BYTES // (dt.bitwidth // 8)

        def codegen(context, builder, sig, args):
            ptr, mt, vt, w = vector_pointer(
                context, builder, sig.args[0], args[0], args[1], sig.args[1]
            )
            v = builder.load(ptr, align=VECTOR_BYTES)
            i32 = ir.IntType(32)
            if mt is vt:
                vals = [builder.extract_element(v, ir.Constant(i32, k)) for k in range(w)]
            else:  # two halves per 32-bit word, the first in the low bits (little-endian)
                i16, et = ir.IntType(16), vt.element
                vals = []
                for k in range(w // 2):
                    word = builder.extract_element(v, ir.Constant(i32, k))
                    vals.append(builder.bitcast(builder.trunc(word, i16), et))
                    vals.append(
                        builder.bitcast(
                            builder.trunc(builder.lshr(word, ir.Constant(i32, 16)), i16), et
                        )
                    )
            return context.make_tuple(builder, sig.return_type, vals)

        return types.UniTuple(dt, w)(a, j), codegen

    @intrinsic
    def vstore(typingctx, a, j, vals):
        dt = operand(a)
        if dt is None or not isinstance(dt, types.Float) or not isinstance(j, types.Integer):
            return None
        if not isinstance(vals, types.BaseTuple) or len(vals) != VECTOR_BYTES // (dt.bitwidth // 8):
            return None

        def codegen(context, builder, sig, args):
            aty, jty, vty = sig.args
            ptr, mt, vt, w = vector_pointer(context, builder, aty, args[0], args[1], jty)
            i32 = ir.IntType(32)
            es = [
                context.cast(builder, builder.extract_value(args[2], k), vty[k], dt)
                for k in range(w)
            ]
            v = ir.Constant(mt, ir.Undefined)
            if mt is vt:
                for k in range(w):
                    v = builder.insert_element(v, es[k], ir.Constant(i32, k))
            else:
                i16 = ir.IntType(16)
                for k in range(w // 2):
                    lo = builder.zext(builder.bitcast(es[2 * k], i16), i32)
                    hi = builder.zext(builder.bitcast(es[2 * k + 1], i16), i32)
                    word = builder.or_(lo, builder.shl(hi, ir.Constant(i32, 16)))
                    v = builder.insert_element(v, word, ir.Constant(i32, k))
            builder.store(v, ptr, align=VECTOR_BYTES)
            return context.get_dummy_value()

        return types.void(a, j, vals), codegen

    got = _state["vector_intrinsics"] = (vload, vstore)
    return got


def _bind(g, spec, which, arrays, fn_name, prep_name):
    """Bind ``fn_name`` to kernel ``which``'s device function (the prepared form and
    ``prep_name`` its parameter-only part where :func:`_prep_names` gives names)."""
    if _prep_names(spec, which, arrays):
        prep, fn, _ = spec.prepared_for(which)
        with _lock:
            g[fn_name] = _rebinder()(fn)
            g[prep_name] = _rebinder()(prep)
    else:
        g[fn_name] = device_function(spec.name, which)


def _source_all(spec, ndim):
    """Python source of the one-pass backward (scalar parameters): ``out = g * f'(x)`` and,
    per parameter k, ``sum(g * df/dp_k)`` accumulated per thread in float64, summed over
    the block in shared memory and added to ``acc[k]`` with one atomic per block."""
    ps = spec.param_names
    pn = [f"p{k}" for k in range(len(ps))]
    idx, decomp = _index(ndim)
    scal = (False,) * len(ps)
    hx = _prep_names(spec, "dx", scal)
    hd = [_prep_names(spec, "d" + p, scal) for p in ps]
    body = [f"s{k} = _ACC(0.0)" for k in range(len(ps))]
    body += _prep_lines("_prep", hx, pn)
    for k in range(len(ps)):
        body += _prep_lines(f"_prepd{k}", hd[k], pn)
    body += [
        "while i < n:",
        *["    " + d for d in decomp],
        f"    xi = _COMPUTE(x[{idx}])",
        f"    gi = _COMPUTE(g[{idx}])",
        f"    out[{idx}] = gi * _fn({', '.join(['xi', *pn, *hx])})",
    ]
    body += [
        f"    s{k} += _ACC(gi * _fd{k}({', '.join(['xi', *pn, *hd[k]])}))" for k in range(len(ps))
    ]
    body += ["    i += st", "buf = cuda.shared.array(_BLOCK, _ACC)", "t = cuda.threadIdx.x"]
    for k in range(len(ps)):
        body += [*_block_sum(f"s{k}", k), "cuda.syncthreads()"]
    fname = f"iglu_np_{spec.name}_{BWD_ALL}"
    lines = [
        f"def {fname}({', '.join(['n', 'x', 'g', *pn, 'out', 'acc'])}):",
        "    i = cuda.grid(1)",
        "    st = cuda.gridsize(1)",
    ] + ["    " + b for b in body]
    return fname, "\n".join(lines) + "\n"


def _which(kind):
    return Kind.parse(kind).scalar


def kernel_python(name, kind, compute, arrays=None, ndim=1, scalar_sum=None, vector=None):
    """The plain-Python kernel (globals bound to device functions), before ``cuda.jit``.

    ``kind``: fwd, dx, bwd, d_<p>, bwd_<p>, or sum_<p> (the fused backward_params
    reduction). ``arrays``: per parameter, whether it is passed as an array (default: all
    scalars). ``scalar_sum`` (sum_ kinds): reduce into one value (default: when the
    parameter is a scalar). ``vector``: the data dtype of the vector form (elementwise
    kinds, 1-D, scalar parameters; see :func:`_source_vec`), else the general form.
    """
    spec = REGISTRY[name]
    if kind not in _kinds(spec):
        raise KeyError(f"{name}: no kernel kind {kind!r}; expected one of {_kinds(spec)}")
    compute = np.dtype(compute)
    if compute not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"compute dtype must be float32 or float64, got {compute}")
    arrays = tuple(bool(a) for a in (arrays or (False,) * len(spec.params)))
    kd = Kind.parse(kind)
    if kd.op == "sum":
        k = spec.param_names.index(kd.param)
        scalar_sum = (not arrays[k]) if scalar_sum is None else bool(scalar_sum)
    else:
        scalar_sum = False
    if vector is not None:
        vector = np.dtype(vector)
        if kd.op == "sum" or any(arrays) or ndim != 1:
            raise ValueError(
                f"{name}.{kind}: the vector form is for elementwise kinds, 1-D data "
                "and scalar parameters"
            )
    key = ("py", name, kind, compute.name, arrays, ndim, scalar_sum, vector)
    fn = _state.get(key)
    if fn is not None:
        return fn
    with _lock:
        cuda = _discovery._cuda()
        g = {
            "cuda": cuda,
            "_COMPUTE": compute.type,
            "_ACC": np.float64,
            "_BLOCK": SIM_THREADS if _discovery.simulator() else THREADS,
        }
        if vector is None:
            fname, src = _source(spec, kind, arrays, ndim, scalar_sum)
        else:
            w = lanes(vector)
            fname, src = _source_vec(
                spec,
                kind,
                w,
                w * vector.itemsize,
                _discovery._mlir() and not _discovery.simulator(),
            )
            if _discovery._mlir():
                g["_OUTVEC"] = getattr(cuda, f"{vector.name}x{w}")
            else:
                g["_vload"], g["_vstore"] = _vector_intrinsics()
        _bind(g, spec, _which(kind), arrays, "_fn", "_prep")
        exec(compile(src, f"<iglu_np.backends.cuda.numba_cuda {fname}>", "exec"), g)
        fn = _state[key] = g[fname]
        fn.__iglu_np_source__ = src
        return fn
