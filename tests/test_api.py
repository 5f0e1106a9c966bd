"""Public API conventions, parametrised over the registry: dtype rules, out=, broadcasting,
errors, derivatives against finite differences, fused kernels against their parts."""

import doctest
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import iglu_np

from . import accuracy as acc

NAMES = list(iglu_np.ACTIVATIONS)
X = np.array([-7.5, -2.0, -0.3, 0.0, 0.4, 1.5, 6.0])


def _typical_params(a):
    return {p.name: p.default for p in a.params}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_is_kept(name, dtype):
    a = iglu_np.ACTIVATIONS[name]
    x = X.astype(dtype)
    outs = [a(x), a.dx(x), a.backward(x, np.ones_like(x)), *a.dparams(x).values()]
    for o in outs:
        assert o.dtype == dtype and o.shape == x.shape
    # a float64 parameter array never widens a float32 computation
    if a.params:
        p = a.params[0]
        o = a(x, **{p.name: np.full(x.shape, p.default)})
        assert o.dtype == dtype


@pytest.mark.parametrize("name", NAMES)
def test_integer_bool_float16_rules(name):
    a = iglu_np.ACTIVATIONS[name]
    xi = np.array([-2, -1, 0, 1, 2])
    assert a(xi).dtype == np.float64
    np.testing.assert_array_equal(a(xi), a(xi.astype(np.float64)))
    assert a(np.array([True, False])).dtype == np.float64
    x16 = X.astype(np.float16)
    r16 = a(x16)
    assert r16.dtype == np.float16
    np.testing.assert_array_equal(r16, a(x16.astype(np.float32)).astype(np.float16))
    assert a.dx(x16).dtype == np.float16
    # Python scalars behave like numpy ufuncs on scalars
    r = a(0.5)
    assert np.ndim(r) == 0 and float(r) == float(a(np.array([0.5]))[0])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "bad", [np.array([1 + 2j]), np.array(["a"]), np.array([object()], dtype=object)]
)
def test_bad_input_types_name_the_activation(name, bad):
    a = iglu_np.ACTIVATIONS[name]
    with pytest.raises(TypeError, match=name):
        a(bad)


@pytest.mark.parametrize("name", [n for n in NAMES if iglu_np.ACTIVATIONS[n].params])
def test_invalid_parameters_raise_value_error_with_domain(name):
    a = iglu_np.ACTIVATIONS[name]
    for p in a.params:
        bad = [np.nan]
        if np.isfinite(p.lo):
            bad.append(p.lo - 1.0 if not p.lo_open else p.lo)
        if np.isfinite(p.hi):
            bad.append(p.hi + 1.0 if not p.hi_open else p.hi)
        for v in bad:
            with pytest.raises(ValueError, match=p.name) as ei:
                a(X, **{p.name: v})
            assert p.domain in str(ei.value)
            with pytest.raises(ValueError, match=p.name):
                a(X, **{p.name: np.array([p.default, v])[:, None]})
        with pytest.raises(TypeError, match=p.name):
            a(X, **{p.name: np.array([1 + 1j])})
    with pytest.raises(TypeError, match="unexpected keyword"):
        a(X, no_such_param=1.0)


@pytest.mark.parametrize("name", NAMES)
def test_out_argument(name):
    a = iglu_np.ACTIVATIONS[name]
    x = X.astype(np.float32)
    expect = a(x)
    out = np.empty_like(x)
    r = a(x, out=out)
    assert r is out
    np.testing.assert_array_equal(out, expect)
    y = x.copy()
    a(y, out=y)  # in place
    np.testing.assert_array_equal(y, expect)
    ro = np.empty_like(x)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        a(x, out=ro)
    with pytest.raises(ValueError, match=name):
        a(x, out=np.empty(3, np.float32))
    g = np.linspace(-1, 1, x.size).astype(np.float32)
    o2 = np.empty_like(x)
    assert a.backward(x, g, out=o2) is o2
    np.testing.assert_array_equal(o2, a.backward(x, g))
    o3 = np.empty_like(x)
    assert a.dx(x, out=o3) is o3


@pytest.mark.parametrize("name", NAMES)
def test_mismatched_shapes(name):
    a = iglu_np.ACTIVATIONS[name]
    with pytest.raises(ValueError, match=name):
        a.backward(np.ones(3), np.ones(4))


@pytest.mark.parametrize("name", NAMES)
def test_backward_is_grad_times_dx(name):
    a = iglu_np.ACTIVATIONS[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(257) * 3
    g = rng.standard_normal(257)
    np.testing.assert_array_equal(a.backward(x, g), g * a.dx(x))


@pytest.mark.parametrize("name", [n for n in NAMES if iglu_np.ACTIVATIONS[n].params])
def test_broadcast_parameters_and_backward_params(name):
    a = iglu_np.ACTIVATIONS[name]
    spec = a.spec
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 6)) * 2
    g = rng.standard_normal((4, 6))
    # one valid value set per row: the test values of each parameter, cycled
    psets = acc.param_sets(spec, np.float64)
    rows = [psets[i % len(psets)] for i in range(4)]
    params = {p: np.array([r[p] for r in rows])[:, None] for p in spec.param_names}
    got = a(x, **params)
    for i, r in enumerate(rows):
        np.testing.assert_array_equal(got[i], a(x[i], **r))
    dps = a.dparams(x, **params)
    bp = a.backward_params(x, g, **params)
    for p in spec.param_names:
        assert dps[p].shape == x.shape
        assert bp[p].shape == (4, 1)
        np.testing.assert_allclose(bp[p][:, 0], (g * dps[p]).sum(axis=1), rtol=1e-12, atol=1e-300)
    bs = a.backward_params(x, g)
    for p in spec.param_names:
        assert bs[p].shape == ()
        np.testing.assert_allclose(bs[p], (g * a.dparams(x)[p]).sum(), rtol=1e-12, atol=1e-300)


def _fd(f, x, h):
    return (f(x + h) - f(x - h)) / (2 * h)


@pytest.mark.parametrize("name", NAMES)
def test_derivatives_match_finite_differences(name):
    a = iglu_np.ACTIVATIONS[name]
    spec = a.spec
    x = np.array([-3.7, -1.9, -0.77, -0.21, 0.31, 0.88, 1.6, 2.7, 4.2])
    for params in acc.param_sets(spec, np.float64)[:5]:
        keep = [xi for xi in x if all(abs(xi - v) > 1e-3 for v in acc.special_values(spec, params))]
        xs = np.array(keep)
        h = 1e-6
        fd = _fd(lambda t: a(t, **params), xs, h)
        np.testing.assert_allclose(a.dx(xs, **params), fd, rtol=2e-6, atol=2e-8)
        for p in spec.param_names:

            def fp(v, p=p):
                q = dict(params)
                q[p] = v
                return a(xs, **q)

            v0 = params[p]
            hp = 1e-6 * max(1.0, abs(v0))
            par = spec.param(p)
            if not (par.contains(v0 - hp) and par.contains(v0 + hp)):
                continue
            if spec.check and (
                spec.check(**{**params, p: v0 - hp}) or spec.check(**{**params, p: v0 + hp})
            ):
                continue
            fdp = (fp(v0 + hp) - fp(v0 - hp)) / (2 * hp)
            np.testing.assert_allclose(a.dparams(xs, **params)[p], fdp, rtol=2e-6, atol=2e-8)


@pytest.mark.parametrize("name", NAMES)
def test_raw_ufuncs(name):
    a = iglu_np.ACTIVATIONS[name]
    assert isinstance(a.ufunc, np.ufunc) and isinstance(a.dx.ufunc, np.ufunc)
    assert isinstance(a.backward.ufunc, np.ufunc)
    assert a.ufunc.nin == 1 + len(a.params)
    assert a.backward.ufunc.nin == 2 + len(a.params)
    x = X.astype(np.float32)
    # Raw ufuncs, like numpy's own, may set floating-point flags (LLVM speculates a
    # division or an exp out of a branch whose result is then discarded): numpy warns
    # about them; the public functions run under errstate and never do.
    with np.errstate(all="ignore"):
        raw = a.ufunc(x, *[np.float32(p.default) for p in a.params])
    np.testing.assert_array_equal(raw, a(x))
    for p, u in a.dparams.ufuncs.items():
        assert isinstance(u, np.ufunc)


@pytest.mark.parametrize("name", NAMES)
def test_docstring_doctest_and_metadata(name):
    a = iglu_np.ACTIVATIONS[name]
    doc = a.__doc__
    assert ".. math::" in doc and a.formula in doc
    for p in a.params:
        assert p.name in doc and p.domain in doc
    assert ">>>" in doc, f"{name}: the spec needs an example"
    import inspect

    assert list(inspect.signature(a).parameters)[0] == "x"
    parser = doctest.DocTestParser()
    test = parser.get_doctest(doc, {"np": np, "iglu_np": iglu_np}, name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    res = runner.summarize(verbose=False)
    assert res.failed == 0 and res.attempted > 1


def test_registry_is_read_only_and_get():
    with pytest.raises(TypeError):
        iglu_np.ACTIVATIONS["x"] = None
    assert iglu_np.get("iglu") is iglu_np.iglu
    with pytest.raises(KeyError, match="known"):
        iglu_np.get("nope")


@pytest.mark.parametrize("name", NAMES)
def test_activation_pickles_by_name(name):
    a = iglu_np.ACTIVATIONS[name]
    assert pickle.loads(pickle.dumps(a)) is a


def test_z_gate_approx_gap_matches_paper():
    """The paper: max |Z - Z_approx| < 0.025; it is about 0.02264 at sigma x = -3.19."""
    t = np.linspace(-50, 50, 2_000_001)
    d = np.abs(iglu_np.z_gate(t) - iglu_np.z_approx(t))
    i = int(np.argmax(d))
    assert 0.0226 < d[i] < 0.0227 < 0.025
    assert abs(abs(t[i]) - 3.19) < 0.01
    # sigma only rescales x
    d2 = np.abs(iglu_np.z_gate(t, sigma=5.0) - iglu_np.z_approx(t, sigma=5.0))
    assert abs(d2.max() - d[i]) < 1e-6


def test_iglu_limits_and_negative_tail_gradient_positive():
    assert iglu_np.iglu(-np.inf, sigma=2.0) == pytest.approx(-1 / (2 * np.pi), rel=1e-15)
    assert iglu_np.iglu(np.inf) == np.inf
    for dt in (np.float32, np.float64):
        x = -np.logspace(0, 12, 200).astype(dt)
        g = iglu_np.iglu.dx(x)
        assert (g > 0).all()
        # the tail follows 2/(3 pi sigma^3 |x|^3)
        far = x < -1e3
        np.testing.assert_allclose(
            g[far], 2 / (3 * np.pi * np.abs(x[far].astype(float)) ** 3), rtol=1e-5
        )


finite = st.floats(-1e6, 1e6, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    x=hnp.arrays(np.float32, hnp.array_shapes(max_dims=3, max_side=5), elements=finite),
    strided=st.booleans(),
)
def test_property_shapes_strides_and_out(name, x, strided):
    a = iglu_np.ACTIVATIONS[name]
    if strided and x.ndim:
        x = x[..., ::2]
    r = a(x)
    assert r.shape == x.shape and r.dtype == np.float32
    np.testing.assert_array_equal(r.ravel(), a(np.ascontiguousarray(x).ravel()))
    out = np.empty(x.shape, np.float64)
    a(x, out=out)  # numpy casting into a wider out
    np.testing.assert_array_equal(out, r.astype(np.float64))


MONOTONE = [n for n in NAMES if iglu_np.ACTIVATIONS[n].spec.monotonic]


@pytest.mark.skipif(not MONOTONE, reason="no spec declares monotonic=True yet")
@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(MONOTONE or ["iglu"]),
    x=hnp.arrays(np.float64, 20, elements=st.floats(-1e4, 1e4)),
)
def test_property_monotonic(name, x):
    a = iglu_np.ACTIVATIONS[name]
    xs = np.sort(x)
    y = a(xs)
    assert (np.diff(y) >= 0).all()
