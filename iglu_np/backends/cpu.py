"""CPU backend: numpy ufuncs compiled by Numba from the activation specs.

For each activation a small Python module is generated (one thin, fixed-arity wrapper per
kernel kind) and written to a cache directory, so Numba's on-disk cache can key on a
real file. The file name carries a hash of the whole package source and the Numba
version: editing any kernel or helper gives new files and never a stale cache entry.

Kernel kinds for an activation with parameters ``p1..pk``:

========== ====================== =======================================
kind       inputs                 value
========== ====================== =======================================
``fwd``    x, p1..pk              f(x)
``dx``     x, p1..pk              df/dx
``bwd``    x, g, p1..pk           g * df/dx (the fused backward)
``d_<p>``  x, p1..pk              df/dp
``bwd_<p>`` x, g, p1..pk          g * df/dp (before the reduction over x)
========== ====================== =======================================
"""
from __future__ import annotations

import hashlib
import math
import os
import sys
import tempfile
import threading
import types
from pathlib import Path

import numpy as np

from .._spec import REGISTRY
from . import _rebind
from ._rebind import Rebinder

_PKG_DIR = Path(__file__).resolve().parent.parent
_lock = threading.RLock()
_state: dict = {}


def kernel_kinds(spec) -> list:
    kinds = ["fwd", "dx", "bwd"]
    for p in spec.param_names:
        kinds += ["d_" + p, "bwd_" + p]
    return kinds


def n_inputs(spec, kind: str) -> int:
    return len(spec.params) + (2 if kind.startswith("bwd") else 1)


_KERNEL_SOURCES = {
    "_spec.py", "_math.py", "_vmath.py",
    "backends/_rebind.py", "backends/cpu.py", "backends/cpu_fast.py",
}


def source_hash() -> str:
    """Hash of the files CPU kernels are compiled from, plus the Numba version.

    Only kernel sources count (specs, helpers, the CPU backends): an edit to the trainer,
    the CLI or a GPU backend must not recompile every ufunc."""
    h = _state.get("hash")
    if h is None:
        import numba

        from .. import _vmath

        d = hashlib.sha256(numba.__version__.encode())
        d.update(b"vmath" if _vmath.enabled() else b"libm")  # IGLU_NP_VMATH=0 compiles apart
        for p in sorted(_PKG_DIR.rglob("*.py")):
            rel = p.relative_to(_PKG_DIR)
            if not (rel.parts[0] == "activations" or str(rel) in _KERNEL_SOURCES):
                continue
            d.update(str(p.relative_to(_PKG_DIR)).encode())
            d.update(p.read_bytes())
        h = _state["hash"] = d.hexdigest()[:16]
    return h


def _gen_dir() -> Path:
    d = _state.get("dir")
    if d is not None:
        return d
    base = os.environ.get("IGLU_NP_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    candidates = []
    if base:
        candidates.append(Path(base) / ("" if "IGLU_NP_CACHE_DIR" in os.environ else "iglu_np"))
    candidates.append(Path.home() / ".cache" / "iglu_np")
    candidates.append(Path(tempfile.gettempdir()) / f"iglu_np-{os.getuid() if hasattr(os, 'getuid') else 'u'}")
    for c in candidates:
        try:
            c = c / "cpu"
            c.mkdir(parents=True, exist_ok=True)
            # A per-process probe name: with one shared name, two processes starting
            # together could each delete the other's probe, and the loser would fall
            # back to another (cold) cache directory.
            probe = c / f".write-probe-{os.getpid()}-{threading.get_ident()}"
            probe.write_text("ok")
            probe.unlink()
            _state["dir"] = c
            return c
        except OSError:
            continue
    raise RuntimeError("iglu_np: no writable cache directory (set IGLU_NP_CACHE_DIR)")


class _CpuRebinder(Rebinder):
    """Rebinds ``math`` too: to :data:`iglu_np._vmath.MATH`, whose elementary functions
    vectorise (libm's are scalar calls that keep every loop scalar)."""

    def __init__(self, jit, math_ns, overrides=None):
        super().__init__(jit, overrides)
        self._math_ns = math_ns

    def rebound(self, fn):
        nf = super().rebound(fn)
        if self._math_ns is not None:
            g = nf.__globals__  # the private copy made by Rebinder.rebound
            for name in _rebind._global_names(fn.__code__):
                if g.get(name) is math:
                    g[name] = self._math_ns
        return nf


def _rebinder() -> Rebinder:
    rb = _state.get("rebinder")
    if rb is None:
        import numba

        from .. import _vmath

        # forceinline (LLVM alwaysinline) lets LLVM see through helpers, as SIMD needs,
        # while each helper is typed and compiled once: inline='always' (Numba-IR
        # inlining, re-typed at every call site) made every ufunc of every activation
        # take 554 s to compile cold against 56 s, for the same machine code.
        # error_model='numpy': a division by zero gives inf/nan instead of a branch to
        # raise (no SIMD then).
        from .. import _math

        rb = _state["rebinder"] = _CpuRebinder(
            lambda f: numba.njit(forceinline=True, error_model="numpy", cache=False)(f),
            _vmath.MATH if _vmath.enabled() else None,
            # straight-line Horner: a loop left in a kernel keeps the element loop scalar
            {_math.horner: _vmath.horner},
        )
    return rb


def _wrapper_source(spec) -> str:
    ps = ", ".join(spec.param_names)
    pc = (", " + ps) if ps else ""
    lines = [f"# generated by iglu_np.backends.cpu from the spec {spec.name!r}; do not edit\n"]
    q = f"iglu_np_{spec.name}"
    lines.append(f"def {q}_fwd(x{pc}):\n    return _f(x{pc})\n")
    lines.append(f"def {q}_dx(x{pc}):\n    return _dx(x{pc})\n")
    lines.append(f"def {q}_bwd(x, g{pc}):\n    return g * _dx(x{pc})\n")
    for p in spec.param_names:
        lines.append(f"def {q}_d_{p}(x{pc}):\n    return _d_{p}(x{pc})\n")
        lines.append(f"def {q}_bwd_{p}(x, g{pc}):\n    return g * _d_{p}(x{pc})\n")
    return "\n".join(lines)


def _module(spec):
    key = ("mod", spec.name)
    mod = _state.get(key)
    if mod is not None:
        return mod
    src = _wrapper_source(spec)
    h = source_hash()
    modname = f"iglu_np._generated_cpu_{spec.name}_{h}"
    path = _gen_dir() / f"{spec.name}_{h}.py"
    if not path.exists() or path.read_text() != src:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(src)
        os.replace(tmp, path)
    mod = types.ModuleType(modname)
    mod.__file__ = str(path)
    rb = _rebinder()
    ns = mod.__dict__
    ns["_f"] = rb(spec.f)
    ns["_dx"] = rb(spec.dx)
    for p in spec.param_names:
        ns["_d_" + p] = rb(spec.dparams[p])
    # Numba's cache rebuilds a function's environment by importing its module by name.
    sys.modules[modname] = mod
    exec(compile(src, str(path), "exec"), ns)
    _state[key] = mod
    return mod


def get_ufunc(name: str, kind: str) -> np.ufunc:
    """The compiled numpy ufunc ``iglu_np_<name>_<kind>`` (float32 and float64 loops)."""
    key = ("ufunc", name, kind)
    u = _state.get(key)
    if u is not None:
        return u
    with _lock:
        u = _state.get(key)
        if u is not None:
            return u
        import numba

        spec = REGISTRY[name]
        if kind not in kernel_kinds(spec):
            raise KeyError(f"{name}: no kernel kind {kind!r}")
        mod = _module(spec)
        fn = getattr(mod, f"iglu_np_{name}_{kind}")
        n = n_inputs(spec, kind)
        sigs = [f"float32({', '.join(['float32'] * n)})", f"float64({', '.join(['float64'] * n)})"]
        du = numba.vectorize(sigs, cache=True)(fn)
        u = du.ufunc if hasattr(du, "ufunc") else du
        try:
            u.__name__ = f"iglu_np_{name}_{kind}"
            u.__module__ = __name__  # pickles by name via __getattr__ below (dask workers)
        except (AttributeError, TypeError):
            pass
        _state[key] = u
        return u


def __getattr__(attr):
    # numpy pickles a ufunc as its __name__ looked up in its __module__: resolving
    # ``iglu_np_<activation>_<kind>`` here lets dask.distributed / multiprocessing workers
    # rebuild raw ufuncs (compiled there or loaded from Numba's cache).
    if attr.startswith("iglu_np_"):
        from .._api import _acts

        rest = attr[len("iglu_np_"):]
        for name in _acts():
            kind = rest[len(name) + 1:]
            if rest.startswith(name + "_") and kind in kernel_kinds(REGISTRY[name]):
                return get_ufunc(name, kind)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
