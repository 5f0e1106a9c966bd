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
