"""The MLP estimators on a device array module, verified without a GPU.

A numpy-backed stand-in for CuPy (``_FakeCupy``: its arrays report the module ``cupy``,
refuse implicit conversion to numpy as CuPy's do, and count every host<->device
transfer: ``asarray`` of a host array, a host array used as an index or operand,
``get``/``asnumpy``, ``float``/``bool``/``int``/``item``/``tolist``) runs the real
estimators' fit loop. The activation op is routed to the CPU kernels (the device
kernels are tested elsewhere). Checked here:

* the transfers of a fit do not depend on the number of steps per epoch (none per step;
  a fixed number per epoch and per fit), with the L2 term, gradient clipping and early
  stopping on, for the classifier and the regressor;
* the device loop computes the CPU loop's numbers: the same weights bit for bit;
* divergence is still reported naming the first bad step, and the epoch is rolled back.

On a real GPU (``-m gpu``): fitting on CuPy arrays matches the CPU fit within float32
tolerance.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::iglu_np.nn.estimator.ConvergenceWarning")

from iglu_np.nn import MLPClassifier, MLPRegressor  # noqa: E402
from iglu_np.nn import autodiff as ad  # noqa: E402


class _Transfers:
    def __init__(self):
        self.h2d = self.d2h = 0

    def as_dict(self):
        return {"h2d": self.h2d, "d2h": self.d2h}


_COUNT = _Transfers()


def _unwrap(v):
    if isinstance(v, _FakeArray):
        return v.a
    if isinstance(v, (list, tuple)):
        return type(v)(_unwrap(x) for x in v)
    if isinstance(v, dict):
        return {k: _unwrap(x) for k, x in v.items()}
    return v


def _host_operand(v):
    """A host array handed to a device operation: an implicit copy to the device."""
    if isinstance(v, np.ndarray) and v.ndim > 0:
        _COUNT.h2d += 1
    elif isinstance(v, (list, tuple)):
        for x in v:
            _host_operand(x)


def _wrap(v):
    if isinstance(v, (np.ndarray, np.generic)):
        return _FakeArray(np.asarray(v))
    if isinstance(v, tuple):
        return tuple(_wrap(x) for x in v)
    return v


class _FakeArray:
    """A device array over a numpy array (reductions give 0-d arrays, as CuPy's)."""

    __module__ = "cupy"
    __hash__ = None

    def __init__(self, a):
        self.a = a

    # metadata: no transfer
    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)
    ndim = property(lambda self: self.a.ndim)
    size = property(lambda self: self.a.size)
    T = property(lambda self: _FakeArray(self.a.T))

    def __len__(self):
        return len(self.a)

    # transfers to the host
    def get(self):
        _COUNT.d2h += 1
        return self.a.copy()

    def _scalar(self, f):
        _COUNT.d2h += 1
        return f(self.a)

    def __float__(self):
        return self._scalar(float)

    def __int__(self):
        return self._scalar(int)

    def __bool__(self):
        return self._scalar(bool)

    def item(self):
        return self._scalar(lambda a: a.item())

    def tolist(self):
        return self._scalar(lambda a: a.tolist())

    def __array__(self, *args, **kwargs):
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed (the stand-in, as CuPy)"
        )

    def __getitem__(self, key):
        _host_operand(key if isinstance(key, tuple) else (key,))
        return _wrap(self.a[_unwrap(key)])

    def __setitem__(self, key, value):
        _host_operand(key if isinstance(key, tuple) else (key,))
        _host_operand(value)
        self.a[_unwrap(key)] = _unwrap(value)

    def __getattr__(self, name):  # methods: sum, max, mean, astype, reshape, copy, all, ...
        attr = getattr(self.a, name)
        if not callable(attr):
            return _wrap(attr)

        def method(*args, **kwargs):
            _host_operand(args)
            return _wrap(attr(*_unwrap(args), **_unwrap(kwargs)))

        return method


def _op(name):
    def f(self, *others):
        _host_operand(others)
        r = getattr(self.a, name)(*_unwrap(others))
        return r if r is NotImplemented else _wrap(r)

    return f


def _iop(name):
    def f(self, other):
        _host_operand((other,))
        getattr(self.a, name)(_unwrap(other))
        return self

    return f


for _n in ("add", "sub", "mul", "truediv", "floordiv", "pow", "matmul", "mod", "and", "or", "xor"):
    setattr(_FakeArray, f"__{_n}__", _op(f"__{_n}__"))
    setattr(_FakeArray, f"__r{_n}__", _op(f"__r{_n}__"))
    setattr(_FakeArray, f"__i{_n}__", _iop(f"__i{_n}__"))
for _n in ("neg", "pos", "abs", "invert", "lt", "le", "gt", "ge", "eq", "ne"):
    setattr(_FakeArray, f"__{_n}__", _op(f"__{_n}__"))


def _fake_cupy():
    mod = types.ModuleType("cupy")
    mod.ndarray = _FakeArray

    def asarray(a, dtype=None):
        if isinstance(a, _FakeArray):
            return _FakeArray(a.a if dtype is None else a.a.astype(dtype, copy=False))
        _COUNT.h2d += 1
        return _FakeArray(np.array(a, dtype=dtype))

    def asnumpy(a):
        return a.get() if isinstance(a, _FakeArray) else np.asarray(a)

    mod.asarray, mod.array, mod.asnumpy = asarray, asarray, asnumpy

    def getattr_(name):
        attr = getattr(np, name)
        if isinstance(attr, type) or not callable(attr):
            return attr  # dtypes and constants

        def fn(*args, **kwargs):
            _host_operand(args)
            return _wrap(attr(*_unwrap(args), **_unwrap(kwargs)))

        return fn

    mod.__getattr__ = getattr_
    return mod


@pytest.fixture
def device(monkeypatch):
    """The stand-in as ``cupy``, the activation op on the CPU kernels, counts reset."""
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    fwd, bwd = ad._Activation.forward, ad._Activation.backward

    def forward(self, x, *pvals, act, names, fixed):
        return _wrap(fwd(self, _unwrap(x), *_unwrap(pvals), act=act, names=names, fixed=fixed))

    def backward(self, g):
        return tuple(_wrap(r) for r in bwd(self, _unwrap(g)))

    monkeypatch.setattr(ad._Activation, "forward", forward)
    monkeypatch.setattr(ad._Activation, "backward", backward)
    _COUNT.h2d = _COUNT.d2h = 0
    return _COUNT


def _data(n=240, d=6, k=3, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=3.0, size=(k, d))
    y = rng.integers(0, k, n)
    X = (centers[y] + rng.normal(size=(n, d))).astype(np.float32)
    return X, y, (X @ rng.normal(size=d)).astype(np.float32)


_SETTINGS = dict(
    hidden_layer_sizes=(8,),
    random_state=0,
    alpha=1e-3,
    clip_grad_norm=1.0,
    early_stopping=True,
    n_iter_no_change=1000,
)


def _fit(cls, X, y, counts, **kw):
    counts.h2d = counts.d2h = 0
    est = cls(**dict(_SETTINGS, **kw)).fit(_FakeArray(X.copy()), y)
    return est, counts.as_dict()


@pytest.mark.parametrize("cls", [MLPClassifier, MLPRegressor], ids=lambda c: c.__name__)
def test_device_fit_transfers_do_not_grow_with_the_steps(device, cls):
    X, yc, yr = _data()
    y = yc if cls is MLPClassifier else yr
    few = _fit(cls, X, y, device, batch_size=108, max_iter=3)[1]  # 2 steps per epoch
    many = _fit(cls, X, y, device, batch_size=27, max_iter=3)[1]  # 8 steps per epoch
    assert few == many, (
        f"transfers grow with the steps per epoch: {few} (2 steps) vs {many} (8 steps)"
    )
    # the counter sees the per-epoch transfers (losses, validation score, epoch snapshot)
    longer = _fit(cls, X, y, device, batch_size=108, max_iter=6)[1]
    assert longer["d2h"] > few["d2h"], (few, longer)


@pytest.mark.parametrize("cls", [MLPClassifier, MLPRegressor], ids=lambda c: c.__name__)
def test_device_fit_computes_the_cpu_fit(device, cls):
    X, yc, yr = _data()
    y = yc if cls is MLPClassifier else yr
    kw = dict(batch_size=32, max_iter=4)
    dev, _ = _fit(cls, X, y, device, **kw)
    cpu = cls(**dict(_SETTINGS, **kw)).fit(X, y)
    assert dev.loss_curve_ == cpu.loss_curve_ and dev.validation_scores_ == cpu.validation_scores_
    for a, b in zip(dev.coefs_ + dev.intercepts_, cpu.coefs_ + cpu.intercepts_):
        np.testing.assert_array_equal(a, b)


def test_device_divergence_names_the_first_bad_step_and_rolls_back(device):
    X, y, _ = _data()
    est = MLPClassifier(
        hidden_layer_sizes=(8,),
        solver="sgd",
        learning_rate_init=1e10,
        momentum=0.0,
        random_state=0,
        batch_size=40,
        max_iter=3,
    )
    cpu = MLPClassifier(**est.get_params())
    # overflow on the way to the non-finite loss (the device epoch also runs on past the
    # bad step): numpy's floating-point warnings are not what is tested here
    with pytest.raises(FloatingPointError) as cpu_err, np.errstate(all="ignore"):
        cpu.fit(X, y)
    with pytest.raises(FloatingPointError) as dev_err, np.errstate(all="ignore"):
        est.fit(_FakeArray(X.copy()), y)
    assert str(dev_err.value) == str(cpu_err.value)
    assert est.t_ == cpu.t_ and est.n_iter_ == cpu.n_iter_
    for a, b in zip(est.coefs_, cpu.coefs_):
        np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
@pytest.mark.parametrize("cls", [MLPClassifier, MLPRegressor], ids=lambda c: c.__name__)
def test_cupy_fit_matches_the_cpu_fit(cls):
    cupy = pytest.importorskip("cupy")
    X, yc, yr = _data(n=600)
    y = yc if cls is MLPClassifier else yr
    kw = dict(_SETTINGS, hidden_layer_sizes=(32, 16), batch_size=64, max_iter=5)
    cpu = cls(**kw).fit(X, y)
    dev = cls(**kw).fit(cupy.asarray(X), y)
    assert isinstance(dev.model_.layers[0].weight.data, cupy.ndarray)
    assert len(dev.loss_curve_) == len(cpu.loss_curve_)
    np.testing.assert_allclose(dev.loss_curve_, cpu.loss_curve_, rtol=1e-4)
    for a, b in zip(dev.coefs_ + dev.intercepts_, cpu.coefs_ + cpu.intercepts_):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
    pred = dev.predict(cupy.asarray(X))
    want = cpu.predict(X)
    if cls is MLPClassifier:
        assert np.mean(np.asarray(pred) == want) > 0.99
    else:
        np.testing.assert_allclose(cupy.asnumpy(pred), want, rtol=1e-3, atol=1e-3)


def test_bench_trainer_epochs_runs_on_the_stand_in(device):
    """The GPU bench's trainer row, its plumbing checked on the stand-in (the torch half
    needs a GPU: it is left out here)."""
    from iglu_np.cli import bench_gpu

    fake = sys.modules["cupy"]
    gen = np.random.default_rng(0)
    fake.random = types.SimpleNamespace(
        default_rng=lambda seed: types.SimpleNamespace(
            standard_normal=lambda shape, dtype: _FakeArray(
                gen.standard_normal(shape).astype(dtype)
            )
        )
    )
    fake.cuda = types.SimpleNamespace(
        Stream=types.SimpleNamespace(null=types.SimpleNamespace(synchronize=lambda: None))
    )
    r = bench_gpu.trainer_epochs(
        fake, None, n=512, features=8, hidden=(16,), classes=3, batch=128, epochs=2
    )
    assert r["steps_per_epoch"] == 4 and r["iglu_np_epoch_s"] > 0 and "torch_epoch_s" not in r
    assert r["summary"].startswith(
        "Trainer: MLPClassifier 8-16-3 (gelu, Adam, batch 128, 512 samples, 4 steps)"
    )
    data = {
        "device": "Test GPU",
        "cupy": "14",
        "numba_cuda": "n/a",
        "torch": None,
        "jax": None,
        "size": 1024,
        "rows": [],
        "trainer": r,
    }
    assert bench_gpu.markdown(data).endswith(r["summary"])
