"""No silent wrong answers (issue #20): overlapping out=, parameters outside the compute
dtype's range, ... each against what numpy (or float64, rounded once) gives."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import iglu_np

NAMES = list(iglu_np.ACTIVATIONS)
WITH_PARAMS = [n for n in NAMES if iglu_np.ACTIVATIONS[n].params]


# --------------------------------------------------------------------------- overlap
def _ops(act):
    yield "fwd", 1, lambda *a, out: act(*a, out=out)
    yield "dx", 1, lambda *a, out: act.dx(*a, out=out)
    yield "bwd", 2, lambda *a, out: act.backward(*a, out=out)
    yield "bwd_all", 2, lambda *a, out: act.backward_all(*a, out=out)[0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(NAMES),
    dt=st.sampled_from([np.float32, np.float64]),
    n=st.sampled_from([5, 100, 2047, 2048, 5000, 70_000]),
    shift=st.sampled_from([-3, -1, 1, 2]),
    which=st.integers(0, 1),
    repeat=st.integers(1, 10),
)
def test_out_overlapping_an_operand_gives_numpys_answer(name, dt, n, shift, which, repeat):
    """out= a shifted view of the buffer x (or grad_out) lives in, both directions, every
    op; repeated calls go past the small-call tier to the compiled loops."""
    act = iglu_np.get(name)
    rng = np.random.default_rng(n + shift)
    for op, n_data, call in _ops(act):
        buf = (rng.standard_normal(n + abs(shift)) * 3).astype(dt)
        other = (rng.standard_normal(n) * 3).astype(dt)
        lo, hi = (0, shift) if shift > 0 else (-shift, 0)
        src = buf[lo : lo + n]  # the operand
        out = buf[hi : hi + n]  # out: the same buffer, shifted
        args = [src] if n_data == 1 else ([src, other] if which == 0 else [other, src])
        want = call(*[a.copy() for a in args], out=None)
        for _ in range(repeat):
            b2 = buf.copy()
            a2 = [b2[lo : lo + n] if a is src else a for a in args]
            got = call(*a2, out=b2[hi : hi + n])
        assert np.array_equal(got, want, equal_nan=True), (name, op, n, shift, which)


def test_the_issue_reproducer():
    b = np.arange(1.0, 3002.0)
    v = b[1:]
    got = iglu_np.relu.backward(v, b[:-1], out=v)
    assert np.array_equal(got, np.arange(1.0, 3001.0))


# --------------------------------------------------------------------------- parameter range
def _big_and_tiny(p):
    for v in (1e39, -1e39, 1e-42, -1e-42, 3.5e38):
        if p.contains(v):
            yield v


@pytest.mark.parametrize("name", WITH_PARAMS)
def test_float32_with_a_parameter_beyond_float32_is_float64_rounded_once(name):
    """A parameter in its domain but outside float32's range (or subnormal there) would
    turn into inf or lose its bits; such calls compute in float64 and round once."""
    act = iglu_np.get(name)
    x32 = np.array([0.0, 1.0, -1.0, 2.5, -7.0, 1e-30, -1e30], np.float32)
    g32 = np.linspace(-2, 2, x32.size).astype(np.float32)
    x64, g64 = x32.astype(np.float64), g32.astype(np.float64)
    tried = 0
    for p in act.params:
        for v in _big_and_tiny(p):
            kw = dict(act.spec.defaults, **{p.name: v})
            if act.spec.check is not None and act.spec.check(**kw):
                continue
            tried += 1
            with np.errstate(over="ignore"):
                pairs = [
                    (act(x32, **kw), act(x64, **kw)),
                    (act.dx(x32, **kw), act.dx(x64, **kw)),
                    (act.backward(x32, g32, **kw), act.backward(x64, g64, **kw)),
                ]
                pairs += [(a, b) for a, b in zip(act.dparams(x32, **kw).values(), act.dparams(x64, **kw).values())]
                pairs += [(a, b) for a, b in zip(act.backward_params(x32, g32, **kw).values(),
                                                 act.backward_params(x64, g64, **kw).values())]
                for got, want in pairs:
                    assert got.dtype == np.float32
                    assert np.array_equal(got, np.asarray(want).astype(np.float32), equal_nan=True), (
                        name, p.name, v, got, want)
    assert tried, f"{name}: no parameter admits a value beyond float32's range: the case is not exercised"
