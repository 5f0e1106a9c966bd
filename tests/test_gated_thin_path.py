"""The gated forms' thin path: a numpy input split along its last axis with scalar
parameters goes straight to the fused loop, with the general path's bits; anything else
goes through the general path, and every error is the general path's."""

import numpy as np
import pytest

import iglu_np
from iglu_np import _gated

from .bitwise import assert_same_bits

# halves (gate first and second), interleaved with a limit and a shift, a parameter
FORMS = ["swiglu", "glu", "swiglu_oai", "geglu", "iglu_glu", "xielu_glu"]
SHAPES = [(3, 8), (4096,), (2, 3, 70_000)]  # the last: threaded


@pytest.fixture
def general_only(monkeypatch):
    """Makes the general path raise: a call that returns took the thin path."""

    def refuse(*a, **k):
        raise AssertionError("general path")

    monkeypatch.setattr(_gated, "_host", refuse)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", FORMS)
def test_same_bits_as_the_general_path(name, dtype, shape):
    g = getattr(iglu_np, name)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    go = rng.standard_normal((*shape[:-1], shape[-1] // 2)).astype(dtype)
    ax = len(shape) - 1  # the same split, through the general path
    assert_same_bits(g(x), g(x, axis=ax))
    assert_same_bits(g.backward(x, go), g.backward(x, go, axis=ax))
    o = np.empty_like(go)
    assert g(x, out=o) is o
    assert_same_bits(o, g(x, axis=ax))
    d = np.empty_like(x)
    assert g.backward(x, go, out=d) is d
    assert_same_bits(d, g.backward(x, go, axis=ax))


# (form, keywords): a limit, parameters, the other layout, axis as ndim - 1
KEYWORDS = [
    ("swiglu", {"limit": 2.5}),
    ("iglu_glu", {"sigma": 2.0}),
    ("xielu_glu", {"alpha_p": 0.5, "beta": 0.25, "limit": 7.0}),
    ("swiglu_oai", {"alpha": 1.5, "limit": None}),
    ("geglu", {"layout": "interleaved"}),
    ("glu", {"layout": "halves", "axis": 1}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,kw", KEYWORDS, ids=[n for n, _ in KEYWORDS])
def test_keywords_give_the_general_paths_bits(name, kw, dtype):
    g = getattr(iglu_np, name)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 96)) * 4).astype(dtype)
    go = rng.standard_normal((5, 48)).astype(dtype)
    # the same values in Fortran order take the general path (composed from the kernels)
    gen = dict(kw, axis=1)
    want_f = g(np.asfortranarray(x), **gen)
    want_b = g.backward(np.asfortranarray(x), go, **gen)
    assert_same_bits(g(x, **kw), want_f)
    assert_same_bits(g.backward(x, go, **kw), want_b)


def test_takes_the_loop_directly(general_only):
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    go = np.ones((4, 32), np.float32)
    iglu_np.swiglu(x)
    iglu_np.swiglu(x, out=np.empty((4, 32), np.float32))
    iglu_np.swiglu.backward(x, go)
    iglu_np.swiglu(x, limit=3.0, axis=1, layout="interleaved")
    iglu_np.iglu_glu.backward(x, go, sigma=2.0)


@pytest.mark.parametrize(
    "call",
    [
        lambda g, x, go: iglu_np.iglu_glu(x, sigma=np.full((4, 32), 2.0, np.float32)),
        lambda g, x, go: iglu_np.iglu_glu(x, sigma=1e39),  # beyond float32
        lambda g, x, go: g(x[:, :63]),  # odd last axis: the general path's error
        lambda g, x, go: g(x.astype(np.float16)),
        lambda g, x, go: g(np.asfortranarray(x)),
        lambda g, x, go: g(x, out=x[:, :32]),  # out overlaps x
        lambda g, x, go: g(x, out=np.empty((4, 32), np.float64)),
        lambda g, x, go: g.backward(x, go[:, :31]),
        lambda g, x, go: g(x, rounding="twice"),
        lambda g, x, go: g(x, axis=0),
    ],
)
def test_other_calls_take_the_general_path(general_only, call):
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    go = np.ones((4, 32), np.float32)
    with pytest.raises(AssertionError, match="general path"):
        call(iglu_np.swiglu, x, go)


def _message(call):
    """The error ``call()`` raises (None if none: both paths must then agree on that)."""
    try:
        call()
    except (TypeError, ValueError) as e:
        return type(e), str(e)
    return None


@pytest.mark.parametrize(
    "kw",
    [
        {"sigma": -1.0},
        {"sigma": 1.0, "limit": -2.0},
        {"sgima": 1.0},
        {"limit": "7"},
        {"limit": True},
        {"sigma": True},
    ],
    ids=["domain", "limit-first", "keyword", "limit-type", "limit-bool", "param-bool"],
)
def test_errors_are_the_general_paths(kw):
    x = np.ones((2, 8), np.float32)
    g = iglu_np.iglu_glu
    g(x, limit=1, sigma=1)  # remembered values equal to True must not pass for it
    assert _message(lambda: g(x, **kw)) == _message(lambda: g(np.asfortranarray(x), **kw))
    go = np.ones((2, 4), np.float32)
    assert _message(lambda: g.backward(x, go, **kw)) == _message(
        lambda: g.backward(np.asfortranarray(x), go, **kw)
    )
    with pytest.raises(ValueError, match="even length"):
        iglu_np.swiglu(np.ones((2, 7), np.float32))
