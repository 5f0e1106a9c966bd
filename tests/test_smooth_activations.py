"""Conventions and edge cases of the sigmoidal, softplus and ELU families that the
generic mpmath sweep does not pin down: kink conventions, limits, the exact softplus
branch test, and agreement with PyTorch where PyTorch is accurate."""

import math

import mpmath
import numpy as np
import pytest

import iglu_np

with mpmath.workdps(50):
    LAMBDA = mpmath.mpf("1.0507009873554804934193349852946")
    LAMBDA_ALPHA = float(LAMBDA * mpmath.mpf("1.6732632423543772848170429916717"))
    LAMBDA = float(LAMBDA)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kink_derivatives_follow_pytorch(dtype):
    z = np.array([0.0, -0.0], dtype=dtype)
    # PyTorch's elu_backward takes the negative branch at x <= 0.
    np.testing.assert_array_equal(iglu_np.elu.dx(z, alpha=2.5), dtype(2.5))
    np.testing.assert_array_equal(iglu_np.celu.dx(z, alpha=2.5), dtype(1.0))
    np.testing.assert_array_equal(iglu_np.selu.dx(z), dtype(LAMBDA_ALPHA))
    np.testing.assert_array_equal(iglu_np.selu.dx(np.array([1.0], dtype)), dtype(LAMBDA))
    np.testing.assert_array_equal(iglu_np.elu.dparams(z, alpha=2.5)["alpha"], dtype(0.0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_signed_zero_and_infinite_limits(dtype):
    x = np.array([-np.inf, -0.0, np.inf], dtype=dtype)
    for name in ("silu", "mish", "elu", "celu", "selu", "tanhshrink"):
        y = iglu_np.get(name)(x)
        assert np.signbit(y[1]) and y[1] == 0, name  # f(-0) = -0
        assert not np.isnan(y).any(), name
    assert iglu_np.silu(x)[0] == 0 and iglu_np.mish(x)[0] == 0
    assert iglu_np.selu(x)[0] == dtype(-LAMBDA_ALPHA)
    # xSiLU: the gate tends to -alpha, so f(-inf) = +inf for alpha > 0, SiLU's 0 at 0.
    assert iglu_np.xsilu(x, alpha=0.5)[0] == np.inf
    assert iglu_np.xsilu(x, alpha=0.0)[0] == 0
    assert iglu_np.xsilu.dx(x, alpha=0.5)[0] == dtype(-0.5)
    assert iglu_np.xsilu.dx(x, alpha=0.5)[2] == dtype(1.5)


def test_tails_keep_relative_accuracy():
    # Where the textbook forms round to 0 or cancel completely.
    assert iglu_np.sigmoid(-700.0) == pytest.approx(math.exp(-700), rel=1e-15)
    assert iglu_np.sigmoid.dx(40.0) == pytest.approx(math.exp(-40), rel=1e-14)
    assert iglu_np.tanh.dx(20.0) == pytest.approx(4 * math.exp(-40), rel=1e-14)
    assert iglu_np.tanhshrink(np.float32(1e-4)) == pytest.approx(1e-12 / 3, rel=1e-6)
    assert iglu_np.softplus(-700.0) == pytest.approx(math.exp(-700), rel=1e-15)
    # beta*x = -745.1 is not a double: exp's argument must be carried beyond it.
    b, x = 3.0, -248.37
    want = mpmath.exp(mpmath.mpf(b) * mpmath.mpf(x)) / b
    assert iglu_np.softplus(x, beta=b) == pytest.approx(float(want), rel=1e-14)
    # softplus d/dbeta for beta*x near the threshold: ~ -(1 + y) e^-y / beta^2, no cancellation.
    y = 19.5
    got = iglu_np.softplus.dparams(np.array([y]))["beta"][0]
    u = mpmath.exp(-mpmath.mpf(y))
    assert got == pytest.approx(float(-(y * u / (1 + u) + mpmath.log1p(u))), rel=1e-14)
    # celu's alpha-derivative ~ -q^2/2 near 0.
    q = -1e-5
    assert iglu_np.celu.dparams(np.array([q]))["alpha"][0] == pytest.approx(-q * q / 2, rel=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softplus_threshold_test_is_exact(dtype):
    """The identity branch applies iff beta*x > threshold holds for the exact product,
    also where the rounded product equals the threshold."""
    beta, thr = dtype(3.0), dtype(20.0)
    x0 = dtype(thr / beta)
    found = 0
    for x in (np.nextafter(x0, dtype(-np.inf)), x0, np.nextafter(x0, dtype(np.inf))):
        with mpmath.workdps(40):  # the product of two doubles needs 106 bits
            exact = mpmath.mpf(float(beta)) * mpmath.mpf(float(x))
        y = iglu_np.softplus(np.array([x]), beta=beta, threshold=thr)[0]
        d = iglu_np.softplus.dx(np.array([x]), beta=beta, threshold=thr)[0]
        if exact > thr:
            assert y == x and d == 1
        else:
            with mpmath.workdps(40):
                want = mpmath.log1p(mpmath.exp(exact)) / float(beta)
                dwant = 1 / (1 + mpmath.exp(-exact))
            assert y == pytest.approx(float(want), rel=float(4 * np.finfo(dtype).eps))
            assert d == pytest.approx(float(dwant), rel=float(4 * np.finfo(dtype).eps))
        found += (dtype(beta * x) == thr) and exact != thr
    assert found, "no rounded product hit the threshold: the case is not exercised"


def test_agrees_with_pytorch_where_pytorch_is_accurate():
    torch = pytest.importorskip(
        "torch", reason="the comparison with torch needs torch (CI installs it)"
    )
    F = torch.nn.functional
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-8, 8, 300), [-3.0, -1.0, 0.5, 2.0, 7.5]])
    cases = {
        "sigmoid": (torch.sigmoid, {}),
        "tanh": (torch.tanh, {}),
        "silu": (F.silu, {}),
        "mish": (F.mish, {}),
        "elu": (lambda t: F.elu(t, alpha=1.7), {"alpha": 1.7}),
        "celu": (lambda t: F.celu(t, alpha=0.6), {"alpha": 0.6}),
        "selu": (F.selu, {}),
        "softplus": (
            lambda t: F.softplus(t, beta=2.0, threshold=10.0),
            {"beta": 2.0, "threshold": 10.0},
        ),
    }
    xt = x[np.abs(x) > 2]  # tanhshrink: torch's x - tanh(x) cancels near 0
    for name, (fn, p) in cases.items():
        t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        y = fn(t)
        y.sum().backward()
        np.testing.assert_allclose(
            iglu_np.get(name)(x, **p), y.detach().numpy(), rtol=1e-13, err_msg=name
        )
        if (
            name != "celu"
        ):  # torch's celu backward is off by up to ~3e-6 relative (0.99999996 at x = 0, alpha = 0.6)
            # atol: torch forms 1 - tanh^2 and 1 - sigma, accurate only in absolute terms
            np.testing.assert_allclose(
                iglu_np.get(name).dx(x, **p), t.grad.numpy(), rtol=1e-12, atol=1e-15, err_msg=name
            )
    np.testing.assert_allclose(
        iglu_np.tanhshrink(xt), F.tanhshrink(torch.tensor(xt)).numpy(), rtol=1e-13
    )
