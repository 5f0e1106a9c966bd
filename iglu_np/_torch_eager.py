"""Eager calls of iglu_np's torch ops without the custom-op dispatch.

A ``torch.library.custom_op`` call passes through the dispatcher, the schema's checks, a
Python autograd wrapper and a redispatch before its kernel runs: most of the cost of a
call on a thousand elements. An eager call on plain tensors needs none of it, so the
torch functions run the op's own kernels through :func:`function`'s ``autograd.Function``
(or directly, when nothing requires grad). The op stays what ``torch.compile`` records
and what ``torch.func`` transforms, tensor subclasses and other devices (``meta``)
dispatch through: :func:`eager` says when a call may skip it.
"""

from __future__ import annotations

import torch

__all__ = ["eager", "function", "needs_grad"]

_DEVICES = ("cpu", "cuda")
# Inside torch.func transforms (vmap, grad, ...) the op is what composes with them.
_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: True)


def eager(tensors) -> bool:
    """Whether a call on ``tensors`` (None entries skipped; the first one decides the
    device) may skip the registered op: plain tensors on the CPU or a CUDA device,
    outside torch.compile's tracing and torch.func's transforms."""
    first = True
    for t in tensors:
        if t is None:
            continue
        if type(t) is not torch.Tensor:
            return False
        if first:
            if t.device.type not in _DEVICES:
                return False
            first = False
    return not (torch.compiler.is_compiling() or _transforms_active())


def needs_grad(tensors) -> bool:
    """Whether autograd records a call on ``tensors`` (None entries skipped)."""
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if t is not None and t.requires_grad:
            return True
    return False


def function(name: str, forward, setup_context, direct, recorded):
    """An ``autograd.Function`` computing ``forward(*inputs)``, with ``setup_context`` as
    the op's. Its backward is ``direct`` (the backward kernel called as a function), or
    under ``create_graph=True`` ``recorded`` (the registered backward op, which has no
    derivative: a second backward then raises instead of treating the first derivative
    as a constant)."""

    def forward_ctx(ctx, *inputs):
        # forward(ctx, ...) rather than a setup_context staticmethod: Function.apply
        # binds the latter's arguments with inspect.signature on every call
        y = forward(*inputs)
        setup_context(ctx, inputs, y)
        return y

    def backward(ctx, *grads):
        return (recorded if torch.is_grad_enabled() else direct)(ctx, *grads)

    return type(
        name,
        (torch.autograd.Function,),
        {
            "forward": staticmethod(forward_ctx),
            "backward": staticmethod(backward),
            "__module__": "iglu_np.torch",
        },
    )
