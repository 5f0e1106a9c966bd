"""The Python -> C++ kernel translator (iglu_np.backends.codegen.cxx_translate) on its own.

A synthetic kernel that uses every construct of the kernel language (tuple returns and
unpacking, locals first assigned in branches, elif chains, Numba's max/min with NaN,
abs of -0.0, selected coefficient tuples, is_f32 branches, math.copysign/isinf, nested
selects and boolean logic) is translated, host-compiled with g++ and compared bit for bit
with the same Python compiled by the CPU backend's Numba rebinder. Unsupported Python is
rejected with the function's name and line.
"""

from __future__ import annotations

import ctypes
import math
import subprocess

import numpy as np
import pytest

from iglu_np._math import horner, is_f32
from iglu_np._spec import kernel
from iglu_np.backends.codegen import cxx
from iglu_np.backends.codegen import cxx_translate as cxx_gen

from . import gpu_helpers as H

_C_POS = (0.5, -0.25, 0.125, 1.0 / 3.0)
_C_NEG = (1.5, 0.75, -0.0625, 2.0 / 7.0)
_SCALE = 1.25


@kernel
def _pair(a, b):
    T = type(a)
    return a * b + T(_SCALE), a - b


@kernel
def _constructs(x, s):
    T = type(x)
    p, q = _pair(x, s)
    if abs(x) > T(4.0):
        r = p / q
    elif x < T(0.0):
        r = max(x, s)  # Numba: select(s > x, s, x): NaN in x gives s, NaN in s gives x
    else:
        r = min(x, T(0.5))
    c = _C_POS if x > T(0.0) else _C_NEG
    h = horner(r, c)
    if is_f32(x):
        k = T(1.5)
    else:
        k = T(2.5)
    z = T(0.0) if not (x == x) else -abs(x)
    w = math.copysign(h, z) + k * z  # the sign of z = -abs(-0.0) shows
    ok = (x > T(-2.0) and not math.isinf(x)) or x != x
    return w if ok else -x + q


def _numba(fn):
    from iglu_np.backends.cpu.ufuncs import _rebinder

    return _rebinder()(fn)


def _host(fn, tmp_path):
    ok, gxx = H.gxx_status()
    if not ok:
        pytest.skip(gxx)
    body = cxx_gen.translate([fn])
    name = cxx_gen.function_name(fn)
    loops = "".join(
        f'extern "C" void run_{ct}(const {ct}* x, const {ct}* s, {ct}* y, long n) {{\n'
        f"  for (long i = 0; i < n; ++i) y[i] = ({ct})iglu_np::{name}(x[i], s[i]);\n}}\n"
        for ct in ("float", "double")
    )
    src = cxx.prelude() + "\nnamespace iglu_np {\n" + body + "\n}\n" + loops
    cpp, so = tmp_path / "k.cpp", tmp_path / "k.so"
    cpp.write_text(src)
    r = subprocess.run(
        [
            gxx,
            "-std=c++17",
            "-shared",
            "-fPIC",
            "-Wall",
            "-Wextra",
            "-O2",
            "-ffp-contract=off",
            str(cpp),
            "-o",
            str(so),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == "", f"g++ warnings:\n{r.stderr}"
    return ctypes.CDLL(str(so))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_translated_kernel_is_bit_identical_to_numba(tmp_path, dt):
    lib = _host(_constructs, tmp_path)
    f = _numba(_constructs)
    xs = np.concatenate(
        [np.linspace(-6, 6, 241), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e300]]
    )
    ss = np.array([0.7, -1.3, np.nan, 0.0])
    with np.errstate(all="ignore"):  # -1e300 and 1e-40 overflow/underflow in float32
        x, s = (a.astype(dt).ravel() for a in np.meshgrid(xs, ss))
        want = np.array([f(a, b) for a, b in zip(x, s)], dtype=dt)
    got = np.empty_like(x)
    ptr = ctypes.POINTER(ctypes.c_float if dt == np.float32 else ctypes.c_double)
    fn = getattr(lib, "run_float" if dt == np.float32 else "run_double")
    fn.argtypes = [ptr, ptr, ptr, ctypes.c_long]
    fn(x.ctypes.data_as(ptr), s.ctypes.data_as(ptr), got.ctypes.data_as(ptr), x.size)
    same = (got.view(f"u{got.itemsize}") == want.view(f"u{want.itemsize}")) | (
        np.isnan(got) & np.isnan(want)
    )
    bad = np.nonzero(~same)[0]
    assert bad.size == 0, [(x[i], s[i], got[i], want[i]) for i in bad[:5]]


def test_translation_shape():
    src = cxx_gen.translate([_constructs])
    # callees first, each once; a local assigned only in branches is declared before them
    pair, top = cxx_gen.function_name(_pair), cxx_gen.function_name(_constructs)
    assert src.index(f"auto {pair}(") < src.index(f"auto {top}(")
    assert src.count(f"IGLU_NP_HOST_DEVICE auto {pair}(") == 1
    assert "IGLU_NP_TYPE(" in src and "if constexpr ((sizeof(x) == 4))" in src
    # the selected coefficient tuple becomes per-coefficient selects, literals exact
    assert f"? {0.5!r} : {1.5!r}" in src and repr(1.0 / 3.0) in src
    assert "iglu_np::py_max(x, s)" in src and "iglu_np::py_abs(x)" in src


def _while_loop(x):
    T = type(x)
    while x > T(1.0):
        x = x * T(0.5)
    return x


def _libm_only(x):
    return math.lgamma(x)


def _keyword(x):
    return max(x, 0.0, key=None)


def _unknown(x):
    return x * NOT_DEFINED  # noqa: F821


@pytest.mark.parametrize(
    "fn, msg",
    [
        (_while_loop, r"_while_loop \(line \d+\): unsupported statement While"),
        (_libm_only, r"_libm_only \(line \d+\): math.lgamma has no C\+\+ counterpart"),
        (_keyword, r"_keyword \(line \d+\): keyword arguments are not supported"),
        (_unknown, r"_unknown \(line \d+\): unknown name 'NOT_DEFINED'"),
    ],
)
def test_unsupported_python_is_named(fn, msg):
    with pytest.raises(cxx_gen.TranslationError, match=msg):
        cxx_gen.translate([fn])


def test_literals_round_trip():
    for v in (0.1, 1e-300, 5e-324, 1.7976931348623157e308, 3.0, -2.5, 2**40):
        assert float(eval(cxx_gen.literal(v).rstrip("L"))) == v  # noqa: S307 (own output)
    assert cxx_gen.literal(np.float32(0.1)) == f"float({float(np.float32(0.1))!r})"
    assert cxx_gen.literal(math.inf) == "iglu_np::inf_d()"
    assert cxx_gen.literal(2**40).endswith("LL")
