"""Numba CUDA backend: numba-cuda-mlir where installed, else numba-cuda
(:mod:`iglu_np.backends.cuda_toolchain` chooses, and says what to install where neither
can compile, e.g. numba-cuda on numpy >= 2.5).

Each spec's scalar kernels (the same Python source as the CPU ufuncs, with the same
elementary functions: iglu_np._vmath's, compiled for the GPU instead of libdevice's) are
compiled as ``cuda.jit(device=True, forceinline=True)`` device functions through
:class:`~iglu_np.backends._rebind.Rebinder`, and called from explicit grid-stride
``@cuda.jit`` kernels generated per (activation, kind, compute dtype, which parameters
are arrays, number of dimensions):

* 64-bit indexing (``cuda.grid(1)`` is int64, so is the loop bound);
* scalar parameters are kernel arguments; array parameters (per-channel sigma ...) and
  broadcast operands are stride-0 views, so nothing is materialised;
* operands are viewed at the broadcast shape and adjacent dimensions that are contiguous
  in *every* operand are merged: the usual case (same-shape contiguous arrays, scalar
  parameters) runs as a 1-D C-contiguous kernel; strided inputs keep their strides (no
  copies) and index through the few dimensions left;
* the vector form: where the collapsed kernel is 1-D, every operand C-contiguous, of one
  dtype and 16-byte aligned, and the parameters scalars (the usual case), each thread
  loads 16 bytes of each operand per step (4 float32, 2 float64, 8 float16; 4 float16
  under numba-cuda-mlir) with one vector load, computes them, stores them with one
  vector store and strides over the grid; the ``n % lanes`` last elements go to one
  thread each. Other launches (strided, broadcast, views that start mid-vector) take the
  general form;
* a thin per-call path for that usual case (:func:`_thin`): a plan cached per
  (activation, kind, dtypes, array type, parameter values) holds the validated
  parameters and the vector kernel compiled for raw pointers (one signature: no type
  resolution per call), launch configurations are cached, a new output comes from the
  input library's own pool (CuPy's, torch's; Numba's ``device_array`` otherwise), and
  the launch passes integers, not wrapped arrays;
* the launch goes to the input's stream (the ``__cuda_array_interface__`` stream of a
  CuPy array or torch tensor, the bound stream of a Numba array, else the default);
* float16 data is loaded as float16, computed in float32 and stored as float16;
  bfloat16 is refused with a TypeError naming the CuPy backend, which computes it;
* ``backward_params`` is one fused pass per parameter: g * df/dp accumulated in float64
  (per-thread sums, a shared-memory block sum, one atomic per block for a scalar
  parameter; atomics into the parameter-shaped accumulator for an array parameter).

Inputs: Numba device arrays and any object with ``__cuda_array_interface__`` (CuPy,
torch CUDA tensors ...), used in place. Outputs have the input's type when it is CuPy or
torch (zero-copy wrappers), else Numba device arrays.

Nothing here imports numba.cuda before it is needed: ``handles`` and ``status`` work
without it.
"""
from __future__ import annotations

import math
import threading

import numpy as np

from .._dtypes import compute_dtype as _compute_dtype
from .._dtypes import f32_range_error as _f32_range_error
from .._kinds import BWD_ALL, Kind, kinds
from .._params import values as _values
from .._spec import REGISTRY
from . import cuda_toolchain
from ._call import Target, prepare, unwrap_out
from ._interop import is_bf16_array

__all__ = ["handles", "status", "run", "backward_params", "backward_all", "device_function",
           "kernel_python", "compile_ptx", "simulator"]

THREADS = 256  # per block on a GPU; also the shared-memory size of the reduction
SIM_THREADS = 8  # the simulator runs one Python thread per CUDA thread: keep it small
BLOCKS_PER_SM = 32
MIN_BLOCKS = 128

_lock = threading.RLock()
_state: dict = {}


# --------------------------------------------------------------------------- discovery
def handles(array) -> bool:
    """Numba device arrays and any ``__cuda_array_interface__`` object (no import needed)."""
    if getattr(type(array), "__cuda_ndarray__", False):
        return True
    try:
        return hasattr(array, "__cuda_array_interface__")
    except Exception:  # a host tensor type that raises something else than AttributeError
        return False


def _cuda():
    """The toolchain's ``cuda`` module (numba-cuda-mlir where installed, else numba-cuda);
    a RuntimeError naming the fix where it cannot compile (numba-cuda on numpy >= 2.5)."""
    cuda = _state.get("cuda")
    if cuda is None:
        cuda = _state["cuda"] = cuda_toolchain.cuda_module()
    return cuda


def _mlir() -> bool:
    """Whether this process compiles with numba-cuda-mlir (chosen once: the choice looks
    the package up on sys.path, 23 us, and simulator() asks several times per launch)."""
    m = _state.get("mlir")
    if m is None:
        m = _state["mlir"] = cuda_toolchain.choose() == cuda_toolchain.MLIR
    return m


def simulator() -> bool:
    """True under ``NUMBA_ENABLE_CUDASIM=1`` with numba-cuda (kernels run as Python on the
    CPU; numba-cuda-mlir has no simulator)."""
    if _mlir():
        return False
    sim = _state.get("cudasim")
    if sim is None:  # fixed for the process (numba reads the variable at import)
        from numba.cuda.core import config

        sim = _state["cudasim"] = bool(config.ENABLE_CUDASIM)
    return sim


def status():
    """(usable, reason) for ``iglu-np info``."""
    tool = cuda_toolchain.choose()
    why = cuda_toolchain.problem(tool)
    if why is not None:
        return False, why
    mod = "numba_cuda_mlir" if tool == cuda_toolchain.MLIR else "numba_cuda"
    try:
        ver = getattr(__import__(mod), "__version__", "?")
    except Exception as e:  # ImportError, or OSError from a wheel built for another Python
        return False, f"{tool} fails to import ({type(e).__name__}: {e})"
    ver = f"{tool} {ver}"
    try:
        cuda = _cuda()
        if simulator():
            return True, f"{ver}, CUDA simulator (NUMBA_ENABLE_CUDASIM=1): slow, for tests"
        dev = cuda.get_current_device()
    except Exception as e:
        import ctypes.util

        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if ctypes.util.find_library("cuda") is None:
            msg = "no NVIDIA driver: libcuda not found"
        return False, f"{ver} installed, but no usable CUDA GPU/driver ({msg})"
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    cc = ".".join(map(str, dev.compute_capability))
    note = ""
    if _mlir():
        import importlib.util

        note = ("; broadcast or strided operands run the CuPy kernels" if importlib.util.find_spec("cupy")
                else "; C-contiguous operands of the result's shape only (install cupy for the rest)")
    return True, f"{ver}, {name} (compute capability {cc}){note}"


# --------------------------------------------------------------------------- device functions
_CUDA_FMA = """
def fma(a, b, c):
    return cuda.fma(a, b, c)
"""


def _cuda_fma(cuda):
    """_math.fma as CUDA's fma (numba-cuda-mlir lowers no llvmlite intrinsic such as
    _vmath._fma). Numba types ``cuda.fma`` only as an attribute of the cuda module,
    hence the source."""
    g = {"cuda": cuda}
    exec(compile(_CUDA_FMA, "<iglu_np.backends.numba_cuda fma>", "exec"), g)
    return g["fma"]


def _horner_intrinsic():
    """``_math.horner`` for the GPU as a Numba intrinsic: the coefficient tuple is unrolled
    at compile time with static element reads. The plain loop indexes the tuple with a
    runtime k, which Numba lowers to a switch that NVVM does not unroll (iglu.dx becomes
    864 PTX instructions with ~400 branches; unrolled it is straight-line FMAs). Same
    operation order as the Python function: r = T(c[n-1]); r = r*v + T(c[k])."""
    from numba.core import types
    from numba.core.extending import intrinsic

    @intrinsic
    def horner_unrolled(typingctx, v, coeffs):
        if not isinstance(v, types.Float) or not isinstance(coeffs, types.BaseTuple):
            return None
        n = len(coeffs)
        if n == 0:
            return None

        def codegen(context, builder, sig, args):
            vv, cc = args

            def coef(k):
                return context.cast(builder, builder.extract_value(cc, k), coeffs[k], v)

            r = coef(n - 1)
            for k in range(n - 2, -1, -1):
                r = builder.fadd(builder.fmul(r, vv), coef(k))
            return r

        return v(v, coeffs), codegen

    return horner_unrolled


def _vmath_helper(obj):
    """The Python of an iglu_np._vmath function (a CPU Numba dispatcher), for the GPU to
    compile as a device function."""
    py = getattr(obj, "py_func", None)
    if py is not None and getattr(py, "__module__", "") == "iglu_np._vmath":
        return py
    return None


def _math_namespace(rb):
    """``math`` with iglu_np._vmath's elementary functions compiled as device functions.
    libdevice's float32 exp (and what is built on it) is ``ex2.approx.ftz.f32``: results
    below the normal range came back as zero (silu, mish, gelu_tanh tails); the CPU's own
    range reduction and polynomials keep them, to within the FMA contractions NVVM makes."""
    import types

    from .. import _vmath

    ns = types.ModuleType("iglu_np.backends.numba_cuda.math")
    for k in dir(math):
        if not k.startswith("_"):
            setattr(ns, k, getattr(math, k))
    for k in _vmath.OVERRIDDEN:
        setattr(ns, k, rb(getattr(_vmath, k).py_func))
    return ns


def _horner_overload():
    """``_math.horner`` unrolled for numba-cuda-mlir: an ``@overload`` whose implementation
    is generated per coefficient count with constant tuple indices (iglu.dx: 151 PTX
    instructions, 11 branches, no local memory, where the plain loop's runtime index gives
    ~575 and 239). Same operation order as the Python function."""
    from numba_cuda_mlir.numba_cuda import types
    from numba_cuda_mlir.numba_cuda.extending import overload

    def horner_unrolled(v, coeffs):  # typed and lowered only through the overload
        raise NotImplementedError("iglu_np horner_unrolled is a CUDA device function")

    impls = {}

    @overload(horner_unrolled, target="cuda")
    def _ol(v, coeffs):
        if not isinstance(v, types.Float) or not isinstance(coeffs, types.BaseTuple) or len(coeffs) == 0:
            return None
        n = len(coeffs)
        impl = impls.get(n)
        if impl is None:
            lines = ["def horner_unrolled_impl(v, coeffs):", "    T = type(v)", f"    r = T(coeffs[{n - 1}])"]
            lines += [f"    r = r * v + T(coeffs[{k}])" for k in range(n - 2, -1, -1)]
            lines.append("    return r")
            g = {}
            exec(compile("\n".join(lines) + "\n", f"<iglu_np.backends.numba_cuda horner{n}>", "exec"), g)
            impl = impls[n] = g["horner_unrolled_impl"]
        return impl

    return horner_unrolled


def _rebinder():
    rb = _state.get("rebinder")
    if rb is None:
        from .. import _math, _vmath
        from ._rebind import Rebinder

        cuda = _cuda()
        # Inlined by NVVM (forceinline), not in Numba's IR (inline="always"): the IR
        # inliner deep-copies a callee's whole call tree at every call site, which makes
        # xIELU's backward kernel take minutes to compile instead of about a second. The simulator runs Python and takes neither option.
        dev = cuda.jit(device=True) if simulator() else cuda.jit(device=True, forceinline=True)
        if simulator():
            # The simulator runs the Python (two_prod's fma exactly, in fractions), and
            # _vmath's bit intrinsics cannot run as Python, so libm's math there.
            rb = Rebinder(dev)
        elif _mlir():
            # numba-cuda-mlir lowers no llvmlite intrinsics (the unrolled Horner, _vmath's bit
            # casts): Horner as a generated @overload, libdevice's math.
            import numba_cuda_mlir.numba_cuda as mlir_numba  # its own float64/int32 casts

            hor = _horner_overload()
            rb = Rebinder(dev, {_math.horner: hor, _vmath.horner: hor,
                                _math.fma: dev(_cuda_fma(cuda))}, numba_ns=mlir_numba)
        else:
            hor = _horner_intrinsic()
            # _vmath's intrinsics as copies of the CPU's own (_vmath._make_intrinsics says
            # why); _math.fma as on the CPU: llvm.fma, which NVVM emits as fma.rn
            overrides = _vmath.intrinsics_for_another_target()
            overrides.update({_math.fma: overrides[_vmath._fma], _math.horner: hor,
                              _vmath.horner: hor})
            rb = Rebinder(dev, overrides, helper=_vmath_helper)
            rb.math_ns = _math_namespace(rb)
        _state["rebinder"] = rb
    return rb


def device_function(name: str, which: str):
    """Device function for kernel ``which`` (``"f"``, ``"dx"`` or ``"d<param>"``) of ``name``."""
    spec = REGISTRY[name]
    fns = spec.kernels()
    if which not in fns:
        raise KeyError(f"{name}: no scalar kernel {which!r}; expected one of {sorted(fns)}")
    with _lock:
        return _rebinder()(fns[which])


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
        body = ["s = _ACC(0.0)", "while i < n:", *["    " + d for d in decomp],
                f"    s += _ACC({val})", "    i += st",
                "buf = cuda.shared.array(_BLOCK, _ACC)", "t = cuda.threadIdx.x", "buf[t] = s",
                "cuda.syncthreads()", "w = _BLOCK // 2", "while w > 0:",
                "    if t < w:", "        buf[t] += buf[t + w]", "    cuda.syncthreads()",
                "    w //= 2", "if t == 0:", "    cuda.atomic.add(acc, 0, buf[0])"]
    elif kd.op == "sum":
        sig.append("acc")
        aidx = idx if ndim == 1 else f"({idx})"
        body = ["while i < n:", *["    " + d for d in decomp],
                f"    cuda.atomic.add(acc, {aidx}, _ACC({val}))", "    i += st"]
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
        body = ["while i + 3 * st < n:", *loads,
                *[f"    y{k} = {v}" for k, v in enumerate(vals)],
                *[f"    out[{q[k]}] = y{k}" for k in range(4)], "    i += 4 * st",
                "while i < n:", f"    out[i] = {val}", "    i += st"]
    else:
        sig.append("out")
        body = ["while i < n:", *["    " + d for d in decomp], f"    out[{idx}] = {val}",
                "    i += st"]
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
    return [f"_prepared = {fn}({', '.join(pn)})",
            *(f"{h} = _prepared[{j}]" for j, h in enumerate(hs))]


# --------------------------------------------------------------------------- vector form
VECTOR_BYTES = 16  # one 128-bit load or store per operand and step


def lanes(data_dtype) -> int:
    """Elements per vector load and store of the vector form for data of ``data_dtype``:
    16 bytes (4 float32, 2 float64, 8 float16), except float16 under numba-cuda-mlir,
    whose vector types hold at most four elements (8 bytes)."""
    size = np.dtype(data_dtype).itemsize
    if size == 2 and _mlir():
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
    body = [f"nv = n // {L}", "j = i", "while j < nv:", *loads, *ys, store, "    j += st",
            f"t = nv * {L} + i", "if t < n:", f"    out[t] = {val('x[t]', 'g[t]')}"]
    fname = f"iglu_np_{spec.name}_{kd.compact}_v{L}"
    lines = [f"def {fname}({', '.join(['n', *data, *pn, 'out'])}):", "    i = cuda.grid(1)",
             "    st = cuda.gridsize(1)"]
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
    if simulator():
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
        data = val if isinstance(ty, types.CPointer) else context.make_array(ty)(context, builder, val).data
        idx = context.cast(builder, j, jty, types.intp)
        return builder.gep(builder.bitcast(data, mt.as_pointer()), [idx], inbounds=True), mt, vt, w

    @intrinsic
    def vload(typingctx, a, j):
        dt = operand(a)
        if dt is None or not isinstance(dt, types.Float) or not isinstance(j, types.Integer):
            return None
        w = VECTOR_BYTES // (dt.bitwidth // 8)

        def codegen(context, builder, sig, args):
            ptr, mt, vt, w = vector_pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1])
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
                    vals.append(builder.bitcast(builder.trunc(builder.lshr(word, ir.Constant(i32, 16)), i16), et))
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
            es = [context.cast(builder, builder.extract_value(args[2], k), vty[k], dt) for k in range(w)]
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
    body += ["while i < n:", *["    " + d for d in decomp],
             f"    xi = _COMPUTE(x[{idx}])", f"    gi = _COMPUTE(g[{idx}])",
             f"    out[{idx}] = gi * _fn({', '.join(['xi', *pn, *hx])})"]
    body += [f"    s{k} += _ACC(gi * _fd{k}({', '.join(['xi', *pn, *hd[k]])}))" for k in range(len(ps))]
    body += ["    i += st", "buf = cuda.shared.array(_BLOCK, _ACC)", "t = cuda.threadIdx.x"]
    for k in range(len(ps)):
        body += [f"buf[t] = s{k}", "cuda.syncthreads()", "w = _BLOCK // 2", "while w > 0:",
                 "    if t < w:", "        buf[t] += buf[t + w]", "    cuda.syncthreads()",
                 "    w //= 2", "if t == 0:", f"    cuda.atomic.add(acc, {k}, buf[0])",
                 "cuda.syncthreads()"]
    fname = f"iglu_np_{spec.name}_{BWD_ALL}"
    lines = [f"def {fname}({', '.join(['n', 'x', 'g', *pn, 'out', 'acc'])}):",
             "    i = cuda.grid(1)", "    st = cuda.gridsize(1)"] + ["    " + b for b in body]
    return fname, "\n".join(lines) + "\n"


def _extent(dev):
    """(first byte, one past the last byte) that a device array's elements span."""
    cai = getattr(dev, "__cuda_array_interface__", None)
    if cai is None:  # the simulator's arrays wrap a host array
        cai = dev._ary.__array_interface__
    lo = hi = int(cai["data"][0])
    item = np.dtype(dev.dtype).itemsize
    for n, st in zip(dev.shape, dev.strides):
        if n > 1:
            lo += min(0, (n - 1) * st)
            hi += max(0, (n - 1) * st)
    return lo, hi + item


def _overlap(a, b) -> bool:
    """Whether two device arrays share memory other than as exactly the same view."""
    (la, ha), (lb, hb) = _extent(a), _extent(b)
    if la == lb and tuple(a.strides) == tuple(b.strides) and tuple(a.shape) == tuple(b.shape):
        return False
    return la < hb and lb < ha


def _kernel_all(name, compute, ndim):
    """The jitted one-pass backward kernel (:func:`_source_all`)."""
    key = (BWD_ALL, name, np.dtype(compute).name, ndim)
    k = _state.get(key)
    if k is None:
        with _lock:
            k = _state.get(key)
            if k is None:
                spec = REGISTRY[name]
                cuda = _cuda()
                fname, src = _source_all(spec, ndim)
                g = {"cuda": cuda, "_COMPUTE": np.dtype(compute).type, "_ACC": np.float64,
                     "_BLOCK": SIM_THREADS if simulator() else THREADS}
                scal = (False,) * len(spec.params)
                _bind(g, spec, "dx", scal, "_fn", "_prep")
                for j, p in enumerate(spec.param_names):
                    _bind(g, spec, "d" + p, scal, f"_fd{j}", f"_prepd{j}")
                exec(compile(src, f"<iglu_np.backends.numba_cuda {fname}>", "exec"), g)
                g[fname].__iglu_np_source__ = src
                k = _state[key] = cuda.jit(g[fname])
    return k


def backward_all(act, data, params, out):
    """grad_x and every scalar parameter's gradient in one pass over x and grad_out (same
    shape, any strides), or None (array parameters, broadcasting, an out= that overlaps:
    two passes then)."""
    if not act.param_names or len(data) != 2 or not all(handles(d) for d in data):
        return None
    _refuse_bf16(act, *zip(_DATA_NAMES, data), *params.items(), ("out", out))
    if any(handles(v) or np.ndim(v) != 0 for v in params.values()):
        return None
    cuda = _cuda()
    # (float32 data with a parameter beyond float32 raise here what the two passes raise)
    stream, c = _operands(cuda, act, data, params)
    devs, cdt, vals = c.data, c.compute, c.values
    if tuple(devs[0].shape) != tuple(devs[1].shape) or devs[0].dtype != devs[1].dtype:
        return None
    shape = tuple(devs[0].shape)
    with _device_ctx(cuda, data[0]):
        if out is not None:
            out = unwrap_out(act.name, out)
            if not handles(out):
                return None
            odev = _as_device(cuda, out)
            if tuple(odev.shape) != shape or odev.dtype != devs[0].dtype:
                return None
            if any(_overlap(d, odev) for d in devs):
                return None  # out= overlapping x or g other than exactly: two passes
        if math.prod(shape) and _needs_cupy([*devs] + ([odev] if out is not None else []), shape):
            return None  # two passes, which take the CuPy kernels (see _needs_cupy)
        if out is None:
            odev = cuda.device_array(shape, dtype=devs[0].dtype, stream=stream)
        acc = cuda.to_device(np.zeros(len(vals), np.float64), stream=stream)
        n = math.prod(shape)
        if n:
            strides = [_broadcast_strides(w, d, shape) for w, d in zip(("x", "grad_out", "out"), [*devs, odev])]
            cshape, cstr = collapse(shape, strides)
            views = [_view(d, cshape, st) for d, st in zip([*devs, odev], cstr)]
            kern = _kernel_all(act.name, cdt, len(cshape))
            blocks, threads = _launch_dims(cuda, n)
            kern[blocks, threads, stream](n, views[0], views[1], *(cdt.type(v) for v in vals), views[2], acc)
        sums = acc.copy_to_host(stream=stream)
        if stream is not None and hasattr(stream, "synchronize"):
            stream.synchronize()
        grads = {p: _like(data[0], cuda.to_device(np.asarray(cdt.type(sums[k])), stream=stream))
                 for k, p in enumerate(act.param_names)}
        return (out if out is not None else _like(data[0], odev)), grads


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
            raise ValueError(f"{name}.{kind}: the vector form is for elementwise kinds, 1-D data "
                             "and scalar parameters")
    key = ("py", name, kind, compute.name, arrays, ndim, scalar_sum, vector)
    fn = _state.get(key)
    if fn is not None:
        return fn
    with _lock:
        cuda = _cuda()
        g = {
            "cuda": cuda,
            "_COMPUTE": compute.type,
            "_ACC": np.float64,
            "_BLOCK": SIM_THREADS if simulator() else THREADS,
        }
        if vector is None:
            fname, src = _source(spec, kind, arrays, ndim, scalar_sum)
        else:
            w = lanes(vector)
            fname, src = _source_vec(spec, kind, w, w * vector.itemsize, _mlir() and not simulator())
            if _mlir():
                g["_OUTVEC"] = getattr(cuda, f"{vector.name}x{w}")
            else:
                g["_vload"], g["_vstore"] = _vector_intrinsics()
        _bind(g, spec, _which(kind), arrays, "_fn", "_prep")
        exec(compile(src, f"<iglu_np.backends.numba_cuda {fname}>", "exec"), g)
        fn = _state[key] = g[fname]
        fn.__iglu_np_source__ = src
        return fn


def _kernel(name, kind, compute, arrays, ndim, scalar_sum=None, vector=None):
    key = ("jit", name, kind, np.dtype(compute).name, tuple(arrays), ndim, scalar_sum, vector)
    k = _state.get(key)
    if k is None:
        with _lock:
            k = _state.get(key)
            if k is None:
                py = kernel_python(name, kind, compute, arrays, ndim, scalar_sum, vector)
                k = _state[key] = _cuda().jit(py)
    return k


def _types():
    """The toolchain's type module (numba-cuda-mlir has its own type objects)."""
    if _mlir():
        return _cuda().types
    from numba.core import types

    return types


def pointer_signature(name, kind, compute, data_dtype=None):
    """Signature of the vector form on raw pointers: ``(n, x[, g], *params, out)`` with
    ``n`` int64, data and output pointers of ``data_dtype`` (default: the compute dtype)
    and compute-dtype scalar parameters, in the toolchain's own types."""
    types = _types()
    spec = REGISTRY[name]
    ct = getattr(types, np.dtype(compute).name)
    ptr = types.CPointer(getattr(types, np.dtype(data_dtype or compute).name))
    data = [ptr, ptr] if Kind.parse(kind).times_grad else [ptr]
    return types.void(types.int64, *data, *([ct] * len(spec.params)), ptr)


def _pointer_kernel(name, kind, compute, data_dtype):
    """The vector form compiled for :func:`pointer_signature` alone: a launch passes
    integers for the arrays and the dispatcher has no types to resolve (one signature
    makes it a specialised dispatcher in numba-cuda and numba-cuda-mlir)."""
    key = ("ptr", name, kind, np.dtype(compute).name, np.dtype(data_dtype).name)
    k = _state.get(key)
    if k is None:
        with _lock:
            k = _state.get(key)
            if k is None:
                spec = REGISTRY[name]
                py = kernel_python(name, kind, compute, (False,) * len(spec.params), 1, None, data_dtype)
                k = _state[key] = _cuda().jit(pointer_signature(name, kind, compute, data_dtype))(py)
    return k


def signature(name, kind, dtype, arrays=None, ndim=1, data_dtype=None, scalar_sum=None):
    """Numba signature of a kernel for :func:`compile_ptx`: contiguous data and output of
    ``data_dtype`` (default: the compute dtype), broadcast ('A') parameter arrays."""
    from numba.core import types
    from numba.np.numpy_support import from_dtype

    spec = REGISTRY[name]
    cdt = np.dtype(dtype)
    ddt = np.dtype(data_dtype or cdt)
    arrays = tuple(arrays or (False,) * len(spec.params))
    ct = from_dtype(cdt)
    dt = from_dtype(ddt)
    lay = "C" if ndim == 1 else "A"
    args = [types.int64, types.Array(dt, ndim, lay)]
    kd = Kind.parse(kind)
    if kd.times_grad:
        args.append(types.Array(dt, ndim, lay))
    args += [types.Array(ct, ndim, "A") if a else ct for a in arrays]
    if kd.op == "sum":
        k = spec.param_names.index(kd.param)
        ss = (not arrays[k]) if scalar_sum is None else scalar_sum
        args.append(types.Array(types.float64, 1, "C") if ss else types.Array(types.float64, ndim, "A"))
    else:
        args.append(types.Array(dt, ndim, lay))
    return types.void(*args)


def compile_ptx(name, kind, dtype, cc=(9, 0), arrays=None, ndim=1, data_dtype=None, vector=False,
                pointers=False):
    """PTX of a kernel for compute capability ``cc``; works without a GPU with numba-cuda
    (and its NVVM wheel, e.g. ``numba-cuda[cu13]``). Its signatures are Numba-core types,
    which numba-cuda-mlir does not take (and 0.6 needs a GPU to compile anyway).
    ``vector``: the vector form (1-D C-contiguous arrays, or raw pointers with
    ``pointers``: what a launch of :func:`_pointer_kernel` runs)."""
    if _mlir():
        raise RuntimeError("compile_ptx needs numba-cuda (IGLU_NP_CUDA_TOOLCHAIN=numba-cuda): "
                           "numba-cuda-mlir takes its own signature types and needs a GPU")
    cuda = _cuda()
    if vector:
        ddt = np.dtype(data_dtype or dtype)
        py = kernel_python(name, kind, dtype, arrays, 1, None, ddt)
        sig = (pointer_signature(name, kind, dtype, ddt) if pointers
               else signature(name, kind, dtype, arrays, 1, ddt))
    else:
        py = kernel_python(name, kind, dtype, arrays, ndim)
        sig = signature(name, kind, dtype, arrays, ndim, data_dtype)
    with offline_device(cc):
        ptx, _ = cuda.compile_ptx(py, sig, cc=cc)
    return ptx


class offline_device:
    """Device functions compile on first call for the current device's compute capability
    (numba-cuda's ``compile_device``); without a GPU there is none, so for an offline
    :func:`compile_ptx` the dispatcher module sees a stand-in with ``cc``."""

    def __init__(self, cc):
        self.cc = tuple(cc)

    def __enter__(self):
        from numba.cuda import dispatcher

        self._mod, self._orig = dispatcher, dispatcher.get_current_device
        cc = self.cc

        def current():
            try:
                return self._orig()
            except Exception:
                return type("OfflineDevice", (), {"compute_capability": cc})()

        dispatcher.get_current_device = current

    def __exit__(self, *exc):
        self._mod.get_current_device = self._orig


# --------------------------------------------------------------------------- arrays
def _as_device(cuda, obj):
    if getattr(type(obj), "__cuda_ndarray__", False):
        return obj
    # sync=False: we launch on the stream the producer named (see _stream), so ordering holds
    return cuda.as_cuda_array(obj, sync=False)


def _stream(cuda, objs):
    if simulator():
        return cuda.default_stream()
    for o in objs:
        if getattr(type(o), "__cuda_ndarray__", False):
            if o.stream:
                return o.stream
            continue
        ptr = o.__cuda_array_interface__.get("stream")
        if ptr is not None:
            return cuda.external_stream(ptr)
    return cuda.default_stream()


def _view(dev, shape, strides):
    """A view of ``dev`` with new shape/strides over the same memory (stride 0 = broadcast)."""
    if simulator():
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        a = np.lib.stride_tricks.as_strided(dev._ary, shape, strides)
        return FakeCUDAArray(a, stream=dev.stream)
    # Through the CUDA array interface, the toolchains' public way in: on an H200 with
    # numba-cuda-mlir 0.6, DeviceNDArray(shape, strides, ..., gpu_data=dev.gpu_data) gave
    # wrong values for strided views and "Unsupported argument type" for to_device arrays.
    return _cuda().as_cuda_array(_described(dev, shape, strides), sync=False)


def _described(dev, shape=None, strides=None):
    """A CUDA-array-interface description of ``dev``'s memory (its own shape and strides
    unless given). The pointer and dtype are read directly: numba-cuda-mlir 0.6's own
    interface property warns on Python 3.12 (int() of a CUstream_flags)."""
    shape = tuple(dev.shape) if shape is None else tuple(shape)
    strides = tuple(dev.strides) if strides is None else tuple(strides)
    desc = {"shape": shape, "strides": strides, "typestr": np.dtype(dev.dtype).str,
            "data": (dev.device_ctypes_pointer.value or 0, False), "version": 3, "stream": None}
    return _Described(desc, dev)


class _Described:
    """An object that only describes memory of ``base`` (which it keeps alive)."""

    __slots__ = ("__cuda_array_interface__", "base")

    def __init__(self, desc, base):
        self.__cuda_array_interface__ = desc
        self.base = base


def _broadcast_strides(what, dev, shape):
    nd = len(shape)
    if dev.ndim > nd:
        raise ValueError(f"{what} has more dimensions than the result {shape}")
    dshape = (1,) * (nd - dev.ndim) + tuple(dev.shape)
    dstr = (0,) * (nd - dev.ndim) + tuple(dev.strides)
    if any(s < 0 for s in dstr):
        raise ValueError(
            f"{what} has negative strides, which the numba_cuda backend does not index; "
            "pass a contiguous copy"
        )
    out = []
    for n, dn, s in zip(shape, dshape, dstr):
        if dn == n:
            out.append(s if n != 1 else 0)
        elif dn == 1:
            out.append(0)
        else:
            raise ValueError(f"{what} of shape {tuple(dev.shape)} does not broadcast to {shape}")
    return out


def collapse(shape, strides_list):
    """Merge adjacent dims contiguous in every operand; drop length-1 dims. Returns
    (shape, strides_list) with at least one dim."""
    keep = [k for k, n in enumerate(shape) if n != 1]
    shape = [shape[k] for k in keep]
    strides_list = [[s[k] for k in keep] for s in strides_list]
    if not shape:
        return (1,), [(0,) for _ in strides_list]
    cs, cst = [shape[-1]], [[s[-1]] for s in strides_list]
    for k in range(len(shape) - 2, -1, -1):
        if all(s[k] == c[0] * cs[0] for s, c in zip(strides_list, cst)):
            cs[0] *= shape[k]
        else:
            cs.insert(0, shape[k])
            for s, c in zip(strides_list, cst):
                c.insert(0, s[k])
    return tuple(cs), [tuple(c) for c in cst]


def _launch_dims(cuda, n, reduction=False):
    if simulator():
        threads = SIM_THREADS
        return max(1, min(3, -(-n // threads))), threads
    sms = _state.get("sms")
    if sms is None:
        sms = _state["sms"] = cuda.get_current_device().MULTIPROCESSOR_COUNT
    # At least MIN_BLOCKS: numba-cuda(-mlir) warns of low occupancy (NumbaPerformanceWarning)
    # for smaller grids, and blocks past the data exit at once.
    return max(MIN_BLOCKS, min(-(-n // THREADS), sms * BLOCKS_PER_SM)), THREADS


def _like(template, dev):
    mod = type(template).__module__.split(".")[0]
    if mod == "cupy":
        import cupy

        return cupy.asarray(dev)
    if mod == "torch":
        import torch

        return torch.as_tensor(dev, device=template.device)
    return dev


def _device_index(obj):
    """The device ordinal of a CuPy or torch array, else None."""
    mod = type(obj).__module__.split(".")[0]
    if mod == "cupy":
        return obj.device.id
    if mod == "torch":
        return obj.device.index
    return None


def _device_ctx(cuda, obj):
    """Context manager selecting the device of a CuPy/torch input (no-op otherwise)."""
    import contextlib

    idx = _device_index(obj)
    if idx is None or simulator():
        return contextlib.nullcontext()
    return cuda.gpus[idx]


# --------------------------------------------------------------------------- run
_DATA_NAMES = ("x", "grad_out")


def _needs_cupy(ops, shape) -> bool:
    """Whether a launch leaves what numba-cuda-mlir was seen to compute right.

    On an H200 (numba-cuda-mlir 0.6), iglu with a per-channel sigma (a stride-0 view) over
    a strided 3-d x gave wrong values (25 million ulp), while contiguous operands of the
    result's shape and a strided 2-d x were right; the same kernels are right in
    numba-cuda's simulator, and the cause is unknown. So launches other than that plain
    case run the CuPy kernels (right on the H200 in every layout)."""
    if not _mlir() or simulator():
        return False
    return not all(tuple(d.shape) == tuple(shape) and d.is_c_contiguous() for d in ops)


def _via_cupy(act, what, data, params, out=None, kind=None):
    """``what`` of the CuPy backend on zero-copy CuPy views of the operands, the results
    handed back as the caller's array type (see :func:`_needs_cupy`); ``out`` is one
    array (run has unwrapped a tuple)."""
    try:
        import cupy
    except ImportError:
        raise NotImplementedError(
            f"{act.name}: with numba-cuda-mlir, the numba_cuda backend runs only C-contiguous "
            "operands of the result's shape (broadcast parameters and strided arrays gave wrong "
            "values with numba-cuda-mlir 0.6 on an H200): install cupy, which then runs them, "
            "or pass contiguous arrays of the result's shape") from None
    from . import cupy_backend

    def dev(a):
        return cupy.asarray(_described(a) if getattr(type(a), "__cuda_ndarray__", False) else a)

    cdata = [dev(d) for d in data]
    cparams = {k: dev(v) if handles(v) else v for k, v in params.items()}
    with _cupy_context(cupy, data):
        if what == "backward_params":
            return {k: _back(data[0], v) for k, v in cupy_backend.backward_params(act, cdata, cparams).items()}
        res = cupy_backend.run(act, kind, cdata, cparams, None if out is None else dev(out))
        # (inside: a Numba view of res syncs on the stream the kernel ran on)
        return out if out is not None else _back(data[0], res)


def _cupy_context(cupy, data):
    """CuPy's device and stream for a hand-off: the data's device, and the stream its
    producer named in its CUDA array interface, which the direct path launches on (Numba
    device arrays name none: CuPy's current stream then)."""
    import contextlib

    stack = contextlib.ExitStack()
    idx = _device_index(data[0])
    if idx is not None:
        stack.enter_context(cupy.cuda.Device(idx))
    for o in data:
        if getattr(type(o), "__cuda_ndarray__", False):
            continue
        ptr = o.__cuda_array_interface__.get("stream")
        if ptr:
            stack.enter_context(_external_stream(cupy, ptr))
            break
    return stack


class _StreamPtr:
    """A raw ``cudaStream_t`` as an object of the CUDA stream protocol."""

    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = int(ptr)

    def __cuda_stream__(self):
        return (0, self.ptr)


def _external_stream(cupy, ptr):
    """CuPy's stream for a raw pointer: ``Stream.from_external`` (CuPy >= 14 deprecates
    ``ExternalStream``, whose warning failed the hand-off under -W error on an H200)."""
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:
        return from_external(_StreamPtr(ptr))
    return cupy.cuda.ExternalStream(ptr)


def _back(template, arr):
    """A CuPy result as the type of ``template`` (zero-copy): CuPy and torch as
    themselves, anything else as the toolchain's device array, as the direct path returns."""
    mod = type(template).__module__.split(".")[0]
    if mod == "cupy":
        return arr
    if mod == "torch":
        return _like(template, arr)
    return _cuda().as_cuda_array(arr)


def _refuse_bf16(act, *operands):
    """TypeError for bfloat16 operands: these kernels are typed for float16/32/64 only
    (Numba has no bfloat16 type to load and store); the CuPy backend computes bfloat16."""
    for what, v in operands:
        for a in (v if isinstance(v, tuple) else (v,)):
            if is_bf16_array(a):
                raise TypeError(
                    f"{act.name}: {what} is bfloat16, which the numba_cuda backend does not "
                    "compute; use the cupy backend (install cupy >= 14 and ml_dtypes: CuPy, torch "
                    "and JAX bfloat16 arrays then run there, or pass backend='cupy'), or pass "
                    "float16/float32 data")


def _target(cuda, stream) -> Target:
    def as_device(v):
        return _as_device(cuda, v)

    def device_param(v):
        d = _as_device(cuda, v)
        return d, d.copy_to_host()  # validated on the host: a small copy, which synchronises

    def param(v, dev, cdt):
        if dev is not None:
            return dev
        if np.ndim(v) == 0:
            return cdt.type(v)
        return cuda.to_device(np.ascontiguousarray(v, dtype=cdt), stream=stream)

    return Target("numba_cuda", data=as_device, device=handles,
                  host_hint="move it with numba.cuda.to_device or cupy.asarray",
                  device_param=device_param, param=param, out=as_device,
                  out_what="a device array for the numba_cuda backend", widen=False)


def _operands(cuda, act, data, params, out=None):
    """``(stream, call)``: the stream the data name and the :class:`~._call.Call` (device
    views of the data; parameters as compute-dtype scalars or device arrays, ``arrays``
    saying which; float32 data refuse parameters beyond float32)."""
    stream = _stream(cuda, [*data]) if all(handles(d) for d in data) else None
    return stream, prepare(act, data, params, out, _target(cuda, stream))


def backward_params(act, data, params) -> dict:
    """Each parameter's gradient on device arrays, reduced to its shape (one fused
    pass per parameter, accumulated in float64)."""
    _refuse_bf16(act, *zip(_DATA_NAMES, data), *params.items())
    cuda = _cuda()
    stream, c = _operands(cuda, act, data, params)
    devs, cdt, pargs, arrays, shape = c.data, c.compute, c.params, c.arrays, c.shape
    if math.prod(shape) and _needs_cupy([*devs, *(a for a, isarr in zip(pargs, arrays) if isarr)], shape):
        return _via_cupy(act, "backward_params", data, params)
    with _device_ctx(cuda, data[0]):
        return {p: _like(data[0], _sum_param(cuda, act, k, devs, pargs, arrays, cdt, shape, stream))
                for k, p in enumerate(act.param_names)}


# --------------------------------------------------------------------------- thin per-call path
# The common call (C-contiguous data of one float dtype, aligned, scalar parameters, out=
# absent, or contiguous and of the same dtype) skips the general path's per-call work
# (wrapping each operand as a Numba device array and again as a view, the dispatcher's
# type resolution, a fresh external-stream object and launch configuration): a plan per
# (activation, kind, dtypes, array type, parameter values) holds the validated
# compute-dtype parameters and the vector kernel compiled for raw pointers, and a launch
# passes integers. Everything else goes through the general path; invalid parameters
# raise the general path's errors (the same validation, whose result alone is cached).
_FLOATS = {np.dtype(t).str: np.dtype(t) for t in (np.float16, np.float32, np.float64)}
_SCALARS = frozenset({float, int, np.float16, np.float32, np.float64, np.int32, np.int64})
_plans: dict = {}
PLAN_LIMIT = 1024  # distinct (activation, kind, dtypes, parameter values) kept


class _Plan:
    __slots__ = ("kernel", "pargs", "lanes", "alloc", "dims", "launches")

    def __init__(self, kernel, pargs, nlanes, alloc):
        self.kernel, self.pargs, self.lanes, self.alloc = kernel, pargs, nlanes, alloc
        self.dims: dict = {}
        self.launches: dict = {}


def _c_contiguous(shape, strides, itemsize) -> bool:
    if strides is None:  # the interface's way of saying C-contiguous
        return True
    want = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != want:
            return False
        want *= n
    return True


def _flat(a):
    """(address, shape, dtype, stream) of a C-contiguous float16/32/64 device array, else
    None. ``stream``: a Numba array's stream object, or the interface's stream pointer
    (None: the default stream)."""
    if getattr(type(a), "__cuda_ndarray__", False):
        dt = _FLOATS.get(np.dtype(a.dtype).str)
        if dt is None or not a.is_c_contiguous():
            return None
        return _pointer(a), tuple(a.shape), dt, (a.stream or None)
    try:
        cai = a.__cuda_array_interface__
    except Exception:  # not a device array: the general path names the problem
        return None
    dt = _FLOATS.get(cai.get("typestr"))
    if dt is None or cai.get("mask") is not None:
        return None
    shape = tuple(cai["shape"])
    if not _c_contiguous(shape, cai.get("strides"), dt.itemsize):
        return None
    return cai["data"][0], shape, dt, cai.get("stream")


def _launch_stream(cuda, s):
    """The Numba stream for ``s`` (see :func:`_flat`), one object per pointer, so that a
    launch configuration can be reused."""
    if simulator():
        s = None
    if s is None or isinstance(s, int):
        key = ("stream", s)
        obj = _state.get(key)
        if obj is None:
            obj = _state[key] = cuda.default_stream() if s is None else cuda.external_stream(s)
        return obj
    return s


def _allocator(cuda, template, odt):
    """``alloc(shape, template, stream) -> (array, kernel argument)`` for a new output of
    the input's array type, from that library's own memory pool (CuPy's, torch's caching
    allocator; Numba's device_array for Numba arrays and any other interface object,
    which the general path returns as Numba arrays too)."""
    mod = type(template).__module__.split(".")[0]
    if mod == "cupy":
        import cupy

        def alloc(shape, x, stream):
            y = cupy.empty(shape, odt)
            return y, y.data.ptr
    elif mod == "torch":
        import torch

        tdt = {2: torch.float16, 4: torch.float32, 8: torch.float64}[odt.itemsize]

        def alloc(shape, x, stream):
            y = torch.empty(shape, dtype=tdt, device=x.device)
            return y, y.data_ptr()
    else:
        sim = simulator()

        def alloc(shape, x, stream):
            y = cuda.device_array(shape, dtype=odt, stream=stream)
            return y, (y if sim else _pointer(y))
    return alloc


def _one_gpu(cuda) -> bool:
    n = _state.get("gpus")
    if n is None:
        n = _state["gpus"] = len(cuda.gpus)
    return n == 1


def _make_plan(act, kind, dts, template, out_dt, params):
    """The plan for :func:`_thin`, or None where the general path must run. Invalid
    parameters raise here with the general path's errors (nothing is cached then)."""
    kd = Kind.parse(kind)
    if kd.op == "sum" or kind not in _kinds(act.spec):
        return None
    cuda = _cuda()
    mod = type(template).__module__.split(".")[0]
    if mod in ("cupy", "torch") and not simulator() and not _one_gpu(cuda):
        return None  # the general path selects the input's device
    cdt = None
    for nm, dt in zip(_DATA_NAMES, dts):
        c = _compute_dtype(act.name, nm, dt)
        cdt = c if cdt is None else np.promote_types(cdt, c)
    odt = np.dtype(np.float16) if (cdt == np.float32 and all(d.itemsize == 2 for d in dts)) else cdt
    ddt = dts[0]
    if any(d != ddt for d in dts) or (out_dt if out_dt is not None else odt) != ddt:
        return None  # the vector form loads and stores one dtype
    vals = _values(act, params)
    if cdt == np.float32:
        _f32_range_error(act, vals, "numba_cuda")
    if any(np.ndim(v) != 0 for v in vals):
        return None
    kernel = _pointer_kernel(act.name, kind, cdt, ddt)
    return _Plan(kernel, tuple(cdt.type(v) for v in vals), lanes(ddt), _allocator(cuda, template, odt))


def _thin(act, kind, data, params, out):
    """``run`` for the common call (see the comment above), or None."""
    for v in params.values():
        if type(v) not in _SCALARS:
            return None
    if isinstance(out, tuple):
        if len(out) != 1:
            return None
        out = out[0]
    fx = _flat(data[0])
    if fx is None:
        return None
    ptr, shape, ddt, s = fx
    ptrs = [ptr]
    if len(data) == 2:
        fg = _flat(data[1])
        if fg is None or fg[1] != shape:
            return None
        ptrs.append(fg[0])
        dts = (ddt, fg[2])
        if s is None:
            s = fg[3]
    else:
        dts = (ddt,)
    fo = None
    if out is not None:
        fo = _flat(out)
        if fo is None or fo[1] != shape:
            return None
    n = math.prod(shape)
    if not n:
        return None
    key = (act.name, kind, dts, type(data[0]), None if fo is None else fo[2], tuple(params.items()))
    plan = _plans.get(key)
    if plan is None:
        plan = _make_plan(act, kind, dts, data[0], None if fo is None else fo[2], params)
        if plan is None:
            return None
        if len(_plans) >= PLAN_LIMIT:
            _plans.clear()
        _plans[key] = plan
    if fo is not None:
        op = fo[0]
        nbytes = n * ddt.itemsize
        for p in ptrs:
            if p != op and p < op + nbytes and op < p + nbytes:
                return None  # out= overlapping an input other than exactly: buffered there
        ptrs.append(op)
    for p in ptrs:
        if p % VECTOR_BYTES:
            return None  # a view that starts mid-vector: the general form
    cuda = _cuda()
    sim = simulator()
    stream = _launch_stream(cuda, s)
    if out is None:
        result, oarg = plan.alloc(shape, data[0], stream)
        if not sim and oarg % VECTOR_BYTES:
            return None  # (allocators align to far more than 16 bytes)
    else:
        result, oarg = out, op
    if sim:  # the simulator's kernels index the arrays themselves
        args, oarg = data, result
    else:
        args = ptrs[: len(data)]
    blocks = plan.dims.get(n)
    if blocks is None:
        blocks = _launch_dims(cuda, -(-n // plan.lanes))[0]
        if len(plan.dims) < 64:
            plan.dims[n] = blocks
    lk = (blocks, stream)
    launch = plan.launches.get(lk)
    if launch is None:
        launch = plan.kernel[blocks, SIM_THREADS if sim else THREADS, stream]
        if len(plan.launches) < 64:
            plan.launches[lk] = launch
    launch(n, *args, *plan.pargs, oarg)
    return result


def _pointer(dev) -> int:
    """The address of a device array's first element (the simulator's host copy)."""
    if simulator():
        return dev._ary.ctypes.data
    return dev.device_ctypes_pointer.value or 0


def _vector_ok(ops, cshape, cstr, arrays) -> bool:
    """Whether a launch can take the vector form: one collapsed dimension, scalar
    parameters, every operand (data and output) of one dtype, contiguous and 16-byte
    aligned (a view that starts mid-vector takes the general form)."""
    if len(cshape) != 1 or any(arrays):
        return False
    dt = np.dtype(ops[0].dtype)
    if any(np.dtype(d.dtype) != dt for d in ops):
        return False
    return all(s == (dt.itemsize,) and _pointer(d) % VECTOR_BYTES == 0 for d, s in zip(ops, cstr))


def run(act, kind, data, params, out):
    """Compute ``kind`` of ``act`` on device arrays (see iglu_np.backends)."""
    r = _thin(act, kind, data, params, out)
    if r is not None:
        return r
    name = act.name
    _refuse_bf16(act, *zip(_DATA_NAMES, data), *params.items(), ("out", out))
    cuda = _cuda()
    with _device_ctx(cuda, data[0]):
        stream, c = _operands(cuda, act, data, params, out)
        devs, cdt, odt, pargs, arrays, shape = (c.data, c.compute, c.output, c.params, c.arrays,
                                                c.shape)
        if out is not None:
            out, odev = c.out, c.out_operand
            if any(_overlap(d, odev) for d in [*devs, *(a for a, isarr in zip(pargs, arrays) if isarr)]):
                # out= shares memory with an operand other than as the very same view: the
                # kernel reads and writes in any order, so compute into a temporary and copy
                # (numpy's buffered semantics)
                tmp = run(act, kind, data, params, None)
                # copied by identity's kernel: any strides of out= and a cast to its dtype
                # (copy_to_device wants both contiguous and of one dtype)
                from .. import _params

                run(_params.of("identity"), "fwd", (tmp,), {}, out)
                return out
            result = out
        n = math.prod(shape)
        arr_ops = [*devs, *(a for a, isarr in zip(pargs, arrays) if isarr)]
        if n and _needs_cupy(arr_ops + ([odev] if out is not None else []), shape):
            return _via_cupy(act, "run", data, params, out, kind)
        if out is None:
            odev = cuda.device_array(shape, dtype=odt, stream=stream)
            result = None
        if n:
            ops = [*arr_ops, odev]
            what = [*_DATA_NAMES[: len(devs)], *(p for p, a in zip(act.param_names, arrays) if a), "out"]
            strides = [_broadcast_strides(w, d, shape) for w, d in zip(what, ops)]
            cshape, cstr = collapse(shape, strides)
            views = [_view(d, cshape, s) for d, s in zip(ops, cstr)]
            it = iter(views[len(devs):-1])
            pv = [next(it) if isarr else a for a, isarr in zip(pargs, arrays)]
            if _vector_ok(ops, cshape, cstr, arrays):
                ddt = np.dtype(odev.dtype)
                kern = _kernel(name, kind, cdt, arrays, 1, None, ddt)
                blocks, threads = _launch_dims(cuda, -(-n // lanes(ddt)))
            else:
                kern = _kernel(name, kind, cdt, arrays, len(cshape))
                blocks, threads = _launch_dims(cuda, n)
            kern[blocks, threads, stream](n, *views[: len(devs)], *pv, views[-1])
        return result if result is not None else _like(data[0], odev)


def _sum_param(cuda, act, k, devs, pargs, arrays, cdt, shape, stream):
    """sum over broadcast axes of g * df/dp_k, shaped like parameter k, dtype cdt."""
    p = act.param_names[k]
    pshape = tuple(pargs[k].shape) if arrays[k] else ()
    acc = cuda.to_device(np.zeros(pshape if arrays[k] else (1,), np.float64), stream=stream)
    n = math.prod(shape)
    if n:
        arr_ops = [a for a, isarr in zip(pargs, arrays) if isarr]
        ops = [*devs, *arr_ops] + ([acc] if arrays[k] else [])
        what = ["x", "grad_out", *(q for q, a in zip(act.param_names, arrays) if a)] + (["acc"] if arrays[k] else [])
        strides = [_broadcast_strides(w, d, shape) for w, d in zip(what, ops)]
        cshape, cstr = collapse(shape, strides)
        views = [_view(d, cshape, s) for d, s in zip(ops, cstr)]
        it = iter(views[2 : 2 + len(arr_ops)])
        pv = [next(it) if isarr else a for a, isarr in zip(pargs, arrays)]
        scalar_sum = not arrays[k]
        kern = _kernel(act.name, "sum_" + p, cdt, arrays, len(cshape), scalar_sum)
        blocks, threads = _launch_dims(cuda, n)
        kern[blocks, threads, stream](n, views[0], views[1], *pv, acc if scalar_sum else views[-1])
    res = cuda.device_array(pshape, dtype=cdt, stream=stream)
    flat_src = _view(acc, (max(1, math.prod(pshape)),), (8,))
    flat_dst = _view(res, (max(1, math.prod(pshape)),), (np.dtype(cdt).itemsize,))
    _cast_kernel()[1 if simulator() else MIN_BLOCKS, 1 if simulator() else 32, stream](flat_src, flat_dst)
    return res


_CAST_SRC = """
def iglu_np_cast(src, dst):
    i = cuda.grid(1)
    while i < src.shape[0]:
        dst[i] = src[i]
        i += cuda.gridsize(1)
"""


def _cast_kernel():
    k = _state.get("cast")
    if k is None:
        cuda = _cuda()
        # ``cuda`` must be a module global (not a closure cell) for the simulator to swap it.
        g = {"cuda": cuda}
        exec(compile(_CAST_SRC, "<iglu_np.backends.numba_cuda cast>", "exec"), g)
        k = _state["cast"] = cuda.jit(g["iglu_np_cast"])
    return k
