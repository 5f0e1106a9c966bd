"""The named gated forms: which activation gates, where the gate sits, and the source
whose definition each follows. Every activation also has the plain gated form
``iglu_np.<name>.glu`` (``iglu_np.get("<name>_glu")``): its gate first, halves along the
last axis, no clamp.

Each entry: ``(activation, parameter values, {public name: activation parameter},
layout, gate first, added to up, limit, source)``.
"""

from __future__ import annotations

from types import MappingProxyType

__all__ = ["FORMS"]

_VLLM = "vLLM csrc/activation_kernels.cu"

FORMS = MappingProxyType(
    {
        "swiglu": (
            "silu",
            {},
            {},
            "halves",
            True,
            0.0,
            None,
            f"silu(x[..., :d]) * x[..., d:]: {_VLLM} silu_and_mul; LLaMA's "
            "F.silu(w1(x)) * w3(x); Shazeer 2020, GLU Variants Improve Transformer",
        ),
        "geglu": (
            "gelu",
            {},
            {},
            "halves",
            True,
            0.0,
            None,
            f"gelu(x[..., :d]) * x[..., d:] with the erf GELU: {_VLLM} gelu_and_mul; Shazeer 2020",
        ),
        "geglu_tanh": (
            "gelu_tanh",
            {},
            {},
            "halves",
            True,
            0.0,
            None,
            f"gelu_tanh(x[..., :d]) * x[..., d:]: {_VLLM} gelu_tanh_and_mul; Gemma's MLP",
        ),
        "reglu": (
            "relu",
            {},
            {},
            "halves",
            True,
            0.0,
            None,
            "relu(x[..., :d]) * x[..., d:]: Shazeer 2020; TransformerEngine reglu",
        ),
        "iglu_glu": (
            "iglu",
            {},
            {},
            "halves",
            True,
            0.0,
            None,
            "iglu(x[..., :d]; sigma) * x[..., d:]: the IGLU gate (Kang, Yang & Rocha Neto 2026)",
        ),
        "xielu_glu": (
            "xielu",
            {},
            {},
            "halves",
            True,
            0.0,
            None,
            "xielu(x[..., :d]; alpha_p, alpha_n, beta, eps) * x[..., d:]: the xIELU gate "
            "(Huang & Schlag 2024)",
        ),
        "glu": (
            "sigmoid",
            {},
            {},
            "halves",
            False,
            0.0,
            None,
            "x[..., :d] * sigmoid(x[..., d:]): torch.nn.functional.glu and jax.nn.glu "
            "(the gate is the second half)",
        ),
        "swiglu_oai": (
            "swish",
            {"beta": 1.702},
            {"alpha": "beta"},
            "interleaved",
            True,
            1.0,
            7.0,
            "gpt-oss (HF transformers modeling_gpt_oss.py, vLLM swigluoai_and_mul): gate = "
            "x[..., ::2].clamp(max=limit), up = x[..., 1::2].clamp(-limit, limit), "
            "(up + 1) * gate * sigmoid(alpha * gate)",
        ),
    }
)
