"""A spec's ``same_as``: at the declared parameter values its kernels return the other
activation's bits for every float (Swish at beta = 1 is SiLU, GELU_a at a = 1 is GELU), so
the CPU fast path may run the other's loops there; other values keep their own."""

import numpy as np
import pytest

import iglu_np
from iglu_np._spec import REGISTRY, Param, define, kernel

from .bitwise import assert_same_bits, full_range

PAIRS = [n for n, s in sorted(REGISTRY.items()) if s.same_as]
DT = [np.float32, np.float64]
IDS = ["f32", "f64"]


def _grid(dtype):
    return full_range(dtype, lin=100.0, n_mags=3000, n_lin=20001)


def test_the_declared_pairs():
    assert {n: REGISTRY[n].same_as[0] for n in PAIRS} == {"gelu_a": "gelu", "swish": "silu"}


@pytest.mark.parametrize("dtype", DT, ids=IDS)
@pytest.mark.parametrize("name", PAIRS)
def test_kernels_give_the_other_activations_bits(name, dtype):
    other, at = REGISTRY[name].same_as
    act, ref = iglu_np.get(name), iglu_np.get(other)
    x = _grid(dtype)
    g = np.random.default_rng(1).standard_normal(x.size).astype(dtype)
    p = [dtype(at[n]) for n in act.param_names]
    with np.errstate(all="ignore"):
        # the exact kernels, through the ufuncs (the fast path's redirect not involved)
        assert_same_bits(act.ufunc(x, *p), ref.ufunc(x))
        assert_same_bits(act.dx.ufunc(x, *p), ref.dx.ufunc(x))
        # and the activation's own fast-path loops (bulk blocks included)
        from iglu_np.backends.cpu import loops

        for kind, ins in (("fwd", (x,)), ("dx", (x,)), ("bwd", (x, g))):
            mine, theirs = np.empty_like(x), np.empty_like(x)
            loops.kernel(name, kind, parallel=False)(*ins, mine, False, *p)
            loops.kernel(other, kind, parallel=False)(*ins, theirs, False)
            assert_same_bits(mine, theirs, err_msg=kind)


def _plans_used(fn):
    """The fast path's plan keys that ``fn()`` adds."""
    from iglu_np.backends.cpu import loops

    before = set(loops.plans)
    fn()
    return {k[:2] for k in set(loops.plans) - before}


def test_the_fast_path_runs_the_other_loops_only_at_the_declared_values():
    x = np.linspace(-9.0, 9.0, 1 << 17, dtype=np.float32)[::-1].copy()  # a fresh shape
    g = np.ones_like(x)
    used = _plans_used(lambda: iglu_np.swish(x, beta=1.0))
    used |= _plans_used(lambda: iglu_np.swish.backward(x, g))
    assert all(n == "silu" for n, _ in used)
    assert_same_bits(iglu_np.swish(x), iglu_np.silu(x))
    assert_same_bits(iglu_np.swish.backward(x, g), iglu_np.silu.backward(x, g))
    # another beta keeps swish's own loops, and so does the beta-derivative at beta = 1
    assert _plans_used(lambda: iglu_np.swish(x, beta=1.5)) <= {("swish", "fwd")}
    assert _plans_used(lambda: iglu_np.swish.dparams(x, beta=1.0)) <= {("swish", "d_beta")}
    assert_same_bits(
        iglu_np.swish.dparams(x)["beta"], iglu_np.swish.dparams.ufuncs["beta"](x, np.float32(1.0))
    )


def test_define_checks_same_as():
    @kernel
    def f(x, s):
        return x * s

    with pytest.raises(ValueError, match="same_as"):
        define(
            "same_as_missing_param",
            summary="",
            formula="",
            f=f,
            dx=f,
            ref=lambda mp, x, s: x,
            ref_dx=lambda mp, x, s: x,
            params=[Param("s", 1.0, "")],
            dparams={"s": f},
            ref_dparams={"s": lambda mp, x, s: x},
            same_as=("identity", {}),
        )
