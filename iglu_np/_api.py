"""Public activation objects, generated from the specs.

``iglu_np.<name>`` is an :class:`Activation`: calling it computes the forward value and
its attributes give the derivatives (``.dx``, ``.dparams``, ``.backward``,
``.backward_params``), the gated form ``act(gate) * up`` (``.glu``: :mod:`iglu_np._gated`)
and the raw numpy ufuncs (``.ufunc``, ``.dx.ufunc`` ...).
"""

from __future__ import annotations

import inspect
from types import MappingProxyType

import numpy as np

from . import _gated, _params
from ._params import keyword_hint as _keyword_hint
from ._spec import REGISTRY
from .backends import backward_all as _backward_all
from .backends import backward_params as _backward_params
from .backends import run as _dispatch
from .backends import ufunc as _ufunc

__all__ = ["Activation", "Alias", "get", "get_gated"]

_PUBLIC_KIND = {"fwd": "__call__", "bwd": "backward"}


class _Op:
    """One kernel kind of an activation, callable with numpy semantics."""

    def __init__(self, act: "Activation", kind: str, n_data: int, doc: str):
        self._p = act._p
        self._kind = kind
        self._n_data = n_data
        self.__doc__ = doc
        self.__name__ = f"{act.name}.{_PUBLIC_KIND.get(kind, kind)}"

    @property
    def ufunc(self) -> np.ufunc:
        """The raw numpy ufunc (float32 and float64 loops; parameters positional).

        No validation and no ``errstate``: like numpy's own ufuncs it may set
        floating-point flags (numpy then warns) where the public function is silent."""
        return _ufunc(self._p.name, self._kind)

    def __call__(self, *args, out=None, **params):
        if len(args) != self._n_data:
            raise TypeError(
                f"{self.__name__}() takes {self._n_data} positional array argument(s) "
                f"({'x, grad_out' if self._n_data == 2 else 'x'}), got {len(args)}"
                + (_keyword_hint(self._p) if len(args) > self._n_data else "")
            )
        return _dispatch(self._p, self._kind, args, params, out)

    def __repr__(self):
        return f"<iglu_np {self.__name__}>"


class _DParams:
    """``dparams(x, **params)``: dict parameter -> elementwise partial derivative."""

    def __init__(self, act: "Activation"):
        self._p = act._p
        self.__name__ = f"{act.name}.dparams"
        self.__doc__ = (
            f"Elementwise partial derivatives of ``{act.name}`` in each parameter.\n\n"
            f"``{act.name}.dparams(x, **params)`` returns a dict name -> array broadcast "
            "against ``x``; empty for an activation without parameters."
        )

    @property
    def ufuncs(self) -> dict:
        return {p: _ufunc(self._p.name, "d_" + p) for p in self._p.param_names}

    def __call__(self, x, /, *args, **params):
        if args:
            raise TypeError(
                f"{self.__name__}() takes 1 positional argument (x), got {1 + len(args)}"
                + _keyword_hint(self._p)
            )
        return {
            p: _dispatch(self._p, "d_" + p, (x,), dict(params), None) for p in self._p.param_names
        }

    def __repr__(self):
        return f"<iglu_np {self.__name__}>"


class Activation:
    """An activation function with its derivatives; see ``help(iglu_np.<name>)``.

    The public face only: signatures, positional-argument errors and docs. Every call
    goes to the dispatcher (:mod:`iglu_np.backends`) with the activation's
    :class:`~iglu_np._params.Params`, which picks the backend."""

    def __init__(self, spec):
        self.spec = spec
        self.name = spec.name
        self.params = spec.params
        self.param_names = spec.param_names
        self.defaults = MappingProxyType(spec.defaults)
        self.formula = spec.formula
        self.__name__ = spec.name
        self.__qualname__ = spec.name
        self.__module__ = "iglu_np"
        self._p = _params.of(spec.name)
        from ._docs import activation_doc, op_doc

        self.__doc__ = activation_doc(spec)
        self.dx = _Op(self, "dx", 1, op_doc(spec, "dx"))
        self.backward = _Op(self, "bwd", 2, op_doc(spec, "bwd"))
        self.dparams = _DParams(self)
        self.glu = _plain_gated(self)
        sig = [inspect.Parameter("x", inspect.Parameter.POSITIONAL_ONLY)]
        sig += [
            inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.default)
            for p in spec.params
        ]
        sig.append(inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None))
        self.__signature__ = inspect.Signature(sig)

    # ------------------------------------------------------------------ public
    def __call__(self, x, /, *args, out=None, **params):
        if args:
            raise TypeError(
                f"{self.name}() takes 1 positional argument (x), got {1 + len(args)}"
                + _keyword_hint(self._p)
            )
        return _dispatch(self._p, "fwd", (x,), params, out)

    # ``backend="cpu" | "numba_cuda" | "cupy" | ...`` is accepted as a keyword by every
    # call; by default the backend follows the array type (iglu_np.backends.detect).

    @property
    def ufunc(self) -> np.ufunc:
        """The raw forward numpy ufunc ``ufunc(x, *params)``: no validation, no ``errstate``
        (it may set floating-point flags, and numpy warn, where the function is silent)."""
        return _ufunc(self.name, "fwd")

    def backward_params(self, x, grad_out, /, *args, **params) -> dict:
        """Gradients of ``sum(grad_out * f(x))`` in each parameter, reduced to its shape.

        A scalar parameter gets a 0-d array; an array parameter (e.g. per channel) gets
        an array of its own shape, summed over the axes it was broadcast along.
        """
        if args:
            raise TypeError(
                f"{self.name}.backward_params() takes 2 positional arguments (x, grad_out), "
                f"got {2 + len(args)}" + _keyword_hint(self._p)
            )
        return _backward_params(self._p, (x, grad_out), params)

    def backward_all(self, x, grad_out, /, *args, out=None, **params) -> tuple:
        """``(grad_x, grads)``: the fused backward ``grad_out * f'(x)`` and the gradients
        of ``sum(grad_out * f(x))`` in each parameter (as :meth:`backward_params`), from
        one read of x and grad_out where the backend fuses them (CPU, CuPy and Numba CUDA,
        with scalar parameters); otherwise from :meth:`backward` and :meth:`backward_params`, with the
        same results. ``out`` receives grad_x.
        """
        if args:
            raise TypeError(
                f"{self.name}.backward_all() takes 2 positional arguments (x, grad_out), "
                f"got {2 + len(args)}" + _keyword_hint(self._p)
            )
        return _backward_all(self._p, (x, grad_out), params, out)

    def __reduce__(self):
        # Pickle by name (dask/multiprocessing workers rebuild from their own registry).
        return (get, (self.name,))

    def __repr__(self):
        ps = ", ".join(f"{p.name}={p.default!r}" for p in self.params)
        return f"<iglu_np activation {self.name}({ps})>"

    def _ufunc(self, kind: str) -> np.ufunc:
        """The raw ufunc of any kernel kind (``bwd_<param>`` has no public accessor)."""
        return _ufunc(self.name, kind)


class _AliasOp(_Op):
    """A kernel kind of an alias: the target's, with the alias's parameter defaults."""

    def __init__(self, act: "Alias", op: _Op):
        vars(self).update(vars(op))
        self._fixed = act.fixed
        self.__name__ = f"{act.name}.{op.__name__.split('.', 1)[1]}"

    def __call__(self, *args, out=None, **params):
        return super().__call__(*args, out=out, **{**self._fixed, **params})


class _AliasDParams(_DParams):
    def __init__(self, act: "Alias", op: _DParams):
        vars(self).update(vars(op))
        self._fixed = act.fixed
        self.__name__ = f"{act.name}.dparams"

    def __call__(self, x, /, *args, **params):
        return super().__call__(x, *args, **{**self._fixed, **params})


class Alias(Activation):
    """Another name for a registered activation (``iglu_np.ALIASES``), with the alias's
    fixed parameter values as its defaults: ``iglu_np.quick_gelu`` is ``iglu_np.swish``
    with ``beta=1.702``. A parameter passed to a call overrides the default, as for any
    activation. Calls, derivatives and backward passes run the target's kernels;
    ``.ufunc`` and ``.spec`` are the target's (the raw ufunc takes every parameter
    positionally). Pickles by the alias's name."""

    def __init__(self, name: str, target: Activation, fixed, note: str = ""):
        import dataclasses

        vars(self).update(vars(target))
        self.name = self.__name__ = self.__qualname__ = name
        self.target = target.name
        self.fixed = MappingProxyType(dict(fixed))
        self.params = tuple(
            dataclasses.replace(p, default=self.fixed[p.name]) if p.name in self.fixed else p
            for p in target.params
        )
        self.defaults = MappingProxyType({p.name: p.default for p in self.params})
        self.__signature__ = target.__signature__.replace(
            parameters=[
                q.replace(default=self.defaults[q.name]) if q.name in self.defaults else q
                for q in target.__signature__.parameters.values()
            ]
        )
        fixed_txt = ", ".join(f"{k}={v!r}" for k, v in self.fixed.items())
        self.__doc__ = (
            f"``{name}``: an alias of ``iglu_np.{target.name}``"
            + (f" with {fixed_txt}" if fixed_txt else "")
            + "."
            + (f" {note}." if note else "")
            + "\n\n"
            + (target.__doc__ or "")
        )
        self.dx = _AliasOp(self, target.dx)
        self.backward = _AliasOp(self, target.backward)
        self.dparams = _AliasDParams(self, target.dparams)
        self.glu = _plain_gated(self, target)

    def __call__(self, x, /, *args, out=None, **params):
        return super().__call__(x, *args, out=out, **{**self.fixed, **params})

    def backward_params(self, x, grad_out, /, *args, **params) -> dict:
        return super().backward_params(x, grad_out, *args, **{**self.fixed, **params})

    def backward_all(self, x, grad_out, /, *args, out=None, **params) -> tuple:
        return super().backward_all(x, grad_out, *args, out=out, **{**self.fixed, **params})

    def __reduce__(self):
        return (get, (self.name,))

    def __repr__(self):
        ps = ", ".join(f"{k}={v!r}" for k, v in self.fixed.items())
        return f"<iglu_np activation {self.name}: alias of {self.target}({ps})>"


def _build() -> dict:
    return {name: Activation(spec) for name, spec in REGISTRY.items()}


_ACTS = None
_ALIAS_ACTS = None


def _alias_objects() -> dict:
    """Alias name -> :class:`Alias` (the table is :data:`iglu_np.ALIASES`)."""
    global _ALIAS_ACTS
    if _ALIAS_ACTS is None:
        from ._aliases import ALIASES, NOTES

        acts = _acts()
        _ALIAS_ACTS = {
            a: Alias(a, acts[t], fixed, NOTES.get(a, "")) for a, (t, fixed) in ALIASES.items()
        }
    return _ALIAS_ACTS


def _acts() -> dict:
    global _ACTS
    if _ACTS is None:
        from . import activations  # noqa: F401  (registers every spec)

        _ACTS = _build()
    return _ACTS


def get(name: str) -> Activation:
    """The activation called ``name``, or the :class:`Alias` of that name
    (``iglu_np.ALIASES``); ``KeyError`` listing the known names otherwise."""
    try:
        return _acts()[name]
    except (KeyError, TypeError):
        pass
    try:
        return _alias_objects()[name]
    except (KeyError, TypeError):
        import difflib

        known = [*_acts(), *_alias_objects()]
        key = str(name).lower().replace("-", "_")
        near = [key] if key in known else difflib.get_close_matches(key, known, n=3)
        hint = f"did you mean {' or '.join(map(repr, near))}? " if near else ""
        raise KeyError(
            f"unknown activation {name!r}; {hint}known: {', '.join(sorted(_acts()))}; "
            f"aliases: {', '.join(sorted(_alias_objects()))}"
        ) from None


# --------------------------------------------------------------------------- gated forms
def _plain_gated(act, target=None) -> _gated.Gated:
    """``act.glu``: the gate first, halves, no clamp (an alias's: its target computes it)."""
    g = _gated.Gated(
        f"{act.name}_glu",
        act,
        target,
        source=f"{act.name}(x[..., :d]) * x[..., d:], the gate first",
    )
    g.__qualname__ = f"{act.name}.glu"  # pickled as iglu_np.<name>.glu
    return g


_FORMS: dict = {}


def gated_forms() -> dict:
    """The named gated forms (:mod:`iglu_np._gated_forms`), name -> :class:`Gated`."""
    if not _FORMS:
        from ._gated_forms import FORMS

        for name, (act, fixed, rename, layout, first, shift, limit, src) in FORMS.items():
            _FORMS[name] = _gated.Gated(
                name,
                get(act),
                fixed=fixed,
                rename=rename,
                layout=layout,
                gate_first=first,
                shift=shift,
                limit=limit,
                source=src,
            )
    return _FORMS


def all_gated() -> dict:
    """Every gated form by name: the named ones, then ``<activation>_glu`` for every
    activation (not the aliases')."""
    return {**gated_forms(), **{f"{n}_glu": a.glu for n, a in _acts().items()}}


def get_gated(name: str) -> _gated.Gated:
    """The named gated form ``name`` (:data:`iglu_np.GATED`) or ``<activation>_glu`` (an
    activation's or alias's ``.glu``); KeyError naming the known forms otherwise."""
    f = gated_forms().get(name)
    if f is not None:
        return f
    if isinstance(name, str) and name.endswith("_glu"):
        try:
            return get(name[:-4]).glu
        except KeyError:
            pass
    raise KeyError(
        f"unknown gated form {name!r}; named forms: {', '.join(gated_forms())}; "
        "and <activation>_glu for every activation or alias"
    )
