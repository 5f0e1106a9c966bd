"""Parameter validation, the same for every backend.

Backends receive an activation as its :class:`Params` (name, spec and parameters, with
what each call's validation needs precomputed) and check a call's keyword parameters with
:func:`values`. This module imports numpy and the specs only: :mod:`iglu_np._api`, the
dispatcher and every backend import it, and it imports none of them.
"""

from __future__ import annotations

import math

import numpy as np

from ._spec import REGISTRY

__all__ = ["Params", "of", "values", "check", "keyword_hint", "unexpected"]


class Params:
    """An activation as the backends see it: ``name``, ``spec``, ``params`` (the
    :class:`~iglu_np._spec.Param` tuple), ``param_names`` and ``defaults`` (a tuple in
    declaration order), and ``same_as``: None, or ``(other, values)`` with ``values`` in
    declaration order where the spec declares that its kernels there are ``other``'s.
    Pickles by name (dask workers rebuild it from their registry)."""

    __slots__ = ("spec", "name", "params", "param_names", "defaults", "by_name", "index", "same_as")

    def __init__(self, spec):
        self.spec = spec
        self.name = spec.name
        self.params = spec.params
        self.param_names = spec.param_names
        self.defaults = tuple(p.default for p in spec.params)
        self.by_name = {p.name: p for p in spec.params}
        self.index = {p.name: i for i, p in enumerate(spec.params)}
        same = spec.same_as
        self.same_as = (same[0], tuple(same[1][n] for n in self.param_names)) if same else None

    def __reduce__(self):
        return (of, (self.name,))

    def __repr__(self):
        return f"<iglu_np parameters of {self.name}>"


_OF: dict = {}
_NP_FLOATS = frozenset((np.float16, np.float32, np.float64))


def of(name: str) -> Params:
    """The :class:`Params` of the registered activation ``name`` (one per name)."""
    p = _OF.get(name)
    if p is None:
        if name not in REGISTRY:
            from . import activations  # noqa: F401  (registers every spec)
        p = _OF[name] = Params(REGISTRY[name])
    return p


def keyword_hint(act: Params) -> str:
    """The tail of a positional-argument error: parameters are keyword-only."""
    if not act.param_names:
        return f"; {act.name} has no parameters"
    ex = ", ".join(f"{p.name}={p.default!r}" for p in act.params)
    return f"; parameters are keyword-only: {', '.join(act.param_names)} (e.g. {act.name}(x, {ex}))"


def unexpected(act: Params, k: str) -> TypeError:
    """The error for a keyword that is not a parameter of ``act``."""
    names = act.param_names
    return TypeError(
        f"{act.name}() got an unexpected keyword argument {k!r}"
        + (f"; its parameters are {', '.join(names)}" if names else "; it has no parameters")
    )


def values(act: Params, params: dict) -> list:
    """Every parameter's value in declaration order (defaults filled in), each checked
    against its domain and the spec's cross-parameter ``check``."""
    vals = list(act.defaults)
    if not params:
        return vals
    index = act.index
    for k, v in params.items():
        i = index.get(k)
        if i is None:
            raise unexpected(act, k)
        vals[i] = check(act, act.params[i], v)
    cross = act.spec.check
    if cross is not None:
        msg = cross(*vals)  # positional: define() checked its parameters' order
        if msg:
            raise ValueError(f"{act.name}: {msg}")
    return vals


def check(act: Params, p, v):
    """Parameter ``p``'s value ``v`` checked against its domain: a Python number as is,
    a numpy scalar or 0-d value as is, anything else as a numpy array."""
    if type(v) is float or type(v) is int:
        if type(v) is int:
            try:
                float(v)
            except OverflowError:
                raise ValueError(
                    f"{act.name}: parameter {p.name} is an integer beyond float64's range "
                    f"({len(str(abs(v)))} digits), outside its domain {p.domain}"
                ) from None
        if not p.contains(v):
            raise ValueError(
                f"{act.name}: parameter {p.name}={v!r} is outside its domain {p.domain}"
            )
        return v
    if type(v) in _NP_FLOATS:
        # a numpy float scalar is checked as its float64 value, as the array branch below
        # checks it (same message), without that branch's array operations
        f = float(v)
        if not p.contains(f):
            raise ValueError(
                f"{act.name}: parameter {p.name} has a value {f!r} outside its domain {p.domain}"
            )
        return v
    arr = np.asarray(v)
    if arr.dtype.kind not in "fiub":
        raise TypeError(
            f"{act.name}: parameter {p.name} must be a real number or real array, "
            f"got dtype {arr.dtype}"
        )
    if arr.size:
        a = arr.astype(np.float64, copy=False)
        ok = np.isfinite(a)
        if p.lo > -math.inf:
            ok &= (a > p.lo) if p.lo_open else (a >= p.lo)
        if p.hi < math.inf:
            ok &= (a < p.hi) if p.hi_open else (a <= p.hi)
        if not ok.all():
            bad = float(a[~ok].flat[0])
            raise ValueError(
                f"{act.name}: parameter {p.name} has a value {bad!r} outside its domain {p.domain}"
            )
    return v if arr.ndim == 0 and isinstance(v, (float, int, np.generic)) else arr
