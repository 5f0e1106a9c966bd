"""One activation's CPU loops at a git revision against the working tree, in one process.

    python tools/ab_speed.py REV NAME [--kinds fwd,bwd] [--dtypes float32,float64]
                            [--n 32768] [--rounds 40] [--offset 16] [--params a=1.5,...]

On a shared VM the speed of one process differs from the next by 10-40% (frequency,
neighbours, the alignment of fresh arrays), so two timings taken in separate processes
compare the machine as much as the code. This compiles the activation's kernels from its
spec file at REV (the file alone: the helpers it imports, ``_math``, ``_vmath`` and other
activation files, are the working tree's; the file's spec is registered under a name of
its own) and from the working tree, builds the fast path's single-thread loops from each
(cpu_fast.kernel: bulk blocks, domain checks and mending included) and times them
alternately on the same arrays (N(0, 9), L2-resident, at a chosen offset from a cache
line), printing the best ns/element of each and whether their outputs agree bit for bit.
Measured so: the same loop compiled twice timed alike (within 0.5%), where separate
processes differed by up to 40%. The asv benchmarks and ``iglu-np bench`` measure whole
calls; this compares kernels.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Compiled cold in a cache of its own, removed at exit: the old spec's generated modules
# must not reach the user's kernel cache (a cached loop of a spec defined at run time
# cannot be loaded back), and both sides then compile alike.
_TMP = tempfile.mkdtemp(prefix="iglu_np_ab_")
atexit.register(shutil.rmtree, _TMP, True)
os.environ["IGLU_NP_CACHE_DIR"] = _TMP
os.environ["IGLU_NP_FAST_NOCACHE"] = "1"

import numpy as np  # noqa: E402

import iglu_np  # noqa: E402
from iglu_np import _spec  # noqa: E402
from iglu_np.backends.cpu import _wide
from iglu_np.backends.cpu import loops as cpu_fast  # noqa: E402


def spec_at(rev: str, name: str) -> dict:
    """``define``'s keyword arguments for ``name`` in its spec file at ``rev``."""
    mod = sys.modules[iglu_np.get(name).spec.f.__module__]
    rel = Path(mod.__file__).resolve().relative_to(ROOT).as_posix()
    src = subprocess.run(
        ["git", "show", f"{rev}:{rel}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    found = {}

    def capture(n, **kw):
        found[n] = kw

    old = types.ModuleType(mod.__name__ + "_ab")
    old.__package__ = mod.__package__
    old.__file__ = f"{rev}:{rel}"
    real = _spec.define
    _spec.define = capture  # the file's `from .._spec import define` takes this one
    try:
        exec(compile(src, old.__file__, "exec"), old.__dict__)
    finally:
        _spec.define = real
    if name not in found:
        raise SystemExit(f"{name} is not defined in {rel} at {rev}")
    return found[name]


def _aligned(n: int, dt, offset: int) -> np.ndarray:
    """An empty array starting ``offset`` bytes past a 64-byte boundary. Both loops use the
    same arrays: with an output of its own (another alignment), one of two copies of the
    same loop ran ~20% slower."""
    buf = np.empty(n * dt.itemsize + 128, np.uint8)
    s = -buf.ctypes.data % 64 + offset
    return buf[s : s + n * dt.itemsize].view(dt)


@contextlib.contextmanager
def _old_vector_bits(bits):
    """Loops made inside take the dispatcher of ``bits`` (None: the working tree's choice)."""
    if bits is None:
        yield
        return
    real = _wide.njit_target
    _wide.njit_target = lambda: real(bits)
    try:
        yield
    finally:
        _wide.njit_target = real


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rev")
    ap.add_argument("name")
    ap.add_argument("--kinds", default="fwd,bwd", help="fwd, dx, bwd, d_<param>, bwd_<param>")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument(
        "--offset",
        type=int,
        default=16,
        help="bytes past a 64-byte boundary where the arrays start (numpy's large "
        "arrays, mmap'd, start 16 bytes past a page; 0: aligned)",
    )
    ap.add_argument(
        "--old-vector-bits",
        type=int,
        choices=(256, 512),
        help="build the old side's loops with this vector width preferred "
        "(iglu_np.backends.cpu._wide; REV HEAD then compares widths alone)",
    )
    ap.add_argument("--params", default="", help="name=value,... (default: the spec's defaults)")
    a = ap.parse_args(argv)
    act = iglu_np.get(a.name)
    spec = act.spec
    params = dict(act.defaults)
    for item in filter(None, a.params.split(",")):
        k, v = item.split("=")
        params[k.strip()] = float(v)
    # The old spec registered under a name of its own: the fast path's own loops
    # (cpu_fast's generated loop_/run_ functions: bulk blocks, mending) are built from it.
    old_name = f"{a.name}__ab_{''.join(c if c.isalnum() else '_' for c in a.rev)}"
    _spec.define(old_name, **spec_at(a.rev, a.name))
    rng = np.random.default_rng(0)
    print(
        f"{a.name} at {a.rev} (old) against the working tree (new): one thread, n = {a.n}, "
        f"N(0, 9), arrays at 64k + {a.offset} bytes, params {params}, best of {a.rounds} "
        f"alternated rounds"
    )
    for dt in (np.dtype(d) for d in a.dtypes.split(",")):
        x = _aligned(a.n, dt, a.offset)
        x[...] = rng.standard_normal(a.n) * 3
        g = _aligned(a.n, dt, a.offset)
        g[...] = rng.standard_normal(a.n)
        p = tuple(dt.type(params[q]) for q in spec.param_names)
        for kind in a.kinds.split(","):
            with_g = kind.startswith("bwd")
            with _old_vector_bits(a.old_vector_bits):
                old_loop = cpu_fast.kernel(old_name, kind, parallel=False)
            loops = [old_loop, cpu_fast.kernel(a.name, kind, parallel=False)]
            outs = [_aligned(a.n, dt, a.offset) for _ in range(3)]
            ins = (x, g) if with_g else (x,)
            for lp, o in zip(loops, outs):
                lp(*ins, o, False, *p)
            best = [np.inf, np.inf]
            reps = max(1, 2_000_000 // a.n)
            for _ in range(a.rounds):
                for j, lp in enumerate(loops):
                    t = time.perf_counter()
                    for _ in range(reps):
                        lp(*ins, outs[2], False, *p)  # one output: the same alignment
                    best[j] = min(best[j], (time.perf_counter() - t) / reps / a.n * 1e9)
            same = np.array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8))
            print(
                f"{dt.name} {kind}: old {best[0]:.3f} new {best[1]:.3f} ns/el, new/old "
                f"{best[1] / best[0]:.3f}, outputs {'identical' if same else 'differ'}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
