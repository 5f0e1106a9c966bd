"""The gated forms ``act(gate) * up``: their sources' formulas, layouts, clamps, the fused
CPU loops against the composition from the activation's kernels, gradients and errors."""

import math

import numpy as np
import pytest

import iglu_np
from iglu_np._gated import Gated
from tests.bitwise import assert_same_bits

RNG = np.random.default_rng(55)
# a few activations of each kind: bulk kernels (silu, gelu, swish), parameters (iglu,
# xielu, swish), piecewise (relu), and sigmoid for glu; the slow tests run every one
FEW = ["silu", "iglu", "xielu", "relu", "gelu", "sigmoid", "swish", "softplus"]


def _x(shape, dt, scale=3.0):
    x = (RNG.standard_normal(shape) * scale).astype(dt)
    flat = x.reshape(-1)
    flat[:4] = [np.nan, np.inf, -np.inf, 0.0]
    return x


# --------------------------------------------------------------------------- formulas
@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize(
    "name, act, first",
    [
        ("swiglu", "silu", True),
        ("geglu", "gelu", True),
        ("geglu_tanh", "gelu_tanh", True),
        ("reglu", "relu", True),
        ("iglu_glu", "iglu", True),
        ("xielu_glu", "xielu", True),
        ("glu", "sigmoid", False),
    ],
)
def test_named_form_is_its_activation_times_up_bit_for_bit(name, act, first, dt):
    x = _x((5, 12), dt)
    a, b = x[:, :6], x[:, 6:]
    gate, up = (a, b) if first else (b, a)
    with np.errstate(all="ignore"):
        want = iglu_np.get(act)(gate) * up
    assert_same_bits(iglu_np.GATED[name](x), want)
    assert_same_bits(iglu_np.GATED[name](gate, up), want)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_swiglu_oai_follows_gpt_oss(dt):
    # modeling_gpt_oss.py: gate, up = x[..., ::2], x[..., 1::2]; gate.clamp(max=limit);
    # up.clamp(-limit, limit); (up + 1) * gate * sigmoid(gate * alpha)
    x = (RNG.standard_normal((4, 16)) * 6).astype(dt)
    gate = np.minimum(x[..., ::2], 7.0)
    up = np.clip(x[..., 1::2], -7.0, 7.0)
    want = (up + 1) * iglu_np.swish(gate, beta=1.702)
    assert_same_bits(iglu_np.swiglu_oai(x), want)
    mp = pytest.importorskip("mpmath")
    ref = [
        float((mp.mpf(float(u)) + 1) * mp.mpf(float(v)) / (1 + mp.exp(-mp.mpf(1.702) * float(v))))
        for u, v in zip(up.ravel(), gate.ravel())
    ]
    # swish's 4 ulp, up + 1's and the product's roundings: 5 ulp, up to 2 eps each
    np.testing.assert_allclose(iglu_np.swiglu_oai(x).ravel(), ref, rtol=10 * np.finfo(dt).eps)
    assert_same_bits(
        iglu_np.swiglu_oai(x, alpha=1.0, limit=3.0),
        (np.clip(x[..., 1::2], -3, 3) + 1) * iglu_np.silu(np.minimum(x[..., ::2], 3.0)),
    )


def test_limit_clamps_the_gate_above_and_up_both_ways():
    # DeepSeek-V4's and GLM's silu(min(gate, limit)) * clamp(up, -limit, limit)
    x = np.linspace(-20, 20, 64).reshape(4, 16)
    got = iglu_np.swiglu(x, limit=5.0)
    want = iglu_np.silu(np.minimum(x[:, :8], 5.0)) * np.clip(x[:, 8:], -5.0, 5.0)
    assert_same_bits(got, want)


def test_interleaved_takes_even_positions_as_the_gate():
    x = _x((3, 4, 10), np.float64)
    got = iglu_np.silu.glu(x, layout="interleaved")
    assert_same_bits(got, iglu_np.silu(x[..., ::2]) * x[..., 1::2])
    got = iglu_np.silu.glu(x, axis=1, layout="interleaved")
    assert_same_bits(got, iglu_np.silu(x[:, ::2]) * x[:, 1::2])
    with pytest.raises(ValueError, match="even length"):
        iglu_np.silu.glu(x, axis=0)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("layout", ["halves", "interleaved"])
def test_split_along_any_axis(axis, layout):
    x = _x((4, 6, 8), np.float32)
    n = x.shape[axis]
    idx = [slice(None)] * 3
    if layout == "halves":
        ia, ib = slice(0, n // 2), slice(n // 2, n)
    else:
        ia, ib = slice(0, n, 2), slice(1, n, 2)
    a = x[tuple(idx[: axis % 3] + [ia])]
    b = x[tuple(idx[: axis % 3] + [ib])]
    with np.errstate(all="ignore"):
        assert_same_bits(iglu_np.iglu.glu(x, axis=axis, layout=layout), iglu_np.iglu(a) * b)


# --------------------------------------------------------------------------- peers
def _torch():
    return pytest.importorskip("torch")


def test_glu_matches_torch_glu():
    t = _torch()
    x = _x((8, 32), np.float32)[1:]  # no NaN/inf rows needed here
    got = iglu_np.glu(x)
    want = t.nn.functional.glu(t.from_numpy(x), dim=-1).numpy()
    np.testing.assert_allclose(got, want, rtol=4e-7, atol=1e-37)
    got0 = iglu_np.glu(x.T.copy(), axis=0)
    np.testing.assert_allclose(
        got0, t.nn.functional.glu(t.from_numpy(x.T.copy()), dim=0), rtol=4e-7, atol=1e-37
    )


@pytest.mark.parametrize(
    "name, fn",
    [
        ("swiglu", lambda F, a: F.silu(a)),
        ("geglu", lambda F, a: F.gelu(a)),
        ("geglu_tanh", lambda F, a: F.gelu(a, approximate="tanh")),
        ("reglu", lambda F, a: F.relu(a)),
    ],
)
def test_and_mul_forms_match_vllm_definitions(name, fn):
    # vLLM's *_and_mul: act(x[..., :d]) * x[..., d:], computed here in float64 by torch
    t = _torch()
    # |x| < 3: torch's float64 GELUs lose their relative accuracy further out (-0.0 for
    # a true -6e-18), where iglu_np's keep theirs
    x = RNG.uniform(-3, 3, (16, 64)).astype(np.float32)
    xt = t.from_numpy(x.astype(np.float64))
    d = x.shape[-1] // 2
    want = (fn(t.nn.functional, xt[..., :d]) * xt[..., d:]).numpy()
    np.testing.assert_allclose(iglu_np.GATED[name](x), want, rtol=5e-7, atol=1e-30)


def test_swiglu_backward_matches_torch_autograd_of_silu_times_up():
    t = _torch()
    x = (RNG.standard_normal((8, 40)) * 3).astype(np.float64)
    go = RNG.standard_normal((8, 20))
    xt = t.from_numpy(x).requires_grad_()
    (t.nn.functional.silu(xt[:, :20]) * xt[:, 20:]).backward(t.from_numpy(go))
    got, want = iglu_np.swiglu.backward(x, go), xt.grad.numpy()
    np.testing.assert_allclose(got[:, 20:], want[:, 20:], rtol=1e-14)  # go * silu(gate)
    # d_gate = go * up * silu'(gate): torch's float64 sig * (1 + x * (1 - sig)) cancels
    # near the root of silu' (x ~ -1.28), so it is compared in the scale of those terms
    a = x[:, :20]
    sig = 1 / (1 + np.exp(-a))
    scale = np.abs(go * x[:, 20:]) * (sig + np.abs(a) * sig * (1 - sig))
    assert np.all(np.abs(got[:, :20] - want[:, :20]) <= 1e-14 * scale)


def test_rounding_twice_reproduces_torch_bfloat16_silu_times_up_for_every_gate():
    t = _torch()
    ml = pytest.importorskip("ml_dtypes")
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    gate = bits.view(ml.bfloat16)
    up = RNG.standard_normal(gate.size).astype(ml.bfloat16)
    x = np.stack([gate, up])  # halves along axis 0
    gt = t.from_numpy(bits.view(np.int16)).view(t.bfloat16)
    ut = t.from_numpy(up.view(np.int16)).view(t.bfloat16)
    torch_twice = (t.nn.functional.silu(gt) * ut).view(t.int16).numpy().view(ml.bfloat16)
    # iglu_np's own unfused act(a) * b, rounded twice, bit for bit
    with np.errstate(all="ignore"):
        ours_unfused = (iglu_np.silu(gate).astype(np.float32) * up.astype(np.float32)).astype(
            ml.bfloat16
        )
    got = iglu_np.swiglu(x, axis=0, rounding="twice")[0]
    assert_same_bits(got, ours_unfused)
    # torch: the same wherever the two bfloat16 silu agree (both round a float32 value)
    same_act = iglu_np.silu(gate).view(np.uint16) == t.nn.functional.silu(gt).view(
        t.int16
    ).numpy().view(np.uint16)
    nan = np.isnan(got.astype(np.float32))
    agree = same_act & ~nan
    assert agree.sum() > 0.99 * gate.size
    np.testing.assert_array_equal(got.view(np.uint16)[agree], torch_twice.view(np.uint16)[agree])
    # once: float32 math rounded once, within half a bfloat16 ulp of the float32 product
    once = iglu_np.swiglu(x, axis=0)[0].astype(np.float32)
    with np.errstate(all="ignore"):
        f32 = iglu_np.silu(gate.astype(np.float32)) * up.astype(np.float32)
        assert_same_bits(once.astype(ml.bfloat16), f32.astype(ml.bfloat16))


# --------------------------------------------------------------------------- fused vs composed
def _both(g, *args, **kw):
    """The fused CPU loops' result and the composition's (backend= takes the latter)."""
    return g(*args, **kw), g(*args, backend="cpu", **kw)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("name", FEW)
def test_fused_loops_equal_the_composition(name, dt):
    _fused_equals_composed(name, dt)


@pytest.mark.slow
@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("name", [n for n in iglu_np.ACTIVATIONS if n not in FEW])
def test_fused_loops_equal_the_composition_for_every_activation(name, dt):
    _fused_equals_composed(name, dt)


def _fused_equals_composed(name, dt):
    g = iglu_np.get(name).glu
    for layout in ("halves", "interleaved"):
        for limit in (None, 1.5):
            for x, go in [
                (_x((6, 10), dt), _x((6, 5), dt)),
                (_x((6, 3, 4), dt), _x((6, 3, 2), dt)),
            ]:
                kw = dict(layout=layout, limit=limit)
                a, b = _both(g, x, **kw)
                assert_same_bits(a, b, f"{name} fwd {kw}")
                a, b = g.backward_all(x, go, **kw), g.backward_all(x, go, backend="cpu", **kw)
                assert_same_bits(a[0], b[0], f"{name} bwd {kw}")
                assert a[1].keys() == b[1].keys()
                for k in a[1]:
                    assert a[1][k].dtype == b[1][k].dtype == dt
                    np.testing.assert_allclose(a[1][k], b[1][k], rtol=1e-5, atol=1e-30)
            up = _x((6, 10), dt)
            a, b = (
                g.backward(x := _x((6, 10), dt), go := _x((6, 10), dt), up, limit=limit),
                g.backward(x, go, up, limit=limit, backend="cpu"),
            )
            assert_same_bits(a[0], b[0])
            assert_same_bits(a[1], b[1])


def test_fused_loops_run_threaded_and_agree_with_one_thread(monkeypatch):
    from iglu_np.backends.cpu import tiers

    x = _x((64, 4096), np.float32)
    go = _x((64, 2048), np.float32)
    one = iglu_np.swish.glu.backward_all(x, go, beta=1.3)
    monkeypatch.setattr(tiers, "THRESHOLD", 1)
    for _ in range(3):  # the busy-machine guard's first call is on one thread
        many = iglu_np.swish.glu.backward_all(x, go, beta=1.3)
    assert_same_bits(many[0], one[0])
    assert_same_bits(many[1]["beta"], one[1]["beta"])


def test_out_receives_the_result_and_may_not_overlap_silently():
    x = _x((4, 8), np.float32)
    out = np.empty((4, 4), np.float32)
    assert iglu_np.swiglu(x, out=out) is out
    assert_same_bits(out, iglu_np.swiglu(x))
    # out over the gate's own memory: computed as if out were separate
    y = x.copy()
    want = iglu_np.swiglu(y)
    iglu_np.swiglu(y, out=y[:, :4])
    assert_same_bits(y[:, :4], want)
    with pytest.raises(ValueError, match="shape"):
        iglu_np.swiglu(x, out=np.empty((4, 8), np.float32))


# --------------------------------------------------------------------------- gradients
def _numeric(f, x, eps=1e-6):
    d = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        d[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return d


@pytest.mark.parametrize("name", ["swiglu", "iglu_glu", "xielu_glu", "glu", "swiglu_oai"])
def test_gradients_match_central_differences(name):
    g = iglu_np.GATED[name]
    rng = np.random.default_rng(7)
    x = rng.uniform(-3, 3, (3, 8))
    x[0, 0] = 8.5  # a clamped gate for swiglu_oai (zero gradient there)
    go = rng.standard_normal((3, 4))
    want = _numeric(lambda v: float(np.sum(go * g(v))), x)
    np.testing.assert_allclose(g.backward(x, go), want, rtol=1e-6, atol=1e-8)
    grads = g.backward_params(x, go)
    for p, v in grads.items():
        d0 = g.defaults[p]
        num = (np.sum(go * g(x, **{p: d0 + 1e-6})) - np.sum(go * g(x, **{p: d0 - 1e-6}))) / 2e-6
        np.testing.assert_allclose(v, num, rtol=1e-5, atol=1e-8, err_msg=p)


def test_float32_with_a_parameter_beyond_float32_computes_as_the_activation_does():
    # float32(1e39) is inf: the fused loops refuse it and the activation widens to float64
    x = _x((3, 8), np.float32)
    with np.errstate(all="ignore"):
        want = iglu_np.iglu(x[:, :4], sigma=1e39) * x[:, 4:]
    assert_same_bits(iglu_np.iglu_glu(x, sigma=1e39), want)


def test_per_channel_parameter_gradient_has_the_parameter_shape():
    x = RNG.uniform(-3, 3, (5, 3, 8))
    go = RNG.standard_normal((5, 3, 4))
    sigma = np.array([[0.5], [1.0], [2.0]])
    grads = iglu_np.iglu_glu.backward_params(x, go, sigma=sigma)
    assert grads["sigma"].shape == (3, 1)
    for c in range(3):
        one = iglu_np.iglu_glu.backward_params(x[:, c], go[:, c], sigma=float(sigma[c, 0]))
        np.testing.assert_allclose(grads["sigma"][c, 0], one["sigma"], rtol=1e-12)


def test_up_given_broadcasts_and_gradients_reduce_to_each_shape():
    gate = RNG.standard_normal((4, 6))
    up = RNG.standard_normal((6,))
    go = RNG.standard_normal((4, 6))
    assert_same_bits(iglu_np.swiglu(gate, up), iglu_np.silu(gate) * up)
    dg, du = iglu_np.swiglu.backward(gate, go, up)
    assert dg.shape == gate.shape and du.shape == up.shape
    np.testing.assert_allclose(du, np.sum(go * iglu_np.silu(gate), axis=0), rtol=1e-14)


# --------------------------------------------------------------------------- 16-bit and arrays
@pytest.mark.parametrize("dtname", ["float16", "bfloat16"])
def test_half_inputs_compute_in_float32_and_round_once(dtname):
    dt = (
        np.dtype(pytest.importorskip("ml_dtypes").bfloat16)
        if dtname == "bfloat16"
        else np.dtype(np.float16)
    )
    x = (RNG.standard_normal((4, 16)) * 3).astype(dt)
    got = iglu_np.swiglu(x)
    assert got.dtype == dt
    x32 = x.astype(np.float32)
    assert_same_bits(got, iglu_np.swiglu(x32).astype(dt))
    go = RNG.standard_normal((4, 8)).astype(dt)
    gx = iglu_np.swiglu.backward(x, go)
    assert gx.dtype == dt
    assert_same_bits(gx, iglu_np.swiglu.backward(x32, go.astype(np.float32)).astype(dt))


def test_torch_and_jax_host_arrays_come_back_as_their_type():
    t = _torch()
    x = _x((4, 8), np.float32)
    r = iglu_np.swiglu(t.from_numpy(x))
    assert isinstance(r, t.Tensor)
    assert_same_bits(r.numpy(), iglu_np.swiglu(x))
    jnp = pytest.importorskip("jax.numpy")
    r = iglu_np.swiglu(jnp.asarray(x))
    assert type(r).__module__.startswith("jax")
    assert_same_bits(np.asarray(r), iglu_np.swiglu(x))


def test_dask_arrays_compute_lazily_with_the_same_bits():
    da = pytest.importorskip("dask.array")
    x = _x((8, 16), np.float32)
    d = da.from_array(x, chunks=(4, 4))  # the split axis across chunks
    r = iglu_np.swiglu(d)
    assert isinstance(r, da.Array)
    assert_same_bits(r.compute(), iglu_np.swiglu(x))
    go = _x((8, 8), np.float32)
    gx = iglu_np.swiglu.backward(d, da.from_array(go, chunks=4))
    assert_same_bits(gx.compute(), iglu_np.swiglu.backward(x, go))


# --------------------------------------------------------------------------- names, errors
def test_every_activation_and_alias_has_a_gated_form():
    for name in [*iglu_np.ACTIVATIONS, *iglu_np.ALIASES]:
        g = iglu_np.get(name).glu
        assert isinstance(g, Gated) and g.name == f"{name}_glu"
        assert iglu_np.get_gated(f"{name}_glu").name == g.name
    q = iglu_np.quick_gelu.glu
    x = _x((2, 6), np.float64)
    assert_same_bits(q(x), iglu_np.swish(x[:, :3], beta=1.702) * x[:, 3:])


def test_named_forms_are_listed_with_their_sources():
    assert {
        "swiglu",
        "geglu",
        "geglu_tanh",
        "reglu",
        "iglu_glu",
        "xielu_glu",
        "glu",
        "swiglu_oai",
    } <= set(iglu_np.GATED)
    for g in iglu_np.GATED.values():
        assert g.source and g.__doc__ and getattr(iglu_np, g.name) is g
    import pickle

    assert pickle.loads(pickle.dumps(iglu_np.swiglu)) is iglu_np.swiglu


@pytest.mark.parametrize(
    "call, err, match",
    [
        (lambda x: iglu_np.swiglu(x[:, :7]), ValueError, "even length"),
        (lambda x: iglu_np.swiglu(x, layout="pairs"), ValueError, "layout"),
        (lambda x: iglu_np.swiglu(x, limit=0.0), ValueError, "limit must be > 0"),
        (lambda x: iglu_np.swiglu(x, limit=math.nan), ValueError, "limit must be > 0"),
        (lambda x: iglu_np.swiglu(x, limit="7"), TypeError, "limit must be a number"),
        (lambda x: iglu_np.swiglu(x, rounding="thrice"), ValueError, "rounding"),
        (lambda x: iglu_np.swiglu(x, sigma=1.0), TypeError, "unexpected keyword"),
        (lambda x: iglu_np.iglu_glu(x, sigma=-1.0), ValueError, "sigma"),
        (lambda x: iglu_np.swiglu(x, axis=2), ValueError, "out of bounds"),
        (lambda x: iglu_np.swiglu(np.float64(1.0)), ValueError, "0-d"),
        (lambda x: iglu_np.swiglu.backward(x, x, x, out=x.copy()), TypeError, "pair"),
    ],
)
def test_bad_input_gets_a_clear_error(call, err, match):
    with pytest.raises(err, match=match):
        call(np.ones((3, 8)))


# --------------------------------------------------------------------------- trainer
@pytest.mark.parametrize("activation", ["swiglu", "iglu_glu"])
def test_trainer_fits_digits_with_gated_hidden_layers(activation, tmp_path):
    pytest.importorskip("sklearn")
    from iglu_np.nn import MLPClassifier, load, load_digits

    X, y = load_digits()
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    tr, te = idx[:1300], idx[1300:]
    m = MLPClassifier(
        hidden_layer_sizes=(64,),
        activation=activation,
        max_iter=60,
        random_state=0,
        learnable_activation=activation == "iglu_glu",
        n_iter_no_change=60,
    )
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # not converged within max_iter: fine here
        m.fit(X[tr], y[tr])
    # the gated layer reads 2 * 64 outputs of its linear layer
    assert m.model_.layers[0].n_out == 128
    assert m.score(X[te], y[te]) > 0.93
    m.save(tmp_path / "m.npz")
    m2 = load(tmp_path / "m.npz")
    np.testing.assert_array_equal(m2.predict(X[te]), m.predict(X[te]))


def test_bench_gated_reports_each_form_against_its_limits():
    from iglu_np.cli import bench_gated

    data = bench_gated.run(["swiglu", "swiglu_oai"], n=8192, repeats=1, min_time=0.0, torch=False)
    assert [r["form"] for r in data["rows"]] == ["swiglu", "swiglu_oai"]
    for r in data["rows"]:
        assert r["fwd_x_limit"] == pytest.approx(r["fwd_s"] / r["fwd_limit_s"])
        assert r["bwd_x_limit"] == pytest.approx(r["bwd_s"] / r["bwd_limit_s"])
    assert len(data["limits"]["fwd_runs"]) == 3  # before each form and after the last
    text = bench_gated.markdown(data)
    assert "| swiglu_oai |" in text and ("Quiet machine" in text or "NOT quiet" in text)
