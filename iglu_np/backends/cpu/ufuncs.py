"""CPU backend: numpy ufuncs compiled by Numba from the activation specs.

For each activation a small Python module is generated (one thin, fixed-arity wrapper per
kernel kind) and written to a cache directory, so Numba's on-disk cache can key on a
real file. The file name carries :func:`kernel_hash`, a hash of what that activation's
kernels are compiled from: its spec file, the files of every helper kernel it reaches
(``_math.py``, another activation's module...), ``_vmath.py`` where it uses ``math``
or ``horner``, the values of the globals its kernels read, the code generators and the
Numba version. Editing one activation recompiles that activation alone; editing a helper
recompiles the activations that use it; never a stale cache entry (Numba's own index
keys a function on its bytecode only, not on the functions it calls).

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
import inspect
import math
import os
import sys
import threading
import types
from pathlib import Path

import numpy as np

from ..._kinds import Kind, kinds
from ..._spec import REGISTRY
from ..codegen import _rebind
from ..codegen._rebind import Rebinder
from ._cache_dir import (  # noqa: F401  (the cache's functions, re-exported)
    PRUNE_AFTER_S,
    _gen_dir,
    _spill_dir,
    _state,
    cache_root,
    cache_size,
    clear_cache,
    write_generated,
)
from ._cache_report import CacheWarning, cache_problem  # noqa: F401  (CacheWarning: public)

_PKG_DIR = Path(__file__).resolve().parents[2]  # iglu_np/
_lock = threading.RLock()


def _new_lock_in_child():
    # A fork while another thread builds kernels copies _lock held by a thread that does
    # not exist in the child: its first build would wait forever. The child starts with a
    # free lock instead (what it guarded is at worst a build the child repeats).
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def kernel_kinds(spec) -> list:
    return kinds(spec.param_names)


def n_inputs(spec, kind: str) -> int:
    return len(spec.params) + Kind.parse(kind).n_data


# The code generators every CPU kernel goes through (cpu_fast.py is added for the loops).
_GENERATORS = ("_spec.py", "_kinds.py", "backends/codegen/_rebind.py", "backends/cpu/ufuncs.py")


def _overrides() -> dict:
    """Helpers the CPU backend replaces: straight-line Horner (a loop left in a kernel
    keeps the element loop scalar), the fused multiply-add instruction, and for the bulk
    kernels exp (alone, with expm1 from one reduction, and times a factor rounded once)
    without range handling and tanh's polynomial branch alone (``_vmath.KERNELS``)."""
    from ... import _math, _vmath

    out = {_math.horner: _vmath.horner, _math.fma: _vmath._fma}
    if _vmath.enabled():  # else it compiles as written: libm's exp
        out.update({getattr(_math, k): getattr(_vmath, k) for k in _vmath.KERNELS})
    return out


def _code_file(v):
    """The source file of a function or Numba dispatcher ``v``, if it has one."""
    code = getattr(getattr(v, "py_func", v), "__code__", None)
    return Path(code.co_filename).resolve() if code is not None else None


def _stable(v) -> str:
    """A representation of a global value that is the same in every process (no ids)."""
    import numpy as np

    if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
        return f"{type(v).__name__}:{v!r}"
    if isinstance(v, (tuple, list)):
        return f"{type(v).__name__}(" + ",".join(_stable(e) for e in v) + ")"
    if isinstance(v, np.ndarray):
        return f"ndarray({v.dtype.str},{v.shape},{hashlib.sha256(v.tobytes()).hexdigest()})"
    if isinstance(v, np.generic):
        return f"{v.dtype.str}:{v.item()!r}"
    if isinstance(v, dict):
        return (
            "dict("
            + ",".join(
                f"{_stable(k)}:{_stable(e)}"
                for k, e in sorted(v.items(), key=lambda kv: repr(kv[0]))
            )
            + ")"
        )
    name = getattr(v, "__qualname__", None) or getattr(v, "__name__", None) or ""
    return f"{type(v).__module__}.{type(v).__qualname__}:{getattr(v, '__module__', '')}.{name}"


def _code_sig(code) -> str:
    """A process-independent digest of a code object (for kernels with no source file)."""
    consts = [_code_sig(c) if isinstance(c, types.CodeType) else _stable(c) for c in code.co_consts]
    parts = [code.co_code.hex(), repr(code.co_names), repr(code.co_varnames), *consts]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def kernel_sources(spec) -> tuple:
    """``(files, values)`` that the compiled kernels of ``spec`` depend on besides the
    generators: the spec's own module file and the files of every kernel reachable from
    ``f``, ``dx`` and ``dparams`` through their globals (as :class:`Rebinder` follows
    them), ``_vmath.py`` where a ``math`` function it replaces or an overridden helper is
    used; and ``values``, ``"<kernel>:<global>=<value>"`` for the other globals they read
    (Numba freezes those at compile time, wherever they were defined)."""
    from ... import _vmath
    from ..._spec import is_kernel

    files = set()
    mod = sys.modules.get(spec.module)
    if getattr(mod, "__file__", None) and Path(mod.__file__).is_file():
        files.add(Path(mod.__file__).resolve())
    values = []
    uses_math = False
    overrides = _overrides()
    vmath_names = frozenset(_vmath.OVERRIDDEN)
    seen = set()
    todo = [spec.f, spec.dx, *spec.dparams.values(), *spec.bulk.values()]
    if spec.bulk_domain is not None:
        todo.append(spec.bulk_domain)
    while todo:
        fn = todo.pop()
        if fn in seen:
            continue
        seen.add(fn)
        if fn in overrides:
            files.add(_code_file(overrides[fn]) or Path(inspect.getfile(overrides[fn])))
            continue
        g = fn.__globals__
        where = f"{fn.__module__}.{fn.__qualname__}"
        f = _code_file(fn)
        if f is not None and f.is_file():
            files.add(f)
        # The code as loaded, whatever the file says now: a process that imported the
        # module before it was edited must not store its old machine code under the key
        # of the edited file (seen: a test run during an edit cached a stale xielu bwd).
        values.append(f"{where}:<code>={_code_sig(fn.__code__)}")
        values.append(f"{where}:<defaults>={_stable(fn.__defaults__)}")
        cells = [c.cell_contents for c in (fn.__closure__ or ())]
        values += [f"{where}:<closure {i}>={_stable(c)}" for i, c in enumerate(cells)]
        for name in sorted(_rebind._global_names(fn.__code__)):
            if name not in g:
                continue  # a builtin or an attribute name
            v = g[name]
            if v is fn:
                continue
            if _rebind._hashable(v) and is_kernel(v):
                todo.append(v)
            elif v is math:
                # only _vmath's functions matter (math.isnan etc. compile as themselves)
                uses_math = uses_math or not vmath_names.isdisjoint(fn.__code__.co_names)
            elif isinstance(v, types.ModuleType):
                f = getattr(v, "__file__", None)
                if f and Path(f).resolve().is_relative_to(_PKG_DIR):
                    files.add(Path(f).resolve())  # kernels reading mod.attr
            else:
                f = _code_file(v)
                if f is not None and f.is_relative_to(_PKG_DIR):
                    files.add(f)  # e.g. an njit helper of the package
                values.append(f"{where}:{name}={_stable(v)}")
    if uses_math:
        if _vmath.enabled():
            files.add(Path(_vmath.__file__).resolve())
    files.discard(None)
    return sorted(files), values


def kernel_hash(spec, extra: tuple = (), read=None) -> str:
    """The cache key of ``spec``'s CPU kernels (16 hex digits): Numba's version, libm or
    vectorised math, the generator files (plus ``extra``, package-relative), and
    :func:`kernel_sources`. ``read(path) -> bytes`` replaces reading the files (tests)."""
    key = ("hash", spec.name, extra)
    h = _state.get(key) if read is None else None
    if h is None:
        import numba

        from ... import _vmath

        rd = read or Path.read_bytes
        d = hashlib.sha256(numba.__version__.encode())
        d.update(b"vmath" if _vmath.enabled() else b"libm")  # IGLU_NP_VMATH=0 compiles apart
        files, values = kernel_sources(spec)
        paths = {_PKG_DIR / rel for rel in (*_GENERATORS, *extra)} | set(files)
        for p in sorted(paths):
            label = p.relative_to(_PKG_DIR) if p.is_relative_to(_PKG_DIR) else p
            d.update(f"\0file {label}\0".encode())
            d.update(rd(p))
        for v in values:
            d.update(f"\0value {v}\0".encode())
        h = d.hexdigest()[:16]
        if read is None:
            _state[key] = h
    return h


def _rebinder() -> Rebinder:
    rb = _state.get("rebinder")
    if rb is None:
        import numba

        from ... import _vmath

        # forceinline (LLVM alwaysinline) lets LLVM see through helpers, as SIMD needs,
        # while each helper is typed and compiled once: inline='always' (Numba-IR
        # inlining, re-typed at every call site) made every ufunc of every activation
        # take 554 s to compile cold against 56 s, for the same machine code.
        # error_model='numpy': a division by zero gives inf/nan instead of a branch to
        # raise (no SIMD then).
        rb = _state["rebinder"] = Rebinder(
            lambda f: numba.njit(forceinline=True, error_model="numpy", cache=False)(f),
            _overrides(),
            # elementary functions that vectorise (libm's are scalar calls)
            math_ns=_vmath.MATH if _vmath.enabled() else None,
        )
    return rb


def _wrapper_source(spec) -> str:
    ps = ", ".join(spec.param_names)
    pc = (", " + ps) if ps else ""
    lines = [
        f"# generated by iglu_np.backends.cpu.ufuncs from the spec {spec.name!r}; do not edit\n"
    ]
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
    rb = _rebinder()
    ns = {"_f": rb(spec.f), "_dx": rb(spec.dx)}
    for p in spec.param_names:
        ns["_d_" + p] = rb(spec.dparams[p])
    # bulk kernels (the fast path's blocks inside bulk_domain): _b_f, _b_dx, _b_<param>
    for k, fn in spec.bulk.items():
        ns["_b_" + k] = rb(fn)
    if spec.bulk_domain is not None:
        ns["_b_domain"] = rb(spec.bulk_domain)
    mod = generated_module("", spec, kernel_hash(spec), _wrapper_source(spec), ns)
    _state[key] = mod
    return mod


def generated_module(kind: str, spec, h: str, src: str, ns: dict) -> types.ModuleType:
    """``src`` written to the cache as ``[<kind>_]<name>_<h>.py`` and executed as the
    module ``iglu_np._generated_cpu_[<kind>_]<name>_<h>`` with the globals ``ns``: the
    CPU's generated modules (ufunc wrappers, loops, gated loops) load through here."""
    stem = f"{kind}_{spec.name}" if kind else spec.name
    path = write_generated(stem, h, src)
    mod = types.ModuleType(f"iglu_np._generated_cpu_{stem}_{h}")
    mod.__file__ = str(path)
    mod.__dict__.update(ns)
    # Numba's cache rebuilds a function's environment by importing its module by name.
    sys.modules[mod.__name__] = mod
    exec(compile(src, str(path), "exec"), mod.__dict__)
    return mod


# Numba's ufunc loop (numba.np.ufunc.wrappers.build_ufunc_wrapper, 0.68 and before) takes
# its contiguous fast loop when every *input* has unit stride and then stores out[i] at
# unit stride whatever out's step: relu(x, out=buf[::2]) wrote x's 5 values to buf[0:5],
# and a reversed out wrote past the view's end (heap corruption). Our ufuncs are built
# with the test extended to the output: the last input's unit-stride flag also requires
# out's step to be its item size, so a strided out takes Numba's general (strided) loop.
_UFUNC_PATCH = threading.Lock()


def _strided_out_safe(built=None):
    """A context manager under which Numba builds ufunc loops that honour out's step (see
    above); a no-op if Numba's internals differ (get_ufunc's check then decides). Each
    loop wrapper built is appended to ``built`` as ``(info, signature)``, its library
    keeping its object code (for :mod:`._direct`)."""
    import contextlib

    try:
        from numba.core import types as nbtypes
        from numba.np.ufunc import ufuncbuilder, wrappers

        orig = ufuncbuilder.build_ufunc_wrapper
        base = wrappers.UArrayArg
    except (ImportError, AttributeError):
        return contextlib.nullcontext()

    def build(library, context, fname, signature, objmode, cres):
        n_in = len(signature.args)
        out_size = context.get_abi_sizeof(context.get_data_type(signature.return_type))

        class Arg(base):
            def __init__(self, context, builder, args, steps, i, fe_type):
                super().__init__(context, builder, args, steps, i, fe_type)
                if i == n_in - 1:
                    step = builder.load(
                        builder.gep(steps, [context.get_constant(nbtypes.intp, n_in)])
                    )
                    unit = builder.icmp_unsigned(
                        "==", context.get_constant(nbtypes.intp, out_size), step
                    )
                    self.is_unit_strided = builder.and_(self.is_unit_strided, unit)

        # called under Numba's global compiler lock: no other build sees Arg
        wrappers.UArrayArg = Arg
        try:
            info = orig(library, context, fname, signature, objmode, cres)
        finally:
            wrappers.UArrayArg = base
        if built is not None:
            info.library.enable_object_caching()  # not finalised yet: its object is kept
            built.append((info, signature))
        return info

    @contextlib.contextmanager
    def patched():
        with _UFUNC_PATCH:
            ufuncbuilder.build_ufunc_wrapper = build
            try:
                yield
            finally:
                ufuncbuilder.build_ufunc_wrapper = orig

    return patched()


def _honours_out_step(u, n: int) -> bool:
    """Whether ufunc ``u`` (``n`` inputs) writes a strided out at its stride (both dtypes)."""
    for dt in (np.float32, np.float64):
        x = np.full(4, 0.5, dt)
        buf = np.full(8, -1234.5, dt)
        with np.errstate(all="ignore"):
            u(*([x] * n), out=buf[::2])
        if not (np.all(buf[1::2] == -1234.5) and np.all(buf[::2] != -1234.5)):
            return False
    return True


def _direct(name: str, kind: str, qual: str, n: int):
    """The ufunc from its objects file (:mod:`._direct`), or None: there is none, it does
    not apply, or ``IGLU_NP_DIRECT_LOAD=0``."""
    if os.environ.get("IGLU_NP_DIRECT_LOAD", "1").strip() == "0":
        return None
    from . import _direct

    try:
        dirs = [_gen_dir()]
        if not _state.get("writable", True):
            dirs.append(_spill_dir())
        for d in dirs:
            u = _direct.load(_direct.path(d, name, kind), qual, n)
            if u is not None:
                return u
    except Exception:  # noqa: BLE001  (no key or directory here, a zipped install...)
        pass  # Numba's path, which needs none of it
    return None


def _compile_ufunc(spec, name: str, kind: str, qual: str, n: int) -> np.ufunc:
    """The ufunc built by Numba (compiled, or its kernel loaded from Numba's cache); its
    loops' machine code is then kept for :func:`_direct`."""
    from numba.np.ufunc.dufunc import DUFunc

    from . import _cache, _direct

    mod = _module(spec)
    fn = getattr(mod, qual)
    sigs = [f"float32({', '.join(['float32'] * n)})", f"float64({', '.join(['float64'] * n)})"]
    # numba.vectorize(sigs, cache=True)(fn), with the cache that survives damage
    du = DUFunc(fn, cache=False)
    _cache.enable(du._dispatcher)
    wrappers = []
    with _strided_out_safe(wrappers):
        for sig in sigs:
            du.add(sig)
    du.disable_compile()
    u = du.ufunc if hasattr(du, "ufunc") else du
    if len(wrappers) == len(sigs) and os.environ.get("IGLU_NP_DIRECT_LOAD", "1").strip() != "0":
        _direct.save(_direct.path(Path(mod.__file__).parent, name, kind), n, wrappers)
    return u


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
        spec = REGISTRY[name]
        if kind not in kernel_kinds(spec):
            raise KeyError(f"{name}: no kernel kind {kind!r}")
        n = n_inputs(spec, kind)
        qual = f"iglu_np_{name}_{kind}"
        u = _direct(name, kind, qual, n) or _compile_ufunc(spec, name, kind, qual, n)
        if not _honours_out_step(u, n):
            import numba

            raise RuntimeError(
                f"iglu_np: Numba {numba.__version__} built a ufunc loop for {name}.{kind} that "
                "ignores the output's stride (a strided out= would be written contiguously); "
                "iglu_np's workaround no longer applies to this Numba version"
            )
        try:
            u.__name__ = qual
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
        from ... import activations  # noqa: F401  (registers every spec)

        rest = attr[len("iglu_np_") :]
        for name in REGISTRY:
            kind = rest[len(name) + 1 :]
            if rest.startswith(name + "_") and kind in kernel_kinds(REGISTRY[name]):
                return get_ufunc(name, kind)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
