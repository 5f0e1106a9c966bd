"""Public activation objects, generated from the specs.

``iglu_np.<name>`` is an :class:`Activation`: calling it computes the forward value and
its attributes give the derivatives (``.dx``, ``.dparams``, ``.backward``,
``.backward_params``) and the raw numpy ufuncs (``.ufunc``, ``.dx.ufunc`` ...).
"""
from __future__ import annotations

import inspect
import math
import sys
from types import MappingProxyType

import numpy as np

from . import backends
from ._dtypes import F16 as _F16
from ._dtypes import F32 as _F32
from ._dtypes import F64 as _F64
from ._dtypes import all_half as _all_half
from ._dtypes import beyond_f32 as _beyond_f32
from ._dtypes import dtype_of as _dtype_of
from ._dtypes import unbroadcast as _unbroadcast
from ._dtypes import widened
from ._spec import REGISTRY

__all__ = ["Activation", "get"]

_HOST_TYPES = (np.ndarray, np.generic, float, int, list, tuple)


def _host_array(v):
    """A memoryview (or other buffer-protocol object numpy reads) as a numpy array;
    anything else unchanged."""
    if isinstance(v, memoryview):
        return np.asarray(v)
    return v


def _pandas_kind(v):
    """'series' / 'frame' for a pandas Series / DataFrame (pandas is never imported)."""
    t = type(v)
    if not t.__module__.startswith("pandas"):
        return None
    for c in t.__mro__:
        if c.__name__ == "Series":
            return "series"
        if c.__name__ == "DataFrame":
            return "frame"
    return None


def _detect(data, act):
    """The backend of the first non-host operand, or None (all host: the CPU); errors
    name the activation."""
    for d in data:
        if not isinstance(d, _HOST_TYPES):
            try:
                return backends.detect(d)
            except TypeError as e:
                raise TypeError(f"{act.name}: {e}") from None
    return None


def _backend(params, data, act, pop=True):
    """The backend= keyword (checked, named in the error) or the operands' backend."""
    b = (params.pop("backend", None) if pop else params.get("backend"))
    if b is None:
        return _detect(data, act)
    if b != "cpu" and b not in backends.BACKENDS:
        raise ValueError(f"{act.name}: unknown backend={b!r}; expected 'cpu' or one of "
                         f"{', '.join(backends.BACKENDS)}")
    return b


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    """Two arrays over exactly the same elements in the same order (elementwise aliasing
    is safe then; any other overlap needs numpy's buffering)."""
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.strides == b.strides and a.shape == b.shape)


_FAST = None


def _cpu_fast():
    # njit loop kernels for contiguous float32/float64 arrays (imported on first use).
    global _FAST
    if _FAST is None:
        from .backends import cpu_fast

        _FAST = cpu_fast
    return _FAST


_PUBLIC_KIND = {"fwd": "__call__", "bwd": "backward"}


def _may_share(out, a) -> bool:
    """Whether two numpy (or two cupy) arrays may overlap in memory."""
    if isinstance(out, np.ndarray):
        return isinstance(a, np.ndarray) and np.may_share_memory(out, a)
    cp = sys.modules.get("cupy")
    if cp is not None and isinstance(out, cp.ndarray) and isinstance(a, cp.ndarray):
        return bool(cp.may_share_memory(out, a))
    return False


def _keyword_hint(act) -> str:
    if not act.param_names:
        return f"; {act.name} has no parameters"
    ex = ", ".join(f"{p.name}={p.default!r}" for p in act.params)
    return (f"; parameters are keyword-only: {', '.join(act.param_names)} "
            f"(e.g. {act.name}(x, {ex}))")


class _Op:
    """One kernel kind of an activation, callable with numpy semantics."""

    def __init__(self, act: "Activation", kind: str, n_data: int, doc: str):
        self._act = act
        self._kind = kind
        self._n_data = n_data
        self.__doc__ = doc
        self.__name__ = f"{act.name}.{_PUBLIC_KIND.get(kind, kind)}"

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
                + (_keyword_hint(self._act) if len(args) > self._n_data else "")
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

    def __call__(self, x, /, *args, **params):
        if args:
            raise TypeError(
                f"{self.__name__}() takes 1 positional argument (x), got {1 + len(args)}"
                + _keyword_hint(self._act)
            )
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
    def __call__(self, x, /, *args, out=None, **params):
        if args:
            raise TypeError(
                f"{self.name}() takes 1 positional argument (x), got {1 + len(args)}"
                + _keyword_hint(self)
            )
        return self._run("fwd", (x,), params, out)

    # ``backend="cpu" | "numba_cuda" | "cupy" | ...`` is accepted as a keyword by every
    # call; by default the backend follows the array type (iglu_np.backends.detect).

    @property
    def ufunc(self) -> np.ufunc:
        """The raw forward numpy ufunc ``ufunc(x, *params)``: no validation, no ``errstate``
        (it may set floating-point flags, and numpy warn, where the function is silent)."""
        return self._ufunc("fwd")

    def backward_params(self, x, grad_out, /, *args, **params) -> dict:
        """Gradients of ``sum(grad_out * f(x))`` in each parameter, reduced to its shape.

        A scalar parameter gets a 0-d array; an array parameter (e.g. per channel) gets
        an array of its own shape, summed over the axes it was broadcast along.
        """
        if args:
            raise TypeError(
                f"{self.name}.backward_params() takes 2 positional arguments (x, grad_out), "
                f"got {2 + len(args)}" + _keyword_hint(self)
            )
        # memoryviews and pandas objects: their values (the result is shaped like the
        # parameters, so there is no index to keep)
        x, grad_out = (np.asarray(d) if type(d) is memoryview or _pandas_kind(d) else d
                       for d in (x, grad_out))
        backend = _backend(params, (x, grad_out), self)
        if backend is not None and backend != "cpu":
            return backends.run(backend, self, "backward_params", (x, grad_out), params, None)
        vals, cdt = self._prepare(("x", "grad_out"), (x, grad_out), params)
        wdt = widened(cdt, vals[2:])
        res = _cpu_fast().backward_params(self, vals, cdt) if wdt == cdt else None
        if res is not None:
            return res
        res = {}
        for i, p in enumerate(self.param_names):
            full = self._call_ufunc("bwd_" + p, vals, wdt, None)
            pshape = np.shape(vals[2 + i])
            with np.errstate(over="ignore"):
                res[p] = np.asarray(_unbroadcast(np.asarray(full), pshape)).astype(cdt, copy=False)
        return res

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
                f"got {2 + len(args)}" + _keyword_hint(self)
            )
        if any(type(d) is memoryview or _pandas_kind(d) for d in (x, grad_out)):
            # array-likes take the general path (a pandas grad_x keeps its index)
            return self.backward(x, grad_out, out=out, **params), self.backward_params(x, grad_out, **params)
        backend = _backend(params, (x, grad_out), self, pop=False)
        if backend is not None and backend != "cpu":
            params = {k: v for k, v in params.items() if k != "backend"}
            res = backends.run_backward_all(backend, self, (x, grad_out), params, out)
            if res is not None:
                return res
            params["backend"] = backend
        elif self.param_names:
            q = {k: v for k, v in params.items() if k != "backend"}
            vals, cdt = self._prepare(("x", "grad_out"), (x, grad_out), q)
            res = _cpu_fast().backward_all(self, vals, cdt, out) if widened(cdt, vals[2:]) == cdt else None
            if res is not None:
                return res
        if out is not None and any(_may_share(out, a) for a in (x, grad_out, *params.values())):
            # numpy's semantics: every operand (the parameters of backward_params too) is
            # read before out is written.
            gp = self.backward_params(x, grad_out, **params)
            return self.backward(x, grad_out, out=out, **params), gp
        gx = self.backward(x, grad_out, out=out, **params)
        return gx, self.backward_params(x, grad_out, **params)

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
            # NEP 50: a Python float/int/bool is "weak" and takes the other operand's
            # dtype (backward(x_f32, 2.0) stays float32); alone, it computes in float64.
            if type(d) in (float, int, bool):
                continue
            dt = _dtype_of(self.name, nm, d)
            cdt = dt if cdt is None else np.promote_types(cdt, dt)
        return list(data) + vals, (_F64 if cdt is None else cdt)

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
        """The common case without the general machinery: aligned float32/64 numpy arrays
        of one dtype and shape whose memory is contiguous (C order; or Fortran/transposed,
        then all laid out alike), scalar parameters, ``out`` None or a matching array (or
        x/grad_out itself). Returns None to fall back to the general path, which also
        produces every error message."""
        x = data[0]
        if type(x) is not np.ndarray:
            return None
        dt = x.dtype
        if (dt is not _F32 and dt is not _F64) or x.ndim == 0:
            return None
        fl = x.flags
        if not fl.aligned:
            return None
        order = None  # C order; else the axis order of x's memory (cpu_fast.axis_order)
        if not fl.c_contiguous:
            order = (_FAST or _cpu_fast()).axis_order(x)
            if order is None:
                return None
        shape = x.shape
        g = None
        if len(data) == 2:
            g = data[1]
            if type(g) is not np.ndarray or g.dtype is not dt or g.shape != shape:
                return None
            fl = g.flags
            if not ((fl.c_contiguous and fl.aligned) if order is None else
                    (fl.aligned and _FAST.mem_flat(g, order) is not None)):
                return None
        if params:
            vals = self._param_values(params)  # validates; raises the usual errors
            if dt is _F32 and _beyond_f32(vals) is not None:
                return None  # computed in float64 by the general path
            for v in vals:
                tv = type(v)
                if tv is not float and tv is not int and not isinstance(v, np.floating):
                    return None
        else:
            vals = self._defaults_tuple
        if out is None:
            o = np.empty(shape, dt) if order is None else _FAST.empty_like_layout(shape, dt, order)
        else:
            if type(out) is not np.ndarray or out.dtype is not dt or out.shape != shape:
                return None
            fl = out.flags
            if not ((fl.c_contiguous and fl.aligned and fl.writeable) if order is None else
                    (fl.aligned and fl.writeable and _FAST.mem_flat(out, order) is not None)):
                return None
            # Each operand on its own: out may be exactly x (or g), elementwise that is
            # safe; any other overlap (a shifted view) goes to numpy's buffered path. Two
            # arrays that own their memory cannot overlap: skip the 0.5 us may_share_memory
            # for the usual preallocated buffers.
            for a in (x, g):
                if a is None or a is out or (out.base is None and a.base is None):
                    continue
                if np.may_share_memory(out, a) and not _same_view(out, a):
                    return None
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
        if order is not None:  # the 1-d loop runs over the memory; o keeps x's layout
            x = fast.mem_flat(x, order)
            o1 = fast.mem_flat(o, order)
            if g is not None:
                g = fast.mem_flat(g, order)
        elif x.ndim != 1:
            x = x.reshape(-1)
            o1 = o.reshape(-1)
            if g is not None:
                g = g.reshape(-1)
        else:
            o1 = o
        ins = (x,) if g is None else (x, g)
        if n >= fast.THRESHOLD and fast.numba.get_num_threads() > 1:
            # typed parameters: the dispatcher would type a Python float as float64
            tv = [dt.type(v) for v in vals]
            fast.launch(par_kernel, n, lambda: par_kernel(*ins, o1, True, *tv),
                        lambda: loop(*ins, o1, 0, n, *vals))
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
        if any(type(d) is memoryview for d in data):
            data = tuple(_host_array(d) for d in data)
        like = None
        for d in data:
            pk = _pandas_kind(d)
            if pk is not None:
                like = d if like is None else like
        if like is not None:
            # numpy's ufuncs on pandas objects: compute on the values, return the same
            # type with the first pandas operand's index (and name / columns).
            data = tuple(np.asarray(d) if _pandas_kind(d) else d for d in data)
            r = self._run(kind, data, params, out)
            if out is not None:
                return out
            return _rewrap(like, r)
        backend = _backend(params, data, self) if "backend" in params else _detect(data, self)
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
        wdt = widened(cdt, vals[len(data):])
        r = _cpu_fast().run(self, kind, vals, cdt, out, len(data)) if wdt == cdt else None
        if r is None:
            r = self._call_ufunc(kind, vals, wdt, out)
            if out is None and wdt != cdt:
                with np.errstate(over="ignore"):  # beyond float32's range rounds to inf
                    r = r.astype(cdt)
        if out is None and cdt == _F32 and _all_half(data):
            with np.errstate(over="ignore"):  # beyond 65504 rounds to inf, as it should
                r = r.astype(_F16)  # float16 in: computed in float32, returned as float16
        return r


def _rewrap(like, r):
    pd = __import__(type(like).__module__.split(".")[0])
    if _pandas_kind(like) == "series":
        return pd.Series(r, index=like.index, name=like.name)
    return pd.DataFrame(r, index=like.index, columns=like.columns)


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
