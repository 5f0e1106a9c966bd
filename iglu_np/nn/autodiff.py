"""A minimal reverse-mode autodiff over numpy (or cupy) arrays.

A :class:`Tensor` holds an array and, when it was produced by an op that needs
gradients, the op's context (a :class:`Function` instance, tinygrad style) that
remembers its parent tensors and whatever the backward pass needs.
``Tensor.backward()`` walks the graph in reverse topological order and accumulates
``.grad`` on every tensor with ``requires_grad``.

Ops are deliberately few: matmul, a fused affine ``linear``, broadcasting add/mul (whose
backward un-broadcasts), sum, mean, reshape, the generic activation op, log-softmax,
fused log-softmax + cross-entropy (optional class weights), mean squared error,
dropout, and the softplus/sigmoid maps used to keep learnable activation parameters in
their domain. Every registered activation goes through the one generic :func:`activation`
op, which calls the activation's fused kernels ``act.backward`` (gradient in x) and
``act.backward_params`` (gradients in its parameters): no activation has autodiff code
of its own.

The array module (numpy or cupy) is taken from the arrays themselves: ops only call
array methods and functions of :func:`array_module`.
"""

from __future__ import annotations

import contextlib

import numpy as np

__all__ = [
    "Tensor",
    "Function",
    "no_grad",
    "array_module",
    "to_host",
    "matmul",
    "linear",
    "add",
    "mul",
    "sum",
    "mean",
    "reshape",
    "activation",
    "log_softmax",
    "cross_entropy",
    "mse_loss",
    "dropout",
    "softplus",
    "sigmoid",
]

_GRAD_ENABLED = True


@contextlib.contextmanager
def no_grad():
    """Inside this block ops record nothing (inference, optimiser updates)."""
    global _GRAD_ENABLED
    prev, _GRAD_ENABLED = _GRAD_ENABLED, False
    try:
        yield
    finally:
        _GRAD_ENABLED = prev


def array_module(*arrays):
    """numpy, or cupy when any argument is a cupy array (cupy is never imported otherwise)."""
    for a in arrays:
        if isinstance(a, Tensor):
            a = a.data
        if a is None or isinstance(a, (np.ndarray, np.generic, float, int)):
            continue
        if type(a).__module__.split(".")[0] == "cupy":
            import cupy

            return cupy
    return np


def to_host(a) -> np.ndarray:
    """A numpy copy/view of a numpy or cupy array."""
    if isinstance(a, Tensor):
        a = a.data
    if isinstance(a, np.ndarray):
        return a
    if type(a).__module__.split(".")[0] == "cupy":
        return a.get()
    return np.asarray(a)


class Tensor:
    """An array with an optional gradient and the op that produced it."""

    __slots__ = ("data", "grad", "requires_grad", "_ctx", "name")

    def __init__(self, data, requires_grad: bool = False, name: str = "", _ctx=None):
        self.data = data
        self.grad = None
        self.requires_grad = requires_grad
        self._ctx = _ctx
        self.name = name

    # -- convenience --------------------------------------------------------------
    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self):
        return self.data.ndim

    def item(self) -> float:
        return float(self.data)

    def numpy(self) -> np.ndarray:
        return to_host(self.data)

    def __repr__(self):
        rg = ", requires_grad=True" if self.requires_grad else ""
        nm = f", name={self.name!r}" if self.name else ""
        return f"Tensor(shape={self.shape}, dtype={self.dtype}{rg}{nm})"

    def __matmul__(self, other):
        return matmul(self, other)

    def __add__(self, other):
        return add(self, other)

    __radd__ = __add__

    def __mul__(self, other):
        return mul(self, other)

    __rmul__ = __mul__

    def sum(self, axis=None):
        return sum(self, axis)

    def mean(self, axis=None):
        return mean(self, axis)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return reshape(self, shape)

    # -- reverse mode -------------------------------------------------------------
    def _topo(self):
        # Iterative DFS: deep graphs (long chains of layers) must not hit the recursion limit.
        order, seen = [], set()
        stack = [(self, False)]
        while stack:
            t, done = stack.pop()
            if done:
                order.append(t)
                continue
            if id(t) in seen:
                continue
            seen.add(id(t))
            stack.append((t, True))
            if t._ctx is not None:
                for p in t._ctx.parents:
                    if p.requires_grad and id(p) not in seen:
                        stack.append((p, False))
        return order

    def backward(self, grad=None):
        """Accumulate d(self)/d(leaf) into ``.grad`` of every tensor that requires it.

        ``grad`` defaults to ones for a scalar (a loss); intermediate gradients are
        freed as soon as they have been propagated.
        """
        if not self.requires_grad:
            raise RuntimeError("backward() on a tensor that does not require gradients")
        xp = array_module(self.data)
        if grad is None:
            if self.data.size != 1:
                raise RuntimeError("backward() without a gradient needs a scalar tensor")
            grad = xp.ones_like(self.data)
        self.grad = grad if self.grad is None else self.grad + grad
        for t in reversed(self._topo()):
            ctx = t._ctx
            if ctx is None or t.grad is None:
                continue
            grads = ctx.backward(t.grad)
            if not isinstance(grads, tuple):
                grads = (grads,)
            for p, g in zip(ctx.parents, grads):
                if g is None or not p.requires_grad:
                    continue
                if p.grad is None:
                    p.grad = g
                else:
                    p.grad = p.grad + g
            # Non-leaf gradients are not needed once propagated; dropping them keeps
            # memory flat and makes accidental reuse of a stale graph visible.
            t.grad = None
            t._ctx = None


def _t(v):
    return v if isinstance(v, Tensor) else Tensor(v)


class Function:
    """One op: ``forward`` on raw arrays, ``backward`` from the output gradient to one
    gradient per parent (``None`` for a parent that needs none)."""

    def __init__(self, *parents):
        self.parents = parents
        self.needs = tuple(p.requires_grad for p in parents)

    @classmethod
    def apply(cls, *parents, **kwargs):
        parents = tuple(_t(p) for p in parents)
        ctx = cls(*parents)
        out = ctx.forward(*[p.data for p in parents], **kwargs)
        rg = _GRAD_ENABLED and any(ctx.needs)
        return Tensor(out, requires_grad=rg, _ctx=ctx if rg else None)

    def forward(self, *arrays, **kwargs):  # pragma: no cover - interface
        raise NotImplementedError

    def backward(self, grad):  # pragma: no cover - interface
        raise NotImplementedError


def unbroadcast(g, shape):
    """Sum ``g`` down to ``shape``: the adjoint of broadcasting ``shape`` to ``g.shape``."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    nlead = g.ndim - len(shape)
    axes = tuple(range(nlead)) + tuple(
        nlead + i for i, n in enumerate(shape) if n == 1 and g.shape[nlead + i] != 1
    )
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)


# ------------------------------------------------------------------------ linear algebra
class _MatMul(Function):
    def forward(self, a, b):
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(f"matmul expects 2-d operands, got shapes {a.shape} and {b.shape}")
        self.a, self.b = a, b
        return a @ b

    def backward(self, g):
        ga = g @ self.b.T if self.needs[0] else None
        gb = self.a.T @ g if self.needs[1] else None
        return ga, gb


def matmul(a, b) -> Tensor:
    """``a @ b`` for 2-d operands."""
    return _MatMul.apply(a, b)


class _Linear(Function):
    # Fused x @ W + b: one graph node per layer keeps the Python overhead per step low.
    def forward(self, x, w, b):
        self.x, self.w = x, w
        return x @ w + b

    def backward(self, g):
        gx = g @ self.w.T if self.needs[0] else None
        gw = self.x.T @ g if self.needs[1] else None
        gb = g.sum(axis=0) if self.needs[2] else None
        return gx, gw, gb


def linear(x, w, b) -> Tensor:
    """``x @ w + b`` with ``x`` (n, in), ``w`` (in, out), ``b`` (out,)."""
    return _Linear.apply(x, w, b)


class _Add(Function):
    def forward(self, a, b):
        self.sa, self.sb = a.shape, b.shape
        return a + b

    def backward(self, g):
        return (
            unbroadcast(g, self.sa) if self.needs[0] else None,
            unbroadcast(g, self.sb) if self.needs[1] else None,
        )


def add(a, b) -> Tensor:
    """``a + b`` with numpy broadcasting; gradients are summed back to each shape."""
    return _Add.apply(a, b)


class _Mul(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return a * b

    def backward(self, g):
        return (
            unbroadcast(g * self.b, self.a.shape) if self.needs[0] else None,
            unbroadcast(g * self.a, self.b.shape) if self.needs[1] else None,
        )


def mul(a, b) -> Tensor:
    """``a * b`` with broadcasting."""
    return _Mul.apply(a, b)


class _Sum(Function):
    def forward(self, a, axis=None):
        self.shape, self.axis = a.shape, axis
        return a.sum(axis=axis)

    def backward(self, g):
        xp = array_module(g)
        if self.axis is not None:
            g = xp.expand_dims(g, self.axis)
        return xp.broadcast_to(g, self.shape).copy()


def sum(a, axis=None) -> Tensor:  # noqa: A001 - mirrors numpy's name on purpose
    return _Sum.apply(a, axis=axis)


class _Mean(Function):
    def forward(self, a, axis=None):
        self.shape, self.axis = a.shape, axis
        self.n = a.size if axis is None else int(np.prod([a.shape[i] for i in np.atleast_1d(axis)]))
        return a.mean(axis=axis)

    def backward(self, g):
        xp = array_module(g)
        if self.axis is not None:
            g = xp.expand_dims(g, self.axis)
        return xp.broadcast_to(g / g.dtype.type(self.n), self.shape).copy()


def mean(a, axis=None) -> Tensor:
    return _Mean.apply(a, axis=axis)


class _Reshape(Function):
    def forward(self, a, shape):
        self.shape = a.shape
        return a.reshape(shape)

    def backward(self, g):
        return g.reshape(self.shape)


def reshape(a, shape) -> Tensor:
    return _Reshape.apply(a, shape=tuple(shape))


# ------------------------------------------------------------------------ activations
class _Activation(Function):
    """Parents: x, then one tensor per *tensor-valued* parameter (in ``names`` order)."""

    def forward(self, x, *pvals, act, names, fixed):
        self.act = act
        self.x = x
        self.params = dict(fixed)
        self.params.update(zip(names, pvals))
        self.names = names
        return act(x, **self.params)

    def backward(self, g):
        act, x, params = self.act, self.x, self.params
        if self.needs[0] and any(self.needs[1:]):
            # one read of x and g for both (backward_all; the same numbers as two passes)
            gx, gp = act.backward_all(x, g, **params)
            return (
                gx,
                *(
                    gp[nm].astype(g.dtype, copy=False) if need else None
                    for nm, need in zip(self.names, self.needs[1:])
                ),
            )
        gx = act.backward(x, g, **params) if self.needs[0] else None
        out = [gx]
        if any(self.needs[1:]):
            gp = act.backward_params(x, g, **params)
            for nm, need in zip(self.names, self.needs[1:]):
                out.append(gp[nm].astype(g.dtype, copy=False) if need else None)
        else:
            out.extend([None] * len(self.names))
        return tuple(out)


def activation(act, x, **params) -> Tensor:
    """``act(x, **params)`` for any registered activation (object or name), or a gated
    form (:class:`iglu_np.Gated`: x split in halves, its parameters by its own names).

    A parameter given as a :class:`Tensor` gets a gradient (reduced to its own shape, so
    a per-unit parameter of shape ``(units,)`` works); other values are constants.
    """
    if isinstance(act, str):
        from .. import get

        act = get(act)
    names = tuple(k for k, v in params.items() if isinstance(v, Tensor))
    fixed = {k: v for k, v in params.items() if not isinstance(v, Tensor)}
    return _Activation.apply(x, *[params[k] for k in names], act=act, names=names, fixed=fixed)


# ------------------------------------------------------------------------ losses
def _log_softmax(z, xp):
    m = z.max(axis=1, keepdims=True)
    s = z - m
    return s - xp.log(xp.exp(s).sum(axis=1, keepdims=True))


class _LogSoftmax(Function):
    def forward(self, z):
        xp = array_module(z)
        self.out = _log_softmax(z, xp)
        return self.out

    def backward(self, g):
        xp = array_module(g)
        return g - xp.exp(self.out) * g.sum(axis=1, keepdims=True)


def log_softmax(z) -> Tensor:
    """Row-wise log-softmax of a 2-d tensor (stable: shifts by the row maximum)."""
    return _LogSoftmax.apply(z)


class _CrossEntropy(Function):
    def forward(self, z, target, weight=None):
        xp = array_module(z)
        if z.ndim != 2:
            raise ValueError(f"cross_entropy expects logits of shape (n, classes), got {z.shape}")
        n = z.shape[0]
        lp = _log_softmax(z, xp)
        rows = xp.arange(n)
        nll = -lp[rows, target]
        if weight is None:
            w = None
            denom = z.dtype.type(n)
        else:
            w = weight[target].astype(z.dtype, copy=False)
            denom = w.sum()
            nll = nll * w
        self.lp, self.target, self.w, self.denom, self.rows = lp, target, w, denom, rows
        return nll.sum() / denom

    def backward(self, g):
        xp = array_module(self.lp)
        d = xp.exp(self.lp)
        d[self.rows, self.target] -= 1
        if self.w is not None:
            d *= self.w[:, None]
        d *= g / self.denom
        return d, None


def cross_entropy(logits, target, weight=None) -> Tensor:
    """Mean negative log-likelihood of integer ``target`` under ``softmax(logits)``.

    With ``weight`` (one per class) it is the weighted mean
    ``sum_i w[y_i] nll_i / sum_i w[y_i]``, as in PyTorch's ``cross_entropy``.
    """
    target = target.data if isinstance(target, Tensor) else target
    weight = weight.data if isinstance(weight, Tensor) else weight
    ctx = _CrossEntropy(_t(logits))
    out = ctx.forward(ctx.parents[0].data, target, weight)
    rg = _GRAD_ENABLED and ctx.needs[0]
    return Tensor(out, requires_grad=rg, _ctx=ctx if rg else None)


class _MSE(Function):
    def forward(self, pred, target):
        self.diff = pred - target
        return (self.diff * self.diff).mean()

    def backward(self, g):
        d = self.diff * (2 * g / self.diff.dtype.type(self.diff.size))
        return d, (-d if self.needs[1] else None)


def mse_loss(pred, target) -> Tensor:
    """``mean((pred - target)**2)``."""
    return _MSE.apply(pred, target)


# ------------------------------------------------------------------------ regularisation
class _Dropout(Function):
    def forward(self, x, p, rng):
        xp = array_module(x)
        keep = 1.0 - p
        u = rng.random(x.shape, dtype=np.float32 if x.dtype == np.float32 else np.float64)
        if xp is not np:
            u = xp.asarray(u)
        self.mask = (u < keep).astype(x.dtype) * x.dtype.type(1.0 / keep)
        return x * self.mask

    def backward(self, g):
        return g * self.mask


def dropout(x, p: float, rng, training: bool = True) -> Tensor:
    """Inverted dropout: zero each element with probability ``p`` and scale the rest by
    ``1/(1-p)``; identity when not training or ``p == 0``. ``rng`` is a numpy Generator
    (the mask is drawn on the host so runs are reproducible on any device)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    if not training or p == 0.0:
        return _t(x)
    return _Dropout.apply(x, p=p, rng=rng)


# ------------------------------------------------------------------------ domain maps
class _Softplus(Function):
    def forward(self, a, floor=None):
        xp = array_module(a)
        self.a = a
        # Floored (at the smallest normal number by default): the result feeds parameters
        # with an open lower bound (sigma > 0) that must stay strictly inside their domain.
        if floor is None:
            floor = a.dtype.type(np.finfo(a.dtype).tiny)
        return xp.maximum(xp.logaddexp(a.dtype.type(0), a), floor)

    def backward(self, g):
        xp = array_module(g)
        # sigmoid(a) through tanh: no overflow of exp(-a) for very negative a.
        return g * (0.5 + 0.5 * xp.tanh(0.5 * self.a))


def softplus(a, floor=None) -> Tensor:
    """``log(1 + exp(a))``, floored at ``floor`` (default: the smallest normal float, so
    always > 0; the gradient passes straight through the floor)."""
    return _Softplus.apply(a, floor=floor)


class _Sigmoid(Function):
    def forward(self, a):
        xp = array_module(a)
        self.s = 0.5 + 0.5 * xp.tanh(0.5 * a)
        return self.s

    def backward(self, g):
        return g * self.s * (1 - self.s)


def sigmoid(a) -> Tensor:
    return _Sigmoid.apply(a)
