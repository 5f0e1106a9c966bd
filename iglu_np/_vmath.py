"""Vectorisable elementary functions for the Numba CPU backend.

Numba lowers ``math.atan``, ``math.exp``, ``math.tanh``... to scalar libm calls, so a loop
that calls them is never turned into SIMD code (8 scalar calls per vector step). The
functions below compute the same values with range reduction by *selects* (no
data-dependent branches, or branches LLVM if-converts), bit manipulation of the exponent
and polynomials on small intervals; inlined into a loop they become AVX-512 code, an
order of magnitude faster (``IGLU_NP_VMATH=0`` with examples/bench_vectorisation.py
compares the two).

The CPU backend substitutes :data:`MATH` (a copy of the ``math`` module with these
functions in place of libm's) for ``math`` in the globals of every spec kernel and helper,
so activation sources stay plain ``math.*`` code and the CUDA backend still gets
libdevice. Functions not overridden here (``math.sqrt``, ``math.fabs``, ``math.copysign``,
``math.floor`` ...) are LLVM intrinsics already; others (``math.lgamma``...) stay libm calls.

Every polynomial is a Chebyshev (near-minimax) fit printed by
``tools/derive_coefficients.py`` (section "vmath"), with the fit's own max relative error
quoted next to it; tests/test_vmath.py measures each function against mpmath in ulp.
Coefficients are in ascending order and rounded to the working dtype at compile time.
Set ``IGLU_NP_VMATH=0`` to compile the kernels against libm instead (slow; for checks).
"""

from __future__ import annotations

import math
import os
import types

import numba
from llvmlite import ir
from numba import types as nbt
from numba.extending import intrinsic, overload

from ._math import PIO2_HI32 as _PIO2_HI32
from ._math import PIO2_HI64 as _PIO2_HI64
from ._math import PIO2_LO32 as _PIO2_LO32
from ._math import PIO2_LO64 as _PIO2_LO64

__all__ = [
    "horner",
    "atan",
    "exp",
    "exp_normal",
    "mul_exp",
    "exp_expm1_neg",
    "expm1",
    "log",
    "log1p",
    "tanh",
    "tanh_small",
    "erf",
    "erfc",
    "hypot",
    "MATH",
    "enabled",
]


def enabled() -> bool:
    return os.environ.get("IGLU_NP_VMATH", "1").strip().lower() not in ("0", "false", "no", "off")


_jit = numba.njit(forceinline=True, error_model="numpy", cache=False)


# --------------------------------------------------------------------------- intrinsics
def _make_intrinsics():
    """``_bits``, ``_from_bits`` and ``_fma``: new intrinsic objects each call.

    An intrinsic keeps one implementation per signature for every typing context (numba
    0.62 does; 0.68 keeps them apart): once numba-cuda's typing context has typed it, a new
    CPU function that calls it is lowered with numba-cuda's implementation, which the CPU
    has no lowering for ("No definition for lowering <function _fma.<locals>.codegen>").
    So the CPU uses the module's objects and the CUDA backend copies of its own
    (:func:`intrinsics_for_another_target`)."""

    @intrinsic
    def _bits(typingctx, x):
        """The IEEE bit pattern of a float32/float64 as int32/int64."""
        if not isinstance(x, nbt.Float):
            return None
        ity = nbt.int32 if x.bitwidth == 32 else nbt.int64

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], ir.IntType(x.bitwidth))

        return ity(x), codegen

    @intrinsic
    def _from_bits(typingctx, i, like):
        """The float of ``like``'s type whose bit pattern is the integer ``i``."""
        if not isinstance(like, nbt.Float) or not isinstance(i, nbt.Integer):
            return None

        def codegen(context, builder, sig, args):
            w = like.bitwidth
            v = args[0]
            if i.bitwidth > w:
                v = builder.trunc(v, ir.IntType(w))
            elif i.bitwidth < w:
                v = builder.sext(v, ir.IntType(w))
            return builder.bitcast(v, context.get_value_type(like))

        return like(i, like), codegen

    @intrinsic
    def _fma(typingctx, a, b, c):
        """a * b + c rounded once (llvm.fma: vfmadd on x86-64 since Haswell)."""
        sig = a(a, b, c)

        def codegen(context, builder, sig, args):
            return builder.fma(*args)

        return sig, codegen

    return _bits, _from_bits, _fma


_bits, _from_bits, _fma = _make_intrinsics()


def intrinsics_for_another_target() -> dict:
    """``{module intrinsic: a copy of it}`` for a backend that types these helpers in a
    typing context of its own (see :func:`_make_intrinsics`)."""
    return dict(zip((_bits, _from_bits, _fma), _make_intrinsics()))


@_jit
def _f32(x):
    # Constant-folded: 2**24 + 1 rounds to 2**24 only in float32.
    T = type(x)
    return T(16777217.0) == T(16777216.0)


@_jit
def _pow2(k, like):
    """2**k as ``like``'s type, for k in the normal exponent range (no checks)."""
    if _f32(like):
        return _from_bits((k + 127) << 23, like)
    return _from_bits((k + 1023) << 52, like)


def horner(v, c):
    """``sum(c[k] * v**k)`` (ascending coefficients, cast to v's type) as straight-line
    code. The CPU backend compiles :func:`iglu_np._math.horner` as this: the loop over a
    tuple there is not always fully unrolled by LLVM (degree >= 10 is not), and a loop
    left inside the element loop keeps the element loop scalar. Compiled, each step is a
    fused multiply-add (as in the C++); this Python form (the CUDA simulator's) rounds
    twice, within the simulator's ulp tolerance."""
    T = type(v)
    r = T(c[len(c) - 1])
    for k in range(len(c) - 2, -1, -1):
        r = r * v + T(c[k])
    return r


_HORNER_IMPLS: dict = {}


def _horner_impl(n: int):
    impl = _HORNER_IMPLS.get(n)
    if impl is None:
        lines = ["def horner_unrolled(v, c):", "    T = type(v)", f"    r = T(c[{n - 1}])"]
        # fused steps: one rounding per step and one instruction, so faster loops
        # (examples/bench_vectorisation.py re-measures); the C++ horner matches
        lines += [f"    r = _fma(r, v, T(c[{k}]))" for k in range(n - 2, -1, -1)]
        lines.append("    return r")
        ns: dict = {"_fma": _fma}
        exec(compile("\n".join(lines), f"<iglu_np._vmath.horner[{n}]>", "exec"), ns)
        impl = _HORNER_IMPLS[n] = ns["horner_unrolled"]
    return impl


@overload(horner, inline="always")
def _ov_horner(v, c):
    if isinstance(v, nbt.Float) and isinstance(c, nbt.BaseTuple) and len(c) > 0:
        return _horner_impl(len(c))
    return None


_poly = horner


# --------------------------------------------------------------------------- atan
# (atan(y) - y)/y^3 in z = y^2 on [0, tan(pi/8)^2]: float32 degree 4 (rel. error 4.7e-8),
# float64 degree 10 (9.5e-17). The term y*z*P(z) is < 6% of atan(y), so the fit error
# is 17x below an ulp of the result.
ATAN32 = (
    -3.3333331761168519851e-1,
    1.99995404836489634448e-1,
    -1.42639555979846391989e-1,
    1.07437314907910830434e-1,
    -6.45192820812174875796e-2,
)
ATAN64 = (
    -3.33333333333333301597e-1,
    1.99999999999955206778e-1,
    -1.42857142846665429225e-1,
    1.11111110152563617275e-1,
    -9.09090457812390189048e-2,
    7.69218319082608656369e-2,
    -6.6645114473819480001e-2,
    5.85814891280220988165e-2,
    -5.08544973794025986132e-2,
    3.92316582955871913028e-2,
    -1.91768871190622589893e-2,
)
_TAN3PI8 = 2.414213562373095
_TANPI8 = 0.41421356237309503
# pi/2 and pi/4 as hi + lo for each dtype: the lo part restores the bits the base loses.
_PIO4_HI64, _PIO4_LO64 = 0.7853981633974483, 3.061616997868383e-17
_PIO4_HI32, _PIO4_LO32 = 0.7853981852531433, -2.1855695000931214e-08


@_jit
def atan(x):
    T = type(x)
    a = abs(x)
    big = a > T(_TAN3PI8)
    mid = a > T(_TANPI8)
    # One division serves the three reductions: atan(a) = base + atan(num/den).
    num = T(-1.0) if big else (a - T(1.0) if mid else a)
    den = a if big else (a + T(1.0) if mid else T(1.0))
    y = num / den
    if _f32(x):
        hi = T(_PIO2_HI32) if big else (T(_PIO4_HI32) if mid else T(0.0))
        lo = T(_PIO2_LO32) if big else (T(_PIO4_LO32) if mid else T(0.0))
        p = _poly(y * y, ATAN32)
    else:
        hi = T(_PIO2_HI64) if big else (T(_PIO4_HI64) if mid else T(0.0))
        lo = T(_PIO2_LO64) if big else (T(_PIO4_LO64) if mid else T(0.0))
        p = _poly(y * y, ATAN64)
    r = hi + (lo + (y + y * (y * y) * p))
    return math.copysign(r, x)


# --------------------------------------------------------------------------- exp, expm1
# (e^r - 1 - r)/r^2 on |r| <= ln2/2: float32 degree 4 (1.3e-7), float64 degree 10 (3e-18).
EXP32 = (
    5.0e-1,
    1.66665770255979881901e-1,
    4.16665546620505339818e-2,
    8.36317307451371090281e-3,
    1.39261761199355788836e-3,
)
EXP64 = (
    5.0e-1,
    1.66666666666666709863e-1,
    4.16666666666666697515e-2,
    8.33333333332614088398e-3,
    1.38888888888837524166e-3,
    1.98412698748004919808e-4,
    2.4801587325533363819e-5,
    2.75572554257464342818e-6,
    2.75572736613486362187e-7,
    2.5105206373957011116e-8,
    2.09146793765839350998e-9,
)
# float64 evaluated as E(r^2) + r O(r^2): two independent 5-step chains instead of one
# of 10, on which the loop would be latency-bound.
EXP64_EVEN = EXP64[0::2]
EXP64_ODD = EXP64[1::2]
_LOG2E = 1.4426950408889634
# ln2 = hi + lo with hi's low bits zero, so k*hi is exact for every k in range.
_LN2_HI64, _LN2_LO64 = 6.93147180369123816490e-01, 1.90821492927058770002e-10
_LN2_HI32, _LN2_LO32 = 0.693145751953125, 1.428606765330187e-06
_MAGIC64 = 6755399441055744.0  # 1.5 * 2**52: adding it rounds to an integer
_MAGIC32 = 12582912.0  # 1.5 * 2**23


@_jit
def _kf_r(x):
    """kf (a float) and r with x = kf ln2 + r, |r| <= ln2/2 (+ rounding); NaN for NaN.
    Fused multiply-adds: three instructions fewer than multiply-then-add (kf ln2_hi is
    exact either way, and r's low step rounds once instead of twice), which makes GELU's
    bulk loop a few percent faster (examples/bench_vectorisation.py gelu re-measures)."""
    T = type(x)
    if _f32(x):
        kf = _fma(x, T(_LOG2E), T(_MAGIC32)) - T(_MAGIC32)
        return kf, _fma(-kf, T(_LN2_LO32), _fma(-kf, T(_LN2_HI32), x))
    kf = _fma(x, T(_LOG2E), T(_MAGIC64)) - T(_MAGIC64)
    return kf, _fma(-kf, T(_LN2_LO64), _fma(-kf, T(_LN2_HI64), x))


@_jit
def _int_k(kf):
    """The integer of _kf_r's kf (in the exponent range; not NaN: int32(NaN) is poison)."""
    T = type(kf)
    if _f32(kf):
        return numba.int32(kf)
    # k from the bits of kf + 1.5*2^52 (exact): AVX2 has no packed float64 -> int64
    # conversion, and int64(kf) becomes four scalar conversions per vector.
    return _bits(kf + T(_MAGIC64)) - _bits(T(_MAGIC64))


@_jit
def _reduce_ln2(x):
    """k, r with x = k ln2 + r, |r| <= ln2/2 (+ rounding); k is 0 for NaN."""
    T = type(x)
    kf, r = _kf_r(x)
    kf = T(0.0) if kf != kf else kf
    return _int_k(kf), r


@_jit
def _expm1_poly(r):
    """expm1(r) for |r| <= ln2/2 (the r term carries the leading bits exactly)."""
    r2 = r * r
    if _f32(r):
        q = _poly(r, EXP32)
    else:
        q = _fma(r, _poly(r2, EXP64_ODD), _poly(r2, EXP64_EVEN))
    return r + r2 * q


@_jit
def _exp_dw(x, xl):
    """exp(x + xl) for a small correction xl (enters the reduced argument exactly once)."""
    T = type(x)
    # Clamping keeps k in range; the two-step scaling then gives inf and subnormals/0 right.
    if _f32(x):
        xc = T(89.0) if x > T(89.0) else x
        xc = T(-104.0) if xc < T(-104.0) else xc
    else:
        xc = T(710.0) if x > T(710.0) else x
        xc = T(-746.0) if xc < T(-746.0) else xc
    k, r = _reduce_ln2(xc)
    p = T(1.0) + _expm1_poly(r + xl)
    k1 = k >> 1
    return (p * _pow2(k1, x)) * _pow2(k - k1, x)


@_jit
def exp(x):
    return _exp_dw(x, type(x)(0.0))


@_jit
def exp_normal(x):
    """exp(x) for float64 -708.39 <= x <= 709.43, float32 -87.33 <= x <= 88.37 (exp
    normal, and 2^k finite: k <= 1023 resp. 127): the same bits as :func:`exp` there,
    garbage elsewhere (NaN included). No clamps, one scaling step, no NaN guard: 8 fewer
    vector instructions than :func:`exp` (examples/bench_vectorisation.py silu
    re-measures the gain). For the spec's bulk kernels."""
    T = type(x)
    kf, r = _kf_r(x)
    return (T(1.0) + _expm1_poly(r)) * _pow2(_int_k(kf), x)


@_jit
def mul_exp(s, x):
    """s exp(x) for s > 0, x <= 0 with exp(x) and s exp(x) normal: s (1 + p) 2^k with s (1 +
    p) one fma, where s times exp_normal's (1 + p) 2^k rounds 1 + p first. One rounding
    and one instruction fewer in GELU's native form, which keeps float32 gelu and gelu_a
    within 4 ulp over every float32 with |a x| <= 12.5 (the float32 sweeps of
    tests/test_accuracy.py check it)."""
    kf, r = _kf_r(x)
    return _fma(s, _expm1_poly(r), s) * _pow2(_int_k(kf), x)


@_jit
def exp_expm1_neg(x):
    """(exp(x), expm1(x)) for float64 -708.39 <= x <= 0, float32 -87.33 <= x <= 0: the bits
    of :func:`exp_normal` and :func:`expm1` there, from one reduction and one polynomial
    (expm1's own reduction is this one down to its clamp, -41.6 / -20, below which both
    give -1). For the spec's bulk kernels that need both (xSiLU's gate), which would
    otherwise reduce x twice (examples/bench_vectorisation.py xsilu re-measures)."""
    T = type(x)
    kf, r = _kf_r(x)
    p = _expm1_poly(r)
    two = _pow2(_int_k(kf), x)
    e = (T(1.0) + p) * two
    # expm1's k <= 0 form; below its clamp it gives -1 here too (2^k - 1 rounds to -1).
    m = two * p + (two - T(1.0))
    m = x if x == T(0.0) else m
    return e, m


@_jit
def expm1(x):
    T = type(x)
    # Below -41.6 (float64) / -20 (float32) expm1 rounds to -1; clamping bounds k to
    # [-60, 1024] so every power of two built below is a normal number.
    if _f32(x):
        xc = T(89.0) if x > T(89.0) else x
        xc = T(-20.0) if xc < T(-20.0) else xc
    else:
        xc = T(710.0) if x > T(710.0) else x
        xc = T(-41.6) if xc < T(-41.6) else xc
    k, r = _reduce_ln2(xc)
    e = _expm1_poly(r)  # exact r = x when k = 0: full relative accuracy near 0
    kp = min(k, 60)
    # k >= 1: 2^k (e + 1 - 2^-k), with 2^k = 2 * 2^(k-1) so k = 1024 does not overflow early.
    ypos = (_pow2(k - 1, x) * (e + (T(1.0) - _pow2(-kp, x)))) * T(2.0)
    # k <= 0: 2^k e + (2^k - 1); 2^k - 1 is exact.
    two = _pow2(k, x)
    yneg = two * e + (two - T(1.0))
    r = yneg if k <= 0 else ypos
    return x if x == T(0.0) else r  # keeps the sign of -0.0


# --------------------------------------------------------------------------- log, log1p
# (2 atanh(s)/s - 2)/s^2 in w = s^2 on [0, (3 - 2 sqrt2)^2]: float32 degree 2 (2.8e-7),
# float64 degree 6 (4.6e-16); s*R is < 1% of the result.
LOG32 = (6.66666850395758550224e-1, 3.99887805660219818994e-1, 2.95799493919727847094e-1)
LOG64 = (
    6.66666666666666968616e-1,
    3.99999999998995044898e-1,
    2.85714286259754849215e-1,
    2.22222111347950798551e-1,
    1.81828891252617220803e-1,
    1.53317216005560412686e-1,
    1.46164496850434058604e-1,
)
_SQRT2 = 1.4142135623730951


@_jit
def _log_core(u, c):
    """log(u) + c for a positive normal finite u and a small correction c (fdlibm form:
    u = 2^k m, m in [sqrt2/2, sqrt2), f = m - 1 exact, log(m) = f - f^2/2 + s(f^2/2 + R))."""
    T = type(u)
    b = _bits(u)
    if _f32(u):
        k = (b >> 23) - 127
        m = _from_bits((b & 0x007FFFFF) | 0x3F800000, u)
    else:
        k = (b >> 52) - 1023
        m = _from_bits((b & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000, u)
    hi = m > T(_SQRT2)
    m = m * T(0.5) if hi else m
    k = k + 1 if hi else k
    f = m - T(1.0)
    s = f / (T(2.0) + f)
    w = s * s
    # kf = T(k) through the bits of 1.5*2^23 + k (1.5*2^52 + k), exact for the exponent
    # range: AVX2 has no packed int64 -> float conversion.
    if _f32(u):
        kf = _from_bits(k + _bits(T(_MAGIC32)), u) - T(_MAGIC32)
        R = w * _poly(w, LOG32)
        l_hi, l_lo = T(_LN2_HI32), T(_LN2_LO32)
    else:
        kf = _from_bits(k + _bits(T(_MAGIC64)), u) - T(_MAGIC64)
        R = w * _poly(w, LOG64)
        l_hi, l_lo = T(_LN2_HI64), T(_LN2_LO64)
    hfsq = T(0.5) * f * f
    return kf * l_hi - ((hfsq - (s * (hfsq + R) + (kf * l_lo + c))) - f)


@_jit
def log(x):
    T = type(x)
    # Subnormals: scale into the normal range first.
    if _f32(x):
        tiny = x < T(1.1754943508222875e-38)
        u = x * T(16777216.0) if tiny else x
        c = T(-16.635532333438687) if tiny else T(0.0)  # -24 ln2
    else:
        tiny = x < T(2.2250738585072014e-308)
        u = x * T(18014398509481984.0) if tiny else x
        c = T(-37.42994775023705) if tiny else T(0.0)  # -54 ln2
    u = T(1.0) if not (u > T(0.0) and u < T(math.inf)) else u
    r = _log_core(u, T(0.0)) + c
    r = x if x == T(math.inf) else r
    r = T(-math.inf) if x == T(0.0) else r
    r = T(math.nan) if (x < T(0.0) or x != x) else r
    return r


@_jit
def log1p(x):
    T = type(x)
    u = T(1.0) + x
    # log1p(x) = log(u) + (x - (u - 1))/u: the rounding error of u = 1 + x, put back.
    c = (T(1.0) - (u - x)) if u >= T(2.0) else (x - (u - T(1.0)))
    c = c / u
    big = u > T(9.0e15) if not _f32(x) else u > T(1.6e7)
    c = T(0.0) if big else c
    ok = u > T(0.0) and u < T(math.inf)
    u = u if ok else T(1.0)
    r = _log_core(u, c)
    r = x if (x == T(0.0) or x == T(math.inf)) else r
    r = T(-math.inf) if x == T(-1.0) else r
    r = T(math.nan) if (x < T(-1.0) or x != x) else r
    return r


# --------------------------------------------------------------------------- tanh
# (tanh(a) - a)/a^3 in w = a^2 on [0, 0.625^2]: float32 degree 5 (4.8e-9), float64
# degree 11 (1.2e-17).
TANH32 = (
    -3.33333331721403616383e-1,
    1.33333035569157417657e-1,
    -5.39592595772045427445e-2,
    2.17689186510282101515e-2,
    -8.34394551583915204801e-3,
    2.29274481617814234315e-3,
)
TANH64 = (
    -3.33333333333333329379e-1,
    1.33333333333330416022e-1,
    -5.39682539678969916896e-2,
    2.18694885190083057558e-2,
    -8.86323510324087792496e-3,
    3.59212175115496226949e-3,
    -1.45577541204780551036e-3,
    5.89660657775704334703e-4,
    -2.37590649605556195509e-4,
    9.25711612955676827068e-5,
    -3.12011014257974000326e-5,
    6.48516348279311314997e-6,
)


@_jit
def _tanh_poly(a):
    """tanh(a) for 0 <= a < 0.625."""
    w = a * a
    if _f32(a):
        return a + a * w * _poly(w, TANH32)
    return a + a * w * _poly(w, TANH64)


@_jit
def tanh_small(x):
    """tanh(x) for |x| < 0.625: :func:`tanh`'s bits there, its polynomial alone (no exp and
    no division). For the spec's bulk kernels."""
    return math.copysign(_tanh_poly(abs(x)), x)


@_jit
def tanh(x):
    T = type(x)
    a = abs(x)
    p = _tanh_poly(a)
    # a >= 0.625: 1 - 2/(e^2a + 1); the subtracted term is < 0.45, so no cancellation.
    q = T(1.0) - T(2.0) / (exp(a + a) + T(1.0))
    r = p if a < T(0.625) else q
    return math.copysign(r, x)


# --------------------------------------------------------------------------- erf, erfc
# erf(a)/a - 1 in w = a^2 on [0, 0.46875^2]: float32 degree 4 (1.5e-8), float64 degree 8.
ERF32 = (
    1.28379166303806993341e-1,
    -3.76126208762129203108e-1,
    1.12831331732509181474e-1,
    -2.67816475813484056941e-2,
    4.77720786766908127306e-3,
)
ERF64 = (
    1.28379167095512572533e-1,
    -3.76126389031836519258e-1,
    1.12837916709429165657e-1,
    -2.68661706394197014043e-2,
    5.22397749149922048249e-3,
    -8.54830935948255731021e-4,
    1.20539621112224636513e-4,
    -1.48634221186455308643e-5,
    1.49253498349654147755e-6,
)
# a exp(a^2) erfc(a) for a >= 0.46875 (bounded, 1/sqrt(pi) at infinity) as a polynomial in
# t = (a - K)/(a + K) in [t0, 1] (Shepherd & Laframboise's variable): float32 K = 2,
# degree 11 (3.7e-9), float64 K = 4, degree 23 (7.7e-18). Dividing by the exact a
# afterwards costs one rounding only.
ERFCX32 = (
    5.10791351246304881615e-1,
    1.67211016484866104479e-1,
    -2.0384413491068249171e-1,
    1.21514684136195018633e-1,
    -2.89794417008350498766e-2,
    -7.51220685657486311082e-3,
    4.80456735820079088468e-3,
    1.10346350774818000127e-3,
    -8.03839778984974387514e-4,
    -2.44397774302828826821e-4,
    1.42831890619944983274e-4,
    5.69148732180492020457e-6,
)
ERFCX64 = (
    5.47997830500245557148e-1,
    5.97234659598045878563e-2,
    -1.01670013407821545781e-1,
    1.16177435475997628591e-1,
    -1.05001121717667953638e-1,
    7.84203253191738002949e-2,
    -4.88147111639297987672e-2,
    2.50057307819578676848e-2,
    -1.01289988597842330675e-2,
    2.91554842178321278646e-3,
    -3.68005645351300872954e-4,
    -1.39120105161625933209e-4,
    8.6588221596954069127e-5,
    -1.12473140915347052048e-5,
    -7.08141540008434374864e-6,
    3.05737496397019062184e-6,
    2.85394796953736229629e-7,
    -4.57528200282300950617e-7,
    2.88426994301681409107e-8,
    5.90024736563505095675e-8,
    -1.0606625768958359159e-8,
    -5.68073134904278790986e-9,
    1.6365018332374111859e-9,
    6.05263144297680045004e-11,
)
# erfc(a) on [0.46875, 1] in (a - 0.734375): float32 degree 8 (6.3e-10), float64 degree 16
# (8e-21). Here the exp(-a^2) Y(t)/a form would cost ~4 ulp (cancellation in Y's Horner sum).
ERFCM32 = (
    2.99007981657766022768e-1,
    -6.58017075200086098816e-1,
    4.83231287167249936418e-1,
    -1.7242319644314384552e-2,
    -1.5474570666482436169e-1,
    5.05966685587446154649e-2,
    2.8872399803150378787e-2,
    -1.74899939127289607181e-2,
    -2.87223455844501968712e-3,
)
ERFCM64 = (
    2.99007981657766022768e-1,
    -6.5801707181238910486e-1,
    4.83231287112223248869e-1,
    -1.72429603778961988955e-2,
    -1.54745696190315671218e-1,
    5.06294363692611802653e-2,
    2.88718548728634297043e-2,
    -1.81125615407485397528e-2,
    -2.86147294929696774475e-3,
    3.98886340021408304062e-3,
    -7.71579849743095391679e-5,
    -6.42419302459164425052e-4,
    9.03193487711184084404e-5,
    8.03710434348289035975e-5,
    -2.03309453541784922343e-5,
    -7.78018817325884973714e-6,
    2.99405966549062241608e-6,
)
_ERF_SPLIT = 0.46875
_ERFC_MID = 1.0


@_jit
def _erf_small(a):
    w = a * a
    if _f32(a):
        return a + a * _poly(w, ERF32)
    return a + a * _poly(w, ERF64)


@_jit
def _erfc_big(a):
    """erfc(a) for a >= 0.46875 (any a >= 0 is safe to pass; NaN propagates)."""
    T = type(a)
    if _f32(a):
        ac = T(11.0) if a > T(11.0) else a  # erfc(11) underflows float32
        K = T(2.0)
        c = T(4097.0)
    else:
        ac = T(30.0) if a > T(30.0) else a  # erfc(30) underflows float64
        K = T(4.0)
        c = T(134217729.0)
    t = (ac - K) / (ac + K)
    if _f32(a):
        y = _poly(t, ERFCX32)
    else:
        y = _poly(t, ERFCX64)
    # exp(-a^2) needs a^2 beyond working precision (its condition number is 2a^2):
    # Veltkamp split, hi*hi exact, then a fast two-sum puts the rest into e.
    v = c * ac
    hi = v - (v - ac)
    lo = ac - hi
    hh = hi * hi
    m = (hi + hi) * lo + lo * lo
    p = hh + m
    e = (hh - p) + m
    big = _exp_dw(-p, -e) * (y / ac)
    v = a - T(0.734375)
    if _f32(a):
        mid = _poly(v, ERFCM32)
    else:
        mid = _poly(v, ERFCM64)
    return mid if a < T(_ERFC_MID) else big


@_jit
def erf(x):
    T = type(x)
    a = abs(x)
    r = _erf_small(a) if a < T(_ERF_SPLIT) else T(1.0) - _erfc_big(a)
    return math.copysign(r, x)


@_jit
def erfc(x):
    T = type(x)
    a = abs(x)
    small = a < T(_ERF_SPLIT)
    s = _erf_small(a)
    b = _erfc_big(a)
    pos = T(1.0) - s if small else b
    neg = T(1.0) + s if small else T(2.0) - b
    return neg if x < T(0.0) else pos


# --------------------------------------------------------------------------- hypot
# float32: sqrt(x^2 + y^2) in float64, where the squares are exact and cannot overflow;
# one rounding to float32 at the end. float64: both scaled by a power of two (2^-600
# above 2^300, 2^600 below 2^-300: the squares neither overflow nor lose bits to
# underflow), the sum of squares as a dw pair (fma products, fast two-sum: the larger
# square comes first), then sqrt and one Newton step on the dw sum. No libm call.
_HYP_BIG = 2.037035976334486e90  # 2^300
_HYP_SMALL = 4.909093465297727e-91  # 2^-300
_HYP_DOWN = 2.409919865102884e-181  # 2^-600
_HYP_UP = 4.149515568880993e180  # 2^600


@_jit
def _two_sq(a):
    """a*a = p + e exactly (for |a| well inside the range): the fma's error term, the same
    bits as Dekker's split (12 flops) in 2."""
    p = a * a
    return p, _fma(a, a, -p)


@_jit
def hypot(x, y):
    T = type(x)
    a = abs(x)
    c = abs(T(y))
    inf = a == T(math.inf) or c == T(math.inf)
    nan = a != a or c != c
    if _f32(x):
        ad = numba.float64(a)
        cd = numba.float64(c)
        r = T(math.sqrt(ad * ad + cd * cd))
    else:
        big = a if a > c else c
        small = c if a > c else a
        up = T(_HYP_DOWN) if big > T(_HYP_BIG) else (T(_HYP_UP) if big < T(_HYP_SMALL) else T(1.0))
        down = (
            T(_HYP_UP) if big > T(_HYP_BIG) else (T(_HYP_DOWN) if big < T(_HYP_SMALL) else T(1.0))
        )
        b = big * up
        sm = small * up
        b = T(1.0) if (inf or nan) else b  # finite stand-ins: the result is selected below
        sm = T(0.0) if (inf or nan) else sm
        p1, e1 = _two_sq(b)
        p2, e2 = _two_sq(sm)
        sh = p1 + p2
        sl = ((p1 - sh) + p2) + (e1 + e2)
        r0 = math.sqrt(sh)
        q, qe = _two_sq(r0)
        # sqrt(sh + sl) = r0 + (sh + sl - r0^2)/(2 r0) to first order; r0 = 0 only for
        # x = y = 0, where the correction is 0.
        den = r0 + r0 if r0 > T(0.0) else T(1.0)
        r = (r0 + (((sh - q) - qe) + sl) / den) * down
    r = T(math.nan) if nan else r
    return T(math.inf) if inf else r


# --------------------------------------------------------------------------- namespace
# The ``math`` functions computed here instead of by libm (CPU) or libdevice (Numba CUDA),
# and translated to C++ for CuPy.
OVERRIDDEN = ("atan", "exp", "expm1", "log", "log1p", "tanh", "erf", "erfc", "hypot")
# The iglu_np._math kernels of the same names that the CPU replaces with these (the bulk
# kernels' forms without range handling); the C++ is translated from these too, so CuPy
# computes the CPU's bits (mul_exp's differ from its generic s * exp(x)).
KERNELS = ("exp_normal", "exp_expm1_neg", "tanh_small", "mul_exp")


def _namespace() -> types.ModuleType:
    m = types.ModuleType("iglu_np._vmath.MATH", "math with vectorisable elementary functions")
    for k in dir(math):
        if not k.startswith("_"):
            setattr(m, k, getattr(math, k))
    for k in OVERRIDDEN:
        setattr(m, k, globals()[k])
    return m


MATH = _namespace()
