"""bfloat16 (``ml_dtypes.bfloat16``) on the CPU: computed in float32, rounded once.

Every entry point returns bfloat16 for bfloat16 operands, bit for bit the float32 result
rounded by ml_dtypes (``f(x.astype(float32)).astype(bfloat16)``), through the loops
(contiguous, at least ``MIN_SIZE`` elements) and through numpy's casts (other layouts,
small arrays); parameter gradients stay float32. Every one of the 65,536 bfloat16 inputs
is within 1 bfloat16 ulp of the exact value (mpmath-anchored, see :func:`_ulps`)."""

import math

import numpy as np
import pytest

import iglu_np
from iglu_np.backends.cpu import tiers

from . import accuracy as acc

ml_dtypes = pytest.importorskip(
    "ml_dtypes", reason="bfloat16 needs ml_dtypes (pip install 'iglu-np[bf16]')"
)
BF16 = np.dtype(ml_dtypes.bfloat16)
FI = ml_dtypes.finfo(BF16)
ALL = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(BF16)  # every bit pattern


def rounded(a):
    """float32 results rounded to bfloat16 by ml_dtypes (NaN's cast sets numpy's flag)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(a).astype(BF16)


def assert_bits(got, want):
    """Same dtype, shape and bits (any NaN for a NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    g, w = got.astype(np.float32), want.astype(np.float32)
    nan = np.isnan(w)
    assert np.array_equal(np.isnan(g), nan)
    bad = (g.view(np.uint32) != w.view(np.uint32)) & ~nan
    assert not bad.any(), f"{bad.sum()} differ, first at {np.flatnonzero(bad.ravel())[:5]}"


def sample(n, seed=0):
    """n bfloat16 values: a spread of magnitudes and every special value."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-8, 8, n))).astype(np.float32)
    x[:12] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 3.3e38, -3.3e38, 1.0, -1.0, 2.0]
    return x.astype(BF16)


# ------------------------------------------------------------------- bit equality
# The bfloat16 loops are one template around each activation's float32 loops: by default
# leaky_relu's (a parameter, quick to compile; test_bf16_out_and_layouts compiles them
# too), gelu's and elu's (7 and 15 s on a cold cache) with -m slow.
@pytest.mark.parametrize(
    "name,n",
    [
        ("gelu", 100),
        ("elu", 100),
        ("leaky_relu", 5000),
        pytest.param("gelu", 5000, marks=pytest.mark.slow),
        pytest.param("elu", 5000, marks=pytest.mark.slow),
    ],
    ids=["gelu-ufunc", "elu-ufunc", "leaky_relu-loops", "gelu-loops", "elu-loops"],
)
def test_bf16_entries_round_the_float32_result_once(name, n):
    f = iglu_np.ACTIVATIONS[name]
    x, g = sample(n), sample(n, seed=1)
    x32, g32 = x.astype(np.float32), g.astype(np.float32)
    with np.errstate(all="ignore"):
        assert_bits(f(x), rounded(f(x32)))
        assert_bits(f.dx(x), rounded(f.dx(x32)))
        assert_bits(f.backward(x, g), rounded(f.backward(x32, g32)))
        for p, d in f.dparams(x).items():
            assert_bits(d, rounded(f.dparams(x32)[p]))
        bp, bp32 = f.backward_params(x, g), f.backward_params(x32, g32)
        gx, gp = f.backward_all(x, g)
        assert_bits(gx, rounded(f.backward(x32, g32)))
    for p in f.param_names:  # float32 gradients, as for float16
        assert bp[p].dtype == np.float32 and gp[p].dtype == np.float32
        assert_bits(bp[p], bp32[p])
        assert_bits(gp[p], bp32[p])


@pytest.mark.parametrize("n", [100, 5000], ids=["ufunc", "loops"])
def test_bf16_out_and_layouts(n):
    f = iglu_np.leaky_relu
    x = sample(n).reshape(-1, 20 if n == 100 else 50)
    g = sample(n, seed=1).reshape(x.shape)
    x32, g32 = x.astype(np.float32), g.astype(np.float32)
    with np.errstate(all="ignore"):
        want = rounded(f(x32, negative_slope=0.5))
        o = np.empty_like(x)
        assert f(x, negative_slope=0.5, out=o) is o
        assert_bits(o, want)
        xc = x.copy()
        assert f(xc, negative_slope=0.5, out=xc) is xc  # in place
        assert_bits(xc, want)
        xf = np.asfortranarray(x)
        r = f(xf, negative_slope=0.5)
        assert_bits(r, want)
        assert r.flags.f_contiguous  # the layout of x, as numpy's ufuncs keep it
        assert_bits(f(x[::2, ::-1]), rounded(f(x32[::2, ::-1])))  # strided: numpy's casts
        o = np.empty_like(x)
        f.backward(x, g, out=o)
        assert_bits(o, rounded(f.backward(x32, g32)))
        o = np.empty_like(x)
        gx, _ = f.backward_all(x, g, out=o)
        assert gx is o
        assert_bits(o, rounded(f.backward(x32, g32)))
        o32 = np.empty(x.shape, np.float32)  # a float32 out receives the float32 result
        f(x, out=o32)
        assert_bits(o32, f(x32))
        # a broadcast grad_out (one row)
        assert_bits(f.backward(x, g[:1]), rounded(f.backward(x32, g32[:1])))
        assert_bits(
            f.backward_params(x, g[:1])["negative_slope"],
            f.backward_params(x32, g32[:1])["negative_slope"],
        )
        assert_bits(f.backward_all(x, g[:1])[0], rounded(f.backward(x32, g32[:1])))
        # a Python float grad_out is weak: bfloat16 stays bfloat16
        assert_bits(f.backward(x, 2.0), rounded(f.backward(x32, 2.0)))


@pytest.mark.parametrize("n", [100, 5000], ids=["ufunc", "loops"])
def test_bf16_beside_float32_or_float16_gives_float32(n):
    f = iglu_np.leaky_relu
    x, g = sample(n), sample(n, seed=1)
    x32, g32 = x.astype(np.float32), g.astype(np.float32)
    with np.errstate(all="ignore"):
        g16 = g32.astype(np.float16)
        assert_bits(f.backward(x, g32), f.backward(x32, g32))
        assert_bits(f.backward(x32, g), f.backward(x32, g32))
        assert_bits(f.backward(x, g16), f.backward(x32, g16.astype(np.float32)))
        assert_bits(f.backward_all(x, g32)[0], f.backward(x32, g32))
        assert_bits(f.backward_all(x, g16)[0], f.backward(x32, g16.astype(np.float32)))


def test_bf16_scalars_and_small_arrays():
    x = ml_dtypes.bfloat16(1.5)
    r = iglu_np.gelu(x)
    assert r.dtype == BF16 and r == rounded(iglu_np.gelu(np.float32(1.5)))
    a = np.array(-0.0, BF16)  # 0-d keeps the sign of zero
    assert_bits(iglu_np.gelu(a), rounded(iglu_np.gelu(np.float32(-0.0))))


def test_bf16_threaded_loops_match_one_thread():
    """The prange loops (two Numba threads, in a child so the machine's core count does not
    matter) give the one-thread bits."""
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np, numba, ml_dtypes, iglu_np\n"
        "from iglu_np.backends.cpu import tiers\n"
        "assert numba.get_num_threads() == 2\n"
        "BF16 = np.dtype(ml_dtypes.bfloat16)\n"
        "rng = np.random.default_rng(0)\n"
        "n = tiers.THRESHOLD + 12345\n"
        "x = (rng.standard_normal(n) * np.exp2(rng.integers(-8, 8, n))).astype(np.float32)\n"
        "x[:5] = [0.0, -0.0, np.inf, -np.inf, 1e-40]\n"
        "x = x.astype(BF16)\n"
        "want = iglu_np.relu(x.astype(np.float32)).astype(BF16)\n"
        "for _ in range(3):  # the first large call runs on one thread (the busy-machine guard)\n"
        "    got = iglu_np.relu(x)\n"
        "    assert got.dtype == BF16 and (got.view(np.uint16) == want.view(np.uint16)).all()\n"
        "print('ok')\n"
    )
    env = dict(os.environ, NUMBA_NUM_THREADS="2")
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "ok"


def test_bf16_rounding_matches_ml_dtypes():
    """The loops' rounding of float32 bits: ties to even, subnormals, overflow, NaNs."""
    from iglu_np.backends.cpu import loops as cpu_fast

    rng = np.random.default_rng(2)
    u = rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    u[:10] = [
        0x7F800001,
        0xFFC12345,
        0x7FFFFFFF,
        0xFFFFFFFF,
        0x7F7FFFFF,
        0xFF7FFFFF,
        0x00008000,
        0x00018000,
        0x00008001,
        0x3F808000,
    ]
    got = np.empty(u.size, np.uint16)
    cpu_fast.converter("narrow", False)(u, got)
    np.testing.assert_array_equal(got, rounded(u.view(np.float32)).view(np.uint16))
    back = np.empty(u.size, np.uint32)
    cpu_fast.converter("widen", False)(got, back)
    np.testing.assert_array_equal(back.view(np.float32), got.view(BF16).astype(np.float32))


# ------------------------------------------------------------------- accuracy
def _ulps(got, ref):
    """|got - ref| in bfloat16 ulps of ref (down to the subnormal spacing); NaN for NaN
    and an infinity for an infinity must match (else inf). ``ref`` is the float64 kernel,
    whose error (~1e-13 of a bfloat16 ulp) is far below what is measured; points above
    0.9 ulp are then measured again against mpmath (:func:`_confirm`)."""
    got = got.astype(np.float64)
    big = math.ldexp(1, FI.maxexp) - math.ldexp(1, FI.maxexp - FI.nmant - 2)
    ref_r = np.where(np.abs(ref) >= big, np.copysign(np.inf, ref), ref)
    with np.errstate(invalid="ignore"):
        e = np.frexp(np.abs(ref_r))[1]
        unit = np.maximum(np.ldexp(1.0, e - 1 - FI.nmant), float(FI.smallest_subnormal))
        err = np.abs(got - ref_r) / unit
    special = np.isnan(ref_r) | np.isnan(got) | np.isinf(ref_r) | np.isinf(got)
    same = (got == ref_r) | (np.isnan(got) & np.isnan(ref_r))
    return np.where(special, np.where(same, 0.0, np.inf), err)


def _confirm(spec, kind, x, got, params):
    """mpmath's errors (tests/accuracy.py, with the spec's scale for kinds that cancel)."""
    true, scale = acc.reference(spec, kind, x.astype(np.float64), params)
    return acc.ulp_errors(got, true, scale, FI, subnormal=True)


def _kernel(f, kind, params=None):
    params = params or {}
    if kind == "fwd":
        return lambda x: f(x, **params)
    if kind == "dx":
        return lambda x: f.dx(x, **params)
    return lambda x: f.dparams(x, **params)[kind[2:]]


def _check_all_inputs(name, kind):
    f = iglu_np.ACTIVATIONS[name]
    # the parameters as float32 holds them (bfloat16 computes in float32), as
    # tests/accuracy.py measures each dtype at its own parameter values
    params = {p: float(np.float32(v)) for p, v in f.defaults.items()}
    k = _kernel(f, kind, params)
    with np.errstate(all="ignore"):
        got = k(ALL)
        assert got.dtype == BF16
        # special values as float32 gives them, rounded (NaN, inf, the sign of zero)
        assert_bits(got, rounded(k(ALL.astype(np.float32))))
        ref = k(ALL.astype(np.float64))
    err = _ulps(got, ref)
    sus = np.flatnonzero(err > 0.9)
    if sus.size:
        e = _confirm(f.spec, kind, ALL[sus], got[sus].astype(np.float64), params)
        worst = int(np.argmax(e))
        assert e[worst] <= 1.0, (
            f"{name}.{kind} bfloat16: {e[worst]:.3g} ulp at x={float(ALL[sus[worst]])!r} "
            f"(got {float(got[sus[worst]])!r}, {sus.size} points checked with mpmath)"
        )


@pytest.fixture
def ufunc_path():
    """Every call through the ufunc and numpy's casts: the loops give the same bits
    (above), and they would compile ~60 kernels here."""
    old = tiers.MIN_SIZE
    tiers.set_min_size(1 << 30)
    yield
    tiers.set_min_size(old)


NAMES = sorted(iglu_np.ACTIVATIONS)
PARAM_KINDS = [(n, "d_" + p) for n in NAMES for p in iglu_np.ACTIVATIONS[n].param_names]


@pytest.mark.parametrize("name", NAMES)
def test_bf16_every_input_within_one_ulp(name, ufunc_path):
    for kind in ("fwd", "dx"):
        _check_all_inputs(name, kind)


@pytest.mark.slow
@pytest.mark.parametrize("name,kind", PARAM_KINDS, ids=[f"{n}-{k}" for n, k in PARAM_KINDS])
def test_bf16_every_input_within_one_ulp_param_kinds(name, kind, ufunc_path):
    _check_all_inputs(name, kind)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_bf16_loops_match_ufunc_on_every_input(name):
    f = iglu_np.ACTIVATIONS[name]
    with np.errstate(all="ignore"):
        for kind in ("fwd", "dx", *("d_" + p for p in f.param_names)):
            k = _kernel(f, kind)
            assert_bits(k(ALL), rounded(k(ALL.astype(np.float32))))
