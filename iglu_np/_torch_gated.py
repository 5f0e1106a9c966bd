"""The gated forms for torch: ``iglu_np.torch.swiglu`` ... and ``nn.Module`` layers
(``iglu_np.torch.SwiGLU`` ...), built by :mod:`iglu_np.torch` from its activations.

Each function is :func:`iglu_np._gated.bridge` over the activation's custom op: the
split, the clamps and the product are torch operations, so autograd, ``gradcheck`` and
``torch.compile(fullgraph=True)`` see ordinary ops around the one opaque activation node,
and CUDA tensors stay on their device.
"""

from __future__ import annotations

import torch

from ._api import all_gated, gated_forms, get_gated
from ._gated import _DEFAULT, bridge

__all__ = ["Gated", "build"]

_NAMES = {
    "swiglu": "SwiGLU",
    "geglu": "GeGLU",
    "geglu_tanh": "GeGLUTanh",
    "reglu": "ReGLU",
    "glu": "GLU",
    "swiglu_oai": "SwiGLUOAI",
}


def _clamp(a, lo, hi):
    return a.clamp(min=lo, max=hi)


def _narrow(a, dt):
    return a.to(dt)


def _widen(a):
    return a.float()


def build(functions, activation_module, class_name, module: str):
    """``(gated functions, gated module classes)`` by name."""
    fns = {
        name: bridge(g, functions[g._spec_name], _clamp, _widen, _narrow, module)
        for name, g in all_gated().items()
    }
    Gated._activation = activation_module
    Gated._module = Gated.__module__ = module
    classes = {}
    for name in gated_forms():
        cname = _NAMES.get(name) or class_name(name[: -len("_glu")]) + "GLU"
        classes[name] = type(
            cname,
            (Gated,),
            {
                "__init__": _init(name),
                "__doc__": f"``iglu_np.{name}`` as an ``nn.Module``: {get_gated(name).source}.",
                "__module__": module,
            },
        )
    return fns, classes


def _init(name):
    def __init__(self, **kw):
        Gated.__init__(self, name, **kw)

    return __init__


class Gated(torch.nn.Module):
    """A gated form as a layer: ``forward(x, up=None)`` is ``act(gate) * up``, the
    activation an :class:`iglu_np.torch.Activation` with its parameters fixed or
    learnable (``learnable``, ``num_parameters``, ``channel_dim`` as there)."""

    _activation = None  # iglu_np.torch.Activation (set by build)
    _module = __name__

    def __init__(
        self,
        name,
        *,
        axis=-1,
        layout=None,
        limit=_DEFAULT,
        rounding="once",
        learnable=False,
        num_parameters=1,
        channel_dim=1,
        **params,
    ):
        super().__init__()
        g = get_gated(name)
        self.gated = g.name
        q = {**g._fixed, **{g._rename.get(k, k): v for k, v in params.items()}}
        if learnable not in (True, False, None):
            names = (learnable,) if isinstance(learnable, str) else tuple(learnable)
            learnable = tuple(g._rename.get(k, k) for k in names)
        self.act = Gated._activation(
            g._spec_name,
            learnable=learnable,
            num_parameters=num_parameters,
            channel_dim=channel_dim,
            **q,
        )
        self._kw = dict(axis=axis, layout=layout, limit=limit, rounding=rounding)
        self._fn = bridge(g, lambda a, **_: self.act(a), _clamp, _widen, _narrow, Gated._module)

    def forward(self, x, up=None):
        return self._fn(x, up, **self._kw)

    def extra_repr(self) -> str:
        kw = {k: v for k, v in self._kw.items() if v is not None and v is not _DEFAULT}
        return f"{self.gated!r}, " + ", ".join(f"{k}={v!r}" for k, v in kw.items())
