"""Numba CUDA backend, verified without a GPU.

* every kernel compiles to PTX (sm_80, sm_90) through numba-cuda's NVVM wheel;
* PTX hygiene: no local memory or spills (nvJitLink runs ptxas), no flush-to-zero and no
  approximate hardware math (the kernels compile _vmath's elementary functions, not
  libdevice's), float32 kernels have no float64 instruction unless the Python asks for
  one, elementwise kernels are single-pass (one load per input and one store per element);
* the kernels run under the CUDA simulator (a subprocess with NUMBA_ENABLE_CUDASIM=1) and
  match the CPU ufuncs: odd sizes, non-contiguous input, broadcast parameter arrays,
  float16, out=, backward_params.

The full compile matrix (every kind x dtype x cc x scalar/array parameters, plus the device
functions on their own) is ``slow``; by default every activation's fwd and bwd kernels
and the whole IGLU matrix are compiled.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import iglu_np
from iglu_np._spec import REGISTRY  # populated by the iglu_np import above
from iglu_np.backends import cxx

from . import gpu_helpers as H

HERE = Path(__file__).resolve().parent
IGLU_FAMILY = ("iglu", "iglu_approx", "z_gate", "z_approx")


def _numba_cuda_or_skip():
    try:
        import numba_cuda  # noqa: F401
        from numba import cuda  # noqa: F401
    except ImportError as e:
        pytest.skip(f"numba-cuda not installed ({e}); pip install -e .[gpu-verify]")
    from iglu_np.backends import numba_cuda as nc

    if nc.simulator():
        pytest.skip("this process runs the CUDA simulator; PTX needs the real target")
    H.skip_where_numba_cuda_cannot_compile()
    return nc


@pytest.fixture(scope="module")
def nc():
    nc = _numba_cuda_or_skip()
    try:
        nc.compile_ptx("iglu", "fwd", np.float32, cc=(8, 0))
    except Exception as e:  # NVVM wheel missing: say so instead of failing every case
        pytest.skip(f"numba-cuda cannot compile PTX here ({type(e).__name__}: {e}); "
                    "pip install 'numba-cuda[cu13]'")
    return nc


def _kinds(spec):
    from iglu_np.backends.numba_cuda import _kinds

    return _kinds(spec)


def _default_cases():
    out = []
    for name in sorted(REGISTRY):
        spec = REGISTRY[name]
        if name in IGLU_FAMILY and name in ("iglu", "iglu_approx"):
            for kind in _kinds(spec):
                for dt in ("float32", "float64"):
                    out.append((name, kind, dt, (9, 0)))
            out += [(name, "fwd", "float32", (8, 0)), (name, "bwd", "float32", (8, 0))]
        else:
            out += [(name, "fwd", "float32", (9, 0)), (name, "bwd", "float32", (9, 0))]
    return out


def _full_cases():
    out = []
    for name in sorted(REGISTRY):
        for kind in _kinds(REGISTRY[name]):
            for dt in ("float32", "float64"):
                for cc in H.ARCHS:
                    out.append((name, kind, dt, cc))
    return out


def _check_hygiene(ptx, name, kind, dt, arrays, exact=True):
    st = H.ptx_stats(ptx)
    assert st["local"] == 0, f"{name}.{kind} {dt}: PTX uses local memory"
    # _vmath's elementary functions, not libdevice's: its float32 exp is ex2.approx.ftz,
    # which flushed subnormal results (silu, mish, gelu_tanh tails) to zero
    assert st["ftz"] == 0, f"{name}.{kind} {dt}: flush-to-zero instructions"
    assert st["mufu"] == 0, f"{name}.{kind} {dt}: approximate hardware math"
    if dt == "float32" and not kind.startswith("sum") and not cxx.asks_float64(REGISTRY[name]):
        # sum_ kernels accumulate in float64 on purpose (see numba_cuda docstring); so does
        # the float32 hypot that the Python asks for (cxx.asks_float64)
        assert st["f64_ops"] == 0, f"{name}.{kind} float32 kernel has float64 instructions"
    if not kind.startswith("sum"):
        n_data = 2 if kind.startswith("bwd") else 1
        H.assert_single_pass(ptx, n_data + sum(arrays), f"{name}.{kind} {dt}",
                             n_always=None if exact else n_data)
    return st


def _ptxas_check(ptx, cc):
    ok, why = H.nvjitlink_status()
    if not ok:
        return None
    info = H.ptxas_info(ptx, cc)
    spills = H.spill_summary(info)
    assert spills == (0, 0, 0), f"ptxas reports spills/stack (store, load, frame) = {spills}:\n{info}"
    return info


@pytest.mark.parametrize("name,kind,dt,cc", _default_cases(), ids=lambda v: str(v).replace(" ", ""))
def test_kernel_ptx(nc, name, kind, dt, cc):
    arrays = (False,) * len(REGISTRY[name].params)
    ptx = nc.compile_ptx(name, kind, dt, cc=cc, arrays=arrays)
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    _check_hygiene(ptx, name, kind, dt, arrays)
    _ptxas_check(ptx, cc)


@pytest.mark.slow
@pytest.mark.parametrize("name,kind,dt,cc", _full_cases(), ids=lambda v: str(v).replace(" ", ""))
def test_kernel_ptx_full_matrix(nc, name, kind, dt, cc):
    n = len(REGISTRY[name].params)
    for arrays in {(False,) * n, (True,) * n}:
        ptx = nc.compile_ptx(name, kind, dt, cc=cc, arrays=arrays)
        _check_hygiene(ptx, name, kind, dt, arrays, exact=False)
        _ptxas_check(ptx, cc)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_device_functions_compile_alone(nc, name):
    from numba import cuda
    from numba.core import types

    spec = REGISTRY[name]
    rb = nc._rebinder()
    for which, fn in spec.kernels().items():
        for t in (types.float32, types.float64):
            sig = t(*([t] * (1 + len(spec.params))))
            for cc in H.ARCHS:
                with nc.offline_device(cc):  # its helpers compile for "the" device
                    ptx, _ = cuda.compile_ptx(rb.rebound(fn), sig, device=True, cc=cc)
                assert ".func" in ptx and ".local" not in ptx, (name, which)


def test_float16_and_nd_kernels_compile(nc):
    # float16 data (computed in float32), 3-D strided views, array parameters
    ptx = nc.compile_ptx("iglu", "bwd", "float32", data_dtype="float16")
    st = _check_hygiene(ptx, "iglu", "bwd", "float32", (False,))
    assert st["f64_ops"] == 0
    ptx = nc.compile_ptx("iglu", "fwd", "float32", ndim=3, arrays=(True,))
    _check_hygiene(ptx, "iglu", "fwd", "float32", (True,))
    _ptxas_check(ptx, (9, 0))
    ptx = nc.compile_ptx("iglu", "sum_sigma", "float32", arrays=(False,))
    assert "atom.global.add.f64" in ptx or "red.global.add.f64" in ptx
    assert ".shared" in ptx


def test_fma_two_prod_override_compiles(nc):
    """two_prod on CUDA (its _math.fma bound to llvm.fma) compiles to an FMA; numerics are
    covered by the GPU tests and, for its host twin, by the g++ build."""
    from numba import cuda
    from numba.core import types

    from iglu_np import _math

    rb = nc._rebinder()
    tp = rb(_math.two_prod)

    def k(a, b, out):
        p, e = tp(a[0], b[0])
        out[0] = p
        out[1] = e

    arr = types.Array(types.float32, 1, "C")
    ptx, _ = cuda.compile_ptx(k, types.void(arr, arr, arr), cc=(9, 0))
    assert "fma.rn.f32" in ptx and ".f64" not in ptx


def test_horner_is_unrolled(nc):
    """iglu.dx evaluates one of two polynomials in v^2 (float32: 7 and 9 terms) and atan's
    (5 terms) per element: straight-line FMAs, not a per-coefficient switch (which NVVM
    left as hundreds of branches). NVVM may fold the two tail polynomials into one with
    selected coefficients (8 FMAs and 8 selects), so at least 8 + 4 FMAs per element. The
    1-D kernel has the device function inlined once per element it keeps in flight (four)
    plus in its remainder loop, which NVVM unrolls up to three times (seen since IGLU's
    division by pi became an fma): one load of x each."""
    ptx = nc.compile_ptx("iglu", "dx", "float32")
    ops = H.ptx_instructions(ptx)
    per = sum(o.startswith("ld.global") for o in ops)
    assert 5 <= per <= 8
    assert sum(o.startswith("fma") for o in ops) >= 12 * per
    assert sum(o.startswith("bra") for o in ops) < 8 * per
    assert len(ops) < 150 * per


# --------------------------------------------------------------------------- pure Python parts
def test_collapse_merges_contiguous_dims():
    from iglu_np.backends.numba_cuda import collapse

    # same-shape C-contiguous operands and a scalar-broadcast one -> 1-D
    shape, st = collapse((4, 5, 6), [[120, 24, 4], [0, 0, 0]])
    assert shape == (120,) and st == [(4,), (0,)]
    # per-channel parameter on NCHW keeps the channel axis
    shape, st = collapse((2, 3, 4, 5), [[240, 80, 20, 4], [0, 4, 0, 0]])
    assert shape == (2, 3, 20) and st == [(240, 80, 4), (0, 4, 0)]
    # every other column stays strided, length-1 dims vanish
    shape, st = collapse((5, 1, 7), [[112, 0, 16], [0, 0, 4]])
    assert shape == (5, 7) and st == [(112, 16), (0, 4)]
    assert collapse((1, 1), [[0, 0]]) == ((1,), [(0,)])


def test_handles_without_importing_cuda():
    from iglu_np.backends import numba_cuda as nc

    class CAI:
        __cuda_array_interface__ = {"shape": (1,), "typestr": "<f4", "data": (0, False), "version": 3}

    assert nc.handles(CAI())
    assert not nc.handles(np.zeros(3))
    assert not nc.handles(1.0)


def test_status_reports_reason():
    from iglu_np.backends import numba_cuda as nc

    usable, why = nc.status()
    assert isinstance(usable, bool) and why
    if not usable:
        assert "numba-cuda" in why


def test_unknown_kind_and_dtype_errors():
    pytest.importorskip("numba_cuda")
    from iglu_np.backends import numba_cuda as nc

    with pytest.raises(KeyError, match="no kernel kind"):
        nc.kernel_python("iglu", "d_alpha", "float32")
    with pytest.raises(TypeError, match="float32 or float64"):
        nc.kernel_python("iglu", "fwd", "int32")


# --------------------------------------------------------------------------- simulator
@pytest.fixture(scope="module")
def sim_results(tmp_path_factory):
    pytest.importorskip("numba_cuda", reason="numba-cuda not installed; pip install -e .[gpu-verify]")
    out = tmp_path_factory.mktemp("sim") / "sim.npz"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    root = str(HERE.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    # IGLU_NP_SIM_ONLY=iglu,gelu restricts the child to a few activations (local runs)
    only = [n for n in os.environ.get("IGLU_NP_SIM_ONLY", "").split(",") if n]
    r = subprocess.run(
        [sys.executable, str(HERE / "gpu_helpers_sim.py"), str(out), *only],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert r.returncode == 0, f"simulator child failed:\n{r.stdout}\n{r.stderr}"
    d = np.load(out)
    return {k: d[k] for k in d.files}


def _case_ids():
    ids = []
    for name in sorted(REGISTRY):
        for c in ("1d_float32", "1d_float64", "2d_float32", "2d_float64", "1d_float16"):
            ids.append((name, c))
    return ids


# Max ulp difference to the CPU ufunc. The simulator evaluates math.* with libm, the CPU
# with iglu_np's vectorised math: two implementations each within ~3.6 ulp of the truth
# (the accuracy harness) differ by up to ~7 ulp (tanhshrink dx at x=-0.719: CPU 2.4 ulp
# high, libm 0.5 low), as in test_gpu_cxx.CROSS_ULP. Reductions sum in a different order
# and precision than numpy (checked separately below).
ULP = {"float32": 8, "float64": 8, "float16": 1}


def _compare(got, want, dt, what):
    got = np.asarray(got)
    want = np.asarray(want).astype(got.dtype)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    d = H.ulp_diff(got, want)
    # differences at the subnormal level (results that underflow) are not ulp-meaningful
    with np.errstate(all="ignore"):
        d = np.where(np.abs(got - want) <= 4 * np.finfo(got.dtype).tiny, 0.0, d)
    worst = np.nanmax(d) if d.size else 0.0
    assert worst <= ULP[dt], f"{what}: {worst} ulp; got {got.ravel()[np.argmax(d)]!r}, cpu {want.ravel()[np.argmax(d)]!r}"


# One worker runs the simulator child (every activation, as Python: the costly fixture);
# the PTX tests above spread over the workers, each paying the nc fixture's one compile.
@pytest.mark.xdist_group("numba_cuda_simulator")
@pytest.mark.parametrize("name,case", _case_ids(), ids=lambda v: str(v))
def test_simulator_matches_cpu(sim_results, name, case):
    pre = f"{name}/{case}/"
    if not any(k.startswith(pre) for k in sim_results):
        pytest.skip(f"{name} not run by the simulator child (IGLU_NP_SIM_ONLY)")
    err = sim_results.get(pre + "error")
    assert err is None, f"simulator run failed: {err}"
    act = iglu_np.get(name)
    r = {k[len(pre):]: v for k, v in sim_results.items() if k.startswith(pre)}
    x = r["x"]
    dt = case.split("_", 1)[1]
    if dt == "float16":
        np.testing.assert_array_equal(r["fwd"].dtype, np.float16)
        _compare(r["fwd"], act(x), dt, f"{name} fwd f16")
        _compare(r["dx"], act.dx(x), dt, f"{name} dx f16")
        return
    ps = {p: r["param_" + p] for p in act.param_names}
    ps = {p: (float(v) if v.ndim == 0 else v) for p, v in ps.items()}
    g = r["g"]
    _compare(r["fwd"], act(x, **ps), dt, f"{name} fwd")
    _compare(r["dx"], act.dx(x, **ps), dt, f"{name} dx")
    _compare(r["bwd"], act.backward(x, g, **ps), dt, f"{name} bwd")
    for p, v in act.dparams(x, **ps).items():
        _compare(r["d_" + p], v, dt, f"{name} d_{p}")
    if "fwd_out" in r:
        _compare(r["fwd_out"], act(x, **ps), dt, f"{name} fwd out=")
    if "all_bwd" in r:  # backward_all's one pass: grad_x as backward, sums as below
        _compare(r["all_bwd"], act.backward(x, g, **ps), dt, f"{name} backward_all grad_x")
        for p in act.param_names:
            a, b = np.float64(r["all_sum_" + p]), np.float64(r["sum_" + p])
            assert r["all_sum_" + p].shape == () and (a == b or abs(a - b) <= 8 * np.finfo(x.dtype).eps * abs(b)
                                                      or not np.isfinite(b)), (name, p, a, b)
    # backward_params: the simulator sums in float64; compare with a float64 CPU sum of
    # the CPU elementwise gradients, relative to the sum of magnitudes.
    for p in act.param_names:
        got = r["sum_" + p]
        full = np.asarray(act.backward_params(x.astype(np.float64), g.astype(np.float64), **{k: (np.asarray(v, np.float64) if not isinstance(v, float) else v) for k, v in ps.items()})[p])
        assert got.shape == np.shape(ps[p]) and got.dtype == x.dtype, (got.shape, got.dtype)
        with np.errstate(all="ignore"):
            terms = np.abs(act._ufunc("bwd_" + p)(x.astype(np.float64), g.astype(np.float64), *[np.asarray(ps[q], np.float64) for q in act.param_names]))
        fin = np.isfinite(full)
        with np.errstate(invalid="ignore"):  # inf - inf where both sums overflowed
            diff = np.abs(got.astype(np.float64) - full)
        scale = np.sum(np.where(np.isfinite(terms), terms, 0.0)) + 1e-300
        eps = np.finfo(x.dtype).eps
        bad = fin & ~(diff <= 8 * eps * scale)
        assert not bad.any(), f"{name} backward_params[{p}]: got {got}, cpu {full}"
        np.testing.assert_array_equal(np.isnan(got), np.isnan(full))


_OVERLAP_CHILD = """
import warnings
import numpy as np
warnings.simplefilter("ignore")
from numba import cuda
import iglu_np
b = np.arange(1.0, 42.0)
db = cuda.to_device(b)
v = db[1:]
r = iglu_np.relu.backward(v, db[:-1], out=v)  # out = grad_out shifted by one element
assert r is v and np.array_equal(v.copy_to_host(), np.arange(1.0, 41.0)), v.copy_to_host()[:5]
d2 = cuda.to_device(np.linspace(-3, 3, 40))
iglu_np.iglu(d2, out=d2)  # exactly aliased: in place
assert np.allclose(d2.copy_to_host(), iglu_np.iglu(np.linspace(-3, 3, 40)))
# a strided out= interleaved with x (overlapping extents), and a float32 out= of float64 x
h = np.linspace(-3, 3, 40)
d3 = cuda.to_device(h)
r = iglu_np.iglu(d3[::2], out=d3[1::2])
assert r is not None and np.allclose(d3.copy_to_host()[1::2], iglu_np.iglu(h[::2]))
assert np.array_equal(d3.copy_to_host()[::2], h[::2])
d4 = cuda.to_device(np.zeros(40, np.float32))
r = iglu_np.iglu(cuda.to_device(h), out=d4)
assert np.allclose(d4.copy_to_host(), iglu_np.iglu(h).astype(np.float32))
print("ok")
"""


def test_out_overlapping_an_operand_is_buffered_in_the_simulator():
    """#20: an out= that overlaps grad_out as a shifted view gives numpy's answer on the
    Numba CUDA backend too (computed into a temporary, then copied)."""
    pytest.importorskip("numba_cuda", reason="numba-cuda not installed; pip install -e .[gpu-verify]")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    r = subprocess.run([sys.executable, "-c", _OVERLAP_CHILD], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]
