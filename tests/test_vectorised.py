"""Structural guard for the CPU fast path's speed: the element loops of the paper's table
activations compile to packed SIMD code and call no libm function.

Read from the assembly (``simd_report`` of ``tools/x86_asm.py``), never timed. A
kernel edit that reintroduces a data-dependent branch LLVM will not if-convert, a loop
left inside the element loop or a libm call makes these fail; run
``python tools/simd_report.py <name>`` to see which kind and dtype.
"""

import math
import platform
import sys
from pathlib import Path

import numba
import numpy as np
import pytest

import iglu_np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import x86_asm  # noqa: E402  (tools/x86_asm.py: a development tool, not in the package)

pytestmark = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"), reason="inspects x86-64 assembly"
)

DT = [np.float32, np.float64]
IDS = ["f32", "f64"]
# the paper's comparison table: the specs declared with define(paper_table=True)
PAPER = [n for n, a in iglu_np.ACTIVATIONS.items() if a.spec.paper_table]
# Loops known to stay scalar (none at present). Strict xfail: fixing one turns it into a
# failure to be removed here.
KNOWN_SCALAR: set = set()


def test_the_paper_table_is_declared():
    assert {"iglu", "iglu_approx", "gelu", "relu"} <= set(PAPER) and len(PAPER) >= 10


def _check(name, kind, dtype):
    r = x86_asm.simd_report(name, kind, dtype)
    assert r["simd"] and not r["libm"], f"{name}.{kind} {np.dtype(dtype).name}: {r}"


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("kind", ["fwd", "bwd"])
def test_iglu_loops_vectorise(kind, dtype):
    _check("iglu", kind, dtype)


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize(
    "name,kind,alias",
    [("iglu", "fwd", 0), ("iglu", "bwd", 1), ("gelu", "fwd", 0), ("gelu", "bwd", 1)],
)
def test_in_place_loops_vectorise(name, kind, alias, dtype):
    """out = x (out = grad_out): the in-place variants, which the backend picks (given
    out aliasing an input, loop_<kind>'s runtime alias check takes its scalar loop)."""
    r = x86_asm.simd_report(name, kind, dtype, alias)
    assert r["simd"] and not r["libm"], f"{name}.{kind} in place {np.dtype(dtype).name}: {r}"


def _cases():
    for name in PAPER:
        for kind in ("fwd", "bwd"):
            for dt, i in zip(DT, IDS):
                marks = [pytest.mark.slow]
                if (name, kind, dt) in KNOWN_SCALAR:
                    marks.append(pytest.mark.xfail(strict=True, reason="not vectorised yet"))
                yield pytest.param(name, kind, dt, marks=marks, id=f"{name}-{kind}-{i}")


@pytest.mark.parametrize("name,kind,dtype", list(_cases()))
def test_paper_table_loops_vectorise(name, kind, dtype):
    _check(name, kind, dtype)


# ---------------------------------------------------------------- the detector itself
def _stats_of(fn, dtype=np.float64):
    loop = numba.njit(error_model="numpy")(fn)
    t = numba.from_dtype(np.dtype(dtype))
    arr = numba.types.Array(t, 1, "C")
    sig = (arr, arr)
    loop.compile(sig)
    for fname, lines in x86_asm.functions(loop.inspect_asm(sig)).items():
        if not fname.startswith(("_ZN7cpython", "cfunc.")) and "_loop" in fname:
            return x86_asm.loop_stats(lines)
    raise AssertionError("function not found in the assembly")


def _atan_loop(x, out):
    for i in range(x.size):
        out[i] = math.atan(x[i])


def _mul_loop(x, out):
    for i in range(x.size):
        out[i] = x[i] * 3.0 + 1.0


def test_detector_sees_libm_calls_and_simd():
    libm = _stats_of(_atan_loop)
    assert not libm["simd"] and any("atan" in c for c in libm["calls"]), libm
    simd = _stats_of(_mul_loop, np.float32)
    assert simd["simd"] and simd["packed"] > 0 and not simd["calls"], simd


def test_detector_on_synthetic_assembly():
    asm = "\n".join(
        [
            "f:",
            "\tmovl\t$0, %eax",
            ".LBB0_1:",
            "\tvmovups\t(%rdi,%rax,4), %zmm0",
            "\tvfmadd213ps\t%zmm1, %zmm2, %zmm0",
            "\taddq\t$16, %rax",
            "\tjne\t.LBB0_1",
            ".LBB0_2:",
            "\tvmulss\t%xmm0, %xmm1, %xmm0",
            "\tmovabsq\t$expf, %rax",
            "\tcallq\t*%rax",
            "\tjne\t.LBB0_2",
            "\tretq",
        ]
    )
    ((name, lines),) = x86_asm.functions(asm).items()
    assert name == "f" and x86_asm.loops(lines) == [(1, 5), (6, 10)]
    st = x86_asm.loop_stats(lines)
    assert st == {"packed": 1, "simd": True, "bits": 512, "calls": ["expf"]}


def _listing(pre, body):
    return "\n".join(["f:", *pre, ".LBB0_1:", *body, "\tjne\t.LBB0_1", "\tretq"])


@pytest.mark.parametrize(
    "load",
    [
        "\tmovabsq\t$atan, %rbx",
        "\tleaq\tatan(%rip), %rbx",
        "\tmovq\tatan@GOTPCREL(%rip), %rbx",
        "\tmovl\t$atan, %ebx",
    ],
    ids=["movabsq", "leaq-rip", "gotpcrel", "movl-32"],
)
def test_detector_follows_calls_through_registers_loaded_before_the_loop(load):
    # LLVM (znver4, and haswell with LLVM 22) hoists the callee's address out of the
    # loop into a callee-saved register: the call inside the loop names no symbol.
    asm = _listing(
        [load, "\txorl\t%r12d, %r12d"],
        ["\tvmovsd\t(%r15,%r12,8), %xmm0", "\tcallq\t*%rbx", "\tincq\t%r12"],
    )
    ((_, lines),) = x86_asm.functions(asm).items()
    assert x86_asm.loop_stats(lines) == {"packed": 0, "simd": False, "bits": 0, "calls": ["atan"]}


def test_detector_register_overwritten_after_the_load_stays_unresolved():
    asm = _listing(["\tmovabsq\t$atan, %rbx", "\tmovq\t%rdi, %rbx"], ["\tcallq\t*%rbx"])
    ((_, lines),) = x86_asm.functions(asm).items()
    assert x86_asm.loop_stats(lines)["calls"] == ["*%rbx"]  # unknown callee: still a call
    # a compare or test reads the register and does not hide the load
    asm = _listing(["\tmovabsq\t$expf, %r14", "\ttestq\t%rdi, %r14"], ["\tcallq\t*%r14"])
    ((_, lines),) = x86_asm.functions(asm).items()
    assert x86_asm.loop_stats(lines)["calls"] == ["expf"]


def test_detector_runtime_calls_through_registers_are_not_libm():
    asm = _listing(
        ["\tmovabsq\t$NRT_decref, %r13"], ["\tvaddps\t%ymm0, %ymm1, %ymm1", "\tcallq\t*%r13"]
    )
    ((_, lines),) = x86_asm.functions(asm).items()
    assert x86_asm.loop_stats(lines) == {"packed": 1, "simd": True, "bits": 256, "calls": []}


# The vectorisation facts must hold whatever x86 CPU the tests run on: compile for an
# AVX2 and two AVX-512 targets (Numba's CPU name override) in fresh processes. Only the
# assembly is inspected; nothing compiled for another CPU is run.
_CPU_PROBE = r"""
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np
from test_vectorised import _atan_loop, _mul_loop, _stats_of, x86_asm
print(json.dumps({{
    "atan": _stats_of(_atan_loop),
    "mul": _stats_of(_mul_loop, np.float32),
    "loops": {{f"{{n}}-{{k}}-{{d}}": x86_asm.simd_report(n, k, d) for n in {names!r}
               for k in ("fwd", "bwd") for d in ("float32", "float64")}},
}}))
"""
# AVX2; AVX-512 Intel with 256-bit loops (prefer-256-bit; its clock drops on 512-bit work);
# AVX-512 Intel with 512-bit loops (iglu_np.backends.cpu._wide); AVX-512 AMD.
CPUS = ["haswell", "skylake-avx512", "sapphirerapids", "znver4"]


def _compile_for(cpu, template, env=(), **fmt):
    """The JSON that ``template`` (formatted with ``tests`` and ``fmt``) prints last, run in
    a fresh process compiling for ``cpu`` with the named CPU's own features, whatever the
    host's (an AVX2 host's would leave an AVX-512 name without AVX-512; an AVX-512 host's
    would give haswell AVX-512); ``env`` overrides."""
    import json
    import os
    import subprocess
    import sys

    full = dict(
        os.environ,
        NUMBA_CPU_NAME=cpu,
        NUMBA_CPU_FEATURES="+avx2" if cpu == "haswell" else "+avx512f",
    )
    full.pop("IGLU_NP_CPU_VECTOR_BITS", None)
    full.update(env)
    code = template.format(tests=os.path.dirname(os.path.abspath(__file__)), **fmt)
    r = subprocess.run(
        [sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=1200
    )
    if f"'{cpu}' is not a recognized processor" in r.stderr:
        # An older Numba's LLVM (0.59's LLVM 14: no znver4, no emeraldrapids) aborts on the
        # name: the CPU cannot be asked about, which says nothing of iglu_np.
        import llvmlite.binding

        ver = ".".join(map(str, llvmlite.binding.llvm_version_info))
        pytest.skip(f"LLVM {ver} does not know the CPU {cpu}")
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _probe(cpu, names):
    res = _compile_for(cpu, _CPU_PROBE, names=names)
    atan, mul = res["atan"], res["mul"]
    assert not atan["simd"] and any("atan" in c for c in atan["calls"]), (cpu, atan)
    assert mul["simd"] and mul["packed"] > 0 and not mul["calls"], (cpu, mul)
    known = _known_scalar_on(cpu)
    scalar = {
        tuple(k.rsplit("-", 2)): st
        for k, st in res["loops"].items()
        if not st["simd"] or st["libm"]
    }
    bad = {k: st for k, st in scalar.items() if k not in known}
    assert not bad, (cpu, bad)
    # strict, as KNOWN_SCALAR's xfail: a loop that vectorises again is taken off the list
    fixed = {k for k in known if k[0] in names and k not in scalar}
    assert not fixed, (cpu, "vectorises now; remove from the known scalar loops", fixed)


_KNOWN = {(n, k, np.dtype(d).name) for n, k, d in KNOWN_SCALAR}
# xIELU's float64 derivative takes its root form (xielu_root_lo, ~250 float64 operations
# on the parameters alone) under a branch. From Python 3.12's bytecode Numba builds an IR
# in which LLVM's cost model for haswell and skylake-avx512 keeps the backward loop scalar
# ("vectorization is not beneficial"; Python 3.11, same Numba and LLVM: vectorised; numpy's
# version plays no part). znver4 and sapphirerapids vectorise it on every Python.
_KNOWN_FROM_PY312 = {
    "haswell": {("xielu", "bwd", "float64")},
    "skylake-avx512": {("xielu", "bwd", "float64")},
}


def _known_scalar_on(cpu):
    extra = _KNOWN_FROM_PY312.get(cpu, set()) if sys.version_info >= (3, 12) else set()
    return _KNOWN | extra


# xIELU's and CELU's float64 forwards: written with branches, LLVM's cost model for Intel's
# AVX-512 targets (skylake-avx512 .. emeraldrapids) keeps them scalar (about 3x slower than
# as selects), where znver4 and haswell vectorise them. Each CPU is a fresh process compiling
# three activations (~45 s on one core): with -m slow (CI runs it too).
@pytest.mark.slow
@pytest.mark.parametrize("cpu", CPUS)
def test_detector_and_some_loops_on_other_cpus(cpu):
    _probe(cpu, ["iglu", "xielu", "celu"])


# identity's forward is a copy (memcpy), not packed arithmetic
ALL = [n for n in sorted(iglu_np.ACTIVATIONS) if n != "identity"]


@pytest.mark.slow
@pytest.mark.parametrize("cpu", CPUS)
def test_every_activations_loops_on_other_cpus(cpu):
    _probe(cpu, ALL)


# The fast path's loops take 512-bit vectors on Intel's AVX-512 targets, whose LLVM tuning
# (prefer-256-bit) stops at 256 (iglu_np.backends.cpu._wide); Numba functions of the user's
# keep Numba's choice (a float64 loop: a float32 one with float64 arithmetic runs 8 float64
# lanes in zmm registers at any preference). Only assembly is made here, nothing run.
_WIDTH_PROBE = r"""
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np
from test_vectorised import _mul_loop, _stats_of, x86_asm
from iglu_np.backends.cpu import _wide
print(json.dumps({{"wide": _wide.wide(), "user": _stats_of(_mul_loop, np.float64)["bits"],
                   "iglu": x86_asm.simd_report("iglu", "fwd", "float32")["bits"],
                   "gelu": x86_asm.simd_report("gelu", "bwd", "float64")["bits"]}}))
"""


# Each case compiles in a child process (~6 s): an AVX-512 target's 512-bit and
# skylake-avx512's 256-bit defaults by default; the other CPUs and the overrides with
# -m slow.
@pytest.mark.parametrize(
    "cpu,env,bits",
    [
        ("sapphirerapids", {}, 512),
        pytest.param("emeraldrapids", {}, 512, marks=pytest.mark.slow),
        pytest.param(
            "sapphirerapids", {"IGLU_NP_CPU_VECTOR_BITS": "256"}, 256, marks=pytest.mark.slow
        ),
        pytest.param(
            "sapphirerapids",
            {"NUMBA_CPU_FEATURES": "+avx512f,+prefer-256-bit"},
            256,
            marks=pytest.mark.slow,
        ),
        ("skylake-avx512", {}, 256),  # its clock drops on 512-bit work
        pytest.param(
            "skylake-avx512", {"IGLU_NP_CPU_VECTOR_BITS": "512"}, 512, marks=pytest.mark.slow
        ),
        pytest.param("haswell", {"NUMBA_CPU_FEATURES": "+avx2,+fma"}, 256, marks=pytest.mark.slow),
    ],
)
def test_fast_loops_vector_width(cpu, env, bits):
    res = _compile_for(cpu, _WIDTH_PROBE, env)
    assert res == {"wide": bits == 512, "user": 256, "iglu": bits, "gelu": bits}, (cpu, env)


def test_vector_bits_setting_is_checked(monkeypatch):
    from iglu_np.backends.cpu import _wide

    monkeypatch.setenv("IGLU_NP_CPU_VECTOR_BITS", "128")
    _wide.wide.cache_clear()
    try:
        with pytest.raises(ValueError, match="IGLU_NP_CPU_VECTOR_BITS='128': expected 256 or 512"):
            _wide.wide()
    finally:
        monkeypatch.undo()
        _wide.wide.cache_clear()
