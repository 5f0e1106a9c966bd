"""The gated forms in the torch and JAX bridges: gradients in x, up and every parameter,
the numpy results, modules with learnable parameters, torch.compile and jax.jit."""

from __future__ import annotations

import numpy as np
import pytest

import iglu_np

FORMS = list(iglu_np.GATED)


def _x(seed, shape=(3, 8)):
    x = np.random.default_rng(seed).uniform(-3, 3, shape)
    x[0, 0] = 8.5  # beyond swiglu_oai's limit: the clamped gate has zero gradient
    return x


def _pval(g, p):
    """A value of form ``g``'s parameter ``p`` for finite differences: its default
    moved by 0.1, or (near the domain's edge: xielu's eps <= 0) a test value well inside."""
    param = iglu_np.get(g._spec_name).spec.param(g._rename.get(p, p))
    v = float(g.defaults[p]) + 0.1
    if all(param.contains(v + d) for d in (-0.01, 0.01)):
        return v
    return next(
        float(t) for t in param.test_values if all(param.contains(t + d) for d in (-0.01, 0.01))
    )


# --------------------------------------------------------------------------- torch
@pytest.fixture(scope="module")
def it():
    pytest.importorskip("torch", reason="the torch bridge needs torch")
    import iglu_np.torch as it

    return it


@pytest.mark.parametrize("name", FORMS)
def test_torch_gradcheck_in_x_up_and_every_parameter(it, name):
    import torch

    g = iglu_np.GATED[name]
    fn = it.GATED[name]
    x = torch.tensor(_x(1), requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: fn(v), (x,))
    gate = torch.tensor(_x(2, (3, 4)), requires_grad=True)
    up = torch.tensor(_x(3, (3, 4)), requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: fn(a, b), (gate, up))
    for p in g.defaults:
        t = torch.tensor(_pval(g, p), dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda v, t: fn(v, **{p: t}), (x, t)), p
    np.testing.assert_array_equal(fn(x).detach().numpy(), g(x.detach().numpy()))


def test_torch_cpu_tensors_with_number_parameters_take_the_fused_op(it):
    import torch

    x = torch.tensor(_x(5, (4, 16)), dtype=torch.float32, requires_grad=True)
    y = it.swiglu_oai(x, alpha=1.3)
    assert "GatedBackward" in type(y.grad_fn).__name__ or "gated" in str(y.grad_fn).lower()
    np.testing.assert_array_equal(
        y.detach().numpy(), iglu_np.swiglu_oai(x.detach().numpy(), alpha=1.3)
    )
    g = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    y.backward(g)
    np.testing.assert_array_equal(
        x.grad.numpy(), iglu_np.swiglu_oai.backward(x.detach().numpy(), g.numpy(), alpha=1.3)
    )
    # a tensor parameter: the composed form, differentiable in it
    s = torch.tensor(0.7, requires_grad=True)
    it.iglu_glu(x, sigma=s).sum().backward()
    assert s.grad is not None


def test_torch_per_channel_parameter_and_learnable_module(it):
    import torch

    x = torch.tensor(_x(4, (5, 3, 8)), requires_grad=True)
    sigma = torch.tensor([[0.5], [1.0], [2.0]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, s: it.iglu_glu(v, sigma=s), (x, sigma))
    m = it.IGLUGLU(learnable=True, num_parameters=3, channel_dim=1)
    y = m(x.float())
    y.sum().backward()
    assert y.shape == (5, 3, 4) and m.act.raw_sigma.grad.shape == (3,)
    oai = it.SwiGLUOAI(alpha=1.0, learnable="alpha")
    assert float(oai.act.beta.detach()) == pytest.approx(1.0)
    assert [n for n, _ in oai.named_parameters()] == ["act.beta"]
    np.testing.assert_allclose(
        oai(x.float()).detach().numpy(),
        iglu_np.swiglu_oai(x.detach().float().numpy(), alpha=1.0),
        rtol=1e-6,
    )
    import copy
    import pickle

    m2 = pickle.loads(pickle.dumps(m))
    torch.testing.assert_close(m2(x.float()), m(x.float()))
    torch.testing.assert_close(copy.deepcopy(oai)(x.float()), oai(x.float()))
    assert {"SwiGLU", "GeGLU", "GeGLUTanh", "ReGLU", "GLU", "SwiGLUOAI", "IGLUGLU", "XIELUGLU"} <= {
        c.__name__ for c in it.GATED_MODULES.values()
    }


def test_torch_bfloat16_rounds_once_or_twice_as_asked(it):
    import torch

    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0)).bfloat16()
    a, b = x[:, :32], x[:, 32:]
    twice = it.swiglu(x, rounding="twice")
    torch.testing.assert_close(twice, it.silu(a) * b, rtol=0, atol=0)
    once = it.swiglu(x)
    torch.testing.assert_close(once, (it.silu(a.float()) * b.float()).bfloat16(), rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore:Guards may run slower:RuntimeWarning")
def test_torch_compile_fullgraph_keeps_the_fused_op_opaque(it):
    import torch
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def record(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return make_boxed_func(gm.forward)

    lin = torch.nn.Linear(6, 8, dtype=torch.float64)
    layer = it.SwiGLU()

    def f(x):
        return layer(lin(x)).sum()

    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    f(x).backward()
    want = x.grad.clone()
    x.grad = None
    torch._dynamo.reset()
    cf = torch.compile(
        f, fullgraph=True, backend=aot_autograd(fw_compiler=record, bw_compiler=record)
    )
    cf(x).backward()
    torch.testing.assert_close(x.grad, want, rtol=1e-14, atol=0)
    fw, bw = graphs
    # the fused op, one opaque node each way (a fixed-parameter layer takes it)
    assert fw.count("iglu_np.gated.default") == 1
    assert bw.count("iglu_np.gated_backward.default") == 1


# --------------------------------------------------------------------------- JAX
@pytest.fixture(scope="module")
def ij():
    pytest.importorskip("jax", reason="the JAX bridge needs jax")
    import iglu_np.jax as ij

    return ij


def _x64():
    import jax

    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # older JAX

    return enable_x64()


@pytest.mark.parametrize("name", FORMS)
def test_jax_check_grads_in_x_up_and_every_parameter(ij, name):
    import jax
    import jax.numpy as jnp
    from jax.test_util import check_grads

    g = iglu_np.GATED[name]
    fn = ij.GATED[name]
    with _x64():
        x = jnp.asarray(_x(1))
        check_grads(fn, (x,), order=1, modes=("rev",))
        check_grads(
            lambda a, b: fn(a, b),
            (jnp.asarray(_x(2, (3, 4))), jnp.asarray(_x(3, (3, 4)))),
            order=1,
            modes=("rev",),
        )
        for p in g.defaults:
            check_grads(
                lambda v, t: fn(v, **{p: t}), (x, jnp.asarray(_pval(g, p))), order=1, modes=("rev",)
            )
        np.testing.assert_array_equal(np.asarray(jax.jit(fn)(x)), g(np.asarray(x)))


def test_jax_names_cover_every_form_and_activation(ij):
    assert set(iglu_np.GATED) <= set(ij.GATED)
    assert {f"{n}_glu" for n in iglu_np.ACTIVATIONS} <= set(ij.GATED)
    assert ij.swiglu is ij.GATED["swiglu"]


def test_jax_number_parameters_take_the_fused_loops_under_jit_grad_and_vmap(ij):
    import jax
    import jax.numpy as jnp

    x = _x(6, (4, 3, 8)).astype(np.float32)
    g = iglu_np.swiglu_oai
    fn = lambda v: ij.swiglu_oai(v, alpha=1.3)  # noqa: E731
    jaxpr = str(jax.make_jaxpr(fn)(jnp.asarray(x)))
    # the clamps and the product are inside the fused loops (a custom call on the CPU,
    # tests/test_jax_ffi.py; else a callback), not jax.numpy operations
    assert "select_n" not in jaxpr and "mul" not in jaxpr
    np.testing.assert_array_equal(np.asarray(jax.jit(fn)(x)), g(x, alpha=1.3))
    ct = np.random.default_rng(2).standard_normal((4, 3, 4)).astype(np.float32)
    gx = jax.grad(lambda v: jnp.sum(fn(v) * ct))(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(gx), g.backward(x, ct, alpha=1.3))
    vm = jax.vmap(fn)(jnp.asarray(x))  # batch axes in front: the split axis counts from the end
    np.testing.assert_array_equal(np.asarray(vm), g(x, alpha=1.3))
