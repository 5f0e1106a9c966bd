"""Numba's on-disk cache for the generated kernel modules, made to survive damage.

Numba's own cache (``numba.core.caching``) trusts its files: a garbled, truncated or
emptied index (``.nbi``) or data file (``.nbc``), what a full disk, a killed writer or a
copied image leaves, raises ``UnpicklingError`` or ``EOFError`` on every later call
until someone deletes the file; a cache directory it cannot write is replaced by another
(cold) one. :class:`HealingCache` is the same cache with

* every index or data file that does not load treated as missing: the entry is compiled
  again and saved over the damaged one (the call that finds it pays the compile once);
* each data file stored with its SHA-256, so a damaged one never reaches the JIT
  linker (a flipped byte in the machine code would load and run);
* the index's version stamp naming llvmlite and this file format as well as Numba: a
  cache written by another Numba or llvmlite is another version, rebuilt rather than
  read;
* the compiled code always beside the generated module (``NUMBA_CACHE_DIR`` picks
  where the generated modules go, :func:`iglu_np.backends.cpu._cache_dir._candidates`,
  so the two never part);
* the cache directory next to the generated module even where it cannot be written (a
  prebuilt cache on a read-only file system, or one owned by another user): it is read,
  and a save that fails is skipped;
* each of those reported once per process and directory
  (:func:`iglu_np.backends.cpu._cache_report.cache_problem`, a :class:`CacheWarning`).

Imported only where something is compiled or loaded (it imports Numba).
"""

from __future__ import annotations

import hashlib
import os
import pickle

import llvmlite
import numba
from numba.core import caching

from ._cache_report import cache_problem

__all__ = ["HealingCache", "enable"]

#: Bumped when the files' layout changes (the index stamp then differs: a rebuild).
FORMAT = 1
_DIGEST = 32  # bytes of SHA-256 before each data file's pickle


class DamagedEntry(Exception):
    """A cache file whose content is not what was written."""


class _Locator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
    """``__pycache__`` beside the generated module, whether or not it can be written
    (Numba's in-tree locator gives up on a directory it cannot write and sends the
    function to a user-wide cache, cold)."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = os.path.join(os.path.dirname(os.path.abspath(py_file)), "__pycache__")

    def get_cache_path(self):
        return self._cache_path

    def ensure_cache_path(self):
        os.makedirs(self._cache_path, exist_ok=True)

    @classmethod
    def from_function(cls, py_func, py_file):
        return cls(py_func, py_file) if os.path.exists(py_file) else None


class _Impl(caching.CompileResultCacheImpl):
    # Only ``__pycache__`` beside the generated module: the generated modules and their
    # compiled code stay in one directory, the one ``iglu-np cache`` reports and clears.
    # NUMBA_CACHE_DIR chooses that directory through the cache roots
    # (iglu_np.backends.cpu._cache_dir._candidates), not through Numba's locator.
    _locator_classes = [_Locator]


class _File(caching.IndexDataCacheFile):
    def __init__(self, cache_path, filename_base, source_stamp):
        super().__init__(cache_path, filename_base, source_stamp)
        self._version = f"{numba.__version__} llvmlite {llvmlite.__version__} iglu_np {FORMAT}"

    def _damaged(self, path, e):
        cache_problem(
            self._cache_path,
            f"skipped the damaged entry {os.path.basename(path)} "
            f"({type(e).__name__}: {e}) and compiled it again",
        )

    def _load_index(self):
        try:
            overloads = super()._load_index()
            if not isinstance(overloads, dict):
                raise DamagedEntry(f"the index holds a {type(overloads).__name__}")
            return overloads
        except Exception as e:  # noqa: BLE001  (any unpickling error: the file is garbage)
            self._damaged(self._index_path, e)
            return {}

    def load(self, key):
        try:
            return super().load(key)  # a data file that is missing: None (Numba's)
        except Exception as e:  # noqa: BLE001
            self._damaged(self._data_path(self._load_index().get(key, "?")), e)
            return None

    def _save_data(self, name, data):
        data = self._dump(data)
        with self._open_for_write(self._data_path(name)) as f:
            f.write(hashlib.sha256(data).digest())
            f.write(data)

    def _load_data(self, name):
        if not isinstance(name, str):
            raise DamagedEntry(f"the index names {name!r}")
        with open(self._data_path(name), "rb") as f:
            raw = f.read()
        data = raw[_DIGEST:]
        if len(raw) < _DIGEST or hashlib.sha256(data).digest() != raw[:_DIGEST]:
            raise DamagedEntry(f"checksum mismatch ({len(raw)} bytes)")
        return pickle.loads(data)


class HealingCache(caching.Cache):
    """Numba's per-function cache with the repairs above."""

    _impl_class = _Impl

    def __init__(self, py_func):
        self._name = repr(py_func)
        self._py_func = py_func
        self._impl = self._impl_class(py_func)
        self._cache_path = self._impl.locator.get_cache_path()
        self._cache_file = _File(
            cache_path=self._cache_path,
            filename_base=self._impl.filename_base,
            source_stamp=self._impl.locator.get_source_stamp(),
        )
        self.enable()

    def load_overload(self, sig, target_context):
        target_context.refresh()
        try:
            return self._load_overload(sig, target_context)
        except Exception as e:  # noqa: BLE001  (a payload that does not rebuild)
            cache_problem(
                self._cache_path,
                f"could not load a cached {self._py_func.__name__} "
                f"({type(e).__name__}: {e}); compiled it again",
            )
            return None

    def save_overload(self, sig, data):
        try:
            self._save_overload(sig, data)
        except OSError as e:
            cache_problem(
                self._cache_path,
                f"cannot be written ({e.strerror or e}): compiled "
                "kernels missing from it are not saved",
            )


def enable(dispatcher):
    """``dispatcher`` (an ``njit`` dispatcher, a ufunc's ``UFuncDispatcher`` or a
    ``cfunc``'s ``CFunc`` before it compiles) caching through :class:`HealingCache`;
    returns it."""
    cache = HealingCache(getattr(dispatcher, "py_func", None) or dispatcher.__wrapped__)
    if hasattr(dispatcher, "_cache"):
        dispatcher._cache = cache
    else:
        dispatcher.cache = cache
    return dispatcher
