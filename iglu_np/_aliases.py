"""Other names for registered activations: the activation names of Hugging Face
transformers' ``ACT2FN`` (``transformers/activations.py``) that are an iglu_np activation
under another name, possibly with fixed parameter values.

An alias is its target with the alias's values as the parameter defaults: a parameter
passed to the call overrides it (``iglu_np.quick_gelu(x, beta=1.0)`` is SiLU).
``iglu_np.ACTIVATIONS`` stays the canonical list (tables, docs and benchmarks); the
aliases are ``iglu_np.ALIASES``, ``iglu_np.get(alias)`` and ``iglu_np.<alias>``.
Plain data: this module imports nothing from the package.
"""

from __future__ import annotations

from types import MappingProxyType

__all__ = ["ALIASES", "NOTES", "HF_SAME_NAME", "HF_NOT_PROVIDED", "wrap"]

# alias -> (activation, fixed parameters, what the alias names and why it is the target)
_TABLE = {
    "gelu_new": (
        "gelu_tanh",
        {},
        "HF NewGELUActivation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), "
        "the tanh approximation of GELU (Google BERT, OpenAI GPT)",
    ),
    "gelu_pytorch_tanh": (
        "gelu_tanh",
        {},
        "HF GELUTanh, torch.nn.functional.gelu(x, approximate='tanh')",
    ),
    "gelu_python_tanh": ("gelu_tanh", {}, "HF GELUTanh's Python form of the same formula"),
    "gelu_accurate": (
        "gelu_tanh",
        {},
        "HF AccurateGELUActivation (MEGA): the same formula with sqrt(2/pi) computed once",
    ),
    "gelu_fast": (
        "gelu_tanh",
        {},
        "HF FastGELUActivation, 0.5 x (1 + tanh(0.7978845608 x (1 + 0.044715 x^2))): "
        "the same formula with sqrt(2/pi) cut to 10 digits (3.6e-12 relative), which "
        "rounds to the same float32, bfloat16 and float16 constant; iglu_np uses "
        "sqrt(2/pi)",
    ),
    "gelu_python": ("gelu", {}, "HF GELUActivation(use_gelu_python=True), x/2 (1 + erf(x/sqrt 2))"),
    "quick_gelu": (
        "swish",
        {"beta": 1.702},
        "HF QuickGELUActivation, x sigmoid(1.702 x) (Hendrycks & Gimpel's "
        "sigmoid approximation of GELU)",
    ),
    "relu6": (
        "hardtanh",
        {"min_val": 0.0, "max_val": 6.0},
        "torch.nn.ReLU6, min(max(x, 0), 6); derivative 0 at both kinks, as "
        "PyTorch's (relu6 is hardtanh(0, 6) there too)",
    ),
    "linear": ("identity", {}, "HF LinearActivation, x"),
}

ALIASES = MappingProxyType({a: (t, MappingProxyType(dict(p))) for a, (t, p, _) in _TABLE.items()})
NOTES = MappingProxyType({a: n for a, (_, _, n) in _TABLE.items()})

# ACT2FN names that are iglu_np activations under the same name and defaults (HF's
# "swish" and "silu" are SiLU: iglu_np.swish at its default beta = 1; "leaky_relu" is
# torch.nn.LeakyReLU's slope 0.01, "prelu" torch.nn.PReLU's initial weight 0.25; "xielu"
# is HF's XIELUActivation at its initial alpha_p = alpha_n = 0.8, beta = 0.5,
# eps = -1e-6, the same form (HF keeps its parameters in bfloat16 by default, so its
# effective values are those rounded).
HF_SAME_NAME = (
    "gelu",
    "hardswish",
    "leaky_relu",
    "mish",
    "prelu",
    "relu",
    "relu2",
    "sigmoid",
    "silu",
    "swish",
    "tanh",
    "xielu",
)

# ACT2FN names with no iglu_np activation, and what they compute.
HF_NOT_PROVIDED = MappingProxyType(
    {
        "gelu_10": "GELU clipped to [-10, 10] (ClippedGELUActivation, for quantisation)",
        "laplace": "the normal CDF 0.5 (1 + erf((x - 0.707107)/(0.282095 sqrt 2))) (MEGA's "
        "attention activation)",
        "sqrtsoftplus": "sqrt(softplus(x))",
    }
)


def wrap(alias: str, fn, module: str):
    """``fn`` (a bridge's function of the alias's target, ``fn(x, /, **params)``) under the
    alias's name, with the alias's fixed values as parameter defaults that a call may
    override, as ``iglu_np.<alias>`` does. Used by :mod:`iglu_np.torch` and :mod:`iglu_np.jax`."""
    import inspect

    target, fixed = ALIASES[alias]
    fixed = dict(fixed)

    def f(x, /, **params):
        return fn(x, **{**fixed, **params})

    f.__name__ = f.__qualname__ = alias
    f.__module__ = module
    sig = inspect.signature(fn)
    f.__signature__ = sig.replace(
        parameters=[
            q.replace(default=fixed[q.name]) if q.name in fixed else q
            for q in sig.parameters.values()
        ]
    )
    shown = ", ".join(f"{k}={v!r}" for k, v in fixed.items())
    f.__doc__ = f"Alias of ``{module}.{target}({shown})``: {NOTES[alias]}.\n\n{fn.__doc__ or ''}"
    return f
