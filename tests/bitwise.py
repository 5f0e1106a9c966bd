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
