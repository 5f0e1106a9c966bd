"""Cached ufuncs loaded without Numba: the first call of a process, fast.

Numba's own cache reloads a ufunc's scalar kernel in ~0.6 s of a fresh process: importing
Numba (0.2-0.3 s), filling its target context (another 0.35 s, scipy's BLAS check among
it), then compiling the ufunc's loop wrapper again. A process that calls one activation
once (a command-line tool, a serverless handler, a test) would pay that on every start.

So each ufunc's finished machine code is also kept here: when Numba builds the ufunc
(:func:`iglu_np.backends.cpu.ufuncs.get_ufunc`), the object code of each loop wrapper (the
scalar kernel inlined into it, Numba's strided-``out`` fix included) is written to
``<cache>/<activation>_<key>.<kind>.ufunc``. A later process links those objects with
llvmlite's JIT linker alone and makes the numpy ufunc through numpy's C API
(``PyUFunc_FromFuncAndData``): the same machine code, so the same bits, in milliseconds.

The key (:func:`key`) is computable without Numba: the content of every source file of
the package (a superset of what the kernels are compiled from), the Numba, llvmlite,
numpy and Python versions, the environment variables that change code generation
(``NUMBA_*``, ``IGLU_NP_VMATH``, ``IGLU_NP_CPU_VECTOR_BITS``) and the host CPU's name
and features. Any doubt (another key, a checksum that does not match, a symbol the
objects need that this process lacks, any error) falls back to Numba's path, which
writes the file again.

The wrappers call back into Python only on a kernel's error path (which the kernels,
compiled with ``error_model='numpy'``, never take): ``PyErr_*`` from the interpreter,
and Numba's two GIL helpers, provided here by :data:`_GIL_IR`.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import pickle
import sys
import threading
from pathlib import Path

MAGIC = b"iglu_np ufunc objects 1\n"
_DIGEST = 32
_lock = threading.Lock()
_state: dict = {}


def _new_lock_in_child():
    # as cpu._lock: a lock held by another thread at fork() would never be released in
    # the child
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)
#: the JIT engines and C arrays each loaded ufunc points into: alive for the process
_keep: list = []

# opaque pointers: LLVM 15 and later (every llvmlite that numba >= 0.62 takes)
_GIL_IR = """
declare i32 @PyGILState_Ensure()
declare void @PyGILState_Release(i32)
define void @iglu_np_gil_ensure(ptr %s) {
  %r = call i32 @PyGILState_Ensure()
  store i32 %r, ptr %s
  ret void
}
define void @iglu_np_gil_release(ptr %s) {
  %v = load i32, ptr %s
  call void @PyGILState_Release(i32 %v)
  ret void
}
"""


def _ll():
    """llvmlite's binding layer, initialised once, with Numba's GIL helpers defined."""
    ll = _state.get("ll")
    if ll is None:
        import llvmlite.binding as ll

        ll.initialize_native_target()
        ll.initialize_native_asmprinter()
        if not ll.address_of_symbol("numba_gil_ensure"):
            tm = ll.Target.from_default_triple().create_target_machine(
                reloc="default", codemodel="jitdefault"
            )
            mod = ll.parse_assembly(_GIL_IR)
            ee = ll.create_mcjit_compiler(mod, tm)
            ee.finalize_object()
            _keep.append(ee)
            for s in ("ensure", "release"):
                ll.add_symbol("numba_gil_" + s, ee.get_function_address("iglu_np_gil_" + s))
        _state["ll"] = ll
    return ll


def _host():
    h = _state.get("host")
    if h is None:
        ll = _ll()
        h = _state["host"] = (
            ll.get_process_triple(),
            ll.get_host_cpu_name(),
            ll.get_host_cpu_features().flatten(),
        )
    return h


def _version(pkg: str) -> str:
    """An installed package's version without importing it (its dist-info directory's
    name; importlib.metadata costs ~30 ms of imports on a first call)."""
    import importlib.util

    spec = importlib.util.find_spec(pkg)
    if spec is not None and spec.origin:
        site = Path(spec.origin).resolve().parent.parent
        found = sorted(site.glob(f"{pkg}-*.dist-info"))
        if len(found) == 1:
            return found[0].name[len(pkg) + 1 : -len(".dist-info")]
    from importlib.metadata import version

    return version(pkg)


def key() -> str:
    """16 hex digits naming everything the ufuncs' machine code may depend on (above)."""
    k = _state.get("key")
    if k is None:
        import numpy as np

        pkg = Path(__file__).resolve().parents[2]  # iglu_np/
        d = hashlib.sha256()
        for p in sorted(pkg.rglob("*.py")):
            d.update(f"\0file {p.relative_to(pkg).as_posix()}\0".encode())
            d.update(p.read_bytes())
        env = sorted(
            (k, v)
            for k, v in os.environ.items()
            if k.startswith("NUMBA_") or k in ("IGLU_NP_VMATH", "IGLU_NP_CPU_VECTOR_BITS")
        )
        d.update(
            repr(
                (_version("numba"), _version("llvmlite"), np.__version__, sys.version, env, _host())
            ).encode()
        )
        k = _state["key"] = d.hexdigest()[:16]
    return k


def path(directory: Path, name: str, kind: str) -> Path:
    return directory / f"{name}_{key()}.{kind}.ufunc"


def _from_func_and_data():
    f = _state.get("mkufunc")
    if f is None:
        try:
            from numpy._core import _multiarray_umath
        except ImportError:  # numpy 1.x
            from numpy.core import _multiarray_umath

        api = ctypes.pythonapi.PyCapsule_GetPointer
        api.restype = ctypes.c_void_p
        api.argtypes = [ctypes.py_object, ctypes.c_char_p]
        table = api(_multiarray_umath._UFUNC_API, None)
        # PyUFunc_API[1] is PyUFunc_FromFuncAndData (numpy's __ufunc_api.h, every 1.x/2.x)
        addr = ctypes.c_void_p.from_address(table + ctypes.sizeof(ctypes.c_void_p)).value
        c = ctypes
        f = _state["mkufunc"] = c.PYFUNCTYPE(
            c.py_object,
            c.c_void_p,
            c.c_void_p,
            c.c_char_p,
            c.c_int,
            c.c_int,
            c.c_int,
            c.c_int,
            c.c_char_p,
            c.c_char_p,
            c.c_int,
        )(addr)
    return f


def load(file: Path, ufunc_name: str, nin: int):
    """The numpy ufunc kept in ``file``, or None where it cannot be used (no file, another
    CPU, a symbol missing, damage: then reported once, and Numba's path rebuilds it)."""
    try:
        raw = file.read_bytes()
    except OSError:
        return None
    from ._cache_report import cache_problem

    body = raw[len(MAGIC) + _DIGEST :]
    if (
        not raw.startswith(MAGIC)
        or hashlib.sha256(body).digest() != raw[len(MAGIC) : len(MAGIC) + _DIGEST]
    ):
        cache_problem(file.parent, f"skipped the damaged entry {file.name} and compiled it again")
        return None
    with _lock:
        try:  # what this installation may lack: then Numba's path, nothing to report
            ll = _ll()
            host = _host()
            make = _from_func_and_data()
        except Exception:  # noqa: BLE001
            return None
        try:
            rec = pickle.loads(body)
            if tuple(rec["host"]) != host or rec["nin"] != nin:
                return None
            loops = rec["loops"]
            if any(not ll.address_of_symbol(s) for lp in loops for s in lp["undefined"]):
                return None  # linking would abort the process: use Numba's path
            tm = ll.Target.from_default_triple().create_target_machine(
                cpu=host[1], features=host[2], reloc="default", codemodel="jitdefault"
            )
            ptrs = []
            for lp in loops:
                # one engine per loop: the two dtypes' objects may define the same helper
                ee = ll.create_mcjit_compiler(ll.parse_assembly(""), tm)
                ee.add_object_file(ll.ObjectFileRef.from_data(lp["object"]))
                ee.finalize_object()
                ptrs.append(ee.get_function_address(lp["symbol"]))
                _keep.append(ee)
            if not all(ptrs):
                return None
            n = len(loops)
            funcs = (ctypes.c_void_p * n)(*ptrs)
            data = (ctypes.c_void_p * n)()
            types = bytes(t for lp in loops for t in lp["types"])
            name = ufunc_name.encode()
            doc = rec.get("doc", "").encode()
            _keep.extend((funcs, data, types, name, doc))
            # identity -1: PyUFunc_None, as Numba's vectorize gives
            return make(
                ctypes.addressof(funcs), ctypes.addressof(data), types, n, nin, 1, -1, name, doc, 0
            )
        except Exception as e:  # noqa: BLE001  (anything unexpected: Numba's path)
            cache_problem(
                file.parent,
                f"could not load {file.name} ({type(e).__name__}: {e}); compiled it again",
            )
            return None


def save(file: Path, nin: int, wrappers, doc: str = "") -> None:
    """Write ``file`` from ``wrappers``, ``[(info, signature)]`` of the loop wrappers Numba
    built for a ufunc (their libraries with object caching enabled before finalising).
    Quietly nothing where the objects are unavailable or the directory cannot be written
    (Numba's cache reports that)."""
    import numpy as np

    try:
        loops = []
        for info, sig in wrappers:
            lib = info.library
            mod = lib._final_module
            undefined = [
                f.name for f in mod.functions if f.is_declaration and not f.name.startswith("llvm.")
            ]
            undefined += [g.name for g in mod.global_variables if g.is_declaration]
            loops.append(
                {
                    "symbol": info.name,
                    "object": bytes(lib._get_compiled_object()),
                    "undefined": undefined,
                    "types": [np.dtype(str(a)).num for a in (*sig.args, sig.return_type)],
                }
            )
        body = pickle.dumps({"host": _host(), "nin": nin, "loops": loops, "doc": doc}, protocol=4)
        tmp = file.with_name(f"{file.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(MAGIC + hashlib.sha256(body).digest() + body)
        os.replace(tmp, file)
    except Exception:  # noqa: BLE001  (an optional copy: Numba's cache has the kernels)
        return
