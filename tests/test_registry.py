"""Completeness: every activation the project promises is registered, and every
registered activation carries what the generators and tests need."""

import subprocess
import sys

import pytest

import iglu_np

PROMISED = """
z_gate z_approx iglu iglu_approx gelu_a relu gelu gelu_tanh silu celu elu hardshrink
hardsigmoid hardswish hardtanh leaky_relu mish prelu selu sigmoid softplus softshrink
softsign squareplus tanh tanhshrink identity relu2 xielu xiprelu xsilu xatlu atlu
""".split()


def test_every_promised_activation_is_registered():
    missing = sorted(set(PROMISED) - set(iglu_np.ACTIVATIONS))
    assert not missing, f"not registered: {missing}"


@pytest.mark.parametrize("name", list(iglu_np.ACTIVATIONS))
def test_spec_is_complete(name):
    spec = iglu_np.ACTIVATIONS[name].spec
    assert spec.summary and spec.formula and spec.example
    assert callable(spec.f) and callable(spec.dx)
    assert callable(spec.ref) and callable(spec.ref_dx)
    for p in spec.params:
        assert callable(spec.dparams[p.name]) and callable(spec.ref_dparams[p.name])
        assert p.doc, f"{name}.{p.name} needs a doc"
        assert p.contains(p.default), f"{name}.{p.name} default outside its domain"
    assert spec.module.startswith("iglu_np.activations.")
    assert hasattr(iglu_np, name) and getattr(iglu_np, name).spec is spec


def test_import_is_light():
    """`import iglu_np` compiles nothing and imports neither numba nor mpmath nor a GPU
    stack: kernels compile lazily on first use."""
    code = (
        "import sys, iglu_np; "
        "bad = [m for m in ('numba', 'mpmath', 'cupy', 'numba.cuda', 'dask', 'torch') "
        "if m in sys.modules]; "
        "assert not bad, bad; print(len(iglu_np.ACTIVATIONS))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == len(iglu_np.ACTIVATIONS)


def test_cli_info_lists_every_activation():
    r = subprocess.run(
        [sys.executable, "-m", "iglu_np", "info", "--json"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    import json

    info = json.loads(r.stdout)
    assert set(info["activations"]) == set(iglu_np.ACTIVATIONS)
    assert info["backends"]["cpu"]["usable"] is True


def test_cache_dir_probe_survives_concurrent_starts(tmp_path, monkeypatch):
    # Processes (threads here) starting together must all get the configured cache
    # directory: with one shared probe file name, one could delete another's probe and
    # send it to a cold fallback directory (fails with that name within a few rounds).
    import threading

    from iglu_np.backends.cpu import ufuncs as cpu

    monkeypatch.setenv("IGLU_NP_CACHE_DIR", str(tmp_path))
    saved = cpu._state.pop("dir", None)
    try:
        for _ in range(30):
            got, errs = [], []
            barrier = threading.Barrier(12)

            def start():
                barrier.wait()
                try:
                    cpu._state.pop("dir", None)
                    got.append(cpu._gen_dir())
                except Exception as e:  # noqa: BLE001
                    errs.append(e)

            ts = [threading.Thread(target=start) for _ in range(12)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            assert not errs
            assert set(got) == {tmp_path / "cpu"}
    finally:
        cpu._state.pop("dir", None)
        if saved is not None:
            cpu._state["dir"] = saved


def test_torch_equivalents_agree_at_default_parameters():
    """``define(torch=...)`` names the torch.nn.functional function (or gives the torch
    expression) ``iglu-np bench`` times beside ours: it must compute the same activation
    at the default parameters."""
    import numpy as np

    named = {n: a.spec.torch for n, a in iglu_np.ACTIVATIONS.items() if a.spec.torch}
    assert {"relu", "gelu", "silu", "softplus", "iglu"} <= set(named)
    torch = pytest.importorskip(
        "torch", reason="the comparison with torch needs torch (CI installs it)"
    )
    F = torch.nn.functional
    x = np.linspace(-8, 8, 1001)
    for name, op in named.items():
        if callable(op):
            fn = lambda t, op=op: op(torch, t)  # noqa: E731
        else:
            assert hasattr(F, op), f"{name}: torch.nn.functional.{op} does not exist"
            fn = getattr(F, op)
        want = fn(torch.tensor(x, dtype=torch.float64)).numpy()
        np.testing.assert_allclose(iglu_np.get(name)(x), want, rtol=1e-12, atol=1e-15, err_msg=name)


def test_define_rejects_unknown_keywords():
    from iglu_np._spec import define

    with pytest.raises(TypeError, match="sumary"):
        define("not_registered", sumary="typo", formula="", f=abs, dx=abs, ref=abs, ref_dx=abs)
    assert "not_registered" not in iglu_np.ACTIVATIONS


def test_define_rejects_a_check_with_other_parameters():
    """Each call's validation passes ``check`` the parameters positionally, in declaration
    order: a check declared with other names or another order is refused up front."""
    from iglu_np._spec import Param, define

    ps = [Param("lo", -1.0, "lower"), Param("hi", 1.0, "upper")]
    kw = dict(
        summary="s",
        formula="",
        params=ps,
        f=lambda x, lo, hi: x,
        dx=lambda x, lo, hi: x,
        dparams={"lo": lambda x, lo, hi: x, "hi": lambda x, lo, hi: x},
        ref=abs,
        ref_dx=abs,
        ref_dparams={"lo": abs, "hi": abs},
    )
    with pytest.raises(
        ValueError, match=r"check's parameters \['hi', 'lo'\] must be \['lo', 'hi'\]"
    ):
        define("not_registered_check", check=lambda hi, lo: None, **kw)
    assert "not_registered_check" not in iglu_np.ACTIVATIONS
