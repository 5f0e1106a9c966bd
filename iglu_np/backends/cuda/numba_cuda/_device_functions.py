"""The specs' scalar kernels as CUDA device functions: the Rebinder for the CUDA target,
_vmath's fma and Horner intrinsics bound to their CUDA forms."""

from __future__ import annotations

import math

from ...._spec import REGISTRY
from . import _discovery
from ._discovery import _lock, _state

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
    exec(compile(_CUDA_FMA, "<iglu_np.backends.cuda.numba_cuda fma>", "exec"), g)
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

    from .... import _vmath

    ns = types.ModuleType("iglu_np.backends.cuda.numba_cuda.math")
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
        if (
            not isinstance(v, types.Float)
            or not isinstance(coeffs, types.BaseTuple)
            or len(coeffs) == 0
        ):
            return None
        n = len(coeffs)
        impl = impls.get(n)
        if impl is None:
            lines = [
                "def horner_unrolled_impl(v, coeffs):",
                "    T = type(v)",
                f"    r = T(coeffs[{n - 1}])",
            ]
            lines += [f"    r = r * v + T(coeffs[{k}])" for k in range(n - 2, -1, -1)]
            lines.append("    return r")
            g = {}
            exec(
                compile(
                    "\n".join(lines) + "\n", f"<iglu_np.backends.cuda.numba_cuda horner{n}>", "exec"
                ),
                g,
            )
            impl = impls[n] = g["horner_unrolled_impl"]
        return impl

    return horner_unrolled


def _rebinder():
    rb = _state.get("rebinder")
    if rb is None:
        from .... import _math, _vmath
        from ...codegen._rebind import Rebinder

        cuda = _discovery._cuda()
        # Inlined by NVVM (forceinline), not in Numba's IR (inline="always"): the IR
        # inliner deep-copies a callee's whole call tree at every call site, which makes
        # xIELU's backward kernel take minutes to compile instead of about a second. The simulator runs Python and takes neither option.
        dev = (
            cuda.jit(device=True)
            if _discovery.simulator()
            else cuda.jit(device=True, forceinline=True)
        )
        if _discovery.simulator():
            # The simulator runs the Python (two_prod's fma exactly, in fractions), and
            # _vmath's bit intrinsics cannot run as Python, so libm's math there.
            rb = Rebinder(dev)
        elif _discovery._mlir():
            # numba-cuda-mlir lowers no llvmlite intrinsics (the unrolled Horner, _vmath's bit
            # casts): Horner as a generated @overload, libdevice's math.
            import numba_cuda_mlir.numba_cuda as mlir_numba  # its own float64/int32 casts

            hor = _horner_overload()
            rb = Rebinder(
                dev,
                {_math.horner: hor, _vmath.horner: hor, _math.fma: dev(_cuda_fma(cuda))},
                numba_ns=mlir_numba,
            )
        else:
            hor = _horner_intrinsic()
            # _vmath's intrinsics as copies of the CPU's own (_vmath._make_intrinsics says
            # why); _math.fma as on the CPU: llvm.fma, which NVVM emits as fma.rn
            overrides = _vmath.intrinsics_for_another_target()
            overrides.update(
                {_math.fma: overrides[_vmath._fma], _math.horner: hor, _vmath.horner: hor}
            )
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
