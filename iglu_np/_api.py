"""Public activation objects, generated from the specs.

``iglu_np.<name>`` is an :class:`Activation`: calling it computes the forward value and
its attributes give the derivatives (``.dx``, ``.dparams``, ``.backward``,
``.backward_params``) and the raw numpy ufuncs (``.ufunc``, ``.dx.ufunc`` ...).
"""
from __future__ import annotations

import inspect
import math
from types import MappingProxyType

import numpy as np

from . import backends
from ._spec import REGISTRY

__all__ = ["Activation", "ACTIVATIONS", "get"]

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_HOST_TYPES = (np.ndarray, np.generic, float, int, list, tuple)
_COMPUTE = {_F16: _F32, _F32: _F32, _F64: _F64}


def _compute_dtype(name: str, what: str, dt: np.dtype) -> np.dtype:
    c = _COMPUTE.get(dt)
    if c is not None:
        return c
    if dt.kind in "biu":
        return _F64
    raise TypeError(
        f"{name}: unsupported dtype {dt} for {what}; expected a real floating "
        "(float16/32/64), integer or boolean array"
    )


def _dtype_of(name, what, v):
    dt = getattr(v, "dtype", None)
    if not isinstance(dt, np.dtype):
        if isinstance(v, (float, int)):  # Python scalars (bool is an int)
            return _F64
        dt = np.asarray(v).dtype
    return _compute_dtype(name, what, dt)


def _all_half(data) -> bool:
    """True when the float16 rule applies: some input is float16 and none is wider."""
    half = False
    for d in data:
        dt = getattr(d, "dtype", None)
        if dt == _F16:
            half = True
        elif dt is not None and dt.kind == "f":
            return False
    return half


def _unbroadcast(a: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``a`` down to ``shape`` (the inverse of broadcasting ``shape`` to a.shape)."""
    if a.shape == shape:
        return a
    nlead = a.ndim - len(shape)
    axes = list(range(nlead))
    axes += [nlead + i for i, n in enumerate(shape) if n == 1 and a.shape[nlead + i] != 1]
    r = a.sum(axis=tuple(axes), keepdims=True) if axes else a
    return r.reshape(shape)


_FAST = None


def _cpu_fast():
    # njit loop kernels for contiguous float32/float64 arrays (imported on first use).
    global _FAST
    if _FAST is None:
        from .backends import cpu_fast

        _FAST = cpu_fast
    return _FAST


class _Op:
    """One kernel kind of an activation, callable with numpy semantics."""

    def __init__(self, act: "Activation", kind: str, n_data: int, doc: str):
        self._act = act
        self._kind = kind
        self._n_data = n_data
        self.__doc__ = doc
        self.__name__ = f"{act.name}.{kind}"

    @property
    def ufunc(self) -> np.ufunc:
        """The raw numpy ufunc (float32 and float64 loops; parameters positional).

        No validation and no ``errstate``: like numpy's own ufuncs it may set
        floating-point flags (numpy then warns) where the public function is silent."""
        return self._act._ufunc(self._kind)

    def __call__(self, *args, out=None, **params):
        if len(args) != self._n_data:
            raise TypeError(
                f"{self.__name__}() takes {self._n_data} positional array argument(s) "
                f"({'x, grad_out' if self._n_data == 2 else 'x'}), got {len(args)}"
            )
        return self._act._run(self._kind, args, params, out)

    def __repr__(self):
        return f"<iglu_np {self.__name__}>"


class _DParams:
    """``dparams(x, **params)``: dict parameter -> elementwise partial derivative."""

    def __init__(self, act: "Activation"):
        self._act = act
        self.__name__ = f"{act.name}.dparams"
        self.__doc__ = (
            f"Elementwise partial derivatives of ``{act.name}`` in each parameter.\n\n"
            f"``{act.name}.dparams(x, **params)`` returns a dict name -> array broadcast "
            "against ``x``; empty for an activation without parameters."
        )

    @property
    def ufuncs(self) -> dict:
        return {p: self._act._ufunc("d_" + p) for p in self._act.param_names}

    def __call__(self, x, **params):
        return {
            p: self._act._run("d_" + p, (x,), dict(params), None) for p in self._act.param_names
        }

    def __repr__(self):
        return f"<iglu_np {self.__name__}>"


class Activation:
    """An activation function with its derivatives; see ``help(iglu_np.<name>)``."""

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
        self._ufuncs = {}
        self._plans = {}  # kind + dtype char -> (compiled loop, threaded kernel)
        self._calls = {}  # kind + dtype char -> small calls served by the ufunc so far
        self._params_by_name = {p.name: p for p in spec.params}
        self._defaults_tuple = tuple(p.default for p in spec.params)
        from ._docs import activation_doc, op_doc

        self.__doc__ = activation_doc(spec)
        self.dx = _Op(self, "dx", 1, op_doc(spec, "dx"))
        self.backward = _Op(self, "bwd", 2, op_doc(spec, "bwd"))
        self.dparams = _DParams(self)
        sig = [inspect.Parameter("x", inspect.Parameter.POSITIONAL_ONLY)]
        sig += [
            inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.default)
            for p in spec.params
        ]
        sig.append(inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None))
        self.__signature__ = inspect.Signature(sig)

    # ------------------------------------------------------------------ public
    def __call__(self, x, /, *, out=None, **params):
        return self._run("fwd", (x,), params, out)

    # ``backend="cpu" | "numba_cuda" | "cupy" | ...`` is accepted as a keyword by every
    # call; by default the backend follows the array type (iglu_np.backends.detect).

    @property
    def ufunc(self) -> np.ufunc:
        """The raw forward numpy ufunc ``ufunc(x, *params)``: no validation, no ``errstate``
        (it may set floating-point flags, and numpy warn, where the function is silent)."""
        return self._ufunc("fwd")

    def backward_params(self, x, grad_out, /, **params) -> dict:
        """Gradients of ``sum(grad_out * f(x))`` in each parameter, reduced to its shape.

        A scalar parameter gets a 0-d array; an array parameter (e.g. per channel) gets
        an array of its own shape, summed over the axes it was broadcast along.
        """
        backend = params.pop("backend", None)
        if backend is None:
            for d in (x, grad_out):
                if not isinstance(d, _HOST_TYPES):
                    backend = backends.detect(d)
                    break
        if backend is not None and backend != "cpu":
            return backends.run(backend, self, "backward_params", (x, grad_out), params, None)
        vals, cdt = self._prepare(("x", "grad_out"), (x, grad_out), params)
        res = _cpu_fast().backward_params(self, vals, cdt)
        if res is not None:
            return res
        res = {}
        for i, p in enumerate(self.param_names):
            full = self._call_ufunc("bwd_" + p, vals, cdt, None)
            pshape = np.shape(vals[2 + i])
            res[p] = np.asarray(_unbroadcast(np.asarray(full), pshape))
        return res

    def __reduce__(self):
        # Pickle by name (dask/multiprocessing workers rebuild from their own registry).
        return (get, (self.name,))

    def __repr__(self):
        ps = ", ".join(f"{p.name}={p.default!r}" for p in self.params)
        return f"<iglu_np activation {self.name}({ps})>"

    # ------------------------------------------------------------------ machinery
    def _ufunc(self, kind: str) -> np.ufunc:
        u = self._ufuncs.get(kind)
        if u is None:
            from .backends import cpu

            u = self._ufuncs[kind] = cpu.get_ufunc(self.name, kind)
        return u

    def _param_values(self, params: dict) -> list:
        if not params:
            return list(self._defaults_tuple)
        vals = list(self._defaults_tuple)
        names = self.param_names
        for k, v in params.items():
            try:
                i = names.index(k)
            except ValueError:
                raise TypeError(
                    f"{self.name}() got an unexpected keyword argument {k!r}"
                    + (f"; its parameters are {', '.join(names)}" if names else "; it has no parameters")
                ) from None
            vals[i] = self._check_param(self._params_by_name[k], v)
        if self.spec.check is not None:
            msg = self.spec.check(**dict(zip(names, vals)))
            if msg:
                raise ValueError(f"{self.name}: {msg}")
        return vals

    def _check_param(self, p, v):
        if type(v) is float or type(v) is int:
            if not p.contains(v):
                raise ValueError(
                    f"{self.name}: parameter {p.name}={v!r} is outside its domain {p.domain}"
                )
            return v
        arr = np.asarray(v)
        if arr.dtype.kind not in "fiub":
            raise TypeError(
                f"{self.name}: parameter {p.name} must be a real number or real array, "
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
                    f"{self.name}: parameter {p.name} has a value {bad!r} outside its domain "
                    f"{p.domain}"
                )
        return v if arr.ndim == 0 and isinstance(v, (float, int, np.generic)) else arr

    def _prepare(self, names, data, params):
        vals = self._param_values(params)
        cdt = None
        for nm, d in zip(names, data):
            dt = _dtype_of(self.name, nm, d)
            cdt = dt if cdt is None else np.promote_types(cdt, dt)
        return list(data) + vals, cdt

    def _call_ufunc(self, kind, vals, cdt, out):
        # Kernels may raise FP flags in branches they discard (inf*0, overflow in a tail
        # that is then replaced by its limit): numpy would turn them into warnings.
        try:
            with np.errstate(all="ignore"):
                return self._ufunc(kind)(*vals, out=out, dtype=cdt)
        except ValueError as e:
            raise ValueError(f"{self.name}: {e}") from None
        except TypeError as e:
            raise TypeError(f"{self.name}: {e}") from None

    def _fast(self, kind, data, params, out):
        """The common case without the general machinery: C-contiguous aligned float32/64
        numpy arrays of one dtype and shape, scalar parameters, ``out`` None or a matching
        array (or x/grad_out itself). Returns None to fall back to the general path, which
        also produces every error message."""
        x = data[0]
        if type(x) is not np.ndarray:
            return None
        dt = x.dtype
        if (dt is not _F32 and dt is not _F64) or x.ndim == 0:
            return None
        fl = x.flags
        if not (fl.c_contiguous and fl.aligned):
            return None
        shape = x.shape
        g = None
        if len(data) == 2:
            g = data[1]
            if type(g) is not np.ndarray or g.dtype is not dt or g.shape != shape:
                return None
            fl = g.flags
            if not (fl.c_contiguous and fl.aligned):
                return None
        if params:
            vals = self._param_values(params)  # validates; raises the usual errors
            for v in vals:
                tv = type(v)
                if tv is not float and tv is not int and not isinstance(v, np.floating):
                    return None
        else:
            vals = self._defaults_tuple
        if out is None:
            o = np.empty(shape, dt)
        else:
            if type(out) is not np.ndarray or out.dtype is not dt or out.shape != shape:
                return None
            fl = out.flags
            if not (fl.c_contiguous and fl.aligned and fl.writeable):
                return None
            # Two arrays that own their memory cannot overlap: skip the 0.5 us
            # may_share_memory for the usual preallocated buffers.
            if out is not x and out is not g and (out.base is not None or x.base is not None or (
                g is not None and g.base is not None)) and (
                np.may_share_memory(out, x) or (g is not None and np.may_share_memory(out, g))
            ):
                return None  # partial overlap: numpy's buffered semantics
            o = out
        fast = _FAST or _cpu_fast()
        n = x.size
        key = kind + dt.char
        p = self._plans.get(key)
        if p is None:
            if n < fast.MIN_SIZE:
                # Tiered: the first few small calls of a kind/dtype take the compiled ufunc
                # (bit-identical); the njit loop, seconds to compile, only for hot ones.
                c = self._calls[key] = self._calls.get(key, 0) + 1
                if c <= fast.WARM_CALLS:
                    ins = (x,) if g is None else (x, g)
                    with np.errstate(all="ignore"):  # FP flags of discarded branches
                        self._ufunc(kind)(*ins, *[dt.type(v) for v in vals], out=o)
                    return o
            p = self._plan(kind, dt)
        loop, par_kernel = p
        if x.ndim != 1:
            x = x.reshape(-1)
            o1 = o.reshape(-1)
            if g is not None:
                g = g.reshape(-1)
        else:
            o1 = o
        ins = (x,) if g is None else (x, g)
        if n >= fast.THRESHOLD and fast.numba.get_num_threads() > 1:
            # typed parameters: the dispatcher would type a Python float as float64
            par_kernel(*ins, o1, True, *[dt.type(v) for v in vals])
        else:
            loop(*ins, o1, 0, n, *vals)
        return o

    def _plan(self, kind, dt):
        p = self._plans[kind + dt.char] = _cpu_fast().plan(self.name, kind, dt)
        return p

    def _run(self, kind, data, params, out):
        if "backend" not in params:
            r = self._fast(kind, data, params, out)
            if r is not None:
                return r
        backend = params.pop("backend", None) if "backend" in params else None
        if backend is None:
            for d in data:
                if not isinstance(d, _HOST_TYPES):
                    backend = backends.detect(d)
                    break
        if backend is not None and backend != "cpu":
            return backends.run(backend, self, kind, data, params, out)
        names = ("x", "grad_out") if len(data) == 2 else ("x",)
        vals, cdt = self._prepare(names, data, params)
        if out is not None:
            if isinstance(out, tuple):
                if len(out) != 1:
                    raise ValueError(f"{self.name}: out= must be one array")
                out = out[0]
            if not isinstance(out, np.ndarray):
                raise TypeError(f"{self.name}: out= must be a numpy array, got {type(out).__name__}")
            if not out.flags.writeable:
                raise ValueError(f"{self.name}: out= is read-only")
        r = _cpu_fast().run(self, kind, vals, cdt, out, len(data))
        if r is None:
            r = self._call_ufunc(kind, vals, cdt, out)
        if out is None and cdt == _F32 and _all_half(data):
            with np.errstate(over="ignore"):  # beyond 65504 rounds to inf, as it should
                r = r.astype(_F16)  # float16 in: computed in float32, returned as float16
        return r


def _build() -> dict:
    return {name: Activation(spec) for name, spec in REGISTRY.items()}


_ACTS = None


def _acts() -> dict:
    global _ACTS
    if _ACTS is None:
        from . import activations  # noqa: F401  (registers every spec)

        _ACTS = _build()
    return _ACTS


def get(name: str) -> Activation:
    """The activation called ``name`` (``KeyError`` listing the known names otherwise)."""
    try:
        return _acts()[name]
    except KeyError:
        import difflib

        key = str(name).lower().replace("-", "_")
        near = [key] if key in _acts() else difflib.get_close_matches(key, _acts(), n=3)
        hint = f"did you mean {' or '.join(map(repr, near))}? " if near else ""
        raise KeyError(
            f"unknown activation {name!r}; {hint}known: {', '.join(sorted(_acts()))}"
        ) from None
