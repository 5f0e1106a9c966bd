"""Compile one Python source for several Numba targets.

Spec kernels are plain Python functions that call helper kernels through module globals.
A backend compiles a kernel by copying the function with those globals *rebound* to the
backend's compiled helpers (``numba.njit`` on the CPU, ``cuda.jit(device=True)`` on the
GPU), so the same source serves every target and no module imports a backend.
"""

from __future__ import annotations

import math
import types

from ..._math import _NumbaCasts
from ..._spec import is_kernel


class Rebinder:
    """Memoised ``kernel -> compiled kernel`` for one target.

    ``jit`` turns a plain function into the target's callable; ``overrides`` maps a
    helper to a target-specific replacement (e.g. the fma instruction for ``_math.fma``).
    ``math_ns`` (optional; may be set after construction where the namespace is compiled
    by this rebinder) replaces the ``math`` module in every rebound function's globals: the CPU and CUDA backends give :mod:`iglu_np._vmath`'s elementary functions
    (SIMD code on the CPU; on the GPU, no ``ex2.approx.ftz`` that flushes subnormal
    results). ``helper(obj)`` (optional) returns the plain Python function of a global
    that this target must compile itself (CUDA compiles _vmath's Numba dispatchers from
    their Python), or None.
    """

    def __init__(self, jit, overrides=None, math_ns=None, helper=None, numba_ns=None):
        self._jit = jit
        self.numba_ns = numba_ns  # what kernels' ``numba.float64(x)`` casts name
        self._overrides = dict(overrides or {})
        self.math_ns = math_ns
        self._helper = helper
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
            if v is fn or not _hashable(v):
                continue
            if isinstance(v, _NumbaCasts):
                if self.numba_ns is None:
                    import numba  # the backends import it anyway; iglu_np itself does not

                    self.numba_ns = numba
                g[name] = self.numba_ns
                continue
            if v is math:
                if self.math_ns is not None:
                    g[name] = self.math_ns
                continue
            if v in self._overrides:
                g[name] = self._overrides[v]
                continue
            py = self._helper(v) if self._helper is not None and not is_kernel(v) else None
            if is_kernel(v) or py is not None:
                compiled = self(py if py is not None else v)
                if compiled is not None:
                    g[name] = compiled
        nf = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
        nf.__qualname__ = fn.__qualname__
        nf.__module__ = fn.__module__
        nf.__doc__ = fn.__doc__
        return nf


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
