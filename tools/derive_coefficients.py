"""Derive the polynomial coefficients used by the activation kernels.

Run ``python tools/derive_coefficients.py`` to print them; the kernels quote the output.
Each fit is a Chebyshev (near-minimax) polynomial computed by mpmath at 60 digits, and
the printed error is the max relative error of the polynomial itself over its interval
(rounding in the kernel adds a few ulp on top; the accuracy tests measure the total).
"""
import mpmath as mp

mp.mp.dps = 60


def fit(name, f, interval, degree, center=0):
    """Fit f(v) ~ sum c_k (v - center)^k on interval; prints c_k in ascending order."""
    a0, b0 = interval
    poly, err = mp.chebyfit(lambda s: f(s + center), [a0 - center, b0 - center], degree + 1, error=True)
    # relative error check on a dense grid
    a, b = interval
    worst = mp.mpf(0)
    for i in range(2001):
        v = a + (b - a) * mp.mpf(i) / 2000
        fv = f(v)
        pv = mp.polyval(poly, v - center)
        worst = max(worst, abs(pv - fv) / abs(fv))
    cond = sum(abs(c) * max(abs(a - center), abs(b - center)) ** k
               for k, c in enumerate(reversed(poly))) / min(abs(f(a)), abs(f(b)))
    print(f"# {name}: degree {degree} in (v - {center}) on {interval}, "
          f"max rel error {mp.nstr(worst, 3)}, Horner condition <= {mp.nstr(cond, 3)}")
    print(f"{name} = (")
    for c in reversed(poly):  # ascending powers
        print(f"    {mp.nstr(c, 20, min_fixed=-1, max_fixed=1)},")
    print(")")


def iglu_tail(v):
    # D(u)/u^3 = (atan(u) - u/(1+u^2)) / u^3 with v = u^2: the IGLU derivative's negative
    # tail divided by its leading behaviour; series 2/3 - 4/5 v + 6/7 v^2 - ...
    if v == 0:
        return mp.mpf(2) / 3
    u = mp.sqrt(v)
    return (mp.atan(u) - u / (1 + v)) / u**3


def iglu_atan(v):
    # atan(u)/u with v = u^2: IGLU's forward needs only atan(u) for u = min(|t|, 1/|t|).
    if v == 0:
        return mp.mpf(1)
    u = mp.sqrt(v)
    return mp.atan(u) / u


def iglu_sum(v):
    # (S(u) - 2u)/u^3 with S(u) = atan(u) + u/(1+u^2), v = u^2; series -4/3 + 6/5 v - ...
    if v == 0:
        return -mp.mpf(4) / 3
    u = mp.sqrt(v)
    return (mp.atan(u) + u / (1 + v) - 2 * u) / u**3


if __name__ == "__main__":
    # IGLU from u = min(|t|, 1/|t|) in [0, 1]: the forward needs atan(u) = u A(u^2), the
    # derivative S and D: S = 2u +
    # u^3 R(u^2), D = u^3 P(u^2). One polynomial each on v in [0, 1], in (v - 1/2): the
    # series in v have alternating coefficients ~1 (a monomial fit loses ~50 ulp at v = 1),
    # centred the Horner condition is < 2.4. float32: 1e-8 and 2e-9; float64: ~1e-17.
    # float64 has no R: R(v) = P(v) - 2/(1 + v) (iglu._iglu_dx_s64).
    fit("IGLU_A32", iglu_atan, [0, 1], 9, center=mp.mpf("0.5"))
    fit("IGLU_A64", iglu_atan, [0, 1], 20, center=mp.mpf("0.5"))
    fit("IGLU_R32", iglu_sum, [0, 1], 10, center=mp.mpf("0.5"))
    fit("IGLU_D32", iglu_tail, [0, 1], 11, center=mp.mpf("0.5"))
    fit("IGLU_D64", iglu_tail, [0, 1], 22, center=mp.mpf("0.5"))


# --------------------------------------------------------------------------- GELU
def gelu_mills(t):
    # Mills ratio M(t) = Phi(-t)/phi(t) = sqrt(pi/2) erfcx(t/sqrt2): the normal tail without
    # its Gaussian factor, smooth and of modest range (sqrt(pi/2) at 0, ~1/t at infinity).
    return mp.erfc(t / mp.sqrt(2)) * mp.exp(t * t / 2) * mp.sqrt(mp.pi / 2)


def gelu_mills_s(v):
    # S(v) = t M(t) with v = 1/t^2 (-> 1 as t -> inf; asymptotically 1 - v + 3v^2 - ...).
    if v == 0:
        return mp.mpf(1)
    t = 1 / mp.sqrt(v)
    return t * gelu_mills(t)


def gelu_fits():
    # Phi(-t) = phi(t) M(t): phi is evaluated with an exactly split t^2 in its exponent, so
    # only the smooth M needs polynomials: pieces on t in [0, 4], and S in v = 1/t^2 for
    # t >= 4. float64 tables aim at ~1e-18, float32 tables at ~1e-9.
    for suffix, degs in (("64", (16, 15, 14, 13, 20)), ("32", (8, 7, 7, 6, 9))):
        for k, (a, b) in enumerate(((0, 1), (1, 2), (2, 3), (3, 4))):
            fit(f"GELU_M{k}_{suffix}", gelu_mills, [a, b], degs[k], center=mp.mpf(a + b) / 2)
        fit(f"GELU_S_{suffix}", gelu_mills_s, [0, mp.mpf(1) / 16], degs[4], center=mp.mpf(1) / 32)


if __name__ == "__main__":
    gelu_fits()


# --------------------------------------------------------------------------- vmath
# Fits quoted by iglu_np/_vmath.py (vectorisable elementary functions of the CPU backend):
# ``python tools/derive_coefficients.py vmath`` prints only these.
def _vm_atan(z):  # (atan(y) - y)/y^3 in z = y^2
    if z == 0:
        return -mp.mpf(1) / 3
    y = mp.sqrt(z)
    return (mp.atan(y) - y) / y**3


def _vm_exp(r):  # (e^r - 1 - r)/r^2
    return mp.mpf(1) / 2 if r == 0 else (mp.exp(r) - 1 - r) / r**2


def _vm_log(w):  # (2 atanh(s)/s - 2)/s^2 in w = s^2
    if w == 0:
        return mp.mpf(2) / 3
    s = mp.sqrt(w)
    return (2 * mp.atanh(s) / s - 2) / w


def _vm_tanh(w):  # (tanh(a) - a)/a^3 in w = a^2
    if w == 0:
        return -mp.mpf(1) / 3
    a = mp.sqrt(w)
    return (mp.tanh(a) - a) / a**3


def _vm_erf(w):  # erf(a)/a - 1 in w = a^2
    if w == 0:
        return 2 / mp.sqrt(mp.pi) - 1
    a = mp.sqrt(w)
    return mp.erf(a) / a - 1


def _vm_erfcx(K):  # a exp(a^2) erfc(a) in t = (a - K)/(a + K)
    def y(t):
        if t == 1:
            return 1 / mp.sqrt(mp.pi)
        a = K * (1 + t) / (1 - t)
        return a * mp.exp(a * a) * mp.erfc(a)
    return y


def vmath_fits():
    zmax = (mp.sqrt(2) - 1) ** 2
    wlog = ((mp.sqrt(2) - 1) / (mp.sqrt(2) + 1)) ** 2
    a0 = mp.mpf("0.46875")
    fit("ATAN32", _vm_atan, [0, zmax], 4)
    fit("ATAN64", _vm_atan, [0, zmax], 10)
    fit("EXP32", _vm_exp, [-mp.log(2) / 2, mp.log(2) / 2], 4)
    fit("EXP64", _vm_exp, [-mp.log(2) / 2, mp.log(2) / 2], 10)
    fit("LOG32", _vm_log, [0, wlog], 2)
    fit("LOG64", _vm_log, [0, wlog], 6)
    fit("TANH32", _vm_tanh, [0, mp.mpf("0.625") ** 2], 5)
    fit("TANH64", _vm_tanh, [0, mp.mpf("0.625") ** 2], 11)
    fit("ERF32", _vm_erf, [0, a0**2], 4)
    fit("ERF64", _vm_erf, [0, a0**2], 8)
    fit("ERFCM32", mp.erfc, [a0, 1], 8, center=mp.mpf("0.734375"))
    fit("ERFCM64", mp.erfc, [a0, 1], 16, center=mp.mpf("0.734375"))
    fit("ERFCX32", _vm_erfcx(2), [(a0 - 2) / (a0 + 2), 1], 11)
    fit("ERFCX64", _vm_erfcx(4), [(a0 - 4) / (a0 + 4), 1], 23)


if __name__ == "__main__":
    vmath_fits()


# --------------------------------------------------------------------------- GELU float32
# float32 GELU/GELU_a compute in float64 and round once (no double-word steps: a float32
# t = a x has an exact float64 square, and float64 has 29 bits to spare). The Mills ratio
# then needs only ~1e-9 and one polynomial covers the whole range: with r = 1/(u + K),
# M(u) = r G(s), s = (u - K) r = (u - K)/(u + K) in [-1, 1), G(s) = (u + K) M(u) smooth
# (G -> 1 as u -> inf). u is clamped to [0, GELU32_UMAX] (beyond, every float32 result
# is 0, 1 or x). K = 3, degree 10 measured best of K in 2..5, degrees 10..16 (3.7e-9).
GELU32_K = 3
GELU32_UMAX = 20


def _gelu32_g(s):
    K = GELU32_K
    u = K * (1 + s) / (1 - s)
    return (u + K) * gelu_mills(u)


def gelu32_fits():
    K, U = GELU32_K, GELU32_UMAX
    fit("GELU_G32", _gelu32_g, [-1, mp.mpf(U - K) / (U + K)], 10)


if __name__ == "__main__":
    gelu32_fits()


# --------------------------------------------------------------------------- GELU float32, native
# float32 GELU/GELU_a for |a x| <= GELU32N_UMAX in float32 arithmetic (2-3x faster than in
# float64): Phi(-u) = exp(-u^2/2) G(u) with G = M/sqrt(2 pi) = r H(q), r = 1/(u + 2),
# q = (u - 2)/(u + 2) = 1 - 4r in [-1, 0.73) for u <= 12.5 (beyond, float64 takes over).
# K = 2 is a power of two, so u + 2's rounding error is exact and r is corrected for it.
# H is flat (1 at u = 0, 1/sqrt(2 pi) at inf; |d log H/dq| <= 0.54), so q's and the
# polynomial's roundings cost little: K = 4 needs degree 9 instead of 11 (7% faster) but
# its H runs from 2 to 0.4, and GELU's worst error grew from 3.1 to 3.4 ulp (GELU_a 4.0).
# c0 is a hi + lo pair and the other coefficients are rounded to float32 one at a time,
# each rounding followed by a least-squares refit of the higher ones (rounding a plain
# fit's coefficients cost 5e-8).
GELU32N_K = 2
GELU32N_UMAX = 12.5
GELU64N_K = 2
GELU64N_UMAX = 18


def _gelu_n_h(K):
    def h(q):
        u = K * (1 + q) / (1 - q)
        return (u + K) * gelu_mills(u) / mp.sqrt(2 * mp.pi)
    return h


def fit_seq(name, f, interval, degree, npts=300, dtype="float32"):
    """c0 as a hi + lo pair and c1.. rounded to ``dtype``, fitted one at a time (relative
    least squares on Chebyshev nodes)."""
    import numpy as np

    def f32(v):
        return mp.mpf(float(np.dtype(dtype).type(v)))

    a, b = (mp.mpf(v) for v in interval)
    nodes = [(a + b) / 2 + (b - a) / 2 * mp.cos(mp.pi * (i + mp.mpf(0.5)) / npts) for i in range(npts)]
    fv = [f(q) for q in nodes]
    cs = [mp.mpf(c) for c in reversed(mp.chebyfit(f, [a, b], degree + 1))][:1]
    while len(cs) < degree + 1:
        k, m = len(cs), degree + 1 - len(cs)
        A, y = mp.matrix(npts, m), mp.matrix(npts, 1)
        for i, q in enumerate(nodes):
            y[i] = (fv[i] - sum(cs[j] * q**j for j in range(k))) / fv[i]
            for j in range(m):
                A[i, j] = q ** (k + j) / fv[i]
        cs.append(f32(mp.lu_solve(A.T * A, A.T * y)[0]))
    worst = mp.mpf(0)
    for i in range(2001):
        q = a + (b - a) * mp.mpf(i) / 2000
        worst = max(worst, abs(mp.polyval(cs[::-1], q) / f(q) - 1))
    hi = f32(cs[0])
    print(f"# {name}: degree {degree} in q on [{mp.nstr(a, 6)}, {mp.nstr(b, 6)}], c0 = hi + lo, "
          f"max rel error {mp.nstr(worst, 3)}")
    print(f"{name}_C0 = ({float(hi)!r}, {float(f32(cs[0] - hi))!r})")
    print(f"{name} = (")
    for c in cs[1:]:
        print(f"    {float(c)!r},")
    print(")")


def gelu32n_fits():
    K, U = GELU32N_K, mp.mpf(GELU32N_UMAX)
    fit_seq("GELU_H32", _gelu_n_h(K), [-1, (U - K) / (U + K)], 11)
    # float64, the same form for |a x| <= 18 (exp(-u^2/2) >= e^-162): degree 26 (1.1e-17).
    # U = 26 needed degree 28 (5.8e-18); U = 18 degree 25 gives 5.6e-17, U = 14 degree 24
    # 1.3e-16 (H's singularity at q = 1 bounds the degree more than the range does).
    # K = 4 needs degree 22 at U = 26 (1.1e-17; 6 multiplies fewer, gelu/gelu_a 9-12% faster)
    # and K = 3 degree 24, but the wider H made the forward's worst error 3.24 -> 4.00 ulp
    # (gelu) and 2.96 -> 4.32 (gelu_a, K = 3) in 75,000-point tail sweeps: over the bound.
    K, U = GELU64N_K, mp.mpf(GELU64N_UMAX)
    fit_seq("GELU_H64", _gelu_n_h(K), [-1, (U - K) / (U + K)], 26, npts=400, dtype="float64")


if __name__ == "__main__":
    gelu32n_fits()


# --------------------------------------------------------------------------- log1p_unit
# iglu_np._math.log1p_unit: log1p(x) = 2s + s w L(w), s = x/(2 + x), w = s^2 <= 1/9 for x in
# [0, 1]; 1/(2 + x) to 2e-3 scales s's correction term.
# ``python tools/derive_coefficients.py log1p_unit`` prints these after the blocks above
# (which print unconditionally).
def log1p_unit_fits():
    fit("LOG1PU_L32", _vm_log, [0, mp.mpf(1) / 9], 4)
    fit("LOG1PU_L64", _vm_log, [0, mp.mpf(1) / 9], 9)
    fit("LOG1PU_INV", lambda x: 1 / (2 + x), [0, 1], 2)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] in ([], ["log1p_unit"]):
        log1p_unit_fits()
