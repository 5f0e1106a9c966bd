"""Compile one Python source for several Numba targets.

Spec kernels are plain Python functions that call helper kernels through module globals.
A backend compiles a kernel by copying the function with those globals *rebound* to the
backend's compiled helpers (``numba.njit`` on the CPU, ``cuda.jit(device=True)`` on the
GPU), so the same source serves every target and no module imports a backend.
"""
from __future__ import annotations

import types

from .._spec import is_kernel


class Rebinder:
    """Memoised ``kernel -> compiled kernel`` for one target.

    ``jit`` turns a plain function into the target's callable; ``overrides`` maps a
    helper to a target-specific replacement (e.g. an FMA-based ``two_prod`` on CUDA).
    """

    def __init__(self, jit, overrides=None):
        self._jit = jit
        self._overrides = dict(overrides or {})
        self._memo = {}

    def __call__(self, fn):
        done = self._memo.get(fn)
        if done is not None:
            return done
        if fn in self._overrides:
            done = self._overrides[fn]
            self._memo[fn] = done
            return done
        self._memo[fn] = None  # guards recursion (a kernel naming itself)
        done = self._jit(self.rebound(fn))
        self._memo[fn] = done
        return done

    def rebound(self, fn):
        """A copy of ``fn`` whose kernel globals point at compiled kernels."""
        g = dict(fn.__globals__)
        for name in _global_names(fn.__code__):
            v = g.get(name)
            if v is not fn and _hashable(v) and is_kernel(v):
                compiled = self(v)
                if compiled is not None:
                    g[name] = compiled
        nf = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
        nf.__qualname__ = fn.__qualname__
        nf.__module__ = fn.__module__
        nf.__doc__ = fn.__doc__
        return nf

    def namespace(self, fns: dict) -> dict:
        return {k: self(v) for k, v in fns.items()}


def _hashable(v):
    try:
        hash(v)
    except TypeError:
        return False
    return True


def _global_names(code):
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _global_names(c)
    return names
