"""Declarative activation specs: the single source of truth.

An activation is declared once, in a small module under ``iglu_np/activations``, with
:func:`define`. The declaration holds

* scalar kernels written in plain Python (``f``, ``dx`` and one per parameter) that the
  backends compile: Numba ufuncs on the CPU, Numba CUDA device functions on the GPU, and
  C++ translated from them for CuPy (:mod:`iglu_np.backends.codegen.cxx_translate`).
  They use ``math`` and the helpers of :mod:`iglu_np._math` imported *by name*, and the
  ``T = type(x)`` idiom so float32 arithmetic stays float32;
* the parameters with defaults, domains and test values;
* mpmath references for the value and every derivative (used only by the tests);
* the formula and notes from which the public docstrings are generated.

Specs never import a backend; backends import specs. Nothing here imports numba or mpmath.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

__all__ = ["Param", "ActivationSpec", "define", "kernel", "REGISTRY", "is_kernel"]

# Every plain-Python function that backends must compile (spec kernels and their helpers).
_KERNELS: set = set()


def kernel(fn):
    """Mark a plain-Python scalar function as compilable by every backend.

    Kernels may call other kernels, ``math`` functions and nothing else; they must be
    imported into the calling module by name (``from iglu_np._math import log1p_exp``),
    because backends rebind those global names to their compiled versions.

    A conditional value is named before it goes into a returned tuple or a call
    (``s = a if c else b; return x, s``): from Python 3.12's bytecode, numba-cuda-mlir
    compiles ``return x, (a if c else b)`` through local memory (tests/test_mlir_ptx.py).
    """
    _KERNELS.add(fn)
    return fn


def is_kernel(obj) -> bool:
    return obj in _KERNELS


@dataclass(frozen=True)
class Param:
    """A scalar (or broadcast array) parameter of an activation.

    ``lo``/``hi`` bound the domain; ``lo_open``/``hi_open`` make the bound strict.
    ``test_values`` are the values the accuracy tests sweep besides the default (domain
    edges, the paper's grid, a few random values). ``above`` names another parameter this
    one must exceed (xIELU's alpha_n > beta; the spec's ``check`` enforces it): trainable
    layers (:func:`iglu_np.nn.layers.param_transform`) then learn it as that parameter
    plus the softplus of a raw value.
    """

    name: str
    default: float
    doc: str = ""
    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = False
    test_values: tuple = ()
    above: str = ""

    @property
    def domain(self) -> str:
        """Human-readable domain, e.g. ``sigma > 0`` or ``0 <= alpha <= 1``."""
        n = self.name
        lo_fin, hi_fin = math.isfinite(self.lo), math.isfinite(self.hi)
        lo_op = "<" if self.lo_open else "<="
        hi_op = "<" if self.hi_open else "<="
        if lo_fin and hi_fin:
            return f"{_fmt(self.lo)} {lo_op} {n} {hi_op} {_fmt(self.hi)}"
        if lo_fin:
            return f"{n} {'>' if self.lo_open else '>='} {_fmt(self.lo)}"
        if hi_fin:
            return f"{n} {hi_op} {_fmt(self.hi)}"
        return f"{n} finite"

    def contains(self, v: float) -> bool:
        """Scalar domain check; NaN and (unless the bound allows it) inf are outside."""
        if not (v == v) or math.isinf(v):
            return False
        if v < self.lo or (self.lo_open and v == self.lo):
            return False
        if v > self.hi or (self.hi_open and v == self.hi):
            return False
        return True


def any_at_least(a, b) -> bool:
    """Whether ``a >= b`` anywhere (numbers or arrays, broadcast): the spec ``check``s'
    cross-parameter test. Python numbers compare directly: ``np.any`` of two 0-d arrays
    cost ~5 us, three times the rest of a small call."""
    if type(a) in (float, int) and type(b) in (float, int):
        return a >= b
    import numpy as np

    return bool(np.any(np.asarray(a) >= np.asarray(b)))


def _fmt(v: float) -> str:
    return repr(int(v)) if float(v).is_integer() else repr(v)


@dataclass(frozen=True)
class ActivationSpec:
    name: str
    summary: str
    formula: str
    params: tuple
    f: Callable
    dx: Callable
    dparams: Mapping
    ref: Callable
    ref_dx: Callable
    ref_dparams: Mapping
    module: str
    notes: str = ""
    derivative_formula: str = ""
    check: Callable | None = None
    scales: Mapping = field(default_factory=dict)
    special_points: tuple = ()
    references: tuple = ()
    x_range: tuple = (-1e6, 1e6)
    tolerances: Mapping = field(default_factory=dict)
    example: str = ""
    monotonic: bool = False
    torch: str | Callable = ""
    jax: str | Callable = ""
    paper_table: bool = False
    bulk: Mapping = field(default_factory=dict)
    bulk_domain: Callable | None = None
    prepared: Mapping = field(default_factory=dict)
    same_as: tuple = ()

    @property
    def param_names(self) -> tuple:
        return tuple(p.name for p in self.params)

    @property
    def defaults(self) -> dict:
        return {p.name: p.default for p in self.params}

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def kernels(self) -> dict:
        """Kernel name -> scalar function: ``f``, ``dx`` and ``d<param>`` for each param."""
        out = {"f": self.f, "dx": self.dx}
        for p in self.params:
            out["d" + p.name] = self.dparams[p.name]
        return out

    def prepared_for(self, which: str):
        """``(prep, fn, n)`` for kernel ``which`` (``"f"``, ``"dx"``, ``"d<param>"``):
        its parameter-only part ``prep(*params)`` (an ``n``-tuple) and ``fn(x, *params,
        *prep(*params))``; None where the spec declares none (see :func:`define`)."""
        key = which if which in ("f", "dx") else which[1:]
        got = self.prepared.get(key)
        if got is None:
            return None
        prep, fn = got
        n = _PREPARED_N.get(prep)
        if n is None:  # the tuple's length, from one plain-Python call at the defaults
            n = _PREPARED_N[prep] = len(prep(*(float(d) for d in self.defaults.values())))
        return prep, fn, n


_PREPARED_N: dict = {}  # prep -> the length of its tuple (see prepared_for)
_REGISTRY: dict = {}
REGISTRY: Mapping = MappingProxyType(_REGISTRY)


def define(
    name: str,
    *,
    summary: str,
    formula: str,
    f: Callable,
    dx: Callable,
    ref: Callable,
    ref_dx: Callable,
    params: Sequence[Param] = (),
    dparams: Mapping | None = None,
    ref_dparams: Mapping | None = None,
    notes: str = "",
    derivative_formula: str = "",
    check: Callable | None = None,
    scales: Mapping | None = None,
    special_points: Sequence = (),
    references: Sequence = (),
    x_range: tuple = (-1e6, 1e6),
    tolerances: Mapping | None = None,
    example: str = "",
    monotonic: bool = False,
    torch: str | Callable = "",
    jax: str | Callable = "",
    paper_table: bool = False,
    bulk: Mapping | None = None,
    bulk_domain: Callable | None = None,
    prepared: Mapping | None = None,
    same_as: tuple = (),
) -> ActivationSpec:
    """Declare and register an activation.

    ``f(x, *params)``, ``dx(x, *params)`` and ``dparams[p](x, *params)`` are scalar
    kernels (parameters positional, in declaration order). ``ref*`` are mpmath
    references called as ``ref(mp, x, *params)`` with ``mp`` an mpmath context at high
    precision and ``x``/params exact ``mpf`` values (possibly ``±inf``: return the
    mathematical limit). ``scales`` optionally maps ``"f"``, ``"dx"`` or a parameter
    name to ``scale(mp, x, *params)``: the magnitude of the largest term, used as the
    error yardstick where the true value cancels to (near) zero. ``check(**params)``
    returns an error message for an invalid *combination* of parameters (or None); its
    parameters are the activation's, in declaration order (each call's validation passes
    them positionally).
    ``special_points`` are x values (kinks, thresholds) the tests always include, as
    numbers or as callables ``(params dict) -> x``. ``monotonic=True`` declares ``f``
    non-decreasing in x at the default parameters (a hypothesis property test checks it).
    ``torch`` names the ``torch.nn.functional`` function that computes the same activation
    at its default parameters (``iglu-np bench`` times it side by side), or is a callable
    ``(torch, x) -> tensor`` computing it with torch operations, or is empty. ``jax``
    likewise names the ``jax.nn`` (else ``jax.numpy``) function, or is a callable
    ``(jax.numpy, x) -> array``, that ``iglu-np bench --device gpu`` and
    ``--frameworks`` time (:mod:`iglu_np.cli.references`).
    The spec's module (where backends look for module-level data such as its C++) is
    ``f.__module__``: define ``f`` in the module that calls ``define``.
    ``paper_table=True`` marks the activations of the IGLU paper's comparison table (the
    set the SIMD test and ``examples/bench_vectorisation.py`` cover).

    ``bulk`` maps ``"f"``, ``"dx"`` or a parameter name to a cheaper kernel that returns
    the same bits as the exact one wherever the kernel ``bulk_domain(x, *params)`` is true
    (no tail handling there: e.g. exp by :func:`iglu_np._math.exp_normal`). The CPU fast
    path runs a block of elements through it when the whole block is in the domain, else
    the exact kernel; the CuPy C++ takes it per element where the domain holds; the ufuncs
    and the Numba CUDA kernels run the exact kernels. The tests check the bit equality
    (tests/test_bulk.py, and the host-compiled C++ against the CPU).

    ``prepared`` maps the same keys to ``(prep, fn)``: ``prep(*params)`` returns a tuple of
    values that depend on the parameters alone, and ``fn(x, *params, *prep(*params))``
    returns the kernel's bits. GPU kernels whose parameters are scalars (the CuPy vector
    kernels, the Numba CUDA ones) compute ``prep`` once per thread, not once per element
    (tests/test_prepared.py checks the bit equality on the CPU and in the host C++).

    ``same_as=(other, values)`` declares that at the parameter values ``values`` (a
    mapping naming every parameter) ``f`` and ``dx`` return activation ``other``'s bits at
    its defaults for every x (Swish at beta = 1 is SiLU). The CPU fast path then runs
    ``other``'s value, derivative and backward loops, whose bulk has no parameter to
    form (tests/test_same_as.py checks the bit equality over the whole float range).
    """
    if name in _REGISTRY:
        raise ValueError(f"activation {name!r} is already registered")
    params = tuple(params)
    dparams = dict(dparams or {})
    ref_dparams = dict(ref_dparams or {})
    names = [p.name for p in params]
    for what, mapping in (("dparams", dparams), ("ref_dparams", ref_dparams)):
        if set(mapping) != set(names):
            raise ValueError(f"{name}: {what} keys {sorted(mapping)} != params {names}")
    bulk = dict(bulk or {})
    if set(bulk) - {"f", "dx", *names}:
        raise ValueError(f"{name}: bulk keys {sorted(bulk)} not in 'f', 'dx', {names}")
    if bool(bulk) != (bulk_domain is not None):
        raise ValueError(f"{name}: bulk kernels and bulk_domain go together")
    prepared = dict(prepared or {})
    if set(prepared) - {"f", "dx", *names}:
        raise ValueError(f"{name}: prepared keys {sorted(prepared)} not in 'f', 'dx', {names}")
    if any(not (isinstance(v, tuple) and len(v) == 2) for v in prepared.values()):
        raise ValueError(f"{name}: prepared values must be (prep, fn) pairs")
    if same_as:
        other, at = same_as
        if not isinstance(other, str) or set(at) != set(names):
            raise ValueError(f"{name}: same_as is (activation name, {{every parameter: value}})")
        same_as = (other, MappingProxyType({k: float(at[k]) for k in names}))
    if check is not None:
        import inspect

        cs = list(inspect.signature(check).parameters)
        if cs != names:
            raise ValueError(f"{name}: check's parameters {cs} must be {names}, in that order")
    for fn in [
        f,
        dx,
        *dparams.values(),
        *bulk.values(),
        *([bulk_domain] if bulk else []),
        *(g for v in prepared.values() for g in v),
    ]:
        kernel(fn)
    module = getattr(f, "__module__", None) or "?"  # the declaring module, as for docs
    spec = ActivationSpec(
        name=name,
        summary=summary,
        formula=formula,
        params=params,
        f=f,
        dx=dx,
        dparams=MappingProxyType(dparams),
        ref=ref,
        ref_dx=ref_dx,
        ref_dparams=MappingProxyType(ref_dparams),
        module=module,
        notes=notes,
        derivative_formula=derivative_formula,
        check=check,
        scales=MappingProxyType(dict(scales or {})),
        special_points=tuple(special_points),
        references=tuple(references),
        x_range=x_range,
        tolerances=MappingProxyType(dict(tolerances or {})),
        example=example,
        monotonic=bool(monotonic),
        torch=torch,
        jax=jax,
        paper_table=bool(paper_table),
        bulk=MappingProxyType(bulk),
        bulk_domain=bulk_domain,
        prepared=MappingProxyType(prepared),
        same_as=tuple(same_as),
    )
    _REGISTRY[name] = spec
    return spec
