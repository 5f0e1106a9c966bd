"""iglu_np.torch: every activation as a differentiable torch op and an nn.Module."""

import copy
import math
import subprocess
import sys

import numpy as np
import pytest

import iglu_np
from iglu_np import _params

torch = pytest.importorskip("torch", reason="the torch bridge needs torch (pip install '.[torch]')")
it = pytest.importorskip("iglu_np.torch")
F = torch.nn.functional

NAMES = list(iglu_np.ACTIVATIONS)
_X_CANDIDATES = (-2.1, 1.6, -0.35, 0.8, -3.3, 2.6, -0.9, 0.27, 3.5, -1.3, 1.2, -4.5, 4.1)


def _inside(p, v, margin=1e-3):
    """v lies in p's domain with room for a finite-difference step either side."""
    return p.contains(v) and p.contains(v - margin) and p.contains(v + margin)


def _channel_params(act, n=3):
    """n parameter sets (one per channel): the defaults, then the spec's test values
    that lie inside the domains and pass the cross-parameter check."""
    sets = [dict(act.defaults)]
    for k in range(8):
        if len(sets) == n:
            break
        cand = {}
        for p in act.params:
            vals = [v for v in p.test_values if _inside(p, v)]
            cand[p.name] = vals[k % len(vals)] if vals else p.default
        try:
            _params.values(act._p, dict(cand))
        except ValueError:
            continue
        if cand not in sets:
            sets.append(cand)
    while len(sets) < n:
        sets.append(dict(act.defaults))
    return sets


def _kinks(act, params):
    pts = []
    for s in act.spec.special_points:
        try:
            v = s(params) if callable(s) else s
        except (ValueError, ZeroDivisionError):
            continue
        if v is not None and math.isfinite(v):  # None: no such point at these parameters
            pts.append(v)
    return pts


def _x_away_from_kinks(act, sets, rows=4, margin=0.05):
    cols = []
    for ps in sets:
        kinks = _kinks(act, ps)
        col = [x for x in _X_CANDIDATES if all(abs(x - k) > margin for k in kinks)][:rows]
        assert len(col) == rows, (act.name, ps, kinks)
        cols.append(col)
    return torch.tensor(np.array(cols).T, dtype=torch.float64)


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck_in_x_and_every_parameter(name):
    """float64 gradcheck with every parameter a per-channel tensor requiring grad, and
    again with 0-d parameter tensors."""
    act = iglu_np.get(name)
    sets = _channel_params(act)
    x = _x_away_from_kinks(act, sets).requires_grad_()
    ps = [
        torch.tensor([s[p] for s in sets], dtype=torch.float64, requires_grad=True)
        for p in act.param_names
    ]
    fn = it.FUNCTIONS[name]

    def f(x, *ps):
        return fn(x, **dict(zip(act.param_names, ps)))

    assert torch.autograd.gradcheck(f, (x, *ps))
    x0 = _x_away_from_kinks(act, sets[:1], rows=6)[:, 0].clone().requires_grad_()
    p0 = [
        torch.tensor(float(sets[0][p]), dtype=torch.float64, requires_grad=True)
        for p in act.param_names
    ]
    assert torch.autograd.gradcheck(f, (x0, *p0))


def test_every_activation_has_a_function_an_op_and_a_module():
    assert list(it.FUNCTIONS) == NAMES and list(it.MODULES) == NAMES
    classes = [c.__name__ for c in it.MODULES.values()]
    assert len(set(classes)) == len(classes)
    for name in NAMES:
        assert getattr(it, name) is it.FUNCTIONS[name]
        cls = it.MODULES[name]
        assert cls.__name__.isidentifier() and getattr(it, cls.__name__) is cls
        assert issubclass(cls, it.Activation) and issubclass(cls, torch.nn.Module)
        assert hasattr(torch.ops.iglu_np, name) and hasattr(torch.ops.iglu_np, name + "_backward")
    assert it.MODULES["iglu"] is it.IGLU and it.MODULES["leaky_relu"] is it.LeakyReLU
    assert it.MODULES["silu"] is it.SiLU and it.MODULES["relu2"] is it.ReLU2
    assert it.class_name("xielu") == "XIELU" and it.class_name("gelu_a") == "GELUa"


# ------------------------------------------------------------------ training
def _mlp(act):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(5, 16), act, torch.nn.Linear(16, 16), act, torch.nn.Linear(16, 2)
    ).double()


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _train(model, opt_cls, steps=4):
    g = torch.Generator().manual_seed(1)
    X = torch.randn(64, 5, generator=g, dtype=torch.float64)
    Y = torch.randn(64, 2, generator=g, dtype=torch.float64)
    opt = opt_cls(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(model(X), Y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("opt_cls", [torch.optim.SGD, torch.optim.Adam], ids=["SGD", "Adam"])
@pytest.mark.parametrize(
    "name",
    ["silu", "gelu", "elu", "softplus", "mish", "tanh", "hardswish", "leaky_relu", "celu", "selu"],
)
def test_training_matches_torch_activation(name, opt_cls):
    ours = _mlp(_Fn(it.FUNCTIONS[name]))
    theirs = _mlp(_Fn(getattr(F, iglu_np.get(name).spec.torch)))
    l1, p1 = _train(ours, opt_cls)
    l2, p2 = _train(theirs, opt_cls)
    assert l1[-1] < l1[0]  # it learns
    np.testing.assert_allclose(l1, l2, rtol=1e-12)
    for a, b in zip(p1, p2):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_learnable_prelu_trains_like_torch_prelu():
    ours = torch.nn.Sequential(
        torch.nn.Linear(5, 16), it.PReLU(learnable=True, num_parameters=16), torch.nn.Linear(16, 2)
    )
    theirs = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.PReLU(16), torch.nn.Linear(16, 2))
    theirs.load_state_dict(ours.state_dict())
    l1, p1 = _train(ours.double(), torch.optim.Adam)
    l2, p2 = _train(theirs.double(), torch.optim.Adam)
    np.testing.assert_allclose(l1, l2, rtol=1e-12)
    for a, b in zip(p1, p2):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert not torch.equal(p1[2], torch.full((16,), 0.25, dtype=torch.float64))  # it moved


def test_per_channel_parameter_gradients_reduce_to_the_parameter_shape():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 3, 5, 6, generator=g, dtype=torch.float64, requires_grad=True)
    sigma = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64).reshape(1, 3, 1, 1).requires_grad_()
    w = torch.randn(x.shape, generator=g, dtype=torch.float64)
    (it.iglu(x, sigma=sigma) * w).sum().backward()
    xr = x.detach().clone().requires_grad_()
    sr = sigma.detach().clone().requires_grad_()
    ((xr * (0.5 + torch.atan(sr * xr) / math.pi)) * w).sum().backward()
    assert sigma.grad.shape == (1, 3, 1, 1)
    torch.testing.assert_close(sigma.grad, sr.grad, rtol=1e-12, atol=0)
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-12, atol=1e-15)
    # a parameter that broadcasts over trailing axes, and one per row
    a = torch.tensor([0.1, 0.2, 0.3, 0.4], requires_grad=True)
    xt = torch.randn(4, 7, generator=g)
    it.leaky_relu(xt, negative_slope=a[:, None]).sum().backward()
    torch.testing.assert_close(a.grad, torch.where(xt > 0, 0.0, xt).sum(1))


def test_module_keeps_constrained_parameters_in_their_domain():
    torch.manual_seed(0)
    m = it.XIELU(learnable=True, num_parameters=4)
    s = it.IGLU(sigma=0.01, learnable=True)
    assert {n for n, _ in m.named_parameters()} == {
        "raw_alpha_p",
        "raw_alpha_n",
        "raw_beta",
        "raw_eps",
    }
    x = torch.randn(32, 4)
    opt = torch.optim.SGD([*m.parameters(), *s.parameters()], lr=50.0)
    for _ in range(5):
        opt.zero_grad()
        (m(x).sum() + s(x).sum() * 100).backward()  # huge steps push towards the bounds
        opt.step()
    assert (m.alpha_n > m.beta).all() and (m.alpha_p > 0).all() and (m.beta >= 0).all()
    assert (m.eps <= 0).all() and s.sigma > 0
    assert torch.isfinite(m(x)).all()


def test_module_fixed_parameters_and_unconstrained_learnable_ones():
    m = it.Hardtanh(min_val=-2.0, max_val=0.5)
    assert list(m.parameters()) == []
    torch.testing.assert_close(m(torch.tensor([-3.0, 0.0, 3.0])), torch.tensor([-2.0, 0.0, 0.5]))
    lr = it.LeakyReLU(negative_slope=0.1, learnable=True)
    assert [n for n, _ in lr.named_parameters()] == ["negative_slope"]
    assert "negative_slope=0.1 (learnable)" in repr(lr)
    g = it.Activation("gelu_a", a=0.5)
    assert repr(g) == "Activation('gelu_a', a=0.5)"
    torch.testing.assert_close(
        g(torch.ones(3)), torch.from_numpy(iglu_np.gelu_a(np.ones(3, np.float32), a=0.5))
    )
    m2 = it.Softplus(beta=torch.tensor([1.0, 2.0]))  # a fixed per-column tensor: a buffer
    assert [n for n, _ in m2.named_buffers()] == ["beta"]
    torch.testing.assert_close(
        m2(torch.zeros(3, 2)), torch.log(torch.tensor(2.0)) / torch.tensor([1.0, 2.0]).expand(3, 2)
    )


def test_modules_pickle_copy_and_load_state():
    import io
    import pickle

    m = it.Activation(iglu_np.xielu, learnable=("alpha_n", "beta"), num_parameters=3, alpha_p=0.5)
    with torch.no_grad():
        m.raw_alpha_n += 0.3
    x = torch.randn(5, 3)
    for m2 in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        torch.testing.assert_close(m2(x), m(x), rtol=0, atol=0)
    m3 = it.XIELU(learnable=("alpha_n", "beta"), num_parameters=3, alpha_p=0.5)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    m3.load_state_dict(torch.load(io.BytesIO(buf.getvalue())))
    torch.testing.assert_close(m3(x), m(x), rtol=0, atol=0)
    assert not torch.equal(m3.alpha_n, it.XIELU(learnable=True, num_parameters=3).alpha_n)


# ------------------------------------------------------------------ dtypes, memory, errors
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_dtype_is_kept_in_forward_and_backward(dtype):
    x = torch.linspace(-3, 3, 11, dtype=dtype, requires_grad=True)
    sigma = torch.tensor(1.5, dtype=dtype, requires_grad=True)
    y = it.iglu(x, sigma=sigma)
    assert y.dtype == dtype
    y.sum().backward()
    assert x.grad.dtype == dtype and sigma.grad.dtype == dtype
    xn = x.detach().numpy()
    np.testing.assert_array_equal(y.detach().numpy(), iglu_np.iglu(xn, sigma=1.5))
    np.testing.assert_array_equal(
        x.grad.numpy(), iglu_np.iglu.backward(xn, np.ones_like(xn), sigma=1.5)
    )


def test_float64_parameter_with_float32_input():
    x = torch.linspace(-3, 3, 11, requires_grad=True)
    sigma = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    y = it.iglu(x, sigma=sigma)
    y.sum().backward()
    assert y.dtype == torch.float32 and sigma.grad.dtype == torch.float64


def test_bfloat16_cpu_tensors():
    x = torch.linspace(-3, 3, 13, dtype=torch.bfloat16, requires_grad=True)
    try:
        import ml_dtypes
    except ImportError:  # the bridge says what to install
        with pytest.raises(TypeError, match="pip install ml_dtypes"):
            it.iglu(x)
        return
    try:
        iglu_np.gelu(np.zeros(1, ml_dtypes.bfloat16))
    except TypeError as e:
        pytest.skip(f"iglu_np's CPU backend refuses bfloat16 here ({e})")
    sigma = torch.full((13,), 1.5, dtype=torch.bfloat16, requires_grad=True)
    y = it.iglu(x, sigma=sigma)
    assert y.dtype == torch.bfloat16
    want = iglu_np.iglu(x.detach().float().numpy(), sigma=1.5)
    np.testing.assert_array_equal(
        y.float().detach().numpy(), torch.from_numpy(want).bfloat16().float().numpy()
    )
    y.sum().backward()
    assert x.grad.dtype == torch.bfloat16 and sigma.grad.dtype == torch.bfloat16
    dp = iglu_np.iglu.dparams(x.detach().float().numpy(), sigma=1.5)["sigma"]
    np.testing.assert_allclose(sigma.grad.float().numpy(), dp, rtol=1e-2)


def test_strided_and_channels_last_inputs():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 4, 5, generator=g).to(memory_format=torch.channels_last)
    y = it.silu(x)
    assert y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y, F.silu(x), rtol=2e-7, atol=1e-7)
    xt = torch.randn(6, 7, generator=g).t().requires_grad_()
    y = it.gelu(xt)
    y.backward(torch.ones(7, 1).expand(7, 6))  # a stride-0 incoming gradient
    np.testing.assert_array_equal(y.detach().numpy(), iglu_np.gelu(xt.detach().numpy()))
    np.testing.assert_array_equal(xt.grad.numpy(), iglu_np.gelu.dx(xt.detach().numpy()))


def test_errors():
    x = torch.ones(3)
    with pytest.raises(ValueError, match="sigma"):
        it.iglu(x, sigma=-1.0)
    with pytest.raises(ValueError, match="sigma"):
        it.iglu(x, sigma=torch.tensor([1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="alpha_n"):
        it.xielu(x, alpha_n=0.3, beta=0.5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sigmaa'"):
        it.iglu(x, sigmaa=1.0)
    with pytest.raises(TypeError, match="dtype"):
        it.relu(torch.ones(3, dtype=torch.int64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        it.relu(np.ones(3))
    with pytest.raises(ValueError, match="broadcast"):
        it.iglu(x, sigma=torch.ones(2, 3))
    with pytest.raises(ValueError, match="sigma"):
        it.IGLU(sigma=0.0)
    with pytest.raises(ValueError, match="alpha_n"):
        it.XIELU(alpha_n=0.3, beta=0.5, learnable=True)
    with pytest.raises(ValueError, match="cannot learn"):
        it.GELU(learnable="a")
    with pytest.raises(KeyError, match="unknown activation"):
        it.Activation("gelu2")


def test_no_grad_inputs_skip_the_backward():
    x = torch.ones(3, requires_grad=True)
    sigma = torch.tensor(1.0)
    y = it.iglu(x, sigma=sigma)
    (gx,) = torch.autograd.grad(y.sum(), x)
    assert sigma.grad is None and gx.shape == (3,)
    assert not it.iglu(torch.ones(3), sigma=1.0).requires_grad


@pytest.mark.parametrize("name", NAMES)
def test_eager_calls_give_the_registered_ops_bits(name):
    """An eager call runs the kernels without the custom op; torch.ops.iglu_np.<name>
    (what torch.compile records) gives the same values and gradients, bit for bit."""
    act = iglu_np.get(name)
    sets = _channel_params(act)
    x = _x_away_from_kinks(act, sets).float()
    ps = [torch.tensor([s[p] for s in sets]) for p in act.param_names]
    grad = torch.linspace(-1.0, 2.0, x.numel()).reshape(x.shape)
    results = []
    for call in (
        lambda x, ps: it.FUNCTIONS[name](x, **dict(zip(act.param_names, ps))),
        lambda x, ps: getattr(torch.ops.iglu_np, name)(
            x, *[v for p, t in zip(act.params, ps) for v in (p.default, t)]
        ),
    ):
        xr = x.clone().requires_grad_()
        pr = [t.clone().requires_grad_() for t in ps]
        y = call(xr, pr)
        y.backward(grad)
        results.append([y.detach(), xr.grad, *(t.grad for t in pr)])
    for a, b in zip(*results):
        assert torch.equal(a, b), name


def test_a_second_backward_raises_instead_of_treating_the_first_as_constant():
    x = torch.tensor([0.5, -1.0], requires_grad=True)
    (gx,) = torch.autograd.grad(it.gelu(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="gelu_backward"):
        (gx.sum() + x.sum()).backward()


def test_meta_tensors_and_subclasses_go_through_the_op():
    y = it.iglu(torch.empty(4, 3, device="meta"), sigma=torch.ones(3, device="meta"))
    assert y.device.type == "meta" and y.shape == (4, 3)

    class Tagged(torch.Tensor):
        pass

    t = torch.tensor([0.5, -1.0]).as_subclass(Tagged)
    assert type(it.gelu(t)) is Tagged
    torch.testing.assert_close(
        it.gelu(t).as_subclass(torch.Tensor), F.gelu(torch.tensor([0.5, -1.0]))
    )


def _compile_case():
    def f(x, s):
        return (it.iglu(x, sigma=s) * it.gelu(x)).sum()

    g = torch.Generator().manual_seed(4)
    x = torch.randn(8, 3, generator=g, dtype=torch.float64, requires_grad=True)
    s = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
    f(x, s).backward()
    want = x.grad.clone(), s.grad.clone()
    x.grad = s.grad = None
    return f, x, s, want


# torch's dynamo warns on Python 3.13.0 that its guards may run slower (fixed in 3.13.1)
@pytest.mark.filterwarnings("ignore:Guards may run slower:RuntimeWarning")
def test_torch_compile_fullgraph_keeps_each_op_opaque_forward_and_backward():
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def record(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return make_boxed_func(gm.forward)

    f, x, s, want = _compile_case()
    torch._dynamo.reset()
    cf = torch.compile(
        f, fullgraph=True, backend=aot_autograd(fw_compiler=record, bw_compiler=record)
    )
    cf(x, s).backward()
    torch.testing.assert_close((x.grad, s.grad), want, rtol=1e-14, atol=0)
    fw, bw = graphs
    assert fw.count("iglu_np.iglu.default") == 1 and fw.count("iglu_np.gelu.default") == 1
    assert bw.count("iglu_np.iglu_backward.default") == 1
    assert bw.count("iglu_np.gelu_backward.default") == 1
    assert not [t for t in fw + bw if t.startswith("aten.atan")]  # not decomposed


@pytest.mark.slow
# torch's inductor itself (torch 2.13) uses torch.jit.script_method, which warns.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:Guards may run slower:RuntimeWarning")
def test_torch_compile_fullgraph_with_inductor():
    """Inductor compiles the rest of the graph around the ops (~20 s on 2 cores)."""
    f, x, s, want = _compile_case()
    torch._dynamo.reset()
    cf = torch.compile(f, fullgraph=True)
    cf(x, s).backward()
    torch.testing.assert_close((x.grad, s.grad), want, rtol=1e-14, atol=0)


# ------------------------------------------------------------------ import, GPU
def test_import_iglu_np_does_not_import_torch():
    code = (
        "import sys, iglu_np; iglu_np.iglu(1.0); "
        "assert 'torch' not in sys.modules and 'iglu_np.torch' not in sys.modules"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_import_without_torch_names_the_extra():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "try:\n    import iglu_np.torch\nexcept ImportError as e:\n    print(e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "pip install '.[torch]'" in r.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_cuda_tensors_match_the_cpu_on_a_side_stream(dtype):
    """The CuPy kernels run on torch's current stream: a side stream's work is ordered."""
    pytest.importorskip("cupy", reason="CUDA tensors run on the CuPy kernels")
    import contextlib

    g = torch.Generator().manual_seed(5)
    xh = torch.randn(4096, 3, generator=g).to(dtype)
    sh = torch.tensor([0.5, 1.0, 2.0], dtype=dtype)
    out = {}
    for dev in ("cpu", "cuda"):
        side = torch.cuda.Stream() if dev == "cuda" else None
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            x = (xh.to(dev) * 1).requires_grad_()  # made on the side stream
            s = sh.to(dev).requires_grad_()
            y = it.iglu(x, sigma=s)
            y.backward(torch.ones_like(y))
            res = [t.detach().cpu() for t in (y, x.grad, s.grad)]
        out[dev] = res
    assert [t.dtype for t in out["cuda"]] == [dtype] * 3
    # the parameter gradient sums 4096 terms, in another order on the GPU
    tol = {torch.float16: 1e-2, torch.bfloat16: 1e-2, torch.float32: 1e-5, torch.float64: 1e-12}[
        dtype
    ]
    for a, b in zip(out["cpu"], out["cuda"]):
        torch.testing.assert_close(b, a, rtol=tol, atol=tol)


def test_docstring_examples_run():
    import doctest

    r = doctest.testmod(it, optionflags=doctest.ELLIPSIS)
    assert r.attempted and not r.failed


def test_aliases_are_their_target_with_the_alias_parameters():
    # Hugging Face's names (iglu_np.ALIASES) as bridge functions, e.g. quick_gelu
    x = torch.linspace(-4, 4, 33, dtype=torch.float64, requires_grad=True)
    assert set(it.ALIASES) == set(iglu_np.ALIASES)
    for alias, (target, fixed) in iglu_np.ALIASES.items():
        fn = getattr(it, alias)
        assert fn is it.ALIASES[alias]
        y = fn(x)
        torch.testing.assert_close(y, it.FUNCTIONS[target](x, **fixed), rtol=0, atol=0)
        want = getattr(iglu_np, alias)(x.detach().numpy())
        np.testing.assert_array_equal(y.detach().numpy(), want)
    b = torch.tensor(1.702, dtype=torch.float64, requires_grad=True)
    it.quick_gelu(x, beta=b).sum().backward()  # an alias parameter stays trainable
    want = iglu_np.swish.backward_params(x.detach().numpy(), np.ones(33), beta=1.702)["beta"]
    np.testing.assert_allclose(b.grad.item(), float(want), rtol=1e-12)
