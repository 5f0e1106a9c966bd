"""The gated forms against mpmath: value, gate derivative and up derivative of every
activation's gated form within the activation's bound plus one rounding
(:mod:`tests.gated_accuracy`), float32 and float64, subnormal results included."""

import numpy as np
import pytest

import iglu_np
from tests import gated_accuracy as ga

FEW = ["iglu", "xielu", "silu", "gelu", "gelu_tanh", "relu", "sigmoid", "softplus"]
KINDS = ga.KINDS


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("name", FEW)
def test_gated_forms_are_within_the_activation_bound_plus_one_rounding(name, dt):
    for kind in KINDS:
        worst, gate, up, bound = ga.errors(name, kind, dt, quick=True)
        assert worst <= bound, f"{name}_glu {kind}: {worst:.3g} > {bound} at gate={gate}, up={up}"


@pytest.mark.slow
@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(iglu_np.ACTIVATIONS))
def test_every_gated_form_on_the_full_grid(name, dt):
    for kind in KINDS:
        worst, gate, up, bound = ga.errors(name, kind, dt, quick=False)
        assert worst <= bound, f"{name}_glu {kind}: {worst:.3g} > {bound} at gate={gate}, up={up}"
