"""Progress of a fit (``verbose=``): a tqdm bar on a terminal, else one line per epoch."""

from __future__ import annotations

import sys


def progress(verbose, total, desc):
    """A tqdm bar over ``total`` epochs, or ``None`` (not verbose, not a terminal, no tqdm)."""
    if not verbose or total <= 0:
        return None
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="epoch", leave=False)


def report(bar, verbose, epoch, info, seconds):
    """One epoch done: the bar moves on, or (verbose, no bar) a line is printed."""
    if bar is not None:
        bar.set_postfix(info, refresh=False)
        bar.update(1)
    elif verbose:
        items = ", ".join(f"{k} = {v}" for k, v in info.items())
        print(f"Iteration {epoch}, {items} ({seconds:.3f} s)")
