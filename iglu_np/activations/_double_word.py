"""Double-word helpers of the GELU family: constants split into hi + lo pairs per dtype, and
the exact sum of two floats."""

import struct
from decimal import Decimal, localcontext

from .._spec import kernel


def _f32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


def split_constant(digits: str):
    """(hi64, lo64, hi32, lo32): a constant split into hi + lo pairs for both dtypes."""
    with localcontext() as ctx:
        ctx.prec = 60
        d = Decimal(digits)
        hi64 = float(d)
        hi32 = _f32(hi64)
        return hi64, float(d - Decimal(hi64)), hi32, _f32(float(d - Decimal(hi32)))


@kernel
def two_sum(a, b):
    """``a + b = s + e`` exactly (Knuth; no ordering assumption)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e
