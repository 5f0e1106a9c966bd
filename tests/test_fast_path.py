"""The CPU backend's loops (njit/prange, iglu_np.backends.cpu.loops; chosen by
iglu_np.backends.cpu.backend) against the ufuncs.

Both compile the same scalar kernels without fastmath, so results must agree bit for bit:
on the accuracy sweep's points (so tests/accuracy.py's bounds carry over), threaded vs
single-thread, odd sizes, out= aliasing, and Fortran-ordered or transposed arrays (the
loop runs over their memory and the result keeps their layout). Layouts the fast path does
not take (gaps, broadcasting, float16, partial overlap) must still give the ufunc's answer.
"""

import numpy as np
import pytest

import iglu_np
from iglu_np import backends
from iglu_np.backends.cpu import backend as cpu_backend
from iglu_np.backends.cpu import loops as cpu_fast
from iglu_np.backends.cpu import tiers

from . import accuracy as acc
from .bitwise import assert_same_bits

QUICK = ["iglu", "iglu_approx", "z_gate"]
ALL = list(iglu_np.ACTIVATIONS)
DT = [np.float32, np.float64]
IDS = ["f32", "f64"]


@pytest.fixture(autouse=True)
def fast_path_at_every_size():
    # small arrays normally take the ufunc (no njit compile); here the loops are under test
    old = tiers.MIN_SIZE
    cpu_backend.set_min_size(0)
    yield
    cpu_backend.set_min_size(old)


@pytest.fixture
def threads_always():
    old = tiers.THRESHOLD
    cpu_backend.set_threshold(0)
    yield
    cpu_backend.set_threshold(old)


@pytest.fixture
def threads_never():
    old = tiers.THRESHOLD
    cpu_backend.set_threshold(1 << 62)
    yield
    cpu_backend.set_threshold(old)


def _same(a, b):
    """Identical bits (so +0/-0 differ), every NaN counted as one (bitwise.py)."""
    assert_same_bits(a, b)


def _fast_as_ufunc(act, kind):
    """A ufunc-like callable that goes through the public (fast) path."""

    def f(x, *pv):
        params = dict(zip(act.param_names, pv))
        if kind == "fwd":
            return act(x, **params)
        if kind == "dx":
            return act.dx(x, **params)
        return backends.run(act._p, kind, (x,), params, None)

    return f


def _check_sweep(name, dtype):
    act = iglu_np.get(name)
    spec = act.spec
    for kind in acc.kinds(spec):
        fast = _fast_as_ufunc(act, kind)
        for params in acc.param_sets(spec, dtype):
            x = acc.x_points(spec, dtype, params)
            pv = [dtype(params[p]) for p in spec.param_names]
            with np.errstate(all="ignore"):
                want = act._ufunc(kind)(x, *pv)
            got = fast(x, *pv)
            _same(got, want)
            assert cpu_backend._flat_in(x, np.dtype(dtype), x.shape) is not None  # took fast path


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("name", QUICK)
def test_sweep_points_match_ufunc(name, dtype):
    _check_sweep(name, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("name", ALL)
def test_sweep_points_match_ufunc_all(name, dtype):
    _check_sweep(name, dtype)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_iglu_accuracy_through_fast_path(dtype):
    spec = iglu_np.ACTIVATIONS["iglu"].spec
    for kind in acc.kinds(spec):
        r = acc.measure(spec, kind, dtype, ufunc=_fast_as_ufunc(iglu_np.iglu, kind))
        assert r.worst <= acc.tolerance(spec, kind), (kind, str(r))


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("n", [1, 7, 63, 64, 65, 4095, 4097, 100_003])
def test_threaded_equals_single_thread(n, dtype, request):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 10).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    a = iglu_np.iglu
    res = []
    for fix in ("threads_never", "threads_always"):
        request.getfixturevalue(fix)
        res.append(
            (
                a(x, sigma=0.7),
                a.dx(x, sigma=0.7),
                a.backward(x, g, sigma=0.7),
                a.backward_params(x, g, sigma=0.7)["sigma"],
            )
        )
    for u, v in zip(*res):
        _same(u, v)
    _same(res[0][0], a.ufunc(x, dtype(0.7)))
    _same(res[0][2], a.backward.ufunc(x, g, dtype(0.7)))


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_threaded_blocks_cover_every_element_at_any_skew(dtype, request):
    # Threaded blocks after the first start on the output's first cache line (cpu_fast._skew):
    # at each offset from a line every element is computed once, out= and in place alike.
    from iglu_np.backends.cpu import loops as cpu_fast

    request.getfixturevalue("threads_always")
    n = 2 * cpu_fast.TASK_BLOCK + 37
    rng = np.random.default_rng(3)
    buf = (rng.standard_normal(n + 64) * 10).astype(dtype)
    gbuf = rng.standard_normal(n + 64).astype(dtype)
    a = iglu_np.iglu
    for off in (0, 1, 3, 15):
        x, g = buf[off : off + n], gbuf[2 * off + 1 : 2 * off + 1 + n]
        want, want_b = a.ufunc(x, dtype(0.7)), a.backward.ufunc(x, g, dtype(0.7))
        out = np.empty(n + 64, dtype)[off + 2 : off + 2 + n]
        _same(a(x, sigma=0.7, out=out), want)
        _same(a.backward(x, g, sigma=0.7, out=out), want_b)
        y = buf.copy()[off : off + n]
        _same(a(y, sigma=0.7, out=y), want)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_backward_params_matches_ufunc_sum(dtype):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((37, 129)) * 3).astype(dtype)
    g = rng.standard_normal(x.shape).astype(dtype)
    got = iglu_np.iglu.backward_params(x, g, sigma=1.3)["sigma"]
    full = iglu_np.iglu.dparams.ufuncs["sigma"](x.astype(np.float64), 1.3) * g
    assert got.shape == () and got.dtype == dtype
    np.testing.assert_allclose(float(got), full.sum(), rtol=1e-5 if dtype == np.float32 else 1e-12)
    # an empty array reduces to 0
    e = np.empty(0, dtype)
    assert float(iglu_np.iglu.backward_params(e, e)["sigma"]) == 0.0


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_layouts_outside_the_fast_path(dtype):
    rng = np.random.default_rng(2)
    base = (rng.standard_normal((64, 33)) * 4).astype(dtype)
    u = iglu_np.iglu.ufunc
    strided = base[:, ::2]
    _same(iglu_np.iglu(strided, sigma=0.5), u(strided, dtype(0.5)))
    _same(iglu_np.iglu(base[::-1]), u(base[::-1], dtype(1.0)))  # negative strides
    fortran = np.asfortranarray(base)  # fast path, but x and out laid out differently: not
    o = np.empty(base.shape, dtype)
    _same(iglu_np.iglu(fortran, out=o), u(fortran, dtype(1.0)))
    col = (np.abs(rng.standard_normal((64, 1))) + 0.1).astype(dtype)  # broadcast parameter
    _same(iglu_np.iglu(base, sigma=col), u(base, col))
    full = (np.abs(rng.standard_normal(base.shape)) + 0.1).astype(dtype)  # same-shape parameter
    _same(iglu_np.iglu(base, sigma=full), u(base, full))
    _same(
        iglu_np.iglu(base, sigma=full.astype(np.float64)),
        u(base, full.astype(np.float64), dtype=dtype),
    )
    bp = iglu_np.iglu.backward_params(base, base, sigma=col)["sigma"]
    assert bp.shape == col.shape
    h = base.astype(np.float16)
    assert iglu_np.iglu(h).dtype == np.float16
    _same(iglu_np.iglu(base[0, 0]), u(base[0, 0], dtype(1.0)))  # 0-d


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("threads", ["threads_never", "threads_always"])
def test_strided_broadcast_and_mismatched_out_take_the_loops_through_buffers(
    dtype, threads, request, no_ufunc
):
    """Operands the loops cannot run over in place (strided or reversed x, a grad_out that
    broadcasts, out= laid out unlike x, partial overlap, float16 or mixed float dtypes):
    numpy's buffered iterator feeds them the loops in contiguous chunks (no ufunc call:
    no_ufunc), with the ufunc's bits, dtype, result layout and overlap semantics."""
    request.getfixturevalue(threads)
    rng = np.random.default_rng(4)
    base = (rng.standard_normal((300, 70)) * 4).astype(dtype)
    a = iglu_np.iglu
    u, ub = a.ufunc, a.backward.ufunc
    s = dtype(0.5)
    with np.errstate(all="ignore"):
        cases = [
            (lambda: a(base[:, ::2], sigma=0.5), u(base[:, ::2], s)),
            (lambda: a(base[::-1, ::-1], sigma=0.5), u(base[::-1, ::-1], s)),
            (lambda: a(base.T[::3], sigma=0.5), u(base.T[::3], s)),
            (lambda: a.dx(base[::2], sigma=0.5), a.dx.ufunc(base[::2], s)),
            (lambda: a.backward(base, base[0], sigma=0.5), ub(base, base[0], s)),
            (lambda: a.backward(base, np.array(dtype(1.5)), sigma=0.5), ub(base, dtype(1.5), s)),
            (lambda: a.backward(base, dtype(-2.0), sigma=0.5), ub(base, dtype(-2.0), s)),
            (lambda: a.backward(base[:, :1], base, sigma=0.5), ub(base[:, :1], base, s)),
            (
                lambda: a(base, sigma=0.5, out=np.empty(base.shape, dtype, order="F")),
                u(base, s, out=np.empty(base.shape, dtype, order="F")),
            ),
        ]
        if dtype == np.float32:  # float16 in: cast in the buffers, computed in float32
            h = base.astype(np.float16)
            cases += [
                (lambda: a(h, sigma=0.5), u(h.astype(dtype), s).astype(np.float16)),
                (
                    lambda: a(h, sigma=0.5, out=np.empty_like(h)),
                    u(h.astype(dtype), s).astype(np.float16),
                ),
                (lambda: a.backward(h, base, sigma=0.5), ub(h.astype(dtype), base, s)),
            ]
        else:  # float32 beside float64: computed in float64
            f = base.astype(np.float32)
            cases += [
                (lambda: a.backward(base, f, sigma=0.5), ub(base, f.astype(dtype), s)),
                (lambda: a.dx(f[::2], sigma=np.float64(0.5)), a.dx.ufunc(f[::2], np.float32(0.5))),
            ]
    for call, want in cases:
        got = call()
        _same(got, want)
        assert got.strides == want.strides
    # partial overlap (shifted views of one buffer): numpy's semantics, the inputs read first
    b = (rng.standard_normal(5001) * 4).astype(dtype)
    bb = b.copy()
    a(b[:-1], sigma=0.5, out=b[1:])
    with np.errstate(all="ignore"):
        u(bb[:-1], s, out=bb[1:])
    _same(b, bb)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
def test_out_and_aliasing(dtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(1000) * 4).astype(dtype)
    want = iglu_np.iglu.ufunc(x, dtype(2.0))
    o = np.empty_like(x)
    r = iglu_np.iglu(x, sigma=2.0, out=o)
    assert r is o
    _same(o, want)
    y = x.copy()
    assert iglu_np.iglu(y, sigma=2.0, out=y) is y  # in place
    _same(y, want)
    # partial overlap: numpy's buffered semantics, like the ufunc
    z = x.copy()
    zz = x.copy()
    iglu_np.iglu(z[:-1], out=z[1:])
    iglu_np.iglu.ufunc(zz[:-1], dtype(1.0), out=zz[1:])
    _same(z, zz)
    g = rng.standard_normal(1000).astype(dtype)
    gg = g.copy()
    iglu_np.iglu.backward(x, gg, out=gg)
    _same(gg, iglu_np.iglu.backward.ufunc(x, g, dtype(1.0)))
    with pytest.raises(ValueError):
        iglu_np.iglu(x, out=np.empty(999, dtype))
    with pytest.raises(TypeError):
        iglu_np.iglu(x, out=np.empty(1000, np.int32))


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("threads", ["threads_never", "threads_always"])
def test_in_place_calls_take_the_in_place_loops(dtype, layout, threads, request):
    """out = x or out = grad_out run the loops' in-place variants (given out aliasing an
    input, LLVM's runtime alias check sends the out= loop to its scalar version: 10x
    slower), with the out= loop's bits; so do array parameters (the general path)."""
    request.getfixturevalue(threads)
    a = iglu_np.iglu
    rng = np.random.default_rng(5)
    shape = (50, 61)
    x0 = np.asarray((rng.standard_normal(shape) * 4).astype(dtype), order=layout)
    g0 = np.asarray(rng.standard_normal(shape).astype(dtype), order=layout)
    sig = (np.abs(rng.standard_normal(shape)) + 0.2).astype(dtype)
    ch = np.dtype(dtype).char
    cases = [
        ("fwd", 0, lambda x, g: a(x, sigma=0.7, out=x), a(x0, sigma=0.7)),
        ("bwd", 1, lambda x, g: a.backward(x, g, sigma=0.7, out=g), a.backward(x0, g0, sigma=0.7)),
        ("bwd", 0, lambda x, g: a.backward(x, g, sigma=0.7, out=x), a.backward(x0, g0, sigma=0.7)),
        ("fwd", 0, lambda x, g: a(x, sigma=sig, out=x), a(x0, sigma=sig)),
        ("bwd", 1, lambda x, g: a.backward(x, g, sigma=sig, out=g), a.backward(x0, g0, sigma=sig)),
    ]
    for i, (kind, j, call, want) in enumerate(cases):
        cpu_fast.plans.clear()
        cpu_fast._kernels.clear()
        x, g = x0.copy(order="K"), g0.copy(order="K")
        r = call(x, g)
        assert r is (x, g)[j]
        _same(r, want)
        if i < 3:
            assert (a.name, kind, ch, j) in cpu_fast.plans, (kind, j)
            assert (a.name, kind, ch, None) not in cpu_fast.plans
        else:
            # (threaded or not as the thread count another test left allows)
            built = [k for k in cpu_fast._kernels if k[:2] == (a.name, kind)]
            assert built and all(k[3] == j for k in built), (kind, j, built)


def test_nd_shapes_and_params_as_numpy_scalars():
    x = np.linspace(-5, 5, 2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    r = iglu_np.iglu(x, sigma=np.float64(0.3))
    assert r.shape == x.shape and r.dtype == np.float32
    _same(r, iglu_np.iglu.ufunc(x, np.float32(0.3)))
    _same(iglu_np.iglu(x, sigma=np.array(0.3)), r)


def test_small_calls_are_tiered():
    """Small arrays: the first WARM_CALLS calls run the ufunc (no njit compile), later
    ones the loop where it is compiled already (here: in the disk cache), with the same
    bits; a loop that is not compiled anywhere is never compiled for them
    (tests/test_first_calls.py)."""
    act = iglu_np.get("iglu")
    old = tiers.MIN_SIZE
    cpu_backend.set_min_size(1 << 20)
    try:
        key = ("iglu", "dx", "f", None)
        cpu_fast.plan("iglu", "dx", np.dtype(np.float32))  # compiled (or loaded): on disk
        cpu_fast.plans.pop(key, None)
        tiers._calls.pop(key, None)
        x = np.linspace(-50, 50, 301).astype(np.float32)
        first = act.dx(x, sigma=0.7)
        for _ in range(tiers.WARM_CALLS - 1):
            act.dx(x, sigma=0.7)
        assert key not in cpu_fast.plans
        hot = act.dx(x, sigma=0.7)
        assert key in cpu_fast.plans
        _same(first, hot)
        _same(hot, act.dx.ufunc(x, np.float32(0.7)))
    finally:
        cpu_backend.set_min_size(old)


# ---------------------------------------------------------------- memory layouts
def _layouts(rng, dtype, shape):
    """(name, x, the same values in C order) for layouts contiguous in memory."""
    c = (rng.standard_normal(shape) * 6).astype(dtype)
    yield "C", c, c
    yield "F", np.asfortranarray(c), c
    yield "T", np.ascontiguousarray(c.T).T, c  # a transposed C array
    if c.ndim == 3:
        p = cpu_fast.empty_like_layout(shape, dtype, (2, 0, 1))  # neither C nor F
        p[...] = c
        yield "P", p, c


def _strides(a):
    return [s for s, n in zip(a.strides, a.shape) if n != 1]  # size-1 axes: any stride


@pytest.fixture
def no_ufunc(monkeypatch):
    """Fail if the general ufunc path runs (the fast path must take the call)."""

    def boom(*a, **k):
        raise AssertionError("took the ufunc path")

    monkeypatch.setattr(cpu_backend, "_call_ufunc", boom)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("shape", [(64, 33), (5, 6, 7), (3, 1, 40)], ids=str)
@pytest.mark.parametrize("threads", ["threads_never", "threads_always"])
def test_fortran_and_transposed_take_the_fast_path(shape, dtype, threads, request, no_ufunc):
    request.getfixturevalue(threads)
    rng = np.random.default_rng(7)
    a = iglu_np.iglu
    for lay, x, xc in _layouts(rng, dtype, shape):
        assert cpu_fast.axis_order(x) is not None, lay
        g = np.empty_like(x)  # same layout as x (order='K')
        g[...] = rng.standard_normal(shape)
        gc = np.ascontiguousarray(g)
        sig = (np.abs(rng.standard_normal(shape)) + 0.2).astype(dtype)
        sig_x = np.empty_like(x)
        sig_x[...] = sig
        for got, want in [
            (a(x, sigma=0.7), a(xc, sigma=0.7)),
            (a.dx(x, sigma=0.7), a.dx(xc, sigma=0.7)),
            (a.backward(x, g, sigma=0.7), a.backward(xc, gc, sigma=0.7)),
            (a.dparams(x, sigma=0.7)["sigma"], a.dparams(xc, sigma=0.7)["sigma"]),
            # array parameters of x's shape: the general path's loops (cpu_backend._run_loops)
            (a(x, sigma=sig), a(xc, sigma=sig)),
            (a(x, sigma=sig_x), a(xc, sigma=sig)),
            (a.backward(x, g, sigma=sig), a.backward(xc, gc, sigma=sig)),
        ]:
            _same(got, want)
            assert _strides(got) == _strides(x), (lay, got.strides, x.strides)  # x's layout kept
            assert got.flags.f_contiguous == x.flags.f_contiguous
            assert got.flags.c_contiguous == x.flags.c_contiguous
        _same(a(x, sigma=0.7), a.ufunc(x, dtype(0.7)))
        # out= in x's layout, and in place
        o = np.empty_like(x)
        assert a(x, sigma=0.7, out=o) is o
        _same(o, a(xc, sigma=0.7))
        y = x.copy(order="K")
        assert a.backward(x, y, out=y) is y
        _same(y, a.backward(xc, np.ascontiguousarray(x)))
        # parameter gradients: summed in memory order, so close to (not bitwise) C order
        bp = a.backward_params(x, g, sigma=0.7)["sigma"]
        bc = a.backward_params(xc, gc, sigma=0.7)["sigma"]
        assert bp.shape == () and bp.dtype == dtype
        np.testing.assert_allclose(bp, bc, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_axis_order_and_mem_flat():
    c = np.arange(24.0).reshape(2, 3, 4)
    assert cpu_fast.axis_order(c) == (0, 1, 2)
    assert cpu_fast.axis_order(np.asfortranarray(c)) == (2, 1, 0)
    assert cpu_fast.axis_order(c.transpose(1, 2, 0)) == (2, 0, 1)
    flat = cpu_fast.mem_flat(c.transpose(1, 2, 0), (2, 0, 1))
    assert np.shares_memory(flat, c) and (flat == c.reshape(-1)).all()
    assert cpu_fast.axis_order(c[:, ::2]) is None  # gaps
    assert cpu_fast.axis_order(c[::-1]) is None  # negative stride
    assert cpu_fast.axis_order(np.broadcast_to(c[:1], c.shape)) is None  # stride 0
    assert cpu_fast.mem_flat(c, (2, 1, 0)) is None  # not laid out that way
    e = cpu_fast.empty_like_layout((2, 3, 4), np.float32, (2, 0, 1))
    assert cpu_fast.axis_order(e) == (2, 0, 1) and e.shape == (2, 3, 4)


def test_compiled_loops_release_the_gil():
    """Threads calling activations run at once: every fast-path loop is nogil (checked on
    the dispatchers; the speed-up itself is measured, not asserted)."""
    mod = cpu_fast._module(iglu_np.iglu.spec)
    for kind in ("fwd", "dx", "bwd", "d_sigma", "bwd_sigma"):
        assert getattr(mod, "loop_" + kind).targetoptions["nogil"] is True, kind
    for par in (False, True):
        assert cpu_fast.kernel("iglu", "fwd", par).targetoptions["nogil"] is True
        assert cpu_fast.kernel("iglu", "sum_sigma", par).targetoptions["nogil"] is True
        assert cpu_fast.kernel("iglu", "bwdall", par).targetoptions["nogil"] is True


def test_threads_calling_at_once_get_their_own_results():
    import threading

    rng = np.random.default_rng(11)
    xs = [(rng.standard_normal(70_000) * 5).astype(np.float32) for _ in range(4)]
    want = [iglu_np.iglu.ufunc(x, np.float32(0.6)) for x in xs]
    got = [None] * len(xs)

    def work(i):
        for _ in range(20):
            got[i] = iglu_np.iglu(xs[i], sigma=0.6)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for g, w in zip(got, want):
        _same(g, w)


def test_threads_launching_parallel_loops_under_workqueue():
    """Numba's workqueue layer aborts the process on concurrent parallel launches; with
    the GIL released those must be serialised (cpu_fast.par_call)."""
    import os
    import subprocess
    import sys

    code = (
        "import threading, numpy as np, numba, iglu_np\n"
        "from iglu_np.backends.cpu import backend as cpu_backend\n"
        "cpu_backend.set_threshold(1024)\n"
        "xs = [np.linspace(-9, 9, 50_000 + i, dtype=np.float32) for i in range(3)]\n"
        "want = [iglu_np.iglu.ufunc(x, np.float32(1.0)) for x in xs]\n"
        "def work(i):\n"
        "    for _ in range(30):\n"
        "        assert (iglu_np.iglu(xs[i]) == want[i]).all()\n"
        "        iglu_np.iglu.backward_params(xs[i], xs[i])\n"
        "ts = [threading.Thread(target=work, args=(i,)) for i in range(3)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "print(numba.threading_layer())\n"
    )
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue", NUMBA_NUM_THREADS="2")
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("workqueue")


def test_busy_machine_guard_tolerates_threaded_calls_a_little_slower(monkeypatch):
    """Threaded calls up to LOSS times the one-thread baseline are not losses (a memory-bound
    kernel in a slow-memory second can cross 1.0); beyond, two in a row trip the guard. A
    fake clock: each call advances it by its cost."""
    from iglu_np.backends.cpu import loops as cpu_fast

    class Clock:
        now = 100.0

        def perf_counter(self):
            return self.now

    clock = Clock()
    monkeypatch.setattr(cpu_fast, "time", clock)
    monkeypatch.setattr(cpu_fast, "_par_threadsafe", True)
    k = object()

    def run(cost):
        def call():
            clock.now += cost

        cpu_fast.launch(k, 1000, call, call)

    run(1.0)  # the baseline, on one thread: 1 ms per element
    trips = cpu_fast.guard_trips
    for _ in range(4):
        run(1.2)  # within LOSS of it: threaded calls go on
    assert not cpu_fast.busy(k, 1000, None) and cpu_fast.guard_trips == trips
    run(1.3)
    run(1.3)  # beyond LOSS twice in a row: one thread for a cooldown
    assert cpu_fast.busy(k, 1000, None) and cpu_fast.guard_trips == trips + 1


def test_busy_machine_guard_sends_a_contended_kernel_to_one_thread(monkeypatch):
    """The first large call of a kernel runs on one thread (the baseline); threaded calls
    that lose to it twice in a row (a contended machine) put the kernel on one thread for
    a cooldown, doubled while the probe after it still loses; a threaded call that wins
    ends it. Sleeping fakes stand in for the calls (5x apart, no timing of real code)."""
    import time

    from iglu_np.backends.cpu import loops as cpu_fast

    monkeypatch.setattr(cpu_fast, "_par_threadsafe", True)
    monkeypatch.setattr(cpu_fast, "COOL_MIN", 0.2)
    k = object()  # the threaded kernel's identity
    log = []

    def run(threaded_nap):
        def threaded():
            log.append("T")
            time.sleep(threaded_nap)

        def single():
            log.append("S")
            time.sleep(0.01)

        cpu_fast.launch(k, 1000, threaded, single)

    try:
        run(0.002)
        assert log == ["S"] and not cpu_fast.busy(k, 1000, None)  # baseline taken on one thread
        run(0.002)
        run(0.05)  # loses once: a hiccup
        run(0.002)
        assert log[1:] == ["T", "T", "T"] and not cpu_fast.busy(k, 1000, None)
        trips = cpu_fast.guard_trips
        run(0.05)
        run(0.05)  # loses twice in a row: contended
        assert (
            cpu_fast.busy(k, 1000, None)
            and cpu_fast._guard[cpu_fast._gkey(k, 1000, None)][3] == 0.2
        )
        assert cpu_fast.guard_trips == trips + 1  # what iglu-np bench reports
        run(0.002)
        assert log[-1] == "S"  # cooling down: one thread
        time.sleep(0.25)
        run(0.05)  # the probe still loses: a longer cooldown
        assert (
            log[-1] == "T"
            and cpu_fast.busy(k, 1000, None)
            and cpu_fast._guard[cpu_fast._gkey(k, 1000, None)][3] == 0.4
        )
        cpu_fast._guard[cpu_fast._gkey(k, 1000, None)][2] = time.perf_counter() - 1.0
        run(0.002)  # the machine is free again
        assert (
            log[-1] == "T"
            and not cpu_fast.busy(k, 1000, None)
            and cpu_fast._guard[cpu_fast._gkey(k, 1000, None)][3] == 0.0
        )
        # another dtype or size class has its own baseline (float32's is no yardstick for
        # float64, nor a cache-resident size's for a memory-bound one)
        for n, dt in ((1000, "f"), (1000, "d"), (64000, None)):
            cpu_fast.launch(k, n, lambda: log.append("T"), lambda: log.append("S"), dt)
            assert log[-1] == "S"
        assert cpu_fast._gkey(k, 1000, None) == cpu_fast._gkey(k, 2000, None)
    finally:
        for n, dt in ((1000, None), (1000, "f"), (1000, "d"), (64000, None)):
            cpu_fast._guard.pop(cpu_fast._gkey(k, n, dt), None)
