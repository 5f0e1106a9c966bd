"""Where the CPU's generated modules and compiled code live: the cache roots in order of
preference (:func:`_candidates`), the first usable one (:func:`_gen_dir`, a read-only one
too), the spill directory for what a read-only root cannot take, writing a generated
module once per key (:func:`write_generated`, old keys pruned), and the size and clearing
that ``iglu-np cache`` reports.

:data:`_state` is the CPU target's memo (the root, and the modules and ufuncs loaded from
it): :mod:`.ufuncs` keeps its entries here too, so :func:`clear_cache` forgets the modules
whose files it removes.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from pathlib import Path

from ._cache_report import cache_problem

_state: dict = {}


def _candidates() -> list:
    """Cache roots in order of preference: IGLU_NP_CACHE_DIR, else $NUMBA_CACHE_DIR/iglu_np,
    else $XDG_CACHE_HOME/iglu_np; then ~/.cache/iglu_np and a per-user temporary directory.
    The first two name where a user wants compiled code to go (IGLU_NP_CACHE_DIR for
    iglu_np alone, so it wins); XDG_CACHE_HOME is every program's cache."""
    out = []
    if os.environ.get("IGLU_NP_CACHE_DIR"):
        out.append(Path(os.environ["IGLU_NP_CACHE_DIR"]))
    else:
        for var in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME"):
            if os.environ.get(var):
                out.append(Path(os.environ[var]) / "iglu_np")
                break
    out.append(Path.home() / ".cache" / "iglu_np")
    out.append(
        Path(tempfile.gettempdir()) / f"iglu_np-{os.getuid() if hasattr(os, 'getuid') else 'u'}"
    )
    return out


def _writable(c: Path) -> bool:
    try:
        c.mkdir(parents=True, exist_ok=True)
        # A per-process probe name: with one shared name, two processes starting
        # together could each delete the other's probe, and the loser would fall
        # back to another (cold) cache directory.
        probe = c / f".write-probe-{os.getpid()}-{threading.get_ident()}"
        probe.write_text("ok")
        probe.unlink()
        return True
    except OSError:
        return False


def _gen_dir() -> Path:
    """``<root>/cpu`` of the first usable cache root (:func:`_candidates`): one that can
    be written, or one that already holds a cache and can only be read (built by
    ``iglu-np warmup`` into an image, or by another user); modules missing from a
    read-only one are written to :func:`_spill_dir`."""
    d = _state.get("dir")
    if d is not None:
        return d
    for c in _candidates():
        c = c / "cpu"
        if _writable(c):
            _state["writable"] = True
        elif c.is_dir() and os.access(c, os.R_OK | os.X_OK) and any(c.glob("*.py")):
            _state["writable"] = False
        else:
            continue
        _state["dir"] = c
        return c
    raise RuntimeError("iglu_np: no writable cache directory (set IGLU_NP_CACHE_DIR)")


def _spill_dir() -> Path:
    """Where modules go that a read-only cache directory lacks: the next writable root."""
    d = _state.get("spill")
    if d is None:
        primary = _gen_dir()
        for c in _candidates():
            c = c / "cpu"
            if c != primary and _writable(c):
                d = _state["spill"] = c
                break
        else:
            raise RuntimeError(
                f"iglu_np: the kernel cache {primary} is read-only and no "
                "other cache directory is writable (set IGLU_NP_CACHE_DIR)"
            )
    return d


def cache_root() -> Path:
    """The cache directory in use (the parent of :func:`_gen_dir`)."""
    return _gen_dir().parent


def cache_size(root: Path | None = None) -> tuple:
    """``(bytes, files)`` under the cache root's ``cpu`` directory."""
    d = (root or cache_root()) / "cpu"
    n = size = 0
    for dirpath, _, files in os.walk(d):
        for f in files:
            try:
                size += os.stat(os.path.join(dirpath, f)).st_size
                n += 1
            except OSError:
                continue
    return size, n


def clear_cache(root: Path | None = None) -> tuple:
    """Delete the cache root's ``cpu`` directory (every generated module and its compiled
    kernels; nothing else under the root); ``(bytes, files)`` removed."""
    import shutil

    d = (root or cache_root()) / "cpu"
    size, n = cache_size(d.parent)
    if d.is_dir():
        shutil.rmtree(d)
    for k in ("dir", "spill", "writable"):
        _state.pop(k, None)
    for k in [k for k in _state if k[0] == "mod"]:
        del _state[k]  # their files are gone: written again on next use
    return size, n


#: Another key's files of a generated module are deleted, once a new key of it is written,
#: when none of them has been written for this long: an upgrade or an edit leaves the old
#: key behind (a few days of development here left 240 MB, 10,000 files). A process still
#: using an old key then recompiles it, nothing worse.
PRUNE_AFTER_S = 7 * 86400


_KEYED = re.compile(r"^(?P<stem>.+)_(?P<h>[0-9a-f]{16})\.")


def _holds(path: Path, src: bytes) -> bool:
    try:
        return path.read_bytes() == src
    except OSError:
        return False


def _write(path: Path, src: bytes) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_bytes(src)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


def write_generated(stem: str, h: str, src: str) -> Path:
    """``<cache dir>/<stem>_<h>.py`` holding ``src`` (written atomically where missing or
    different: the name is the key of its content, so a different file is a damaged one);
    writing a new key prunes the stem's stale keys (:data:`PRUNE_AFTER_S`). Where the
    cache directory cannot be written, a module it lacks goes to :func:`_spill_dir`."""
    d = _gen_dir()
    name = f"{stem}_{h}.py"
    path = d / name
    data = src.encode()
    if _holds(path, data):
        return path
    new = not path.exists()
    if not new:
        cache_problem(d, f"rewrote the damaged module {name}")
    try:
        _write(path, data)
    except OSError as e:
        spill = _spill_dir()
        cache_problem(
            d,
            f"cannot be written ({e.strerror or e}): kernels missing from it "
            f"are compiled into {spill}",
        )
        d, path = spill, spill / name
        if _holds(path, data):
            return path
        new = not path.exists()
        _write(path, data)
    if new:
        _prune(d, stem, h)
    return path


def _prune(d: Path, stem: str, keep: str) -> None:
    keys = {}
    for f in [*d.glob(f"{stem}_*"), *(d / "__pycache__").glob(f"{stem}_*")]:
        m = _KEYED.match(f.name)
        if m is not None and m["stem"] == stem and m["h"] != keep:  # gelu is not gelu_a
            keys.setdefault(m["h"], []).append(f)
    now = time.time()
    for files in keys.values():
        try:
            if now - max(f.stat().st_mtime for f in files) < PRUNE_AFTER_S:
                continue
            for f in files:
                f.unlink()
        except OSError:  # another process pruned or rewrote it first
            continue
