"""A Numba CPU target for the fast path's loops alone: full-width AVX-512 vectors on Intel.

LLVM tunes Intel's AVX-512 CPUs (skylake-avx512 ... emeraldrapids) with ``prefer-256-bit``:
its loop vectoriser stops at 256-bit vectors there, while on AMD's znver4 it uses all 512
bits. The loops here are compute-bound at two threads (erf, arctangent, exp polynomials),
so the wider vectors pay: on an Intel Xeon (emeraldrapids) the 512-bit loops are faster
where they compute and no slower where memory bounds them (with cpu_fast._skew's aligned
blocks). ``tools/ab_speed.py HEAD NAME --old-vector-bits 256`` times both widths in one
process.

Numba takes its target features from one global setting (``config.CPU_FEATURES``) for every
function it compiles, the user's among them, so they are not changed here: the loops get
a dispatcher of their own whose target context is the CPU one with another code generator
(its own target machine, features ``<host features>,-prefer-256-bit``). Everything else
(typing, lowering, the scalar kernels the loops call and inline, the on-disk cache, whose
index key holds the features) is Numba's CPU target unchanged.

Not on Skylake-SP, Cascade Lake and Cooper Lake: their cores drop to a lower clock for a
while after 512-bit floating-point work (Intel's "license 2"), which slows the caller's
other code; Ice Lake and later barely do (Intel's documentation; on emeraldrapids numpy's
exp times alike after our 512-bit and 256-bit loops). ``IGLU_NP_CPU_VECTOR_BITS=256`` (or
``512``) overrides the choice; so does naming ``prefer-256-bit`` in ``NUMBA_CPU_FEATURES``.
"""

from __future__ import annotations

import functools
import os

from numba.core import codegen, registry

__all__ = ["wide", "njit_target"]

# LLVM CPU names whose 512-bit work lowers the core clock (license 2), kept at 256 bits.
_THROTTLED = frozenset({"skylake-avx512", "cascadelake", "cooperlake"})


class _WideCodegen(codegen.JITCPUCodegen):
    def _customize_tm_features(self):
        return self._get_host_cpu_features() + ",-prefer-256-bit"


class _WideTarget(registry.CPUTarget):
    @functools.cached_property
    def _toplevel_target_context(self):
        base = registry.cpu_target.target_context
        return base.subtarget(_internal_codegen=_WideCodegen("iglu_np.wide"))

    @functools.cached_property
    def _toplevel_typing_context(self):
        return registry.cpu_target.typing_context


class WideDispatcher(registry.CPUDispatcher):
    targetdescr = _WideTarget("cpu")


@functools.cache
def wide() -> bool:
    """Whether the fast path's loops are built with 512-bit vectors preferred: the target
    has AVX-512 (host features, or ``NUMBA_CPU_FEATURES``), its features do not name
    ``prefer-256-bit`` themselves, and it is not in :data:`_THROTTLED` (unless
    ``IGLU_NP_CPU_VECTOR_BITS=512``); never with ``IGLU_NP_CPU_VECTOR_BITS=256``."""
    env = os.environ.get("IGLU_NP_CPU_VECTOR_BITS", "").strip()
    if env not in ("", "256", "512"):
        raise ValueError(f"IGLU_NP_CPU_VECTOR_BITS={env!r}: expected 256 or 512")
    cg = codegen.JITCPUCodegen.__new__(codegen.JITCPUCodegen)  # only for its host queries
    feats = cg._get_host_cpu_features().split(",")
    if "+avx512f" not in feats or any(f[1:] == "prefer-256-bit" for f in feats) or env == "256":
        return False
    return env == "512" or cg._get_host_cpu_name() not in _THROTTLED


def njit_target(bits=None):
    """The dispatcher class for the fast path's loops: :class:`WideDispatcher` for 512-bit
    loops, Numba's own CPU dispatcher for 256; ``bits=None``: as :func:`wide` decides."""
    if bits is None:
        bits = 512 if wide() else 256
    return WideDispatcher if bits == 512 else registry.CPUDispatcher
