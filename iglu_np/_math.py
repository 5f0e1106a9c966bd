"""Scalar math helpers shared by the activation kernels.

Plain Python, compiled by every backend (Numba CPU, Numba CUDA) after the backend
rebinds the names. Rules for code here and in the activation kernels:

* ``T = type(x)`` and ``T(constant)``: float32 inputs compute in float32.
* only ``math`` functions and other ``@kernel`` helpers imported by name.
* a comment says why a form is used (stability), not what it does.

Double-word ("dw") arithmetic: a value ``hi + lo`` with ``|lo| <= ulp(hi)/2``. It is used
where the *argument* of a steep function (exp, erfc) must be carried beyond working
precision: ``exp(y)`` has condition number ``|y|``, so rounding ``y = beta*x`` alone costs
``|y|/2`` ulp in the result.
"""

from __future__ import annotations

import math

from ._spec import kernel

__all__ = [
    "is_f32",
    "fma",
    "two_prod",
    "two_sum",
    "mul_dw",
    "exp_dw",
    "exp_scaled",
    "exp_normal",
    "mul_exp",
    "exp_expm1_neg",
    "tanh_small",
    "log1p_unit",
    "sigmoid",
    "log1p_exp",
    "horner",
    "padded",
    "BIG",
    "BIG64",
    "PIO2_HI64",
    "PIO2_LO64",
    "PIO2_HI32",
    "PIO2_LO32",
]


class _NumbaCasts:
    """Stands for the ``numba`` module in kernel sources that ask for an explicit cast
    (``numba.float64(x)``: a float32 kernel computing in float64 on purpose) without
    importing numba with iglu_np: the backends' Rebinder puts the real module in its
    place, and the C++ translator reads ``numba.<type>(x)`` as a cast."""

    __name__ = "numba"


NUMBA = _NumbaCasts()

# Beyond this magnitude (float32) two_prod's error term is dropped: dw corrections only
# matter for arguments of exp/erfc that are far smaller. The bound dates from Dekker's
# split (a * 4097 overflowed there); kept so every target drops the same terms.
BIG = 1e30
# The same for float64 (Dekker's a * (2^27 + 1)).
BIG64 = 1e290

# pi/2 = hi + lo per dtype (_vmath's atan and IGLU's derivative: pi/2 - atan(v) keeps
# atan's accuracy).
PIO2_HI64, PIO2_LO64 = 1.5707963267948966, 6.123233995736766e-17
PIO2_HI32, PIO2_LO32 = 1.5707963705062866, -4.371139000186243e-08


@kernel
def is_f32(x):
    # Constant-folded by LLVM: 2**24 + 1 is not representable in float32.
    T = type(x)
    return T(16777217.0) == T(16777216.0)


def fma(a, b, c):
    """``a*b + c`` rounded once. Compiled, it is the hardware instruction (the CPU and
    numba-cuda bind :func:`iglu_np._vmath._fma`, numba-cuda-mlir ``cuda.fma``, the C++
    ``fma``); this Python form (the CUDA simulator's) rounds the exact value once to
    float64 (then to float32 for float32 operands: within the simulator's ulp tolerance), and
    is exact for two_prod's error term, which is representable."""
    from fractions import Fraction

    T = type(a)
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return T(a * b + c)  # inf/NaN propagate as they would through the instruction
    try:
        return T(float(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))))
    except OverflowError:
        return T(a * b + c)


@kernel
def two_prod(a, b):
    """``a*b = p + e`` exactly: e = fma(a, b, -p), 2 instructions where Dekker's split
    takes 17 (enough, four times over, to make gelu_tanh's float32 gate compute-bound). ``e`` is
    0 where |p| >= 1e30 in float32, 1e290 in float64 (p = inf would make it -inf), on
    every target. Dekker's split also needed |a|, |b| below that; fma does not, and that
    guard lost e where a x + beta cancels with a huge a or x (xiprelu float32
    alpha_p = 1e35, x = 2.5e-36, beta = -0.5: dx 7e5 ulp; float64 1e11)."""
    T = type(a)
    p = a * b
    e = fma(a, b, -p)
    big = T(BIG) if is_f32(a) else T(BIG64)
    if not (abs(p) < big):
        e = T(0.0)
    return p, e


@kernel
def two_sum(a, b):
    """``a + b = s + e`` exactly (Knuth; either order of magnitudes)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@kernel
def mul_dw(x, c_hi, c_lo):
    """``x * (c_hi + c_lo)`` as a dw pair, for an exact x and a dw constant."""
    p, e = two_prod(x, c_hi)
    return p, e + x * c_lo


@kernel
def exp_dw(hi, lo):
    """``exp(hi + lo)`` for a dw argument (|lo| tiny, so exp(lo) = 1 + lo)."""
    e = math.exp(hi)
    return e + e * lo


@kernel
def exp_normal(x):
    """``exp(x)`` for an x whose exp is a normal number (float64 |x| <= 708, float32
    |x| <= 87; the bulk kernels pass x <= 0): for the bulk kernels (see :func:`iglu_np._spec.define`), which run only
    there. The CPU binds :func:`iglu_np._vmath.exp_normal` (the same bits as ``exp`` in
    that range, without its range handling); elsewhere it is ``math.exp``."""
    return math.exp(x)


@kernel
def mul_exp(s, x):
    """``s * exp(x)`` for s > 0 and x <= 0 where exp(x) and the product are normal numbers
    (GELU's native form: s = 1/(u + 2), x >= -79). The CPU binds
    :func:`iglu_np._vmath.mul_exp`, which rounds once where ``s * exp(x)`` rounds twice;
    elsewhere it is that product."""
    return s * math.exp(x)


@kernel
def neg_side(x):
    """0 where x > 0, else x (-0.0 and NaN kept: min(x, 0) would give +0.0 for -0.0): the
    argument of :func:`exp_expm1_neg` for the non-positive side of a select."""
    T = type(x)
    return T(0.0) if x > T(0.0) else x


@kernel
def exp_expm1_neg(x):
    """``(exp(x), expm1(x))`` for an x <= 0 whose exp is normal (float64 x >= -708,
    float32 x >= -87), for the bulk kernels: the CPU binds
    :func:`iglu_np._vmath.exp_expm1_neg` (the same bits, one reduction and one polynomial
    for both); elsewhere it is ``math.exp`` and ``math.expm1``."""
    return math.exp(x), math.expm1(x)


@kernel
def tanh_small(x):
    """``tanh(x)`` for |x| < 0.625, for the bulk kernels: the CPU binds
    :func:`iglu_np._vmath.tanh_small` (tanh's bits there, its polynomial alone); elsewhere
    it is ``math.tanh``."""
    return math.tanh(x)


# log1p(x) = 2 atanh(s), s = x/(2 + x) in [0, 1/3] for x in [0, 1]: 2 atanh(s) = 2s + s w L(w),
# w = s^2 <= 1/9 (tools/derive_coefficients.py `log1p_unit_fits`). s w L is < 4% of the
# result, so L's fit error (1.0e-8 float32, 1.3e-16 float64) stays below 0.04 ulp.
LOG1PU_L32 = (
    6.6666667320527412469e-1,
    3.9999706331929717402e-1,
    2.8592357994302837723e-1,
    2.1706575800880372646e-1,
    2.3224329224023348832e-1,
)
LOG1PU_L64 = (
    6.6666666666666658561e-1,
    4.0000000000014582673e-1,
    2.8571428567108757162e-1,
    2.2222222717427862989e-1,
    1.8181789436132858169e-1,
    1.5385570064958623103e-1,
    1.331414420965493615e-1,
    1.2001072809590712535e-1,
    8.8007384861446738822e-2,
    1.6164045611943532221e-1,
)
# 1/(2 + x) on [0, 1] to 2e-3: it only scales s's correction term (itself ~2^-53 s).
LOG1PU_INV = (4.9896907216494845361e-1, -2.3092783505154639175e-1, 6.5979381443298969072e-2)


@kernel
def log1p_unit(x):
    """``log1p(x)`` for 0 <= x <= 1 (and NaN), as 2 atanh(x/(2 + x)): one division and one
    polynomial, no range reduction. s = x/(2 + x) is carried as s + s_lo (2 + x by
    Fast2Sum, the division's remainder by an fma), so the result rounds about once.
    The bulk kernels and the exact ones that stay in [0, 1] (softplus) share it: cheaper
    there than log1p's fdlibm form (two divisions, the exponent split) and more accurate:
    worst error 0.583 ulp float32 (every float32 in [0, 1]), 0.61 float64 (2e7 samples;
    log1p's: 0.79). examples/bench_vectorisation.py softplus re-measures the speed."""
    T = type(x)
    d = T(2.0) + x
    ed = (T(2.0) - d) + x  # d's rounding error, exact (2 >= x)
    s = x / d
    rem = fma(-s, d, x)  # x - s d, exact
    slo = (rem - s * ed) * horner(x, LOG1PU_INV)
    w = s * s
    if is_f32(x):
        el = horner(w, LOG1PU_L32)
    else:
        el = horner(w, LOG1PU_L64)
    # 2 atanh(s + slo) = 2s + s w L(w) + 2 slo/(1 - w) + ..., 2 slo (1 + w) to 2^-12 ulp
    r = T(2.0) * s + ((s * w) * el + T(2.0) * fma(slo, w, slo))
    # below 2^-60, log1p(x) rounds to x (and x/2 would round a subnormal x)
    return x if x < T(8.673617379884035e-19) else r


# 64 ln2 = hi + lo per dtype, hi on the grid of the tail's inputs (float32 2^-17: every y in
# [-128, -64]; float64 2^-43: [-1024, -512]), so y + hi is exact there, and |lo| <= 2^-18,
# small enough for exp_dw's exp(lo) = 1 + lo (lo^2 / 2 is below both dtypes' rounding).
_K64_HI32, _K64_LO32 = 44.361419677734375, -1.2189787519729715e-07
_K64_HI64, _K64_LO64 = 44.361419555836505, -5.62123739673937e-15
_TWO_M64 = 5.421010862427522e-20  # 2^-64
# 128 ln2 (float32) and 1024 ln2 (float64) on the same grids: 2 and 16 times the above
_K128_HI32, _K128_LO32 = 2.0 * _K64_HI32, 2.0 * _K64_LO32
_K1024_HI64, _K1024_LO64 = 16.0 * _K64_HI64, 16.0 * _K64_LO64
_TWO_M960 = 1.0261342003245941e-289  # 2^-960


@kernel
def exp_scaled(y, ylo):
    """``(m, s)`` with ``exp(y + ylo) = m * s`` (ylo: a dw low part, or 0): s = 2^-64 below
    the underflow edge (y < -80 in float32, -700 in float64), else 1 (and m =
    exp_dw(y, ylo) exactly). m stays normal where exp is subnormal or zero, so a result
    ``(a * m * b) * s`` rounds once into the subnormal range: x * exp(x) computed with a
    subnormal exp(x) is off by up to ~50 (float32) / ~350 (float64) subnormal steps.
    Selects only: the loops stay SIMD. exp_scaled_over with b = 1 (its constant selects
    fold away)."""
    m, _, s = exp_scaled_over(y, ylo, type(y)(1.0))
    return m, s


_TWO_64 = 1.8446744073709552e19  # 2^64
# Powers of two for the parameter-scaled forms (squareplus, CELU, gelu's tail, xIPReLU,
# softplus, IGLU's d_sigma)
_TWO_512, _TWO_M512 = 1.3407807929942597e154, 7.458340731200207e-155
_TWO_M60, _TWO_M500 = 8.673617379884035e-19, 3.054936363499605e-151
_TWO_200, _TWO_M200 = 1.6069380442589903e60, 6.223015277861142e-61
_TWO_16, _TWO_M16 = 65536.0, 1.52587890625e-05
_TWO_32, _TWO_M32 = 4294967296.0, 2.3283064365386963e-10
_TWO_60, _TWO_M90 = 1.152921504606847e18, 8.077935669463161e-28
_TWO_120, _TWO_M120 = 1.329227995784916e36, 7.52316384526264e-37
_TWO_128, _TWO_M128 = 3.402823669209385e38, 2.938735877055719e-39
_TWO_256, _TWO_M256 = 1.157920892373162e77, 8.636168555094445e-78
_TWO_500, _TWO_M900 = 3.273390607896142e150, 1.1830521861667747e-271
_TWO_1000, _TWO_M1000 = 1.0715086071862673e301, 9.332636185032189e-302


@kernel
def exp_scaled_times(y, a):
    """``(a', m, s)`` with ``a exp(y) = (a' m) s`` for y <= 0 and a > 0 (a finite), rounded
    once into the subnormal range like :func:`exp_scaled` (which this is for a < 2^64),
    also where a is so large that a e^y is normal or subnormal while exp_scaled's
    e^(y + 64 ln2) underflows (ELU's dx with alpha = 3.7e272 at x = -1000, float64, is
    1.9e-162, not 0): in the tail a >= 2^64 is taken as a' = a 2^-960 (2^-64 float32) and
    exp's argument moves by 1024 ln2 (128 ln2), on the tail's grid as exp_scaled's 64 ln2.
    a' s < 1, so m's rounding where it is subnormal stays below a spacing of the result.
    The choice on a is off exp's dependency chain: a 4-step ladder computed after the
    tail test would triple the scalar ufunc loop's time (a parameter of stride 0) in
    float64, and a branch would keep the SIMD loops from vectorising. Selects only."""
    T = type(y)
    big = a >= T(_TWO_64)
    if is_f32(y):
        tail = y < T(-80.0)
        a_s = a * T(_TWO_M64) if big else a
        kh = T(_K128_HI32) if big else T(_K64_HI32)
        kl = T(_K128_LO32) if big else T(_K64_LO32)
    else:
        tail = y < T(-700.0)
        a_s = a * T(_TWO_M960) if big else a
        kh = T(_K1024_HI64) if big else T(_K64_HI64)
        kl = T(_K1024_LO64) if big else T(_K64_LO64)
    hi = y + (kh if tail else T(0.0))
    lo = kl if tail else T(0.0)
    a_out = a_s if tail else a
    s = T(_TWO_M64) if tail else T(1.0)
    return a_out, exp_dw(hi, lo), s


# 192 ln2 (float32) and 1152 ln2 (float64): 3 and 18 times the above, on the same grids
_K192_HI32, _K192_LO32 = 3.0 * _K64_HI32, 3.0 * _K64_LO32
_K1152_HI64, _K1152_LO64 = 18.0 * _K64_HI64, 18.0 * _K64_LO64
_TWO_544 = 5.758609657015292e163  # 2^544


@kernel
def exp_scaled_over(y, ylo, b):
    """``(m, b', s)`` with ``exp(y + ylo) / b = (m / b') s`` for b > 0, rounded once into
    the subnormal range like :func:`exp_scaled` (which this is for b >= 2^-64: b' = b),
    also where b is so small that e^y/b is normal while exp_scaled's e^(y + 64 ln2)
    underflows (softplus at float32 beta = 3.8e-31, x = -4e32 is 2.6e-36, not 0): in the
    tail b < 2^-64 is taken as b' = b 2^128 (2^1088 float64) and exp's argument moves by
    192 ln2 (1152 ln2), so m stays normal wherever the result is (b >= the smallest
    subnormal) and never overflows (y < -80 float32, -700 float64). Selects only."""
    T = type(y)
    small = b < T(_TWO_M64)
    if is_f32(y):
        tail = y < T(-80.0)
        b_s = (b * T(_TWO_64)) * T(_TWO_64) if small else b
        kh = T(_K192_HI32) if small else T(_K64_HI32)
        kl = T(_K192_LO32) if small else T(_K64_LO32)
    else:
        tail = y < T(-700.0)
        b_s = (b * T(_TWO_544)) * T(_TWO_544) if small else b
        kh = T(_K1152_HI64) if small else T(_K64_HI64)
        kl = T(_K1152_LO64) if small else T(_K64_LO64)
    hi = y + (kh if tail else T(0.0))
    lo = ylo + (kl if tail else T(0.0))
    b_out = b_s if tail else b
    s = T(_TWO_M64) if tail else T(1.0)
    return exp_dw(hi, lo), b_out, s


@kernel
def sigmoid(x):
    """Logistic function, accurate in both tails (no 1 - small cancellation)."""
    T = type(x)
    e = math.exp(-abs(x))
    r = T(1.0) / (T(1.0) + e)
    if x < T(0.0):
        return e * r
    return r


@kernel
def log1p_exp(x):
    """``log(1 + exp(x))`` without overflow for large x or loss for x << 0."""
    T = type(x)
    return max(x, T(0.0)) + math.log1p(math.exp(-abs(x)))


@kernel
def horner(v, coeffs):
    """``sum(coeffs[k] * v**k)``; coefficients in ascending order, cast to v's type."""
    T = type(v)
    n = len(coeffs)
    r = T(coeffs[n - 1])
    for k in range(n - 2, -1, -1):
        r = r * v + T(coeffs[k])
    return r


def padded(*ts, dtype=float):
    """The coefficient tuples zero-padded at the high-degree end to one length (at import,
    not a kernel): Horner then gives the same value bit for bit (0 v + 0 = +-0 and +-0 + c
    = c for finite v), so one evaluation with coefficients chosen by selects replaces a
    branch per piece. Pass ``dtype=numpy.float32`` for float32 sets: numpy float32 scalars
    (the same rounding as T(c)) keep the selects float32 (the CUDA float32 kernels must have
    no float64 instruction)."""
    n = max(len(t) for t in ts)
    return tuple(tuple(dtype(c) for c in tuple(t) + (0.0,) * (n - len(t))) for t in ts)
