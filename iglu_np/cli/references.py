"""The peers' own form of an activation, as the benchmarks time it beside ours.

The spec names it (:func:`iglu_np._spec.define`'s ``torch`` and ``jax``): a
``torch.nn.functional`` / ``jax.nn`` function, or an expression in the framework's
operations (IGLU's is the paper's ``x * (0.5 + atan(x) / pi)``). JAX's GELU is taken
exact (``approximate=False``), as ours and torch's are.
"""

from __future__ import annotations

import functools

__all__ = ["jax_function", "torch_function"]


def torch_function(torch, act):
    """``f(tensor) -> tensor`` computing ``act`` at its defaults with torch, or None."""
    op = act.spec.torch
    if callable(op):
        return functools.partial(op, torch)
    if not op:
        return None
    return getattr(torch.nn.functional, op, None) or getattr(torch, op)


def jax_function(jax, act):
    """``f(array) -> array`` computing ``act`` at its defaults with JAX, or None."""
    op = act.spec.jax
    if callable(op):
        return functools.partial(op, jax.numpy)
    if not op:
        return None
    f = getattr(jax.nn, op, None) or getattr(jax.numpy, op)
    if op == "gelu":
        f = functools.partial(f, approximate=False)  # the exact GELU, as ours
    return f
