"""Which CPU fast-path loops vectorise: packed SIMD and libm calls per activation and kind.

    python tools/simd_report.py [names...] [--kinds fwd,bwd] [--dtypes float32,float64]

Prints a Markdown table from the compiled assembly of each element loop
(:func:`x86_asm.simd_report`, tools/x86_asm.py). Compiles every loop it reports on
(about a second each on an idle core).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import x86_asm  # tools/x86_asm.py (this script's folder is on sys.path)

import iglu_np
from iglu_np.backends.cpu import ufuncs as cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--kinds", default="fwd,dx,bwd,d_*")
    ap.add_argument("--dtypes", default="float32,float64")
    a = ap.parse_args(argv)
    names = a.names or list(iglu_np.ACTIVATIONS)
    want = a.kinds.split(",")
    dts = [np.dtype(d) for d in a.dtypes.split(",")]
    print(
        "| activation | kind | "
        + " | ".join(f"{d.name} SIMD (packed ops, width) | libm" for d in dts)
        + " |"
    )
    print("|---|---|" + "---|---|" * len(dts))
    bad = 0
    for name in names:
        spec = iglu_np.get(name).spec
        for kind in cpu.kernel_kinds(spec):
            if not any(kind == w or (w.endswith("*") and kind.startswith(w[:-1])) for w in want):
                continue
            cells = []
            for d in dts:
                r = x86_asm.simd_report(name, kind, d)
                bad += not r["simd"] or bool(r["libm"])
                cells.append(
                    f"{'yes' if r['simd'] else 'NO'} ({r['packed']}, {r['bits']}-bit) | "
                    f"{', '.join(r['libm']) or '-'}"
                )
            print(f"| {name} | {kind} | " + " | ".join(cells) + " |", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
