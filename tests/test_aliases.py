"""Other names for registered activations (iglu_np.ALIASES): Hugging Face transformers'
ACT2FN names, each its target with fixed parameter values as defaults."""

import json
import math
import pickle
import subprocess
import sys

import numpy as np
import pytest

import iglu_np
from iglu_np._aliases import HF_NOT_PROVIDED, HF_SAME_NAME

X = np.array([-30.0, -7.5, -3.0, -1.0, -0.3, -1e-3, 0.0, 2e-4, 0.4, 1.0, 2.5, 5.9, 6.0, 6.1, 40.0])


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("alias", list(iglu_np.ALIASES))
def test_alias_equals_its_target_with_the_fixed_parameters(alias):
    target, fixed = iglu_np.ALIASES[alias]
    a, t = iglu_np.get(alias), iglu_np.get(target)
    assert a is getattr(iglu_np, alias) and a.spec is t.spec
    assert dict(a.defaults) == {**t.defaults, **fixed}
    g = np.linspace(-2.0, 2.0, X.size)
    for dt in (np.float32, np.float64):
        x = X.astype(dt)
        _same(a(x), t(x, **fixed))
        _same(a.dx(x), t.dx(x, **fixed))
        _same(a.backward(x, g.astype(dt)), t.backward(x, g.astype(dt), **fixed))
        for p, v in a.dparams(x).items():
            _same(v, t.dparams(x, **fixed)[p])
        want = t.backward_params(x, g.astype(dt), **fixed)
        got = a.backward_params(x, g.astype(dt))
        assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in got)
        gx, gp = a.backward_all(x, g.astype(dt))
        _same(gx, t.backward(x, g.astype(dt), **fixed))
        assert gp.keys() == want.keys()


# Hugging Face's formulas as written in transformers/activations.py, at float64.
_S2PI = math.sqrt(2.0 / math.pi)
_HF = {
    "gelu_new": lambda x: 0.5 * x * (1.0 + np.tanh(_S2PI * (x + 0.044715 * x**3.0))),
    "gelu_pytorch_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(_S2PI * (x + 0.044715 * x**3.0))),
    "gelu_python_tanh": lambda x: x * 0.5 * (1.0 + np.tanh(_S2PI * (x + 0.044715 * x**3.0))),
    "gelu_accurate": lambda x: 0.5 * x * (1 + np.tanh(_S2PI * (x + 0.044715 * x**3))),
    "gelu_fast": lambda x: 0.5 * x * (1.0 + np.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x))),
    "gelu_python": lambda x: x * 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0))),
    "quick_gelu": lambda x: x / (1.0 + np.exp(-1.702 * x)),
    "relu6": lambda x: np.minimum(np.maximum(x, 0.0), 6.0),
    "linear": lambda x: x,
}


def test_every_alias_has_its_formula_in_this_test():
    assert set(_HF) == set(iglu_np.ALIASES)


@pytest.mark.parametrize("alias", list(_HF))
def test_alias_matches_the_hugging_face_formula(alias):
    # moderate x; 1 + tanh(u) cancels for x < 0 in the textbook forms, whose error is then
    # absolute (a few 1e-16 here); gelu_fast's 10-digit sqrt(2/pi) differs by 3.6e-12
    x = np.linspace(-6.0, 6.0, 241)
    tol = 1e-10 if alias == "gelu_fast" else 4e-15
    np.testing.assert_allclose(iglu_np.get(alias)(x), _HF[alias](x), rtol=tol, atol=tol)


def test_gelu_fast_constant_is_sqrt_two_over_pi_in_float32():
    assert np.float32(0.7978845608) == np.float32(_S2PI)
    assert np.float16(0.7978845608) == np.float16(_S2PI)


def test_relu6_derivative_at_the_kinks_is_pytorchs():
    # torch's relu6 backward is hardtanh_backward: 0 at x = 0 and x = 6
    _same(iglu_np.relu6.dx(np.array([-1.0, 0.0, 3.0, 6.0, 7.0])), [0.0, 0.0, 1.0, 0.0, 0.0])


def test_a_parameter_passed_to_an_alias_overrides_its_default():
    x = np.linspace(-5.0, 5.0, 21)
    _same(iglu_np.quick_gelu(x, beta=1.0), iglu_np.silu(x))
    _same(iglu_np.relu6(x, max_val=2.0), iglu_np.hardtanh(x, min_val=0.0, max_val=2.0))
    with pytest.raises(ValueError, match="hardtanh"):
        iglu_np.relu6(x, max_val=-1.0)  # min_val = 0 >= max_val
    with pytest.raises(TypeError, match="keyword"):
        iglu_np.quick_gelu(x, 1.702)


def test_alias_signature_repr_and_doc_name_the_target():
    import inspect

    q = iglu_np.quick_gelu
    assert inspect.signature(q).parameters["beta"].default == 1.702
    assert repr(q) == "<iglu_np activation quick_gelu: alias of swish(beta=1.702)>"
    assert q.__name__ == "quick_gelu" and "alias of ``iglu_np.swish`` with beta=1.702" in q.__doc__
    assert q.dx.__name__ == "quick_gelu.dx" and q.backward.__name__ == "quick_gelu.backward"


def test_alias_pickles_by_name():
    for a in ("quick_gelu", "relu6", "gelu_new"):
        obj = iglu_np.get(a)
        assert pickle.loads(pickle.dumps(obj)) is obj


def test_alias_in_a_layer_trains_and_pickles():
    from iglu_np.nn.layers import ActivationLayer

    layer = ActivationLayer("quick_gelu", learnable="beta")
    assert float(layer.param_values()["beta"]) == pytest.approx(1.702)
    back = pickle.loads(pickle.dumps(layer))
    assert back.activation is iglu_np.quick_gelu


def test_aliases_are_read_only_and_not_in_the_canonical_list():
    with pytest.raises(TypeError):
        iglu_np.ALIASES["x"] = ("relu", {})  # type: ignore[index]
    with pytest.raises(TypeError):
        iglu_np.ALIASES["quick_gelu"][1]["beta"] = 2.0  # type: ignore[index]
    assert not set(iglu_np.ALIASES) & set(iglu_np.ACTIVATIONS)
    assert all(t in iglu_np.ACTIVATIONS for t, _ in iglu_np.ALIASES.values())
    assert set(HF_SAME_NAME) <= set(iglu_np.ACTIVATIONS)
    assert not set(HF_NOT_PROVIDED) & (set(iglu_np.ACTIVATIONS) | set(iglu_np.ALIASES))
    assert set(iglu_np.ALIASES) <= set(iglu_np.__all__)


def test_unknown_name_suggests_close_aliases_too():
    with pytest.raises(KeyError, match="did you mean 'quick_gelu'") as e:
        iglu_np.get("quick_gelo")
    assert "aliases: " in str(e.value) and "relu6" in str(e.value)
    with pytest.raises(KeyError, match="did you mean 'relu6'"):
        iglu_np.get("RELU6")
    with pytest.raises(KeyError, match="did you mean 'gelu_tanh'"):
        iglu_np.get("gelu_tanhh")


def test_info_lists_the_aliases():
    r = subprocess.run(
        [sys.executable, "-m", "iglu_np", "info", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["aliases"]["quick_gelu"] == {"activation": "swish", "params": {"beta": 1.702}}
    assert set(info["aliases"]) == set(iglu_np.ALIASES)
    assert not set(info["aliases"]) & set(info["activations"])
