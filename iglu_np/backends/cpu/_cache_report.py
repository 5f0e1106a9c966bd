"""How problems with the kernel cache are reported: one :class:`CacheWarning` per process
and directory (a module of its own: the cache's modules and :mod:`.cpu` both report)."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

__all__ = ["CacheWarning", "cache_problem"]

_lock = threading.Lock()


class CacheWarning(UserWarning):
    """Something in iglu_np's kernel cache could not be used (a damaged entry, a directory
    that cannot be written): it was skipped, and compiled again where needed. Results are
    unaffected; only that compile's time is lost. Given once per process and directory."""


_warned: set = set()


def cache_problem(directory, what: str) -> None:
    """Warn (:class:`CacheWarning`) about ``directory`` (a generated module's, or its
    ``__pycache__``: the same one), once per process: the first problem found there names
    it and says how to clear the cache; later ones are silent."""
    d = Path(directory)
    d = str(d.parent if d.name == "__pycache__" else d)
    with _lock:
        if d in _warned:
            return
        _warned.add(d)
    warnings.warn(
        f"iglu_np kernel cache {d}: {what}. Results are unaffected; "
        "'iglu-np cache --clear' empties the cache.",
        CacheWarning,
        stacklevel=3,
    )
