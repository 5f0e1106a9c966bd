"""The CuPy backend's thin per-call path (``cupy_backend.fast_path``), without a GPU.

The common case (contiguous, 16-byte-aligned CuPy arrays of one dtype and shape, scalar
parameters) skips the general path's machinery. Driven through the public calls with a
fake ``cupy`` (tests/fake_cupy.py) whose kernels record their launches:

* the thin path launches the very kernel object the general path launches, with the same
  grid, block and arguments (fwd, dx, bwd, d<param>, backward_all; float16/32/64 and
  bfloat16; out= given, in place, or new), on the current device and stream;
* every other call (strided, unaligned, F-ordered, broadcast, array or device parameters,
  mixed dtypes, out= of another dtype or overlapping, parameters float32 cannot hold...)
  reaches the general path, which decides and raises;
* errors (a parameter outside its domain, an unsupported dtype, an unknown keyword) are
  the general path's, word for word.

The tests marked gpu compare the two paths and the CPU bit for bit on a real GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import iglu_np
from iglu_np import _params, backends
from iglu_np.backends.cuda import cupy as cb

from . import fake_cupy
from . import gpu_helpers as H

BF16 = None
try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # the bf16 extra; CI installs it
    pass


@pytest.fixture
def fc(monkeypatch):
    """The fake cupy, with the dispatcher's entry for its arrays in place (what the first
    call on a CuPy array notes)."""
    m = fake_cupy.install(monkeypatch)
    backends._note_fast(m.ndarray(16, np.float32))
    return m


@pytest.fixture
def general_calls(monkeypatch):
    """How many calls reached the general path (its ``_prepare``)."""
    n = [0]
    orig = cb._prepare

    def counting(*a, **k):
        n[0] += 1
        return orig(*a, **k)

    monkeypatch.setattr(cb, "_prepare", counting)
    return n


def _norm(arg, named):
    """A launch argument in comparable form: operands by role, new arrays by shape, dtype
    and alignment, scalars by type and bits."""
    if isinstance(arg, fake_cupy.ndarray):
        for k, v in named.items():
            if arg is v:
                return k
        return ("new", arg.shape, arg.dtype.str, arg.strides, arg.data.ptr % 16)
    return (type(arg).__name__, np.asarray(arg).tobytes())


def _launches(fc, fn, named):
    fc.STATE.launches.clear()
    res = fn()
    return res, [
        (L.kernel, L.grid, L.block, tuple(_norm(a, named) for a in L.args), L.device, L.stream)
        for L in fc.STATE.launches
    ]


def _arr(fc, n, dt, shape=None):
    a = fc.ndarray(n, dt)
    return a.reshape(shape) if shape else a


# (activation, kind, dtype, number of elements or shape, params, out: None | "new" | "x" | "g")
CASES = [
    ("iglu", "fwd", np.float32, 1024, {}, None),
    ("iglu", "fwd", np.float32, 1024, {}, "new"),
    ("iglu", "fwd", np.float32, 1024, {"sigma": 2.0}, "x"),
    ("iglu", "fwd", np.float32, 1027, {"sigma": 3}, None),
    ("iglu", "fwd", np.float32, 1024, {"sigma": np.float32(0.7)}, None),
    ("iglu", "fwd", np.float64, 1024, {"sigma": np.array(0.1)}, None),
    ("iglu", "fwd", np.float64, 1024, {"sigma": 1e39}, None),  # float64 data holds it
    ("iglu", "dx", np.float16, 4096, {"sigma": np.float64(1.5)}, "new"),
    ("iglu", "bwd", np.float32, (32, 32), {}, None),
    ("iglu", "bwd", np.float16, 1000, {"sigma": 0.5}, "g"),
    ("iglu", "bwd", np.float64, 2**24, {}, "new"),  # more vectors than the grid's cap
    ("iglu", "d_sigma", np.float32, 1024, {"sigma": 2.0}, None),
    ("iglu", "bwd_sigma", np.float32, 1024, {}, None),
    ("gelu", "fwd", np.float16, 1, {}, None),
    ("silu", "fwd", np.float64, (4, 8, 16), {}, "x"),
    ("xielu", "fwd", np.float32, 1024, {"alpha_p": 0.5, "beta": 0.25}, None),
    ("xielu", "bwd", np.float64, 1024, {"alpha_n": np.float32(0.75)}, "new"),
    ("hardtanh", "fwd", np.float32, 1024, {"min_val": -2.0, "max_val": 3.0}, None),
    ("iglu", "fwd", "bf16", 1024, {"sigma": 2.0}, None),
    ("swish", "bwd", "bf16", 4104, {}, "new"),
]


def _case_id(c):
    name, kind, dt, n, params, out = c
    return f"{name}-{kind}-{np.dtype(dt).name if dt != 'bf16' else 'bf16'}-{n}-{'+'.join(params) or 'defaults'}-out_{out}"


def _call(name, kind, data, params, out):
    act = iglu_np.get(name)
    kw = dict(params) if out is None else dict(params, out=out)
    if kind == "fwd":
        return act(*data, **kw)
    if kind == "dx":
        return act.dx(*data, **kw)
    if kind == "bwd":
        return act.backward(*data, **kw)
    if kind.startswith("d_"):
        return act.dparams(*data, **params)[kind[2:]]
    return act._ufunc  # not reached: bwd_<param> has no public call (see _thin_or_general)


def _dtype(dt):
    if dt == "bf16":
        if BF16 is None:
            pytest.skip("ml_dtypes not installed (the bf16 extra)")
        return BF16
    return np.dtype(dt)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_the_thin_path_launches_what_the_general_path_launches(fc, general_calls, case):
    name, kind, dt, n, params, out_kind = case
    dt = _dtype(dt)
    shape = n if isinstance(n, tuple) else None
    size = int(np.prod(n))
    x = _arr(fc, size, dt, shape)
    g = _arr(fc, size, dt, shape)
    data = (x, g) if kind.startswith("bwd") else (x,)
    out = {None: None, "new": _arr(fc, size, dt, shape), "x": x, "g": g}[out_kind]
    named = {"x": x, "g": g, "out": out}
    act = _params.of(name)
    if kind.startswith("bwd_"):  # no public call: the dispatcher's entry

        def thin():
            return backends.run(act, kind, data, dict(params), out)
    else:

        def thin():
            return _call(name, kind, data, params, out)

    res_g, want = _launches(fc, lambda: cb.run(act, kind, data, dict(params), out), named)
    assert general_calls[0] == 1 and len(want) == 1
    assert isinstance(
        want[0][0], fake_cupy.RawKernel
    )  # the vector kernel, not the ElementwiseKernel
    for _ in range(2):  # the call that builds the plan and one that finds it
        res_t, got = _launches(fc, thin, named)
        assert got == want
        assert general_calls[0] == 1, "the call went to the general path"
        assert res_t.shape == res_g.shape and res_t.dtype == res_g.dtype
        if out is not None:
            assert res_t is out and res_g is out
        else:
            assert fc.STATE.launches[0].args[len(data)] is res_t  # the kernel writes the result
            assert res_t._c_contiguous and res_t.data.ptr % 16 == 0


BACKWARD_ALL = [
    ("iglu", np.float32, 1024, {"sigma": 2.0}, None),
    ("iglu", np.float64, 2**22, {}, "new"),
    ("xielu", np.float16, 1000, {"beta": np.float32(0.125)}, "g"),
    ("prelu", np.float32, (16, 64), {}, "x"),
    ("iglu", "bf16", 1024, {}, None),
]


@pytest.mark.parametrize("case", BACKWARD_ALL, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-out_{c[4]}")
def test_the_thin_backward_all_launches_what_the_general_path_launches(fc, general_calls, case):
    name, dt, n, params, out_kind = case
    dt = _dtype(dt)
    shape = n if isinstance(n, tuple) else None
    size = int(np.prod(n))
    x, g = _arr(fc, size, dt, shape), _arr(fc, size, dt, shape)
    out = {None: None, "new": _arr(fc, size, dt, shape), "x": x, "g": g}[out_kind]
    named = {"x": x, "g": g, "out": out}
    act = _params.of(name)
    (gx_g, gp_g), want = _launches(
        fc, lambda: cb.backward_all(act, (x, g), dict(params), out), named
    )
    assert general_calls[0] == 1 and len(want) == 1
    for _ in range(2):
        (gx, gp), got = _launches(
            fc, lambda: iglu_np.get(name).backward_all(x, g, out=out, **params), named
        )
        assert got == want and general_calls[0] == 1
        assert (
            (gx is out) if out is not None else (gx.shape == gx_g.shape and gx.dtype == gx_g.dtype)
        )
        assert list(gp) == list(gp_g) == list(act.param_names)
        assert [(v.shape, v.dtype) for v in gp.values()] == [
            (v.shape, v.dtype) for v in gp_g.values()
        ]


def _aligned_pair(fc, n, dt):
    """x and an out= view of the same buffer shifted by 16 bytes (overlapping)."""
    buf = fc.ndarray(n + 16, dt)
    k = 16 // np.dtype(dt).itemsize
    return buf[:n], buf[k : n + k]


def _fallbacks(fc):
    f32, f64, f16 = np.float32, np.float64, np.float16
    x = fc.ndarray(1024, f32)
    sq = fc.ndarray(1024, f32).reshape((32, 32))
    xo, shifted = _aligned_pair(fc, 1024, f32)
    return {
        "strided x": lambda: iglu_np.iglu(fc.ndarray(2048, f32)[::2]),
        "unaligned x": lambda: iglu_np.iglu(fc.ndarray(1025, f32)[1:]),
        "F-ordered 2-d x": lambda: iglu_np.iglu(sq.T),
        "F-ordered g": lambda: iglu_np.iglu.backward(sq, sq.T),
        "array parameter": lambda: iglu_np.iglu(x, sigma=np.full(1024, 2.0)),
        "device parameter": lambda: iglu_np.iglu(x, sigma=fc.asarray(np.float32(2.0))),
        "bool parameter": lambda: iglu_np.iglu(x, sigma=True),
        "float32 data, parameter beyond float32": lambda: iglu_np.iglu(x, sigma=1e39),
        "float16 data, parameter beyond float32": lambda: iglu_np.iglu(
            fc.ndarray(64, f16), sigma=1e-39
        ),
        "x float32, g float64": lambda: iglu_np.iglu.backward(x, fc.ndarray(1024, f64)),
        "g broadcast": lambda: iglu_np.iglu.backward(x, fc.ndarray(1024, f32).reshape((1, 1024))),
        "out float64 for float32 x": lambda: iglu_np.iglu(x, out=fc.ndarray(1024, f64)),
        "out overlapping x shifted": lambda: iglu_np.iglu(xo, out=shifted),
        "out strided": lambda: iglu_np.iglu(x, out=fc.ndarray(2048, f32)[::2]),
        "out as a tuple": lambda: iglu_np.iglu(x, out=(fc.ndarray(1024, f32),)),
        "integer data": lambda: iglu_np.iglu(fc.ndarray(1024, np.int32)),
        "byte-swapped data": lambda: iglu_np.iglu(fc.ndarray(1024, ">f4")),
        "zero elements": lambda: iglu_np.iglu(fc.ndarray(0, f32)),
        "backward_all with an array parameter": lambda: iglu_np.iglu.backward_all(
            x, fc.ndarray(1024, f32), sigma=np.full(1024, 2.0)
        ),
        "backward_all, out overlapping": lambda: iglu_np.iglu.backward_all(
            xo, fc.ndarray(1024, f32), out=shifted
        ),
    }


FALLBACKS = list(_fallbacks(fake_cupy))


@pytest.mark.parametrize("what", FALLBACKS)
def test_calls_outside_the_common_case_take_the_general_path(fc, general_calls, what):
    iglu_np.iglu(fc.ndarray(1024, np.float32))  # the thin path is in place
    iglu_np.iglu.backward_all(fc.ndarray(1024, np.float32), fc.ndarray(1024, np.float32))
    assert general_calls[0] == 0
    fc.STATE.launches.clear()
    _fallbacks(fc)[what]()
    assert general_calls[0] >= 1
    assert fc.STATE.launches or what == "zero elements"


def _message(fn):
    with pytest.raises(Exception) as e:
        fn()
    return type(e.value), str(e.value)


@pytest.mark.parametrize(
    "bad",
    [
        {"sigma": -1.0},
        {"sigma": 0},
        {"sigma": float("nan")},
        {"sigma": np.float32(-2.0)},
        {"sigma": np.array(-1.0)},
        {"sigma": 10**400},
        {"sgma": 1.0},
    ],
    ids=lambda b: f"{list(b)[0]}={b[list(b)[0]]!r}"[:40],
)
def test_bad_parameters_raise_the_general_paths_errors(fc, general_calls, bad):
    x = fc.ndarray(1024, np.float32)
    iglu_np.iglu(x, sigma=2.0)  # plan in place
    thin = _message(lambda: iglu_np.iglu(x, **bad))
    assert general_calls[0] == 0  # raised by the thin path's checks
    general = _message(lambda: cb.run(_params.of("iglu"), "fwd", (x,), dict(bad), None))
    cpu = _message(lambda: iglu_np.iglu(np.ones(4, np.float32), **bad))
    assert thin == general == cpu
    assert "iglu" in thin[1]
    assert not fc.STATE.launches[1:]  # nothing launched after the first call


def test_a_cross_parameter_check_still_runs(fc):
    x = fc.ndarray(1024, np.float32)
    iglu_np.hardtanh(x)
    with pytest.raises(ValueError, match="hardtanh"):
        iglu_np.hardtanh(x, min_val=2.0, max_val=1.0)


def test_unsupported_dtypes_raise_the_general_paths_error(fc):
    x = fc.ndarray(1024, np.float32)
    iglu_np.iglu(x)
    c = fc.ndarray(1024, np.complex64)
    thin = _message(lambda: iglu_np.iglu(c))
    general = _message(lambda: cb.run(_params.of("iglu"), "fwd", (c,), {}, None))
    assert thin == general and thin[0] is TypeError and "complex64" in thin[1]


@pytest.mark.parametrize("out_kind", ["a tuple of two", "a host array"])
def test_backward_all_refuses_the_out_that_backward_refuses(fc, out_kind):
    f32 = np.float32
    x, g = fc.ndarray(1024, f32), fc.ndarray(1024, f32)
    out = {
        "a tuple of two": (fc.ndarray(1024, f32), fc.ndarray(1024, f32)),
        "a host array": np.zeros(1024, f32),
    }[out_kind]
    want = _message(lambda: iglu_np.iglu.backward(x, g, out=out))
    assert _message(lambda: iglu_np.iglu.backward_all(x, g, out=out)) == want


def test_backward_all_with_out_a_one_tuple_returns_its_array(fc):
    x, g, o = (fc.ndarray(1024, np.float32) for _ in range(3))
    gx, grads = iglu_np.iglu.backward_all(x, g, out=(o,))
    assert gx is o and list(grads) == ["sigma"]


def test_bf16_on_an_old_cupy_raises_and_no_plan_is_kept(fc, monkeypatch):
    if BF16 is None:
        pytest.skip("ml_dtypes not installed (the bf16 extra)")
    monkeypatch.setattr(fc, "__version__", "13.6.0")
    x = fc.ndarray(1024, BF16)
    iglu_np.iglu(fc.ndarray(1024, np.float32))
    thin = _message(lambda: iglu_np.iglu(x))
    general = _message(lambda: cb.run(_params.of("iglu"), "fwd", (x,), {}, None))
    assert thin == general and "CuPy >= 14" in thin[1]
    assert not any(k[2] == BF16 for k in cb._plans)


def test_launches_follow_the_current_device_and_stream(fc, general_calls):
    x = fc.ndarray(1024, np.float32)
    iglu_np.iglu(x)
    k0 = fc.STATE.launches[-1].kernel
    with fc.cuda.Device(1):
        x1 = fc.ndarray(1024, np.float32)
        y1 = iglu_np.iglu(x1)
        L = fc.STATE.launches[-1]
        assert L.device == 1 and L.kernel is not k0  # built for device 1
        assert y1.data.device_id == 1
        s = fc.cuda.Stream("side")
        with s:
            iglu_np.iglu(x1)
            assert fc.STATE.launches[-1].stream is s
            assert fc.STATE.launches[-1].kernel is L.kernel
    iglu_np.iglu(x)
    assert fc.STATE.launches[-1].device == 0 and fc.STATE.launches[-1].kernel is k0
    assert fc.STATE.launches[-1].stream is fc.cuda.Stream.null
    assert general_calls[0] == 0
    # the general path on device 1 launches the kernel the thin path took
    with fc.cuda.Device(1):
        cb.run(_params.of("iglu"), "fwd", (x1,), {}, None)
        assert fc.STATE.launches[-1].kernel is L.kernel


def test_the_first_call_notes_the_thin_path_whatever_the_backend_keyword(
    fc, general_calls, monkeypatch
):
    monkeypatch.setattr(backends, "_FAST", {})
    x = fc.ndarray(1024, np.float32)
    iglu_np.iglu(x, backend="cupy")  # the general path notes the thin path for the type
    assert backends._FAST[fake_cupy.ndarray][0] == "cupy"
    iglu_np.iglu(x, backend="cupy", sigma=2.0)
    iglu_np.iglu.backward_all(x, x, backend="cupy")
    assert general_calls[0] == 1
    with pytest.raises(ValueError, match="unknown backend"):
        iglu_np.iglu(x, backend="nope")


def test_a_cupy_without_the_contiguity_attribute_keeps_the_general_path(
    fc, general_calls, monkeypatch
):
    class Old(fake_cupy.ndarray):
        """Contiguity through ``flags`` only."""

        def __getattribute__(self, name):
            if name == "_c_contiguous":
                raise AttributeError(name)
            return super().__getattribute__(name)

        @property
        def flags(self):
            return fake_cupy._Flags(self.__dict__["_c_contiguous"], self.__dict__["_f_contiguous"])

    Old.__module__ = "cupy"
    monkeypatch.setattr(fc, "ndarray", Old)
    x = Old(1024, np.float32)
    assert cb.fast_path(x) is None
    iglu_np.iglu(x)
    iglu_np.iglu(x)
    assert general_calls[0] == 2 and backends._FAST[Old][1:] == (None, None)


# --------------------------------------------------------------------------- real GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["float16", "float32", "float64", "bfloat16"])
def test_on_a_gpu_the_thin_path_equals_the_general_path_and_the_cpu(dt, general_calls):
    cupy = pytest.importorskip("cupy")
    if dt == "bfloat16":
        ddt = _dtype("bf16")
    else:
        ddt = np.dtype(dt)
    rng = np.random.default_rng(0)
    n = 4099
    xh = (rng.standard_normal(n) * 4).astype(np.float32).astype(ddt)
    gh = rng.standard_normal(n).astype(np.float32).astype(ddt)
    x, g = cupy.asarray(xh), cupy.asarray(gh)
    iglu_np.relu(x)  # the first call on a CuPy array notes the thin path
    cases = [
        ("iglu", {}),
        ("iglu", {"sigma": 2.5}),
        ("xielu", {"alpha_p": np.float32(0.5)}),
        ("gelu", {}),
        ("silu", {}),
        ("softplus", {"beta": 2}),
    ]
    for name, ps in cases:
        act, p = iglu_np.get(name), _params.of(name)
        before = general_calls[0]
        thin = {"fwd": act(x, **ps), "dx": act.dx(x, **ps), "bwd": act.backward(x, g, **ps)}
        o = cupy.empty_like(x)
        assert act(x, out=o, **ps) is o
        assert general_calls[0] == before, f"{name}: the thin path was not taken"
        for kind, r in thin.items():
            data = (x, g) if kind == "bwd" else (x,)
            general = cb.run(p, kind, data, dict(ps), None)
            assert r.dtype == general.dtype == ddt
            H.assert_same_bits(
                cupy.asnumpy(r), cupy.asnumpy(general), f"{name} {kind} thin vs general"
            )
            with np.errstate(all="ignore"):
                cpu = {"fwd": act, "dx": act.dx, "bwd": act.backward}[kind](
                    *(xh, gh)[: len(data)], **ps
                )
            H.assert_same_bits(cupy.asnumpy(r), cpu, f"{name} {kind} thin vs cpu")
        H.assert_same_bits(cupy.asnumpy(o), cupy.asnumpy(thin["fwd"]), f"{name} out=")
        gx, gp = act.backward_all(x, g, **ps)
        # without parameters there is nothing to fuse: backward and backward_params
        assert general_calls[0] == before or not act.params, (
            f"{name}: backward_all left the thin path"
        )
        gx_g, gp_g = cb.backward_all(p, (x, g), dict(ps), None) or (None, None)
        if gx_g is not None:  # activations with parameters: the fused kernel on both paths
            H.assert_same_bits(cupy.asnumpy(gx), cupy.asnumpy(gx_g), f"{name} backward_all grad_x")
            for k in gp:
                assert cupy.asnumpy(gp[k]) == cupy.asnumpy(gp_g[k]), (name, k)


@pytest.mark.gpu
def test_on_a_gpu_the_thin_path_runs_on_the_current_stream_and_device():
    cupy = pytest.importorskip("cupy")
    x = cupy.linspace(-5, 5, 1 << 16, dtype=cupy.float32)
    want = cupy.asnumpy(iglu_np.iglu(x))
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        y = iglu_np.iglu(x)
        iglu_np.iglu(x, out=y)
        s.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(y), want)
    if cupy.cuda.runtime.getDeviceCount() > 1:
        with cupy.cuda.Device(1):
            x1 = cupy.asarray(cupy.asnumpy(x))
            y1 = iglu_np.iglu(x1)
            assert y1.device.id == 1
            np.testing.assert_array_equal(cupy.asnumpy(y1), want)
