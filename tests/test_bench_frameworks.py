"""``iglu-np bench --frameworks`` and the peers' forms it times (:mod:`iglu_np.cli.references`)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import iglu_np
from iglu_np.cli import bench_frameworks, references

X = np.linspace(-6.0, 6.0, 97, dtype=np.float32)


def _with(attr):
    return [n for n in iglu_np.ACTIVATIONS if getattr(iglu_np.get(n).spec, attr)]


@pytest.mark.parametrize("name", _with("torch"))
def test_the_torch_form_computes_the_activation_at_its_defaults(name):
    torch = pytest.importorskip("torch")
    f = references.torch_function(torch, iglu_np.get(name))
    got = f(torch.from_numpy(X.copy())).numpy()
    np.testing.assert_allclose(got, iglu_np.get(name)(X), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", _with("jax"))
def test_the_jax_form_computes_the_activation_at_its_defaults(name):
    jax = pytest.importorskip("jax")
    f = references.jax_function(jax, iglu_np.get(name))
    got = np.asarray(f(jax.numpy.asarray(X)))
    np.testing.assert_allclose(got, iglu_np.get(name)(X), rtol=2e-6, atol=2e-6)


def test_frameworks_report_times_ours_and_native_for_each_pass():
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    pytest.importorskip("iglu_np.jax")
    data = bench_frameworks.run(["gelu", "iglu"], sizes=[256], repeats=1, min_time=0.0)
    assert data["frameworks"] == ["torch", "jax"]
    got = [(r["framework"], r["name"], r["pass"]) for r in data["rows"]]
    assert got == [
        (fw, name, pas) for fw in ("torch", "jax") for name in ("gelu", "iglu")
        for pas in ("fwd", "fwd+bwd")
    ]  # fmt: skip
    for r in data["rows"]:
        assert r["native_x"] == pytest.approx(r["native_s"] / r["ours_s"])
    text = bench_frameworks.markdown(data)
    assert "| jax | iglu | 256 | fwd+bwd |" in text
    assert "Quiet machine" in text or "NOT quiet" in text


def test_frameworks_report_skips_a_framework_and_says_when_none_is_left():
    data = bench_frameworks.run(
        ["silu"], sizes=[64], repeats=1, min_time=0.0, torch=False, jax=False
    )
    assert data["rows"] == [] and "neither torch nor JAX" in bench_frameworks.markdown(data)


def test_frameworks_cli_refuses_other_dtypes():
    r = subprocess.run(
        [sys.executable, "-m", "iglu_np", "bench", "--frameworks", "--dtype", "float64"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "float32 only" in r.stderr
