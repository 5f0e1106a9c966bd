"""``iglu-np info``: activations, parameters, available backends, versions and the kernel
cache (its directory, size, and how to clear it)."""

from __future__ import annotations

import importlib
import platform


def add_arguments(p):
    p.add_argument("--json", action="store_true", help="print the same information as JSON")


def backend_status() -> dict:
    """Backend name -> (usable, reason). Importing a GPU backend never needs a GPU."""
    from .. import backends

    out = {}
    for name, path in backends.BACKENDS.items():
        try:
            mod = importlib.import_module(path)
            status = getattr(mod, "status", None)
            out[name] = status() if status else (True, "")
        except ImportError as e:
            out[name] = (False, f"not installed ({e})")
    return out


def versions() -> dict:
    v = {"python": platform.python_version()}
    for m in (
        "iglu_np",
        "numpy",
        "scipy",
        "numba",
        "llvmlite",
        "numba_cuda",
        "numba_cuda_mlir",
        "cupy",
        "dask",
    ):
        try:
            v[m] = importlib.import_module(m).__version__
        except Exception:
            pass
    return v


def main(args) -> int:
    from .. import ACTIVATIONS, ALIASES, GATED, backends
    from . import cache

    info = {
        "activations": {
            n: {p.name: {"default": p.default, "domain": p.domain} for p in a.params}
            for n, a in ACTIVATIONS.items()
        },
        "aliases": {a: {"activation": t, "params": dict(p)} for a, (t, p) in ALIASES.items()},
        "gated": {
            n: {
                "activation": g.activation.name,
                "layout": g.layout,
                "limit": g.limit,
                "params": dict(g.defaults),
                "source": g.source,
            }
            for n, g in GATED.items()
        },
        "backends": {k: {"usable": u, "detail": r} for k, (u, r) in backend_status().items()},
        "array_types": [{"types": t, "backend": b} for t, b in backends.array_types()],
        "versions": versions(),
        "cache": cache.describe(),
    }
    if args.json:
        import json

        print(json.dumps(info, indent=2))
        return 0
    print(f"iglu_np {info['versions']['iglu_np']}: {len(info['activations'])} activations\n")
    w = max(map(len, info["activations"]))
    for n, ps in info["activations"].items():
        pdesc = ", ".join(f"{k}={d['default']!r} ({d['domain']})" for k, d in ps.items())
        print(f"  {n:<{w}}  {pdesc or '-'}")
    print(f"\naliases ({len(info['aliases'])}, other names in use: Hugging Face ACT2FN):")
    w = max(map(len, info["aliases"]), default=0)
    for a, d in info["aliases"].items():
        ps = ", ".join(f"{k}={v!r}" for k, v in d["params"].items())
        print(f"  {a:<{w}}  {d['activation']}({ps})")
    print(f"\ngated forms ({len(info['gated'])} named; <activation>_glu for every activation):")
    w = max(map(len, info["gated"]), default=0)
    for n, d in info["gated"].items():
        print(f"  {n:<{w}}  {d['source']}")
    print("\nbackends:")
    for k, d in info["backends"].items():
        print(f"  {k:<11} {'yes' if d['usable'] else 'no '}  {d['detail']}")
    print("\narray types accepted:")
    for d in info["array_types"]:
        print(f"  {d['types']}: {d['backend']}")
    print("\nversions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    print("\nkernel cache: " + cache.text(info["cache"]).replace("\n", "\n  "))
    return 0
