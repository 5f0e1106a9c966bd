"""``iglu-np cache``: where the compiled kernels are cached, how much they take, and
``--clear`` to delete them.

The cache holds, per activation, a generated Python module and Numba's compiled code for
it (the ufuncs and the fast path's loops). It lives in ``IGLU_NP_CACHE_DIR`` when that
is set, else ``$NUMBA_CACHE_DIR/iglu_np``, else ``$XDG_CACHE_HOME/iglu_np``, else
``~/.cache/iglu_np``, else a per-user temporary directory (the first one that can be used). Deleting it is always safe: the
next call of each activation compiles it again (``iglu-np warmup`` does that ahead).

Examples::

    iglu-np cache            the directory, its size and file count
    iglu-np cache --clear    delete every compiled kernel
"""

from __future__ import annotations

import sys


def add_arguments(p):
    p.add_argument(
        "--clear",
        action="store_true",
        help="delete the cached kernels (compiled again on next use)",
    )
    p.add_argument("--json", action="store_true", help="print the same information as JSON")


def describe() -> dict:
    """``{"directory", "bytes", "files", "writable", "clear"}`` of the cache in use."""
    from ..backends.cpu import ufuncs as cpu

    root = cpu.cache_root()
    size, files = cpu.cache_size(root)
    return {
        "directory": str(root),
        "bytes": size,
        "files": files,
        "writable": bool(cpu._state.get("writable", True)),
        "clear": "iglu-np cache --clear",
    }


def text(d: dict) -> str:
    ro = "" if d["writable"] else " (read-only: used as it is, nothing is saved there)"
    return (
        f"{d['directory']}{ro}\n{d['bytes'] / 2**20:.1f} MiB in {d['files']} files; "
        f"delete with '{d['clear']}'"
    )


def main(args) -> int:
    import json

    d = describe()
    if args.clear:
        from pathlib import Path

        from ..backends.cpu import ufuncs as cpu

        if not d["writable"]:
            print(f"iglu-np cache: {d['directory']} is read-only; nothing deleted", file=sys.stderr)
            return 1
        try:
            size, files = cpu.clear_cache(Path(d["directory"]))
        except OSError as e:
            print(
                f"iglu-np cache: could not delete everything in {d['directory']}: {e}",
                file=sys.stderr,
            )
            return 1
        d = {**d, "deleted_bytes": size, "deleted_files": files, "bytes": 0, "files": 0}
        if not args.json:
            print(f"deleted {files} files ({size / 2**20:.1f} MiB) from {d['directory']}")
            return 0
    if args.json:
        print(json.dumps(d, indent=2))
    else:
        print(text(d))
    return 0
