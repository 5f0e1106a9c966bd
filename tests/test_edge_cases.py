"""Edge cases a demanding user probes, and the classes of fault behind them: out= overlapping
an operand, parameters beyond float32's range, intermediates that overflow or cancel, bad
environment values, numpy's input conventions, the trainer's argument checks, and error
messages that name the activation (first reported together in issue #20).

The fixed cases come first; the property tests further down draw dtypes, shapes, strides,
overlaps and parameter magnitudes around them (``pytest --hypothesis-show-statistics``
reports how many cases each ran)."""

import numpy as np
import pytest

import iglu_np

from .bitwise import assert_same_bits

NAMES = list(iglu_np.ACTIVATIONS)


# --------------------------------------------------------------------- overlapping out=
def _overlap_cases(n, dt):
    """(x, g, out) triples where out partially overlaps x or g (shifted views both ways)."""
    for shift in (1, -1):
        b = np.linspace(-3, 3, n + 1).astype(dt)
        lo, hi = (b[1:], b[:-1]) if shift > 0 else (b[:-1], b[1:])
        yield b, lo, hi, lo  # out is x, grad_out shifted
        yield b, lo, hi, hi  # out is grad_out, x shifted
        yield b, lo, lo.copy(), hi  # out overlaps x only


@pytest.mark.parametrize("name", ["relu", "iglu", "gelu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [7, 3000])
def test_backward_out_overlapping_grad_out(name, dtype, n):
    a = iglu_np.ACTIVATIONS[name]
    for rep in range(10):  # small arrays switch to the compiled loop after a few calls
        for b, x, g, o in _overlap_cases(n, dtype):
            b0 = b.copy()
            want = a.backward(x.copy(), g.copy())
            got = a.backward(x, g, out=o)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {dtype} n={n} rep={rep}")
            b[:] = b0


# --------------------------------------------------- parameters beyond float32's range
F32_CASES = [
    ("iglu", "sigma", 1e39),
    ("iglu", "sigma", 1e-45),
    ("z_gate", "sigma", 1e39),
    ("squareplus", "b", 1e39),
    ("gelu_a", "a", 1e39),
    ("leaky_relu", "negative_slope", 1e39),
    ("leaky_relu", "negative_slope", -1e39),
    ("celu", "alpha", 1e39),
    ("celu", "alpha", 1e-40),
    ("elu", "alpha", 1e39),
    ("xsilu", "alpha", 1e39),
    ("xatlu", "alpha", 1e39),
    ("softplus", "beta", 1e39),
    ("softplus", "beta", 1e-39),
    ("hardshrink", "lambd", 1e39),
    ("xielu", "alpha_p", 1e39),
    ("xiprelu", "beta", -1e39),
    ("prelu", "weight", 1e39),
]


@pytest.mark.parametrize("name,p,v", F32_CASES)
def test_float32_parameter_beyond_range_computes_in_float64(name, p, v):
    """A parameter float32 cannot hold gives the float64 answer rounded to float32."""
    a = iglu_np.ACTIVATIONS[name]
    x32 = np.float32([0.0, 1.0, -1.0, 3.5, -0.25, 1e-30, -1e30])
    x64 = x32.astype(np.float64)
    g32 = np.float32([1.0, -2.0, 0.5, 1.0, 3.0, 1.0, 1e-10])
    with np.errstate(all="ignore"):  # the float64 answers may overflow float32 (-> inf)
        pairs = [
            (a(x32, **{p: v}), a(x64, **{p: v})),
            (a.dx(x32, **{p: v}), a.dx(x64, **{p: v})),
            (a.backward(x32, g32, **{p: v}), a.backward(x64, g32.astype(np.float64), **{p: v})),
        ]
        pairs += [(a.dparams(x32, **{p: v})[k], a.dparams(x64, **{p: v})[k]) for k in a.param_names]
        pairs += [
            (
                a.backward_params(x32, g32, **{p: v})[k],
                a.backward_params(x64, g32.astype(np.float64), **{p: v})[k],
            )
            for k in a.param_names
        ]
        out = np.empty_like(x32)
        pairs.append((a(x32, **{p: v}, out=out), a(x64, **{p: v})))
        for got, want in pairs:
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got, np.asarray(want).astype(np.float32))
    # the case first reported: sigma = 1e39, beyond float32, with float32 x
    np.testing.assert_allclose(
        iglu_np.iglu(np.float32([0, 1, -1]), sigma=1e39),
        np.float32([0, 1, -3.1830988e-40]),
        rtol=1e-6,
        atol=0,
    )


MIXED_CASES = [
    ("iglu", "sigma", 1e39),
    ("softplus", "beta", 1e-39),
    ("swish", "beta", -1e300),
    ("xielu", "alpha_p", 1e39),
]


def _mixed_param(act, p, v, n):
    """n values of parameter p: in-domain values float32 holds, and v (beyond it) twice."""
    vals = [
        float(t)
        for t in act._p.by_name[p].test_values
        if act._p.by_name[p].contains(t) and abs(t) < 1e30 and (t == 0 or abs(t) > 1e-30)
    ]
    col = np.resize(np.array(vals or [act.defaults[act.param_names.index(p)]]), n)
    col[[1, n - 2]] = v
    return col


@pytest.mark.parametrize("name,p,v", MIXED_CASES)
def test_float32_parameter_array_partly_beyond_range_is_elementwise(name, p, v):
    """Only the elements whose parameter float32 cannot hold compute in float64: each
    element's bits are those it gets alone (a Dask chunk without such a value computes in
    float32 and must match the whole array)."""
    a = iglu_np.ACTIVATIONS[name]
    rng = np.random.default_rng(3)
    n = 11
    x = (rng.standard_normal((5, n)) * 3).astype(np.float32)
    g = rng.standard_normal((5, n)).astype(np.float32)
    col = _mixed_param(a, p, v, n)
    kinds = [
        ("fwd", lambda x, g, **k: a(x, **k)),
        ("dx", lambda x, g, **k: a.dx(x, **k)),
        ("bwd", a.backward),
    ]
    kinds += [("d_" + q, lambda x, g, q=q, **k: a.dparams(x, **k)[q]) for q in a.param_names]
    with np.errstate(all="ignore"):
        for what, f in kinds:
            whole = f(x, g, **{p: col})
            assert whole.dtype == np.float32
            for j in range(n):
                alone = f(x[:, j : j + 1], g[:, j : j + 1], **{p: col[j : j + 1]})
                assert_same_bits(whole[:, j : j + 1], alone, err_msg=f"{what} column {j}")
        out = np.empty_like(x)
        a(x, **{p: col}, out=out)
        assert_same_bits(out, a(x, **{p: col}))
        bp = a.backward_params(x, g, **{p: col})[p]
        for j in range(n):
            alone = a.backward_params(x[:, j : j + 1], g[:, j : j + 1], **{p: col[j : j + 1]})[p]
            np.testing.assert_allclose(bp[j], alone[0], rtol=2e-7, err_msg=f"d_{p} column {j}")


# ------------------------------------------- intermediates that overflow or cancel
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_no_intermediate_overflow_near_max(dtype):
    fi = np.finfo(dtype)
    x = np.array([fi.max, fi.max * 0.75, fi.max / 2 * 1.1, -fi.max, -fi.max * 0.75], dtype)
    sp = iglu_np.squareplus(x)
    np.testing.assert_allclose(sp[:3], x[:3], rtol=4 * fi.eps)
    # b/(2(s + |x|)) ~ b/(4|x|) for x << 0: tiny, positive, not a NaN
    np.testing.assert_allclose(sp[3:], 1.0 / np.abs(x[3:].astype(np.float64)), rtol=1e-6, atol=0)
    da = iglu_np.xatlu.dparams(x)["alpha"]
    np.testing.assert_allclose(da, np.abs(x), rtol=4 * fi.eps)  # (2/pi) x atan x ~ |x|


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "an,beta", [(0.8, 0.5), (1.0, 0.1), (3.0, 0.7), (10.0, 1e-4), (0.55, 0.5), (1.0, 0.999999)]
)
def test_xielu_dx_root_cancellation(dtype, an, beta):
    """alpha_n expm1(x) + beta cancels near x0 = log1p(-beta/alpha_n) (x0 ~ -0.98 with the
    defaults; computed naively, float64 is 69 ulp off there): within a factor 2 of the root
    both dtypes meet 8 ulp of the true value (not only of the largest term), the doubles
    next to the root aside (there the result is ~1e-16 of the terms and x0's own
    double-word error shows)."""
    import mpmath

    an, beta = (float(dtype(v)) for v in (an, beta))
    with mpmath.workdps(60):
        x0 = float(mpmath.log1p(-mpmath.mpf(beta) / an))
    x = np.linspace(2 * x0, x0 / 2, 301).astype(dtype)
    x = np.concatenate([x, dtype([-1.0, x0 * (1 + 1e-6), x0 * (1 - 1e-6)])])
    x = x[(x <= -1e-6) & (np.abs(x.astype(np.float64) - x0) > 1e-9 * abs(x0))]
    got = iglu_np.xielu.dx(x, alpha_n=an, beta=beta)
    for xi, g in zip(x, got):
        with mpmath.workdps(60):
            t = mpmath.mpf(an) * mpmath.expm1(mpmath.mpf(float(xi))) + mpmath.mpf(beta)
        ulp = float(np.spacing(dtype(abs(float(t)))))
        assert abs(float(g) - float(t)) <= 8 * ulp, (xi, g, t, abs(float(g) - float(t)) / ulp)


@pytest.mark.parametrize("a", [1e-280, 1e-200, 1e-10, 1e-3, 0.038, 1.0])
def test_gelu_a_da_normal_result_from_subnormal_gate(a):
    """x^2 phi(a x) is a normal number where phi(a x) is subnormal (|a x| > 37.5, |x|
    large), so it must not be computed as x^2 times the subnormal phi (24,011 ulp off at
    a = 1e-10, x = -3.8e11, float64): within the README's 8 ulp down to the subnormal
    range."""
    import mpmath

    fi = np.finfo(np.float64)
    x = np.concatenate([-np.geomspace(30 / a, 64 / a, 200), np.geomspace(30 / a, 64 / a, 50)])
    got = iglu_np.gelu_a.dparams(x, a=a)["a"]
    for xi, g in zip(x, got):
        with mpmath.workdps(60):
            t = float(mpmath.mpf(xi) ** 2 * mpmath.npdf(mpmath.mpf(a) * mpmath.mpf(xi)))
        if t > fi.max:
            continue
        ulp = max(float(np.spacing(abs(t))), float(fi.smallest_subnormal))
        assert abs(float(g) - t) <= 8 * ulp, (xi, g, t)


# ------------------------------------------------------------------ environment errors
@pytest.mark.parametrize(
    "var", ["IGLU_NP_PARALLEL_THRESHOLD", "IGLU_NP_FAST_MIN_SIZE", "IGLU_NP_FAST_WARM_CALLS"]
)
def test_bad_environment_value_names_the_variable(var):
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", "import numpy as np, iglu_np; iglu_np.relu(np.ones(3))"],
        env={**__import__("os").environ, var: "64k"},
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0
    assert var in r.stderr and "'64k'" in r.stderr and "non-negative integer" in r.stderr


# ------------------------------------------------------------- numpy's conventions
def test_byte_swapped_input_is_its_dtype():
    for dt in (">f4", ">f8", "<f4"):
        x = np.array([1.0, -1.0, 0.5], dtype=dt)
        native = x.astype(np.dtype(dt).newbyteorder("="))
        for f in (iglu_np.iglu, iglu_np.iglu.dx, iglu_np.gelu):
            r = f(x)
            assert r.dtype == native.dtype
            np.testing.assert_array_equal(r, f(native))
        np.testing.assert_array_equal(
            iglu_np.iglu.backward(x, x), iglu_np.iglu.backward(native, native)
        )
        np.testing.assert_array_equal(
            iglu_np.iglu.backward_params(x, x)["sigma"],
            iglu_np.iglu.backward_params(native, native)["sigma"],
        )


def test_memoryview_and_pandas_inputs():
    pd = pytest.importorskip("pandas")
    x = np.array([1.0, -2.0, 0.5])
    np.testing.assert_array_equal(iglu_np.iglu(memoryview(x)), iglu_np.iglu(x))
    np.testing.assert_array_equal(
        iglu_np.iglu.backward(memoryview(x), memoryview(x)), iglu_np.iglu.backward(x, x)
    )
    s = pd.Series(x, index=["a", "b", "c"], name="v")
    for r, want in [
        (iglu_np.iglu(s, sigma=0.5), iglu_np.iglu(x, sigma=0.5)),
        (iglu_np.iglu.dx(s), iglu_np.iglu.dx(x)),
        (iglu_np.iglu.backward(s, x), iglu_np.iglu.backward(x, x)),
        (iglu_np.iglu.dparams(s)["sigma"], iglu_np.iglu.dparams(x)["sigma"]),
    ]:
        assert isinstance(r, pd.Series) and list(r.index) == ["a", "b", "c"] and r.name == "v"
        np.testing.assert_array_equal(r.to_numpy(), want)
    df = pd.DataFrame({"a": x, "b": -x}, index=[7, 8, 9])
    r = iglu_np.gelu(df)
    assert (
        isinstance(r, pd.DataFrame) and list(r.columns) == ["a", "b"] and list(r.index) == [7, 8, 9]
    )
    np.testing.assert_array_equal(r.to_numpy(), iglu_np.gelu(df.to_numpy()))
    np.testing.assert_array_equal(
        iglu_np.iglu.backward_params(s, s)["sigma"], iglu_np.iglu.backward_params(x, x)["sigma"]
    )


def test_positional_parameter_says_keyword():
    x = np.ones(3)
    for call, what in [
        (lambda: iglu_np.iglu(x, 0.5), "iglu()"),
        (lambda: iglu_np.iglu.dx(x, 0.5), "iglu.dx()"),
        (lambda: iglu_np.iglu.backward(x, x, 0.5), "iglu.backward()"),
        (lambda: iglu_np.iglu.dparams(x, 0.5), "iglu.dparams()"),
        (lambda: iglu_np.iglu.backward_params(x, x, 0.5), "iglu.backward_params()"),
    ]:
        with pytest.raises(TypeError) as e:
            call()
        assert what in str(e.value) and "keyword" in str(e.value) and "sigma" in str(e.value)
    with pytest.raises(TypeError, match=r"relu\(\).*no parameters"):
        iglu_np.relu(x, 1.0)
    with pytest.raises(TypeError, match=r"iglu\.backward\(\)"):
        iglu_np.iglu.backward(x)


def test_python_scalars_are_weak():
    x32 = np.float32([1.0, -0.5])
    assert iglu_np.iglu.backward(x32, 2.0).dtype == np.float32
    assert iglu_np.iglu.backward(x32, 2).dtype == np.float32
    assert iglu_np.iglu.backward(1.5, x32).dtype == np.float32
    assert (
        iglu_np.iglu.backward(x32, np.float64(2.0)).dtype == np.float64
    )  # numpy scalars are not weak
    assert iglu_np.iglu.backward(np.float16([1.0]), 2.0).dtype == np.float16
    assert iglu_np.iglu(1.0).dtype == np.float64
    np.testing.assert_array_equal(
        iglu_np.iglu.backward(x32, 2.0), iglu_np.iglu.backward(x32, np.float32([2, 2]))
    )


# ------------------------------------------------------------------ the trainer
def _blobs(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    return X, y


@pytest.mark.parametrize(
    "kw",
    [
        {"alpha": float("nan")},
        {"alpha": float("inf")},
        {"alpha": -1.0},
        {"learning_rate_init": float("inf")},
        {"learning_rate_init": float("nan")},
    ],
)
def test_non_finite_hyperparameters_rejected_up_front(kw):
    from iglu_np.nn import MLPClassifier

    X, y = _blobs()
    with pytest.raises(ValueError, match=list(kw)[0]):
        MLPClassifier((4,), max_iter=2, **kw).fit(X, y)


@pytest.mark.filterwarnings(
    "ignore::iglu_np.nn.estimator.ConvergenceWarning"
)  # 6 epochs on purpose
def test_interrupted_epoch_then_resume_matches_uninterrupted():
    from iglu_np.nn import MLPClassifier

    X, y = _blobs()
    kw = dict(
        hidden_layer_sizes=(8,),
        max_iter=6,
        batch_size=16,
        random_state=3,
        learning_rate_init=0.01,
        tol=0.0,
        n_iter_no_change=100,
    )
    want = MLPClassifier(**kw).fit(X, y)
    clf = MLPClassifier(**kw)
    clf.fit(X, y, n_epochs=2)
    calls = {"n": 0}
    orig = clf._loss

    def interrupting(*a, **k):
        calls["n"] += 1
        if calls["n"] == 4:  # mid-epoch (8 batches an epoch)
            raise KeyboardInterrupt
        return orig(*a, **k)

    clf._loss = interrupting
    with pytest.raises(KeyboardInterrupt):
        clf.fit(X, y, resume=True)
    del clf._loss
    assert clf.n_iter_ == 2 and clf.t_ == 2 * 8
    clf.fit(X, y, resume=True)
    assert clf.t_ == want.t_ and clf.n_iter_ == want.n_iter_
    for a, b in zip(clf.coefs_, want.coefs_):
        np.testing.assert_array_equal(a, b)


def test_max_iter_reached_warns_convergence():
    from iglu_np.nn import ConvergenceWarning, MLPClassifier

    X, y = _blobs()
    with pytest.warns(ConvergenceWarning, match="maximum iterations"):
        MLPClassifier((4,), max_iter=3, random_state=0).fit(X, y)


def test_float64_divergence_raises():
    from iglu_np.nn import MLPClassifier

    X, y = _blobs()
    with pytest.raises(FloatingPointError, match="diverged"):
        MLPClassifier(
            (16,),
            solver="sgd",
            learning_rate_init=1e10,
            max_iter=5,
            dtype="float64",
            random_state=0,
        ).fit(X, y)


def test_partial_fit_single_class_rejected():
    from iglu_np.nn import MLPClassifier

    X, y = _blobs()
    with pytest.raises(ValueError, match="at least 2 classes"):
        MLPClassifier((4,)).partial_fit(X, np.zeros(len(X), int), classes=[0])


# ------------------------------------------------------------------ every error names the activation
def _error_cases(a):
    x = np.linspace(-2, 2, 6).astype(np.float32)
    ro = np.empty_like(x)
    ro.setflags(write=False)
    yield "complex input", lambda: a(x.astype(np.complex64)), "float"
    yield "unknown keyword", lambda: a(x, sigmaa=1.0), "sigmaa"
    yield "backend", lambda: a(x, backend="nope"), "backend"
    yield "input type", lambda: a("text"), "numpy array"
    yield "shapes", lambda: a.backward(x, np.ones(4, np.float32)), "broadcast"
    yield "read-only out", lambda: a(x, out=ro), "read-only"
    yield "positional parameter", lambda: a(x, 1.0), "keyword" if a.params else "no parameters"
    for p in a.params:
        bad = (
            (p.lo - 1.0)
            if p.lo is not None and np.isfinite(p.lo)
            else ((p.hi + 1.0) if p.hi is not None and np.isfinite(p.hi) else np.nan)
        )
        yield f"{p.name} outside its domain", lambda p=p, bad=bad: a(x, **{p.name: bad}), p.name
        # an int float64 cannot hold: a named ValueError, not float()'s bare OverflowError
        yield f"{p.name} = 10**400", lambda p=p: a(x, **{p.name: 10**400}), p.name


@pytest.mark.parametrize("name", NAMES)
def test_every_error_names_the_activation_and_the_argument(name):
    a = iglu_np.ACTIVATIONS[name]
    for what, call, needle in _error_cases(a):
        with pytest.raises((TypeError, ValueError)) as e:
            call()
        msg = str(e.value)
        assert name in msg and needle in msg, (what, msg)


# ------------------------------------------------------------------ property tests
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# The overlap handling is the dispatcher's, the same for every activation; each activation
# drawn compiles its loops on a cold cache. The default run draws from a few (fixed, so its
# time does not vary from run to run), the slow one from every activation.
OVERLAP_DEFAULT = ["relu", "iglu", "gelu_a", "hardtanh"]
_ANY_OPERAND = dict(
    kind=st.sampled_from(["fwd", "dx", "bwd", "bwd_all"]),
    dtype=st.sampled_from([np.float32, np.float64]),
    n=st.integers(1, 3000),
    shift=st.integers(-3, 3),
    step=st.sampled_from([1, 2]),
    out_on=st.sampled_from(["x", "g"]),
    swap=st.booleans(),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(OVERLAP_DEFAULT), **_ANY_OPERAND)
@example(name="relu", kind="bwd", dtype=np.float64, n=3001, shift=1, step=1, out_on="x", swap=False)
def test_property_out_overlapping_any_operand_gives_numpys_answer(
    name, kind, dtype, n, shift, step, out_on, swap
):
    """out= a shifted (or strided) view of the buffer holding x or grad_out: the result
    is the one computed from copies (numpy's buffered semantics)."""
    _check_out_overlapping_any_operand(name, kind, dtype, n, shift, step, out_on, swap)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(NAMES), **_ANY_OPERAND)
def test_property_out_overlapping_any_operand_of_every_activation(
    name, kind, dtype, n, shift, step, out_on, swap
):
    _check_out_overlapping_any_operand(name, kind, dtype, n, shift, step, out_on, swap)


def _check_out_overlapping_any_operand(name, kind, dtype, n, shift, step, out_on, swap):
    a = iglu_np.ACTIVATIONS[name]
    m = n * step + abs(shift) + 1
    buf = np.linspace(-4, 4, m).astype(dtype)
    lo = max(0, -shift)
    xs = buf[lo : lo + n * step : step]
    os_ = buf[lo + shift : lo + shift + n * step : step]
    if kind in ("bwd", "bwd_all"):
        g = np.linspace(1, 2, m).astype(dtype)
        g = g[lo : lo + n * step : step]
        x, gg = (xs, g) if out_on == "x" else (g, xs)
        if swap:
            x, gg = gg, x
        if kind == "bwd":
            want = a.backward(x.copy(), gg.copy())
            got = a.backward(x, gg, out=os_)
        else:  # the parameter gradients too read x and grad_out before out is written
            want, wp = a.backward_all(x.copy(), gg.copy())
            got, gp = a.backward_all(x, gg, out=os_)
            for k in wp:  # sums in another order (a strided view against a copy): rounding only
                np.testing.assert_allclose(
                    gp[k],
                    wp[k],
                    rtol=1e-5 if dtype == np.float32 else 1e-12,
                    atol=64 * n * float(np.finfo(dtype).eps),
                )
    else:
        f = a if kind == "fwd" else a.dx
        want = f(xs.copy())
        got = f(xs, out=os_)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from([n for n in NAMES if iglu_np.ACTIVATIONS[n].params]),
    which=st.integers(0, 3),
    exp=st.integers(-60, 60),
    sign=st.sampled_from([1.0, -1.0]),
    mant=st.floats(1.0, 9.99),
)
@example(name="iglu", which=0, exp=39, sign=1.0, mant=1.0)
@example(name="squareplus", which=0, exp=39, sign=1.0, mant=1.0)
@example(name="xielu", which=3, exp=22, sign=-1.0, mant=1.0)  # found by this test: eps = -1e22
@example(name="hardtanh", which=0, exp=0, sign=-1.0, mant=1.0000000298023224)  # and this one
def test_property_float32_parameters_of_any_magnitude(name, which, exp, sign, mant):
    """Any in-domain parameter value, however large or small for float32: float32 data
    gives the float64 answer rounded once, or a ValueError naming the parameter."""
    a = iglu_np.ACTIVATIONS[name]
    p = a.params[which % len(a.params)]
    v = sign * mant * 10.0**exp
    x32 = np.float32([0.0, 1.0, -1.0, 2.5, -7.0, 1e-20, -1e20])
    try:
        a(x32[:1], **{p.name: v})
    except ValueError as e:
        assert p.name in str(e)
        return
    f32 = np.finfo(np.float32)
    wide = abs(v) > float(f32.max) or abs(v) < float(f32.tiny)
    # a parameter float32 holds is rounded to float32 first, as numpy rounds a Python float
    # for float32 arithmetic: at a breakpoint (hardtanh's min_val = -1.00000003 and x = -1)
    # that rounding, not the arithmetic, decides the branch
    vr = v if wide else float(np.float32(v))
    with np.errstate(all="ignore"):
        for f in (a, a.dx):
            got = f(x32, **{p.name: v})
            want = np.asarray(f(x32.astype(np.float64), **{p.name: vr})).astype(np.float32)
            assert got.dtype == np.float32
            if wide:
                np.testing.assert_array_equal(got, want)  # computed in float64
            else:  # float32 arithmetic: within the accuracy bounds of the float64 answer
                fin = np.isfinite(want)
                assert (np.isfinite(got) == fin).all(), (got, want)
                np.testing.assert_allclose(
                    got[fin],
                    want[fin],
                    rtol=3e-6,
                    atol=1e-6 * np.abs(want[fin]).max(initial=0) + 1e-37,
                )
            # never NaN where the float64 truth is not
            assert not (np.isnan(got) & ~np.isnan(want)).any()


@settings(max_examples=100, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    dtype=st.sampled_from(["<f4", ">f4", "<f8", ">f8"]),
    shape=st.sampled_from([(5,), (2, 3), (3, 1, 2)]),
    order=st.sampled_from(["C", "F"]),
    container=st.sampled_from(["ndarray", "memoryview", "list"]),
)
def test_property_array_likes_follow_numpy(name, dtype, shape, order, container):
    a = iglu_np.ACTIVATIONS[name]
    base = np.linspace(-3, 3, int(np.prod(shape))).reshape(shape)
    x = np.asarray(base, dtype=dtype, order=order)
    native = x.astype(np.dtype(dtype).newbyteorder("="))
    if container == "memoryview":
        if np.dtype(dtype).byteorder == ">":
            return  # a big-endian buffer's format is not one numpy reads back as such
        xin = memoryview(np.ascontiguousarray(x))
    elif container == "list":
        xin, native = x.tolist(), native.astype(np.float64)
    else:
        xin = x
    r = a(xin)
    assert r.dtype == native.dtype and r.shape == shape
    np.testing.assert_array_equal(r, a(native))


def _param_array(p, n, dtype):
    """An in-domain per-element parameter array for p (its test values, cycled)."""
    big = float(np.finfo(dtype).max)  # a value the dtype cannot hold is not an array element
    vals = [v for v in (p.test_values or (p.default,)) if abs(v) <= big] or [p.default]
    return np.resize(np.asarray(vals, dtype=dtype), n)


_PARAM_ARRAY = dict(
    kind=st.sampled_from(["fwd", "dx", "bwd", "bwd_all"]),
    dtype=st.sampled_from([np.float32, np.float64]),
    n=st.integers(1, 2500),
    shift=st.integers(-2, 2),
    which=st.integers(0, 3),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from([n for n in OVERLAP_DEFAULT if iglu_np.ACTIVATIONS[n].params]),
    **_PARAM_ARRAY,
)
@example(name="iglu", kind="bwd", dtype=np.float32, n=2049, shift=1, which=0)
def test_property_out_overlapping_a_parameter_array(name, kind, dtype, n, shift, which):
    """out= a shifted view of a per-element parameter array (an operand like x): numpy's
    buffered answer, for every operation that takes out= (backward_all's grad_x too)."""
    _check_out_overlapping_a_parameter_array(name, kind, dtype, n, shift, which)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from([n for n in NAMES if iglu_np.ACTIVATIONS[n].params]), **_PARAM_ARRAY)
def test_property_out_overlapping_a_parameter_array_of_every_activation(
    name, kind, dtype, n, shift, which
):
    _check_out_overlapping_a_parameter_array(name, kind, dtype, n, shift, which)


def _check_out_overlapping_a_parameter_array(name, kind, dtype, n, shift, which):
    a = iglu_np.ACTIVATIONS[name]
    p = a.params[which % len(a.params)]
    buf = np.empty(n + abs(shift) + 1, dtype)
    lo = max(0, -shift)
    pv = buf[lo : lo + n]
    pv[...] = _param_array(p, n, dtype)
    out = buf[lo + shift : lo + shift + n]
    x = np.linspace(-4, 4, n).astype(dtype)
    g = np.linspace(1, 2, n).astype(dtype)
    kw = {p.name: pv}
    kwc = {p.name: pv.copy()}
    if a.spec.check is not None and a.spec.check(**{**a.defaults, **kwc}):
        return  # a cross-parameter constraint (xIELU's alpha_n > beta) rules this array out
    with np.errstate(all="ignore"):
        if kind == "fwd":
            want, got = a(x, **kwc), a(x, **kw, out=out)
        elif kind == "dx":
            want, got = a.dx(x, **kwc), a.dx(x, **kw, out=out)
        elif kind == "bwd":
            want, got = a.backward(x, g, **kwc), a.backward(x, g, **kw, out=out)
        else:
            (want, wp), (got, gp) = a.backward_all(x, g, **kwc), a.backward_all(x, g, **kw, out=out)
            assert wp.keys() == gp.keys()
            for k in wp:  # the parameter gradients read the parameter before out= is written
                np.testing.assert_allclose(
                    gp[k], wp[k], rtol=1e-6 if dtype == np.float32 else 1e-12
                )
    np.testing.assert_array_equal(got, want)
