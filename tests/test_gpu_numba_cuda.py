"""Numba CUDA backend, verified without a GPU.

* every kernel compiles to PTX (sm_80, sm_90) through numba-cuda's NVVM wheel;
* PTX hygiene: no local memory or spills (nvJitLink runs ptxas), no flush-to-zero and no
  approximate hardware math (the kernels compile _vmath's elementary functions, not
  libdevice's), float32 kernels have no float64 instruction unless the Python asks for
  one, elementwise kernels are single-pass (one load per input and one store per element);
* the kernels run under the CUDA simulator (a subprocess with NUMBA_ENABLE_CUDASIM=1) and
  match the CPU ufuncs: odd sizes, non-contiguous input, broadcast parameter arrays,
  float16, out=, backward_params;
* the vector form (16-byte loads and stores, a scalar tail) in PTX, and in the simulator
  bit for bit against the general form (misaligned views) at every tail length; the
  thin per-call path's choices (pointers, parameters, what it leaves to the general
  path, its errors) with fake device arrays and a recording kernel.

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
from iglu_np.backends.codegen import cxx

from . import gpu_helpers as H

HERE = Path(__file__).resolve().parent


def _numba_cuda_or_skip():
    try:
        import numba_cuda  # noqa: F401
        from numba import cuda  # noqa: F401
    except ImportError as e:
        pytest.skip(f"numba-cuda not installed ({e}); pip install -e .[gpu-verify]")
    from iglu_np.backends.cuda import numba_cuda as nc

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
        pytest.skip(
            f"numba-cuda cannot compile PTX here ({type(e).__name__}: {e}); "
            "pip install 'numba-cuda[cu13]'"
        )
    return nc


def _kinds(spec):
    from iglu_np.backends.cuda.numba_cuda._sources import _kinds

    return _kinds(spec)


def _default_cases():
    out = []
    for name in sorted(REGISTRY):
        spec = REGISTRY[name]
        if name == "iglu":
            for kind in _kinds(spec):
                for dt in ("float32", "float64"):
                    out.append((name, kind, dt, (9, 0)))
            out += [(name, "fwd", "float32", (8, 0)), (name, "bwd", "float32", (8, 0))]
        elif name in H.GPU_DEFAULT:
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
        H.assert_single_pass(
            ptx, n_data + sum(arrays), f"{name}.{kind} {dt}", n_always=None if exact else n_data
        )
    return st


def _ptxas_check(ptx, cc):
    ok, why = H.nvjitlink_status()
    if not ok:
        return None
    info = H.ptxas_info(ptx, cc)
    spills = H.spill_summary(info)
    assert spills == (0, 0, 0), (
        f"ptxas reports spills/stack (store, load, frame) = {spills}:\n{info}"
    )
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
    rb = nc._device_functions._rebinder()
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

    rb = nc._device_functions._rebinder()
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
    from iglu_np.backends.cuda.numba_cuda import collapse

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
    from iglu_np.backends.cuda import numba_cuda as nc

    class CAI:
        __cuda_array_interface__ = {
            "shape": (1,),
            "typestr": "<f4",
            "data": (0, False),
            "version": 3,
        }

    assert nc.handles(CAI())
    assert not nc.handles(np.zeros(3))
    assert not nc.handles(1.0)


def test_status_reports_reason():
    from iglu_np.backends.cuda import numba_cuda as nc

    usable, why = nc.status()
    assert isinstance(usable, bool) and why
    if not usable:
        assert "numba-cuda" in why


def test_unknown_kind_and_dtype_errors():
    pytest.importorskip("numba_cuda")
    from iglu_np.backends.cuda import numba_cuda as nc

    with pytest.raises(KeyError, match="no kernel kind"):
        nc.kernel_python("iglu", "d_alpha", "float32")
    with pytest.raises(TypeError, match="float32 or float64"):
        nc.kernel_python("iglu", "fwd", "int32")


# --------------------------------------------------------------------------- simulator
# The simulator runs the kernels as Python (seconds per activation): a few activations
# by default, covering the kernel shapes (parameters 0 to 4, bulk forms, float16), every
# one with -m slow. The child runs those the session selected.
SIM_DEFAULT = {"iglu", "relu", "xielu", "hardtanh"}


def _sim_names(session) -> list:
    names = {
        item.callspec.params["name"]
        for item in session.items
        if item.originalname == "test_simulator_matches_cpu"
    }
    return sorted(names)


@pytest.fixture(scope="module")
def sim_results(tmp_path_factory, request):
    pytest.importorskip(
        "numba_cuda", reason="numba-cuda not installed; pip install -e .[gpu-verify]"
    )
    out = tmp_path_factory.mktemp("sim") / "sim.npz"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    root = str(HERE.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    # IGLU_NP_SIM_ONLY=iglu,gelu restricts the child to a few activations (local runs)
    only = [n for n in os.environ.get("IGLU_NP_SIM_ONLY", "").split(",") if n]
    only = only or _sim_names(request.session)
    r = subprocess.run(
        [sys.executable, str(HERE / "gpu_helpers_sim.py"), str(out), *only],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, f"simulator child failed:\n{r.stdout}\n{r.stderr}"
    d = np.load(out)
    return {k: d[k] for k in d.files}


def _case_ids():
    ids = []
    for name in sorted(REGISTRY):
        for c in ("1d_float32", "1d_float64", "2d_float32", "2d_float64", "1d_float16"):
            ids.append(
                (name, c) if name in SIM_DEFAULT else pytest.param(name, c, marks=pytest.mark.slow)
            )
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
    assert worst <= ULP[dt], (
        f"{what}: {worst} ulp; got {got.ravel()[np.argmax(d)]!r}, cpu {want.ravel()[np.argmax(d)]!r}"
    )


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
    r = {k[len(pre) :]: v for k, v in sim_results.items() if k.startswith(pre)}
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
            assert r["all_sum_" + p].shape == () and (
                a == b or abs(a - b) <= 8 * np.finfo(x.dtype).eps * abs(b) or not np.isfinite(b)
            ), (name, p, a, b)
    # backward_params: the simulator sums in float64; compare with a float64 CPU sum of
    # the CPU elementwise gradients, relative to the sum of magnitudes.
    for p in act.param_names:
        got = r["sum_" + p]
        full = np.asarray(
            act.backward_params(
                x.astype(np.float64),
                g.astype(np.float64),
                **{
                    k: (np.asarray(v, np.float64) if not isinstance(v, float) else v)
                    for k, v in ps.items()
                },
            )[p]
        )
        assert got.shape == np.shape(ps[p]) and got.dtype == x.dtype, (got.shape, got.dtype)
        with np.errstate(all="ignore"):
            terms = np.abs(
                act._ufunc("bwd_" + p)(
                    x.astype(np.float64),
                    g.astype(np.float64),
                    *[np.asarray(ps[q], np.float64) for q in act.param_names],
                )
            )
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
    pytest.importorskip(
        "numba_cuda", reason="numba-cuda not installed; pip install -e .[gpu-verify]"
    )
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    r = subprocess.run(
        [sys.executable, "-c", _OVERLAP_CHILD], capture_output=True, text=True, env=env, timeout=600
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]


# --------------------------------------------------------------------------- vector form
# (name, kind, compute dtype, data dtype): one float16 case (eight halves per 16-byte
# access), float64 (two per access), a prepared kernel (xielu) and a two-input one (bwd)
VECTOR_CASES = [
    ("iglu", "fwd", "float32", "float32"),
    ("relu", "fwd", "float32", "float32"),
    ("iglu", "bwd", "float32", "float16"),
    ("gelu_tanh", "bwd", "float64", "float64"),
    ("xielu", "dx", "float32", "float32"),
]
VECTOR_OPS = {
    "float32": ("ld.global.v4.f32", "st.global.v4.f32"),
    "float64": ("ld.global.v2.f64", "st.global.v2.f64"),
    # halves move as 32-bit words: NVVM splits a vector of eight halves in two
    "float16": ("ld.global.v4.u32", "st.global.v4.u32"),
}


# every case on raw pointers (the thin path's launch), the first on 1-D arrays too (the
# general path's and the simulator's signature: same body)
@pytest.mark.parametrize(
    "name,kind,dt,ddt,pointers",
    [(*c, True) for c in VECTOR_CASES] + [(*VECTOR_CASES[0], False)],
    ids=lambda v: str(v),
)
def test_vector_form_ptx_loads_and_stores_16_bytes(nc, name, kind, dt, ddt, pointers):
    ptx = nc.compile_ptx(name, kind, dt, vector=True, pointers=pointers, data_dtype=ddt)
    ops = H.ptx_instructions(ptx)
    n_in = 2 if kind.startswith("bwd") else 1
    vld, vst = VECTOR_OPS[ddt]
    loads = [o for o in ops if o.startswith("ld.global")]
    stores = [o for o in ops if o.startswith("st.global")]
    # the loop's accesses are all vector ones (NVVM may unroll it: k copies); the only
    # scalar accesses are the tail's, one per input and one store
    assert sum(o == vld for o in loads) >= n_in and sum(o == vst for o in stores) >= 1, (
        loads,
        stores,
    )
    assert sum(o == vld for o in loads) == n_in * sum(o == vst for o in stores)
    assert len(loads) - sum(o == vld for o in loads) == n_in, loads
    assert len(stores) - sum(o == vst for o in stores) == 1, stores
    _check_hygiene(ptx, name, kind, dt, (False,) * len(REGISTRY[name].params))
    _ptxas_check(ptx, (9, 0))


def test_vector_form_stores_float16_rounded_to_nearest(nc):
    ptx = nc.compile_ptx("iglu", "fwd", "float32", vector=True, pointers=True, data_dtype="float16")
    ops = H.ptx_instructions(ptx)
    cvt = [o for o in ops if o.startswith("cvt") and "f16.f32" in o]
    # eight lanes per (possibly unrolled) step and the tail's one, all round-to-nearest
    assert len(cvt) >= 9 and len(cvt) % 8 == 1 and all(o == "cvt.rn.f16.f32" for o in cvt), cvt


def test_vector_source_shape():
    from iglu_np.backends.cuda import numba_cuda as nc

    spec = REGISTRY["iglu"]
    _, src = nc._sources._source_vec(spec, "bwd", 4, 16, mlir=False)
    assert src.count("_vload(") == 2 and src.count("_vstore(") == 1 and "nv = n // 4" in src
    assert "if t < n:" in src and "out[t] = _COMPUTE(g[t]) * _fn(_COMPUTE(x[t]), p0)" in src
    # numba-cuda-mlir: its aligned vector load/store, elements as attributes, no tuples
    _, src = nc._sources._source_vec(spec, "fwd", 4, 8, mlir=True)
    assert "cuda.vector.load(x, j * 4, 4, 8)" in src and "_xv.w" in src
    assert "cuda.vector.store(out, j * 4, _OUTVEC(y0, y1, y2, y3), 8)" in src
    assert "(" + "y0, y1" not in src.replace("_OUTVEC(y0, y1", "")


def test_vector_form_takes_only_elementwise_1d_scalar_parameter_kernels():
    pytest.importorskip("numba_cuda")
    from iglu_np.backends.cuda import numba_cuda as nc

    for args in (("sum_sigma", (False,), 1), ("fwd", (True,), 1), ("fwd", (False,), 2)):
        with pytest.raises(ValueError, match="vector form"):
            nc.kernel_python("iglu", args[0], "float32", args[1], args[2], vector="float32")


_VECTOR_SIM_CHILD = r"""
import warnings
import numpy as np
warnings.simplefilter("ignore")
np.seterr(all="ignore")
from numba import cuda
import iglu_np
from iglu_np.backends.cuda import numba_cuda as nc

def sbits(a):
    a = np.asarray(a)
    return a.view("u%d" % a.dtype.itemsize)

def misaligned(h):
    # the same values one element into a buffer: not 16-byte aligned, the general form
    buf = cuda.to_device(np.concatenate([h[:1], h]))
    return buf[1:]

checked = 0
for name, ps in (("iglu", {"sigma": 1.5}), ("gelu_tanh", {}), ("relu", {}), ("xielu", {})):
    act = iglu_np.get(name)
    for dt in (np.float32, np.float64, np.float16):
        for n in (1, 3, 7, 8, 9, 33, 101):
            rng = np.random.default_rng(n)
            h = (rng.standard_normal(n) * 4).astype(dt)
            gh = rng.standard_normal(n).astype(dt)
            dx, dg = cuda.to_device(h), cuda.to_device(gh)
            for kind, fn, args, margs in (
                ("fwd", act, (dx,), (misaligned(h),)),
                ("dx", act.dx, (dx,), (misaligned(h),)),
                ("bwd", act.backward, (dx, dg), (dx, misaligned(gh))),
            ):
                got = fn(*args, **ps).copy_to_host()
                ref = fn(*margs, **ps).copy_to_host()
                want = fn(*(a.copy_to_host() for a in args), **ps)
                assert got.dtype == want.dtype == ref.dtype, (name, kind, dt)
                assert np.array_equal(sbits(got), sbits(ref)), (name, kind, dt, n, got, ref)
                if name == "relu":  # no rounding anywhere: the CPU's bits
                    assert np.array_equal(sbits(got), sbits(want)), (name, kind, dt, n)
                else:
                    assert np.allclose(got, want, rtol=2e-3 if dt == np.float16 else 1e-5, atol=0), (name, kind, dt, n)
                checked += 1
            ran = {k[1] for k in nc._thin_path._plans if k[0] == name and k[2][0] == np.dtype(dt)}
            assert ran >= {"fwd", "dx", "bwd"}, ran  # the thin path ran
            # out=: aligned, exactly x (in place), and misaligned
            o = cuda.device_array(n, dt)
            assert act(dx, out=o, **ps) is o
            assert np.array_equal(sbits(o.copy_to_host()), sbits(act(misaligned(h), **ps).copy_to_host()))
            m = misaligned(np.zeros(n, dt))
            act(dx, out=m, **ps)
            assert np.array_equal(sbits(m.copy_to_host()), sbits(o.copy_to_host()))
            d2 = cuda.to_device(h)
            act(d2, out=d2, **ps)
            assert np.array_equal(sbits(d2.copy_to_host()), sbits(o.copy_to_host()))
# a 0-d parameter array: the general path, which takes the vector form too
d = cuda.to_device(np.linspace(-3, 3, 37).astype(np.float32))
a = iglu_np.iglu(d, sigma=np.array(1.5)).copy_to_host()
b = iglu_np.iglu(d, sigma=1.5).copy_to_host()
assert np.array_equal(a, b)
assert ("jit", "iglu", "fwd", "float32", (False,), 1, None, np.dtype(np.float32)) in nc._discovery._state
# bad parameters keep their errors, each time, and leave no plan
for _ in range(2):
    try:
        iglu_np.iglu(d, sigma=-1.0)
    except ValueError as e:
        assert "sigma" in str(e)
    else:
        raise AssertionError("sigma=-1 accepted")
assert not any(k[5] == (("sigma", -1.0),) for k in nc._thin_path._plans)
print("ok", checked)
"""


def test_vector_and_thin_paths_give_the_general_forms_bits_in_the_simulator():
    """Aligned contiguous calls (the thin path's vector kernel) against the same values
    one element into a buffer (not aligned: the general scalar form), bit for bit:
    sizes below, at and past one vector, tails of every length, float16/32/64, fwd, dx
    and bwd (a misaligned grad_out alone), out= aligned, misaligned and in place; relu
    bit for bit with the CPU, the rest close (the simulator computes with libm)."""
    pytest.importorskip(
        "numba_cuda", reason="numba-cuda not installed; pip install -e .[gpu-verify]"
    )
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = str(HERE.parent) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run(
        [sys.executable, "-c", _VECTOR_SIM_CHILD],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout[-2000:] + r.stderr[-3000:]
    assert int(r.stdout.split()[1]) == 4 * 3 * 7 * 3


# --------------------------------------------------------------------------- thin per-call path
class _CAI:
    """A device array as its CUDA array interface (never dereferenced here)."""

    def __init__(self, n, dtype=np.float32, address=1 << 20, strides=None, shape=None):
        self.__cuda_array_interface__ = {
            "shape": shape or (n,),
            "typestr": np.dtype(dtype).str,
            "strides": strides,
            "data": (address, False),
            "version": 3,
            "stream": None,
        }


class _Recorder:
    def __init__(self):
        self.configs, self.launches = [], []

    def __getitem__(self, config):
        self.configs.append(config)
        return lambda *args: self.launches.append(args)


@pytest.fixture
def thin(monkeypatch):
    """The thin path with what needs a GPU replaced: the pointer kernel records its
    launches, new outputs come from a fake allocator at a fixed aligned address; no
    toolchain is needed."""
    from iglu_np.backends.cuda import numba_cuda as nc

    monkeypatch.setattr(nc._discovery, "_cuda", lambda: None)
    monkeypatch.setattr(nc._discovery, "simulator", lambda: False)
    monkeypatch.setattr(nc._discovery, "_mlir", lambda: False)
    monkeypatch.setattr(nc._thin_path, "_plans", {})
    monkeypatch.setitem(nc._discovery._state, "sms", 132)
    rec, kernels = _Recorder(), []

    def kernel(name, kind, cdt, ddt):
        kernels.append((name, kind, np.dtype(cdt).name, np.dtype(ddt).name))
        return rec

    monkeypatch.setattr(nc._compile, "_pointer_kernel", kernel)
    monkeypatch.setattr(nc._thin_path, "_launch_stream", lambda cuda, s: ("stream", s))
    monkeypatch.setattr(
        nc._thin_path,
        "_allocator",
        lambda cuda, t, odt: lambda shape, x, s: (_CAI(shape[0], odt, 1 << 28), 1 << 28),
    )
    return nc, rec, kernels


def test_thin_path_launches_pointers_with_validated_parameters(thin):
    nc, rec, kernels = thin
    x, y = _CAI(1027), _CAI(1027, address=1 << 24)
    p = iglu_np._params.of("iglu")
    assert nc._thin_path._thin(p, "fwd", (x,), {"sigma": 1.5}, y) is y
    n, xp, sigma, op = rec.launches[-1]
    assert (n, xp, op) == (1027, 1 << 20, 1 << 24)
    assert type(sigma) is np.float32 and sigma == np.float32(1.5)
    # 257 vectors of 4 (the last one short): one thread each at least, never below 128 blocks
    assert rec.configs[-1] == (128, nc.THREADS, ("stream", None))
    # the same call again: the plan, the kernel and the launch configuration are reused
    nc._thin_path._thin(p, "fwd", (x,), {"sigma": 1.5}, y)
    assert len(kernels) == 1 and len(rec.configs) == 1 and len(rec.launches) == 2
    # a new output from the input library's allocator; the backward on two pointers
    r = nc._thin_path._thin(p, "bwd", (x, _CAI(1027, address=1 << 22)), {}, None)
    assert r.__cuda_array_interface__["data"][0] == 1 << 28
    assert rec.launches[-1][:3] == (1027, 1 << 20, 1 << 22) and rec.launches[-1][-1] == 1 << 28
    assert kernels[-1] == ("iglu", "bwd", "float32", "float32")


@pytest.mark.parametrize(
    "case",
    [
        "misaligned x",
        "misaligned out",
        "strided x",
        "mixed dtypes",
        "array parameter",
        "out overlapping x",
        "out of another dtype",
        "shapes differ",
        "bfloat16",
        "empty",
        "sum kind",
    ],
)
def test_thin_path_leaves_other_calls_to_the_general_path(thin, case):
    nc, rec, kernels = thin
    p = iglu_np._params.of("iglu")
    x, g, y = _CAI(64), _CAI(64, address=1 << 22), _CAI(64, address=1 << 24)
    data, params, out, kind = (x,), {}, y, "fwd"
    if case == "misaligned x":
        data = (_CAI(64, address=(1 << 20) + 4),)
    elif case == "misaligned out":
        out = _CAI(64, address=(1 << 24) + 8)
    elif case == "strided x":
        data = (_CAI(32, strides=(8,)),)
        out = _CAI(32, address=1 << 24)
    elif case == "mixed dtypes":
        data, kind = (x, _CAI(64, np.float16, 1 << 22)), "bwd"
    elif case == "array parameter":
        params = {"sigma": np.full(64, 1.5, np.float32)}
    elif case == "out overlapping x":
        out = _CAI(64, address=(1 << 20) + 64)
    elif case == "out of another dtype":
        out = _CAI(64, np.float64, 1 << 24)
    elif case == "shapes differ":
        data, kind = (x, _CAI(32, address=1 << 22)), "bwd"
    elif case == "bfloat16":
        data = (_CAI(64, np.dtype("V2")),)
    elif case == "empty":
        data, out = (_CAI(0),), _CAI(0, address=1 << 24)
    elif case == "sum kind":
        data, kind = (x, g), "sum_sigma"
    assert nc._thin_path._thin(p, kind, data, params, out) is None
    assert not rec.launches


def test_thin_path_runs_in_place_on_x_itself(thin):
    nc, rec, _ = thin
    x = _CAI(64)
    assert nc._thin_path._thin(iglu_np._params.of("iglu"), "fwd", (x,), {}, x) is x
    assert rec.launches[-1] == (64, 1 << 20, np.float32(1.0), 1 << 20)


def test_thin_path_keeps_the_parameter_errors_and_caches_no_plan(thin):
    nc, rec, _ = thin
    p = iglu_np._params.of("iglu")
    for _ in range(2):
        with pytest.raises(ValueError, match="sigma"):
            nc._thin_path._thin(p, "fwd", (_CAI(64),), {"sigma": -1.0}, None)
    with pytest.raises(TypeError, match="unexpected keyword"):
        nc._thin_path._thin(p, "fwd", (_CAI(64),), {"sigmaa": 1.0}, None)
    assert not nc._thin_path._plans and not rec.launches


def test_host_overhead_tool_runs_the_thin_path():
    r = subprocess.run(
        [
            sys.executable,
            str(HERE.parent / "tools" / "numba_cuda_host_overhead.py"),
            "--calls",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(HERE.parent)),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("us per call") == 6


_CPU_AFTER_CUDA = """
import numba, numpy as np
from iglu_np import _vmath as V
import iglu_np.backends.cuda.numba_cuda as nc

@numba.njit
def before(x):
    return V._fma(x, x, x)

before(0.5)
nc.compile_ptx("iglu", "fwd", np.float64, cc=(9, 0))  # types the fma in numba-cuda

@numba.njit
def after(x):
    return V._fma(x, x, 1.0 * x)

print(after(0.5))
"""


def test_cpu_functions_compiled_after_ptx_still_lower_the_fma(nc):
    """The CPU and numba-cuda type _vmath's intrinsics through separate objects: a CPU
    function compiled after a kernel's PTX lowers the fma (numba 0.62 found numba-cuda's
    implementation there and raised 'No definition for lowering')."""
    env = dict(os.environ, IGLU_NP_CUDA_TOOLCHAIN="numba-cuda")
    r = subprocess.run(
        [sys.executable, "-c", _CPU_AFTER_CUDA],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-1] == "0.75"
