"""Derive the polynomial coefficients of the sigmoidal and ELU-family kernels.

Run ``python tools/derive_smooth_coefficients.py``; iglu_np/activations/sigmoidal.py and
elu.py quote its output. Each fit is a Chebyshev (near-minimax) polynomial computed by
mpmath, in (v - center); the printed error is the polynomial's own max relative error
over the interval (rounding in the kernel adds a few ulp; the accuracy tests measure the
total) and the condition bounds the relative error growth of the Horner sum.
"""
import mpmath as mp

mp.mp.dps = 60


def tanhshrink_ratio(v):
    # (x - tanh x)/x^3 with v = x^2: tanhshrink without its cancelling leading terms;
    # series 1/3 - 2/15 v + 17/315 v^2 - ...
    if v == 0:
        return mp.mpf(1) / 3
    x = mp.sqrt(v)
    with mp.workdps(200):
        return (x - mp.tanh(x)) / x**3


def celu_dalpha_ratio(q):
    # (expm1(q) - q e^q)/q^2: CELU's alpha-derivative over q^2 (q = x/alpha <= 0);
    # series -1/2 - q/3 - q^2/8 - ..., entire.
    if q == 0:
        return -mp.mpf(1) / 2
    with mp.workdps(200):
        return (mp.expm1(q) - q * mp.exp(q)) / q**2


def fit(name, f, interval, degree, center):
    a, b = (mp.mpf(t) for t in interval)
    c = mp.mpf(center)
    poly = mp.chebyfit(lambda s: f(s + c), [a - c, b - c], degree + 1)
    worst = max(abs(mp.polyval(poly, v - c) - f(v)) / abs(f(v))
                for v in (a + (b - a) * mp.mpf(i) / 2000 for i in range(2001)))
    r = max(abs(a - c), abs(b - c))
    cond = sum(abs(k) * r**i for i, k in enumerate(reversed(poly))) / min(abs(f(a)), abs(f(b)))
    print(f"# {name}: degree {degree} in (v - {center}) on {interval}, "
          f"max rel error {mp.nstr(worst, 3)}, Horner condition <= {mp.nstr(cond, 3)}")
    print(f"{name} = (")
    line = "   "
    for k in reversed(poly):  # ascending powers
        s = " " + mp.nstr(k, 20, min_fixed=-1, max_fixed=1) + ","
        if len(line) + len(s) > 96:
            print(line)
            line = "   "
        line += s
    print(line)
    print(")")


if __name__ == "__main__":
    # |x| < 1.5: beyond it x - tanh(x) loses < 1 ulp. float64 and float32 sets.
    fit("TANHSHRINK_64", tanhshrink_ratio, ["0", "2.25"], 20, "1.125")
    fit("TANHSHRINK_32", tanhshrink_ratio, ["0", "2.25"], 10, "1.125")
    # -2 <= q <= 0: beyond it expm1(q) - q e^q cancels by a factor < 1.5.
    fit("CELU_DALPHA_64", celu_dalpha_ratio, ["-2", "0"], 14, "-1")
    fit("CELU_DALPHA_32", celu_dalpha_ratio, ["-2", "0"], 8, "-1")
