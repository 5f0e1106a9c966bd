"""Bulk kernels (``define(bulk=..., bulk_domain=...)``): the CPU fast path runs a block
through them when every element is in the domain. They must give the exact kernels'
bits there (the ufuncs and the Numba CUDA kernels run the exact ones; the CuPy C++ takes
the bulk per element, checked by the host-compiled C++ in test_gpu_cxx), and a block with
any element outside must give the exact answer, in place too."""

import functools

import numba
import numpy as np
import pytest

import iglu_np
from iglu_np import backends
from iglu_np.backends.cpu import loops as cpu_fast
from iglu_np.backends.cpu import ufuncs as cpu

from . import accuracy as acc
from .test_fast_path import _same, fast_path_at_every_size  # noqa: F401 (autouse)

BULK = [n for n, a in iglu_np.ACTIVATIONS.items() if a.spec.bulk]
DT = [np.float32, np.float64]
IDS = ["f32", "f64"]
# kernel kinds -> the bulk key they use
_KEY = {"fwd": "f", "dx": "dx", "bwd": "dx"}


def test_some_activations_have_bulk_kernels():
    assert {"silu", "sigmoid", "softplus", "gelu"} <= set(BULK)


# Bulk domains left empty for a dtype on purpose (the fast path then runs the exact loop).
EMPTY = {
    ("xielu", "float64"): "float64 xIELU's derivative takes a double-word root form "
    "across 2 x0 <= x <= x0/2: a bulk kernel would need it too"
}


@functools.lru_cache(maxsize=None)  # the parameters are arguments: compile each kernel once
def _ufunc(fn, n_in, dtype):
    sig = numba.from_dtype(np.dtype(dtype))
    return numba.vectorize([sig(*([sig] * n_in))])(fn)


def _grid(dtype):
    """Dense, sorted points over every magnitude (so whole blocks are in the domain)."""
    mags = np.geomspace(np.finfo(dtype).tiny, 1e4, 40_000)
    lin = np.linspace(-750.0, 750.0, 30_001)
    x = np.concatenate([-mags[::-1], [0.0, -0.0], mags, lin]).astype(dtype)
    return np.sort(x)


def _in_domain(spec, x, pv, dtype):
    with np.errstate(all="ignore"):  # a x = 0 * inf is outside, not an error
        return _ufunc(cpu._module(spec)._b_domain, 1 + len(pv), dtype)(x, *pv) != 0


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("name", BULK)
def test_bulk_kernels_equal_exact_in_domain(name, dtype):
    spec = iglu_np.get(name).spec
    mod = cpu._module(spec)
    n_in = 1 + len(spec.params)
    exact = {"f": mod._f, "dx": mod._dx, **{p: getattr(mod, "_d_" + p) for p in spec.param_names}}
    for params in acc.param_sets(spec, dtype):
        pv = [dtype(params[p]) for p in spec.param_names]
        x = np.concatenate([_grid(dtype), acc.x_points(spec, dtype, params)])
        inside = _in_domain(spec, x, pv, dtype)
        xs = x[inside]
        if params == spec.defaults:
            if (name, np.dtype(dtype).name) in EMPTY:
                assert xs.size == 0, EMPTY[name, np.dtype(dtype).name]
            else:
                assert xs.size > 0.5 * x.size  # the domain is the bulk of the line
        assert not inside[~np.isfinite(x)].any()  # NaN and inf are never in it
        for key in spec.bulk:
            want = _ufunc(exact[key], n_in, dtype)(xs, *pv)
            # FP flags of a bulk kernel are nobody's: only the fast path runs it, and its
            # loops report none (LLVM may evaluate a discarded select side on any lane:
            # selu's expm1 of a large x); the exact kernels are the .ufunc's, kept strict
            with np.errstate(all="ignore"):
                got = _ufunc(getattr(mod, "_b_" + key), n_in, dtype)(xs, *pv)
            _same(got, want)


# The block logic is one template for both dtypes (the bulk kernels' bits per dtype are the
# test above): float32 by default, float64 with -m slow; each case compiles the fast path.
# A few activations by default (each compiles its fast-path loop on a cold cache; the
# bulk kernels' bits are checked for all above), every one with -m slow.
TAIL_DEFAULT = {"gelu", "xielu", "swish"}


@pytest.mark.parametrize(
    "dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)], ids=IDS
)
@pytest.mark.parametrize(
    "name", [n if n in TAIL_DEFAULT else pytest.param(n, marks=pytest.mark.slow) for n in BULK]
)
def test_fast_path_with_tail_elements_in_some_blocks(name, dtype):
    act = iglu_np.get(name)
    spec = act.spec
    n = 5 * cpu_fast.DOMAIN_BLOCK + 37
    rng = np.random.default_rng(7)
    x0 = (rng.standard_normal(n) * 8).astype(dtype)
    # blocks 0 and 2 hold elements outside any float domain (recomputed alone; block 2's
    # in two DOMAIN_CHUNKs, the later one past the first's, which must not end the
    # search), block 3 more than MAX_OUTSIDE (recomputed whole), block 4 (the partial last
    # one) one at its end; block 1 stays in the bulk
    x0[0] = np.nan
    x0[2 * cpu_fast.DOMAIN_BLOCK + 5] = -np.inf
    x0[2 * cpu_fast.DOMAIN_BLOCK + 6] = -1e4
    x0[2 * cpu_fast.DOMAIN_BLOCK + 7 * cpu_fast.DOMAIN_CHUNK + 3] = np.nan
    many = 3 * cpu_fast.DOMAIN_BLOCK + 9 + 2 * np.arange(cpu_fast.MAX_OUTSIDE + 1)
    x0[many] = np.where(np.arange(many.size) % 2 == 0, -1e4, np.nan)
    x0[-1] = np.inf
    g = rng.standard_normal(n).astype(dtype)
    for params in acc.param_sets(spec, dtype):
        pv = [dtype(params[p]) for p in spec.param_names]
        for kind in ("fwd", "dx", "bwd"):
            if _KEY[kind] not in spec.bulk:
                continue
            ins = (x0, g) if kind == "bwd" else (x0,)
            with np.errstate(all="ignore"):
                want = act._ufunc(kind)(*ins, *pv)
            # loop_<kind> itself (act.backward may take the fused reduction instead)
            _same(backends.run(act._p, kind, ins, params, None), want)
            # in place (out = x; out = grad_out or x for bwd): the loops' in-place
            # variants, which read the domain before a block is written
            for j in range(len(ins)):
                cp = [a.copy() for a in ins]
                backends.run(act._p, kind, tuple(cp), params, cp[j])
                _same(cp[j], want)
                # loop_<kind> itself given out aliasing an input (the backend never does)
                cp = [a.copy() for a in ins]
                cpu_fast.plan(name, kind, np.dtype(dtype))[0](*cp, cp[j], 0, n, *pv)
                _same(cp[j], want)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_vmath_bulk_functions_equal_the_full_ones_in_range(dtype):
    """exp_normal (what the bulk kernels call on the CPU) gives exp's bits wherever exp is
    normal."""
    from iglu_np import _vmath

    fi = np.finfo(dtype)
    # exp normal, and 2^k finite (k = maxexp - 1 at most)
    lo, hi = np.log(fi.tiny) * 0.9999, (fi.maxexp - 0.5) * np.log(2.0) * 0.9999
    x = np.concatenate([np.linspace(lo, hi, 200_001), [0.0, -0.0, lo, hi]]).astype(dtype)
    _same(_ufunc(_vmath.exp_normal, 1, dtype)(x), _ufunc(_vmath.exp, 1, dtype)(x))


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_log1p_unit_is_within_0_65_ulp(dtype):
    """_math.log1p_unit (softplus's log1p(exp(-|y|)), bulk and exact alike) against mpmath
    on [0, 1]: subnormal and tiny x give x, 0 gives 0, NaN gives NaN."""
    import mpmath as mp

    from iglu_np import _math

    f = _ufunc(cpu._rebinder()(_math.log1p_unit), 1, dtype)
    fi = np.finfo(dtype)
    rng = np.random.default_rng(3)
    x = np.concatenate(
        [
            np.geomspace(fi.smallest_subnormal, 1.0, 3000),
            rng.random(3000),
            [
                0.0,
                1.0,
                2.0**-60,
                2.0**-59,
                1 / 3,
                0.9621459,
                0.9858711779843162,
                0.94472706,
                0.9841174358173821,
            ],
        ]
    )  # the worst found: 0.58 / 0.61 ulp
    x = x.astype(dtype)
    y = f(x)
    with mp.workdps(40):
        ref = [mp.log1p(mp.mpf(float(v))) for v in x]
        err = acc.ulp_errors(y, ref, None, dtype, subnormal=True)
    assert err.max() <= 0.65, (err.max(), x[int(np.argmax(err))])
    tiny = x < 2.0**-60
    _same(y[tiny], x[tiny])
    with np.errstate(invalid="ignore"):
        assert np.isnan(f(np.array([np.nan], dtype)))[0]


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_exp_expm1_neg_gives_exp_and_expm1_bits(dtype):
    """One reduction and one polynomial for both: exp's and expm1's bits wherever exp is
    normal and x <= 0, across expm1's clamp (below it expm1 is -1) and at -0.0."""
    from iglu_np import _vmath

    @numba.njit
    def both(x, e, m):
        for i in range(x.size):
            e[i], m[i] = _vmath.exp_expm1_neg(x[i])

    fi = np.finfo(dtype)
    lo = np.log(fi.tiny) * 0.9999
    clamp = -20.0 if dtype == np.float32 else -41.6
    c = np.asarray(clamp, dtype)
    near = [np.nextafter(c, -np.inf), c, np.nextafter(c, 0)]
    x = np.concatenate(
        [
            np.linspace(lo, 0.0, 300_001),
            -np.geomspace(fi.tiny, 50.0, 100_001),
            np.linspace(clamp - 1, clamp + 1, 10_001),
            near,
            [0.0, -0.0, lo],
        ]
    ).astype(dtype)
    e, m = np.empty_like(x), np.empty_like(x)
    both(x, e, m)
    _same(e, _ufunc(_vmath.exp, 1, dtype)(x))
    _same(m, _ufunc(_vmath.expm1, 1, dtype)(x))
