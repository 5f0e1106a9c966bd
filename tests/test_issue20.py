"""Regressions of issue #20 (a demanding user's probes) and the classes of fault behind them.

Each ``test_row_<n>`` is one row of the issue's table as a fixed case; the property tests
further down draw dtypes, shapes, strides, overlaps and parameter magnitudes around them."""
import numpy as np
import pytest

import iglu_np

NAMES = list(iglu_np.ACTIVATIONS)


# --------------------------------------------------------------------- row 1: overlapping out=
def _overlap_cases(n, dt):
    """(x, g, out) triples where out partially overlaps x or g (shifted views both ways)."""
    for shift in (1, -1):
        b = np.linspace(-3, 3, n + 1).astype(dt)
        lo, hi = (b[1:], b[:-1]) if shift > 0 else (b[:-1], b[1:])
        yield b, lo, hi, lo    # out is x, grad_out shifted
        yield b, lo, hi, hi    # out is grad_out, x shifted
        yield b, lo, lo.copy(), hi  # out overlaps x only


@pytest.mark.parametrize("name", ["relu", "iglu", "gelu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [7, 3000])
def test_row_1_backward_out_overlapping_grad_out(name, dtype, n):
    a = iglu_np.ACTIVATIONS[name]
    for rep in range(10):  # small arrays switch to the compiled loop after a few calls
        for b, x, g, o in _overlap_cases(n, dtype):
            b0 = b.copy()
            want = a.backward(x.copy(), g.copy())
            got = a.backward(x, g, out=o)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {dtype} n={n} rep={rep}")
            b[:] = b0


# --------------------------------------------------- row 2: parameters beyond float32's range
F32_CASES = [
    ("iglu", "sigma", 1e39), ("iglu", "sigma", 1e-45), ("z_gate", "sigma", 1e39),
    ("squareplus", "b", 1e39), ("gelu_a", "a", 1e39), ("leaky_relu", "negative_slope", 1e39),
    ("leaky_relu", "negative_slope", -1e39), ("celu", "alpha", 1e39), ("celu", "alpha", 1e-40),
    ("elu", "alpha", 1e39), ("xsilu", "alpha", 1e39), ("xatlu", "alpha", 1e39),
    ("softplus", "beta", 1e39), ("softplus", "beta", 1e-39), ("hardshrink", "lambd", 1e39),
    ("xielu", "alpha_p", 1e39), ("xiprelu", "beta", -1e39), ("prelu", "weight", 1e39),
]


@pytest.mark.parametrize("name,p,v", F32_CASES)
def test_row_2_float32_parameter_beyond_range_computes_in_float64(name, p, v):
    """A parameter float32 cannot hold gives the float64 answer rounded to float32."""
    a = iglu_np.ACTIVATIONS[name]
    x32 = np.float32([0.0, 1.0, -1.0, 3.5, -0.25, 1e-30, -1e30])
    x64 = x32.astype(np.float64)
    g32 = np.float32([1.0, -2.0, 0.5, 1.0, 3.0, 1.0, 1e-10])
    with np.errstate(all="ignore"):  # the float64 answers may overflow float32 (-> inf)
        pairs = [(a(x32, **{p: v}), a(x64, **{p: v})),
                 (a.dx(x32, **{p: v}), a.dx(x64, **{p: v})),
                 (a.backward(x32, g32, **{p: v}), a.backward(x64, g32.astype(np.float64), **{p: v}))]
        pairs += [(a.dparams(x32, **{p: v})[k], a.dparams(x64, **{p: v})[k]) for k in a.param_names]
        pairs += [(a.backward_params(x32, g32, **{p: v})[k],
                   a.backward_params(x64, g32.astype(np.float64), **{p: v})[k]) for k in a.param_names]
        out = np.empty_like(x32)
        pairs.append((a(x32, **{p: v}, out=out), a(x64, **{p: v})))
        for got, want in pairs:
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got, np.asarray(want).astype(np.float32))
    # the case
    np.testing.assert_allclose(iglu_np.iglu(np.float32([0, 1, -1]), sigma=1e39),
                               np.float32([0, 1, -3.1830988e-40]), rtol=1e-6, atol=0)
