"""Prepared kernels (``define(prepared={key: (prep, fn)})``): GPU kernels with scalar
parameters compute ``prep(*params)`` once per thread and call ``fn(x, *params, *pre)``
per element. It must give the exact kernel's bits for every x and parameter set: on the
CPU (Numba), in the host-compiled C++ (the entry points the CuPy vector kernels call),
and the kernels must really compute it once (xIELU's float64 root, whose per-element
recomputation would make the float64 backward 3.5x the bandwidth limit on an H100)."""

from __future__ import annotations

import ctypes
import re

import numba
import numpy as np
import pytest

import iglu_np  # noqa: F401  (registers the activations)
from iglu_np._spec import REGISTRY
from iglu_np.backends.codegen import cxx
from iglu_np.backends.cpu import ufuncs as cpu

from . import accuracy as acc
from . import gpu_helpers as H

PREPARED = sorted(n for n, s in REGISTRY.items() if s.prepared)
DT = [np.float32, np.float64]
IDS = ["f32", "f64"]


_same = H.assert_same_bits


def _which_keys(spec):
    return [k if k in ("f", "dx") else "d" + k for k in spec.prepared]


def _points(spec, dtype, params):
    x = np.concatenate(
        [H.sweep_points(dtype), acc.x_points(spec, dtype, params), np.linspace(-45.0, 1.0, 40_001)]
    ).astype(dtype)
    return x


def _param_sets(spec, dtype):
    sets = list(acc.param_sets(spec, dtype))
    if spec.name == "xielu":  # the root form's guards: beta = 0, alpha_n >= 1e30, roots near 0
        # and -7; expm1(eps)'s double-word (eps < -1, below -40)
        d = spec.defaults
        sets += [
            {**d, "beta": 0.0},
            {**d, "alpha_n": 1e31},
            {**d, "alpha_n": 1.0, "beta": 0.999},
            {**d, "alpha_n": 3.0, "beta": 0.01},
            {**d, "eps": -2.0},
            {**d, "eps": -45.0},
        ]
    if spec.name in ("xielu", "xiprelu"):  # _quad_scale's three cases, on each side
        tiny = 2.0 ** (-110 if dtype == np.float32 else -1000)
        big = 0.75 * float(np.finfo(dtype).max)
        d = spec.defaults
        sides = ("alpha_p", "alpha_n") if spec.name == "xiprelu" else ("alpha_p",)
        for a in sides:
            big_beta = {**d, a: 2.0, "beta": big}
            if spec.name == "xielu":  # alpha_n must exceed beta
                big_beta["alpha_n"] = 0.9 * float(np.finfo(dtype).max)
            sets += [{**d, a: tiny, "beta": tiny}, {**d, a: big}, big_beta]
    return sets


def test_some_activation_is_prepared():
    assert "xielu" in PREPARED


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("name", PREPARED)
def test_prepared_equals_exact_on_the_cpu(name, dtype):
    spec = REGISTRY[name]
    rb = cpu._rebinder()
    sig = numba.from_dtype(np.dtype(dtype))
    n_p = len(spec.params)
    for which in _which_keys(spec):
        prep, fn, nh = spec.prepared_for(which)
        exact = numba.vectorize([sig(*[sig] * (1 + n_p))])(rb(spec.kernels()[which]))
        prepared = numba.vectorize([sig(*[sig] * (1 + n_p + nh))])(rb(fn))
        prep_c = rb(prep)
        for params in _param_sets(spec, dtype):
            pv = [dtype(params[p]) for p in spec.param_names]
            x = _points(spec, dtype, params)
            pre = prep_c(*pv)
            assert len(pre) == nh
            with np.errstate(all="ignore"):
                _same(
                    prepared(x, *pv, *[dtype(h) for h in pre]),
                    exact(x, *pv),
                    f"{name} {which} {np.dtype(dtype).name} {params}",
                )


def _host_source(spec):
    parts = [cxx.preamble(spec)]
    ps = spec.param_names
    for which in _which_keys(spec):
        for ct in ("float", "double"):
            args = ", ".join(f"{ct} {p}" for p in ps)
            call = ", ".join(["x[i]", *ps])
            cw = cxx.entry_suffix(which)
            parts.append(
                f'extern "C" void both_{which}_{ct}(const {ct}* x, {ct}* a, {ct}* b, long n, {args}) {{\n'
                f"  const auto pre = iglu_np::{spec.name}_{cw}_prep<{ct}>({', '.join(ps)});\n"
                f"  for (long i = 0; i < n; ++i) {{\n"
                f"    a[i] = iglu_np::{spec.name}_{cw}_at<{ct}>({call}, pre);\n"
                f"    b[i] = iglu_np::{spec.name}_{cw}<{ct}>({call});\n  }}\n}}\n"
            )
    return "\n".join(parts)


@pytest.mark.parametrize("name", PREPARED)
def test_prepared_equals_exact_in_host_cxx(name):
    """The C++ entry points the CuPy vector kernels call: ``<name>_<which>_at`` given
    ``<name>_<which>_prep`` equals ``<name>_<which>`` (bulk path included) bit for bit."""
    ok, gxx = H.gxx_status()
    if not ok:
        pytest.skip(gxx)
    spec = REGISTRY[name]
    lib, log = H.compile_host(_host_source(spec), f"{name}_prepared")
    assert not log, log
    for dtype, ct, cty in (
        (np.float32, "float", ctypes.c_float),
        (np.float64, "double", ctypes.c_double),
    ):
        ptr = ctypes.POINTER(cty)
        for which in _which_keys(spec):
            f = getattr(lib, f"both_{which}_{ct}")
            f.argtypes = [ptr, ptr, ptr, ctypes.c_long] + [cty] * len(spec.params)
            for params in _param_sets(spec, dtype):
                x = np.ascontiguousarray(_points(spec, dtype, params))
                a, b = np.empty_like(x), np.empty_like(x)
                f(
                    x.ctypes.data_as(ptr),
                    a.ctypes.data_as(ptr),
                    b.ctypes.data_as(ptr),
                    x.size,
                    *[float(dtype(params[p])) for p in spec.param_names],
                )
                _same(a, b, f"{name} {which} {ct} {params}")


# _expm1_dw (the float64 root's e^-hi, and expm1(eps) for eps < -1) scales by 2^-16 first
# (compiled as v 2^-16 or -hi (-2^-16)): its PTX constant marks each inlined copy.
_ROOT_MARK = re.compile(r"0d[3B]EF0000000000000")


@pytest.mark.parametrize("kind,copies", [("bwd", 1), ("dx", 1), ("fwd", 1), ("bwdall", 2)])
def test_xielu_float64_vector_kernels_compute_the_root_once(kind, copies):
    """One copy per prepared part that needs it (the root for dx; expm1(eps) for the value
    and d_alpha_n), all before the grid-stride loop."""
    ok, why = H.nvrtc_status()
    if not ok:
        pytest.skip(why)
    spec = REGISTRY["xielu"]
    src = (
        cxx.fused_backward_source(spec, np.float64)
        if kind == "bwdall"
        else cxx.vector_kernel_source(spec, kind, np.float64)
    )
    ptx, _ = H.nvrtc_compile(src.source, (9, 0), options=cxx.NVRTC_OPTIONS)
    body = ptx[ptx.index(f".entry {src.name}") :]
    marks = [m.start() for m in _ROOT_MARK.finditer(body)]
    assert len(marks) == copies, f"{src.name}: {len(marks)} copies of _expm1_dw, not {copies}"
    # and before the grid-stride loop: the first global load comes after them
    assert max(marks) < body.index("ld.global")


def test_xielu_numba_cuda_kernels_call_prep_before_their_loop():
    from iglu_np.backends.cuda import numba_cuda as nc

    spec = REGISTRY["xielu"]
    for kind, arrays, ndim in (("bwd", (False,) * 4, 1), ("dx", (False,) * 4, 2)):
        src = nc._sources._source(spec, kind, arrays, ndim, False)[1]
        assert src.index("_prep(p0, p1, p2, p3)") < src.index("while i"), src
        assert src.count("_prep(") == 1
    # per-element parameters: no prepared part (its values differ per element)
    assert "_prep" not in nc._sources._source(spec, "bwd", (False, True, False, False), 1, False)[1]
    assert nc._sources._source_all(spec, 1)[1].count("_prep(") == 1


def test_xielu_numba_cuda_float64_kernel_holds_one_root():
    """numba-cuda's offline PTX of the float64 backward: one inlined copy of the root (the
    prepared part; four or more were it computed per element of the unrolled loop)."""
    from iglu_np.backends.cuda import numba_cuda as nc

    H.skip_where_numba_cuda_cannot_compile()
    try:
        ptx = nc.compile_ptx("xielu", "bwd", np.float64)
    except Exception as e:  # no numba-cuda toolchain here
        pytest.skip(
            f"compile_ptx unavailable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        )
    assert len(_ROOT_MARK.findall(ptx)) == 1


# _quad_scale's smallest threshold, 2^-960, marks its compares
_SCALE_MARK = re.compile(r"0d03F0000000000000")


@pytest.mark.parametrize("name", ["xielu", "xiprelu"])
def test_quad_scale_before_the_grid_stride_loop(name):
    """x (a x + beta)'s float64 scaling depends on the parameters alone: in the vector
    forward it is computed before the first load, not per element (left to NVVM, it stays
    in the loop behind short-circuit branches: xIELU's H100 forward then takes ~1.3x the
    copy limit instead of ~1x). float32 needs none (it takes float64): no compare of it
    remains."""
    ok, why = H.nvrtc_status()
    if not ok:
        pytest.skip(why)
    for dtype in DT:
        src = cxx.vector_kernel_source(REGISTRY[name], "fwd", dtype)
        ptx, _ = H.nvrtc_compile(src.source, (9, 0), options=cxx.NVRTC_OPTIONS)
        body = ptx[ptx.index(f".entry {src.name}") :]
        marks = [m.start() for m in _SCALE_MARK.finditer(body)]
        if dtype == np.float32:
            assert not marks and "0f0D800000" not in body, src.name
        else:
            assert marks and max(marks) < body.index("ld.global"), (src.name, len(marks))
