"""iglu_np.nn autodiff: every op and whole models against central finite differences
(float64), activation parameters included."""

import numpy as np
import pytest

import iglu_np
from iglu_np.nn import MLP, Tensor, no_grad
from iglu_np.nn import autodiff as ad
from iglu_np.nn.layers import ActivationLayer, param_transform


def numgrad(f, arr, h=1e-6):
    g = np.zeros_like(arr)
    for i in np.ndindex(arr.shape):
        old = arr[i]
        step = h * max(1.0, abs(old))
        arr[i] = old + step
        fp = f()
        arr[i] = old - step
        fm = f()
        arr[i] = old
        g[i] = (fp - fm) / (2 * step)
    return g


def check_grads(loss_fn, leaves, rtol=1e-5, atol=1e-7):
    for t in leaves:
        t.grad = None
    loss_fn().backward()
    for t in leaves:
        num = numgrad(lambda: float(loss_fn().data), t.data)
        assert t.grad is not None, t.name
        assert t.grad.shape == t.data.shape, t.name
        np.testing.assert_allclose(t.grad, num, rtol=rtol, atol=atol, err_msg=t.name)


rng = np.random.default_rng(0)


def leaf(*shape, name=""):
    return Tensor(rng.normal(size=shape), requires_grad=True, name=name)


def test_matmul_linear_add_mul_sum_mean_reshape():
    a, b, c = leaf(4, 3, name="a"), leaf(3, 5, name="b"), leaf(5, name="c")
    d = leaf(1, 5, name="d")
    check_grads(lambda: ad.sum(ad.mul(ad.add(ad.matmul(a, b), c), d)), [a, b, c, d])
    w, bias = leaf(3, 2, name="w"), leaf(2, name="bias")
    check_grads(lambda: ad.mean(ad.mul(ad.linear(a, w, bias), ad.linear(a, w, bias))), [a, w, bias])
    check_grads(lambda: ad.sum(ad.mul(ad.mean(a, axis=0), ad.sum(a, axis=0))), [a])
    check_grads(lambda: ad.sum(ad.mul(ad.reshape(a, (2, 6)), ad.reshape(a, (2, 6)))), [a])


def test_add_unbroadcasts_to_each_shape():
    a, s = leaf(3, 4), leaf(1, 1)
    (a + s).sum().backward()
    assert s.grad.shape == (1, 1) and s.grad[0, 0] == pytest.approx(12.0)
    np.testing.assert_array_equal(a.grad, np.ones((3, 4)))


@pytest.mark.parametrize("weighted", [False, True])
def test_log_softmax_and_cross_entropy(weighted):
    z = leaf(6, 4, name="z")
    y = np.array([0, 1, 3, 3, 2, 1])
    w = np.array([1.0, 3.0, 0.5, 2.0]) if weighted else None
    check_grads(lambda: ad.cross_entropy(z, y, w), [z])
    # value: weighted mean of the negative log-likelihood, computed directly
    lp = z.data - np.log(np.exp(z.data).sum(1, keepdims=True))
    wy = np.ones(6) if w is None else w[y]
    expected = -(wy * lp[np.arange(6), y]).sum() / wy.sum()
    assert float(ad.cross_entropy(z, y, w).data) == pytest.approx(expected, rel=1e-12)
    coef = leaf(6, 4, name="coef")
    check_grads(lambda: ad.sum(ad.mul(ad.log_softmax(z), coef)), [z, coef])


def test_cross_entropy_is_stable_for_huge_logits():
    z = Tensor(np.array([[1e4, 0.0], [0.0, -1e4]]), requires_grad=True)
    loss = ad.cross_entropy(z, np.array([0, 1]))
    loss.backward()
    assert np.isfinite(float(loss.data)) and np.isfinite(z.grad).all()


def test_mse_softplus_sigmoid():
    p, t = leaf(5, 2, name="p"), leaf(5, 2, name="t")
    check_grads(lambda: ad.mse_loss(p, t), [p, t])
    check_grads(lambda: ad.sum(ad.mul(ad.softplus(p), ad.sigmoid(t))), [p, t])


def test_softplus_never_reaches_zero():
    out = ad.softplus(np.array([-1e4, -800.0], dtype=np.float32))
    assert (out.data > 0).all()


def test_dropout_scales_and_masks():
    x = Tensor(np.ones((200, 50)), requires_grad=True)
    out = ad.dropout(x, 0.25, np.random.default_rng(1))
    kept = out.data != 0
    assert 0.7 < kept.mean() < 0.8
    np.testing.assert_allclose(out.data[kept], 1 / 0.75)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad, out.data)  # gradient = mask * scale
    assert ad.dropout(x, 0.25, None, training=False).data is x.data
    with pytest.raises(ValueError, match="dropout"):
        ad.dropout(x, 1.0, np.random.default_rng(1))


def test_no_grad_records_nothing():
    a = leaf(2, 2)
    with no_grad():
        out = ad.matmul(a, a)
    assert not out.requires_grad and out._ctx is None
    with pytest.raises(RuntimeError, match="does not require"):
        out.backward()
    with pytest.raises(RuntimeError, match="scalar"):
        ad.matmul(a, a).backward()


def test_gradient_accumulates_over_shared_use():
    a = leaf(3)
    ad.sum(ad.add(ad.mul(a, a), a)).backward()
    np.testing.assert_allclose(a.grad, 2 * a.data + 1)


def test_array_module_is_numpy_for_numpy_and_scalars():
    assert ad.array_module(np.ones(2), 1.0, None, Tensor(np.ones(1))) is np
    assert ad.to_host([1.0, 2.0]).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("name", ["iglu", "iglu_approx"])
@pytest.mark.parametrize("per_unit", [False, True])
def test_activation_op_gradients_x_and_params(name, per_unit):
    x = leaf(5, 4, name="x")
    layer = ActivationLayer(
        name, 4, params={"sigma": 0.8}, learnable=True, per_unit=per_unit, dtype=np.float64
    )
    coef = rng.normal(size=(5, 4))
    check_grads(lambda: ad.sum(ad.mul(layer(x), coef)), [x, *layer.parameters()])


# Several activations, through whole models: every parameter, activation ones included.
MODEL_CASES = [
    ("iglu", {"sigma": 0.7}, True),
    ("iglu_approx", {"sigma": 2.0}, True),
    ("iglu", {"sigma": 5.0}, False),
    ("gelu", {}, True),
    ("silu", {}, True),
    ("mish", {}, True),
    ("elu", {}, True),
    ("softplus", {}, True),
    ("xielu", {}, True),
    ("prelu", {}, True),
]


@pytest.mark.parametrize(
    "name,params,learn", MODEL_CASES, ids=[c[0] + ("-learn" if c[2] else "") for c in MODEL_CASES]
)
def test_whole_model_matches_finite_differences(name, params, learn):
    if name not in iglu_np.ACTIVATIONS:
        pytest.skip(f"{name} not registered yet")
    act = iglu_np.get(name)
    learn = learn and bool(act.param_names)
    model = MLP(
        5,
        [6, 4],
        3,
        activation=name,
        activation_params=params,
        learnable=learn,
        per_unit=True,
        dtype=np.float64,
        rng=1,
    )
    if learn:
        assert any(getattr(p, "group", "") == "activation" for p in model.parameters())
    X = rng.normal(size=(7, 5))
    y = rng.integers(0, 3, 7)
    w = np.array([1.0, 2.0, 0.5])
    check_grads(
        lambda: ad.cross_entropy(model(Tensor(X)), y, w), model.parameters(), rtol=2e-5, atol=1e-7
    )


def test_iglu_sigma_reparameterisation_keeps_domain():
    act = iglu_np.get("iglu")
    fwd, inv = param_transform(act, "sigma")
    raw = inv(np.array([1e-3, 0.5, 10.0]), {})
    np.testing.assert_allclose(fwd(Tensor(raw), {}).data, [1e-3, 0.5, 10.0], rtol=1e-12)
    # An optimiser can push raw anywhere; sigma stays strictly positive (float32 too).
    for dt in (np.float32, np.float64):
        assert (fwd(Tensor(np.array([-1e6, -100.0, 0.0], dtype=dt)), {}).data > 0).all()


def test_activation_layer_errors():
    with pytest.raises(ValueError, match="no parameter"):
        ActivationLayer("iglu", 3, params={"alpha": 1.0})
    with pytest.raises(ValueError, match="cannot learn"):
        ActivationLayer("iglu", 3, learnable=["beta"])
    with pytest.raises(ValueError, match="domain"):
        ActivationLayer("iglu", 3, params={"sigma": -1.0})
    with pytest.raises(KeyError, match="unknown activation"):
        ActivationLayer("nope", 3)


def test_xielu_reparameterisation_follows_the_paper():
    if "xielu" not in iglu_np.ACTIVATIONS:
        pytest.skip("xielu not registered yet")
    act = iglu_np.get("xielu")
    layer = ActivationLayer(
        act,
        3,
        params={"alpha_p": 0.8, "alpha_n": 0.8},
        learnable=["alpha_p", "alpha_n"],
        dtype=np.float64,
    )
    vals = layer.param_values()
    assert vals["alpha_p"] == pytest.approx(0.8) and vals["alpha_n"] == pytest.approx(0.8)
    beta = vals["beta"]
    # alpha_n = beta + softplus(a_n): pushing the raw value far down leaves alpha_n > beta.
    layer.raw["alpha_n"].data[...] = -50.0
    assert float(layer.param_values()["alpha_n"]) > float(beta)
