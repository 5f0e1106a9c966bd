"""Bit-for-bit comparison of results, every NaN counted as one.

IEEE 754 leaves a NaN result's sign and payload unspecified, and the compiler's operand
order decides them: ``g * dx`` with both operands NaN gives the first one's bits, and a
vectorised loop may commute them where the numpy ufunc does not. So two paths that agree
on every value (a chunked Dask call and the whole-array call, the ufunc and the njit loop)
are equal when their bits are, NaN wherever NaN, whichever NaN it is.
"""

import numpy as np

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(a):
    """The bit patterns of ``a``, every NaN replaced by the default one."""
    a = np.ascontiguousarray(a)
    if a.dtype.kind in "fc" or a.dtype.name == "bfloat16":
        nan = np.isnan(a.astype(np.float64) if a.dtype.name == "bfloat16" else a)
        if nan.any():
            a = a.copy()
            a[nan] = np.nan
    return a.view(_UINT[a.dtype.itemsize])


def assert_same_bits(got, want, err_msg=""):
    """``got`` equals ``want`` in dtype, shape and bits (NaN anywhere ``want`` has NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(bits(got), bits(want), err_msg=err_msg)


def full_range(dtype, lin=800.0, n_mags=4000, n_lin=4001):
    """Inputs over the whole float range of ``dtype``: +-magnitudes from the smallest
    subnormal to the maximum, a linear grid on [-lin, lin], +-0, +-inf and NaN."""
    fi = np.finfo(dtype)
    mags = np.append(
        np.geomspace(float(fi.smallest_subnormal), float(fi.max) / 2, n_mags), float(fi.max)
    )
    x = np.concatenate(
        [mags, -mags, np.linspace(-lin, lin, n_lin), [0.0, -0.0, np.inf, -np.inf, np.nan]]
    )
    return x.astype(dtype)
