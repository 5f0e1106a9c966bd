"""The CuPy kernels' C++, verified without a GPU.

* NVRTC compiles exactly the preamble and body the CuPy ElementwiseKernels use (wrapped
  as CuPy wraps them) for float16/32/64 data, every kernel kind, scalar and array
  parameters, with an empty log (no warnings): one program per (activation, data dtype,
  arch) holding all those kernels under distinct entry names. sm_80 for every activation
  (plus one sm_90 compile) by default, sm_90 for all with ``-m slow``. nvJitLink assembles
  each float32 program and ptxas reports no spills or stack;
* PTX hygiene, entry by entry: no local memory, no flush-to-zero, no FMA, no approximate
  hardware math (so the GPU computes the CPU's operations), float32 kernels have no
  float64 instruction unless the Python asks for one, forward kernels load x once and
  store once;
* the same preamble and body, host-compiled with g++ (IGLU_NP_HOST_DEVICE -> inline; one
  compile per activation and flag set), match the Numba CPU ufuncs bit for bit over
  log-spaced +-[1e-30, 1e6], the underflow tails, the dtype's extremes, subnormals, +-0,
  +-inf, nan and several parameter values, with FMA contraction off (as the kernels are
  compiled for the GPU): the C++ is translated from the same Python, elementary functions
  included (iglu_np.backends.codegen.cxx_translate). With FMA contraction on, within a few ulp, counted
  like the accuracy harness: in ulp of the spec's scale where the value cancels.

Every activation's kernels translate to C++; a completeness test fails naming any that
does not.
"""

from __future__ import annotations

import platform

import numpy as np
import pytest

import iglu_np
from iglu_np._spec import REGISTRY  # populated by the iglu_np import above
from iglu_np.backends.codegen import cxx

from . import accuracy as acc
from . import gpu_helpers as H

NAMES = sorted(REGISTRY)

NO_EXPLICIT_FMA = ("-DIGLU_NP_NO_EXPLICIT_FMA",)


def _spec_with_cxx(name):
    spec = REGISTRY[name]
    assert cxx.has_cxx(spec), (
        f"{name}: its kernels do not translate to C++ ({spec.module}; cxx.spec_cxx names the line)"
    )
    return spec


def test_every_spec_has_cxx():
    missing = [n for n in NAMES if not cxx.has_cxx(REGISTRY[n])]
    assert not missing, f"no C++ for {len(missing)} activations: {', '.join(missing)}"


def test_kernel_source_shape():
    spec = REGISTRY["iglu"]
    ks = cxx.kernel_source(spec, "fwd", np.float32)
    assert ks.name == "iglu_np_iglu_fwd"
    assert ks.in_params == "X x, float32 p_sigma" and ks.out_params == "Y y"
    assert ks.body == "y = (Y)(iglu_np::iglu_fwd<float>((float)x, p_sigma));"
    assert "\n" not in ks.body
    assert ks.preamble.startswith(cxx.prelude()) and cxx.spec_cxx(spec) in ks.preamble
    bwd = cxx.kernel_source(spec, "bwd_sigma", np.float64)
    assert bwd.name == "iglu_np_iglu_bwdsigma" and bwd.args == ("x", "g", "p_sigma")
    assert bwd.body == "y = (Y)((double)g * iglu_np::iglu_dsigma<double>((double)x, p_sigma));"
    names = {cxx.kernel_source(spec, k, np.float32).name for k in cxx.kernel_kinds(spec)}
    assert names == {"iglu_np_iglu_" + k for k in ("fwd", "dx", "bwd", "dsigma", "bwdsigma")}
    with pytest.raises(KeyError):
        cxx.kernel_source(spec, "d_alpha", np.float32)
    with pytest.raises(TypeError):
        cxx.kernel_source(spec, "fwd", np.float16)


def _bad_kernel(x, sigma):
    T = type(x)
    r = T(0.0)
    while r < x:  # no loops with a run-time trip count in a kernel
        r = r + sigma
    return r


def test_untranslatable_kernel_error_is_clear():
    from dataclasses import replace

    spec = replace(REGISTRY["iglu"], f=_bad_kernel)
    with pytest.raises(
        cxx.NoCxxError, match=r"iglu: .*_bad_kernel \(line \d+\): unsupported statement While"
    ):
        cxx.preamble(spec)
    assert not cxx.has_cxx(spec)


def test_header_is_in_package_data():
    assert cxx.HEADER.is_file()
    assert "IGLU_NP_HOST_DEVICE" in cxx.prelude()


# --------------------------------------------------------------------------- NVRTC
# One NVRTC program per (activation, data dtype, arch): the preamble once and every kernel
# of that dtype (each kind, scalar- and array-parameter variants) exactly as CuPy wraps it,
# under distinct entry names; each entry's PTX is then checked on its own. float32/float64
# data compute in their own type; float16 data (fwd and bwd) compute in float32.
DATA_DTYPES = ("float32", "float64", "float16")
# The default run compiles gpu_helpers.GPU_DEFAULT for sm_80 and this one also for sm_90
# (the code is the same C++; the arch only changes the back end); `-m slow` compiles them all.
SM90_DEFAULT = "iglu"


def _program_kernels(spec, ddt):
    kinds = ["fwd", "bwd"] if ddt == "float16" else cxx.kernel_kinds(spec)
    compute = "float32" if ddt == "float16" else ddt
    out = []
    for kind in kinds:
        ks = cxx.kernel_source(spec, kind, compute)
        for param_arrays in (False, True) if spec.params else (False,):
            entry = f"{ks.name}__{ddt}" + ("_parr" if param_arrays else "")
            out.append(H.ProgramKernel(ks, ddt, ddt, param_arrays, entry))
    return out


def _nvrtc_cases():
    for name in NAMES:
        marks = () if name in H.GPU_DEFAULT else (pytest.mark.slow,)
        yield pytest.param(name, (8, 0), id=f"sm_80-{name}", marks=marks)
        marks = () if name == SM90_DEFAULT else (pytest.mark.slow,)
        yield pytest.param(name, (9, 0), id=f"sm_90-{name}", marks=marks)


def test_nvrtc_compile_leaves_the_interpreters_one_byte_bytes_intact(nvrtc):
    """An empty NVRTC log is one byte (its NUL). Written into a 1-byte ``bytes`` it would
    land in the interpreter's shared ``b" "`` and turn every later one into ``b"\\x00"``
    (numpy's .npy header padding among them: unreadable model files)."""
    ptx, log = H.nvrtc_compile('extern "C" __global__ void k(float* a) { a[0] = 1.0f; }', (8, 0))
    assert log == "" and ".entry" in ptx
    assert bytes((32, 0))[:1] == bytearray(b"\x20")  # the shared 1-byte object of 0x20
    assert b" " * 3 == bytes(bytearray(b"\x20\x20\x20"))


@pytest.mark.parametrize("name, cc", list(_nvrtc_cases()))
def test_nvrtc_compiles_without_warnings(nvrtc, name, cc):
    spec = _spec_with_cxx(name)
    explicit_f64 = cxx.asks_float64(spec)
    for ddt in DATA_DTYPES:
        kernels = _program_kernels(spec, ddt)
        ptx, log = H.nvrtc_compile(H.cupy_like_program(kernels), cc)
        assert log == "", f"{name} ({ddt} program): NVRTC log not empty:\n{log}"
        # Horner's steps and two_prod are explicit fma (as on the CPU); without them, none may remain
        plain, _ = H.nvrtc_compile(H.cupy_like_program(kernels), cc, options=NO_EXPLICIT_FMA)
        assert ptx.count(".entry ") == len(kernels), (
            f"{name} ({ddt}): expected {len(kernels)} entries"
        )
        for k in kernels:
            assert f".entry {k.entry}(" in ptx, k.entry
            st = H.ptx_stats(ptx, k.entry)
            assert st["local"] == 0, f"{k.entry}: local memory"
            # the CPU's operations and nothing else: no flush of subnormals, no contracted
            # FMA, no hardware approximation (CUDA's expf is ex2.approx.ftz: tails went to 0)
            assert st["ftz"] == 0, f"{k.entry}: flush-to-zero instructions"
            assert H.ptx_stats(plain, k.entry)["fma"] == 0, (
                f"{k.entry}: FMA contraction (the CPU rounds a*b and +c apart)"
            )
            assert st["mufu"] == 0, f"{k.entry}: approximate hardware math"
            if k.ks.compute == "float" and not explicit_f64:
                assert st["f64_ops"] == 0, f"{k.entry}: float64 instructions in a float32 kernel"
            if k.ks.name.endswith("_fwd"):
                n_in = 1 + len(spec.params) * k.param_arrays
                H.assert_single_pass(ptx, n_in, k.entry, k.entry)
        if ddt == "float32":
            ok, _ = H.nvjitlink_status()
            if ok:  # every float32 kernel through ptxas: no spills, no stack frame
                info = H.ptxas_info(ptx, cc)
                assert H.spill_summary(info) == (0, 0, 0), info


# --------------------------------------------------------------------------- g++ host build
@pytest.fixture(scope="module")
def host_libs(tmp_path_factory):
    ok, why = H.gxx_status()
    if not ok:
        pytest.skip(why)
    return {"dir": tmp_path_factory.mktemp("cxx_host"), "libs": {}}


def _lib(host_libs, spec, flags):
    key = (spec.name, flags)
    if key not in host_libs["libs"]:
        lib, log = H.host_library(spec, flags=flags, workdir=host_libs["dir"])
        assert log == "", f"g++ warnings for {spec.name}:\n{log}"
        host_libs["libs"][key] = lib
    return host_libs["libs"][key]


def _param_sets(spec):
    sets = [dict(spec.defaults)]
    for p in spec.params:
        for v in p.test_values[:4]:
            if p.contains(v):
                d = dict(spec.defaults, **{p.name: v})
                if spec.check is None or not spec.check(**d):
                    sets.append(d)
    return sets


def _cpu(act, kind, x, g, ps):
    with np.errstate(all="ignore"):
        args = [x] + ([g] if g is not None else []) + [x.dtype.type(ps[p]) for p in act.param_names]
        return act._ufunc(kind)(*args)


def _kinds_host_and_cpu(lib, spec, act, dt, x, ps):
    """(kind, grad_out or None, host C++ result, CPU ufunc result, their ulp difference) for
    every kernel kind at the points x and parameters ps."""
    pv = tuple(ps[p] for p in act.param_names)
    g = np.linspace(-3.0, 3.0, x.size).astype(dt)
    for kind in cxx.kernel_kinds(spec):
        gg = g if kind.startswith("bwd") else None
        got = H.host_call(lib, spec, kind, dt, x, g=gg, params=pv)
        want = _cpu(act, kind, x, gg, ps)
        yield kind, gg, got, want, H.ulp_diff(got, want)


def _host_vs_cpu(host_libs, name, flags, max_ulp):
    spec = _spec_with_cxx(name)
    act = iglu_np.get(name)
    lib = _lib(host_libs, spec, flags)
    worst = {}
    for dt in (np.float32, np.float64):
        sweep = H.sweep_points(dt)
        for ps in _param_sets(spec):
            # the spec's special points for these parameters (xIELU's root: its own branch)
            # and 16 neighbours each side
            sp = [dt(v) for v in acc.special_values(spec, ps) if np.isfinite(v)]
            near = [v + k * np.spacing(v) for v in sp for k in range(-16, 17)]
            x = np.concatenate([sweep, np.array(near, dtype=dt)])
            for kind, gg, got, want, d in _kinds_host_and_cpu(lib, spec, act, dt, x, ps):
                if max_ulp > 0:  # bit-for-bit (max_ulp 0) counts subnormal differences too
                    with np.errstate(all="ignore"):
                        d = np.where(np.abs(got - want) <= 4 * np.finfo(dt).tiny, 0.0, d)
                    d = H.in_scale_units(spec, kind, dt, x, gg, ps, got, want, d, max_ulp)
                i = int(np.argmax(d))
                key = (np.dtype(dt).name, kind)
                if d[i] > worst.get(key, (-1,))[0]:
                    worst[key] = (d[i], x[i], ps, got[i], want[i])
    bad = {k: v for k, v in worst.items() if v[0] > max_ulp}
    assert not bad, f"{name}: host C++ vs CPU ufunc beyond {max_ulp} ulp: {bad}"
    return worst


def _cpu_uses_vmath() -> bool:
    """Whether the CPU ufuncs use iglu_np._vmath's elementary functions (the default), which
    the C++ is translated from too; IGLU_NP_VMATH=0 compiles them against libm instead."""
    from iglu_np import _vmath

    return _vmath.enabled()


# Where the CPU uses libm (IGLU_NP_VMATH=0) the C++ still computes _vmath's functions: two
# implementations each within ~3.6 ulp of the truth (the accuracy harness) differ by at most
# ~7 ulp; the GPU's FMA contraction adds at most one rounding per fused step. Where the
# value cancels, ulp are those of the spec's scale, as in the accuracy harness.
CROSS_ULP = 8


@pytest.mark.parametrize("name", H.default_or_slow(NAMES))
def test_host_cxx_matches_cpu(host_libs, name):
    """No FMA contraction (as Numba on the CPU): the C++ is translated from the same Python
    as the CPU ufuncs, elementary functions included, so the results agree to the last bit,
    subnormals and the tails included."""
    _host_vs_cpu(
        host_libs, name, ("-O2", "-ffp-contract=off"), max_ulp=0 if _cpu_uses_vmath() else CROSS_ULP
    )


def _has_fma():
    try:
        with open("/proc/cpuinfo") as f:
            return " fma " in f.read()
    except OSError:
        return False


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or not _has_fma(),
    reason="needs an x86-64 CPU with FMA to mimic the GPU's contraction",
)
@pytest.mark.parametrize("name", H.default_or_slow(NAMES))
def test_host_cxx_with_fma_contraction_within_ulp(host_libs, name):
    """NVRTC contracts a*b+c into FMA by default: the stable forms must not depend on the
    rounding of such products (a naive IGLU is off by 196x under FMA)."""
    _host_vs_cpu(host_libs, name, ("-O2", "-mfma", "-ffp-contract=fast"), max_ulp=CROSS_ULP)


def _extreme_cases():
    from .test_accuracy import _EXTREME_PARAMETERS

    return _EXTREME_PARAMETERS


@pytest.mark.parametrize(
    "name,dtype,xs,params",
    _extreme_cases(),
    ids=[f"{n}-{d.__name__}-{i}" for i, (n, d, _, _) in enumerate(_extreme_cases())],
)
def test_host_cxx_matches_cpu_at_extreme_parameters(host_libs, name, dtype, xs, params):
    """The accuracy harness's extreme parameters (over- and underflow guards, rescaled
    forms, fallbacks chosen by selects), every kernel kind: the C++ takes the same
    branches as the CPU, bit for bit."""
    if not _cpu_uses_vmath():
        pytest.skip("bit-for-bit needs the CPU on _vmath's functions")
    spec = _spec_with_cxx(name)
    act = iglu_np.get(name)
    lib = _lib(host_libs, spec, ("-O2", "-ffp-contract=off"))
    x = np.array(xs, dtype)
    ps = {k: float(dtype(v)) for k, v in params.items()}
    for kind, _, got, want, d in _kinds_host_and_cpu(lib, spec, act, dtype, x, ps):
        assert d.max() == 0, (kind, x, got, want)
