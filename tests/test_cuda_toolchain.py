"""The Numba CUDA toolchain choice, without a GPU: numba-cuda-mlir where installed (or
asked for), numba-cuda otherwise; numba-cuda on a numpy without ``row_stack`` (numpy >= 2.5;
on an older numpy the attribute is deleted in a subprocess) gives a clear error naming the
fix, in ``iglu-np info`` and at the first call, never an AttributeError from inside
numba-cuda."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from iglu_np.backends.cuda import toolchain as tc


def test_choice_follows_the_environment_and_what_is_installed(monkeypatch):
    monkeypatch.delenv("IGLU_NP_CUDA_TOOLCHAIN", raising=False)
    monkeypatch.setattr(tc, "_installed", lambda m: m == "numba_cuda_mlir")
    assert tc.choose() == tc.MLIR
    monkeypatch.setattr(tc, "_installed", lambda m: m == "numba_cuda")
    assert tc.choose() == tc.NUMBA_CUDA
    monkeypatch.setenv("IGLU_NP_CUDA_TOOLCHAIN", "numba-cuda-mlir")
    assert tc.choose() == tc.MLIR
    assert "numba-cuda-mlir is not installed" in tc.problem()
    with pytest.raises(RuntimeError, match=r"\.\[cuda13\]"):
        tc.check()
    monkeypatch.setenv("IGLU_NP_CUDA_TOOLCHAIN", "cuda-thing")
    with pytest.raises(ValueError, match="IGLU_NP_CUDA_TOOLCHAIN"):
        tc.choose()


def test_the_simulator_takes_numba_cuda_where_both_are_installed(monkeypatch):
    monkeypatch.delenv("IGLU_NP_CUDA_TOOLCHAIN", raising=False)
    monkeypatch.setattr(tc, "_installed", lambda m: True)
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    assert tc.choose() == tc.NUMBA_CUDA
    monkeypatch.setattr(tc, "_installed", lambda m: m == "numba_cuda_mlir")
    assert tc.choose() == tc.MLIR  # no numba-cuda: mlir (whose missing simulator then says so)
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM")
    monkeypatch.setattr(tc, "_installed", lambda m: True)
    assert tc.choose() == tc.MLIR


def test_numba_cuda_is_usable_exactly_where_numpy_has_row_stack(monkeypatch):
    pytest.importorskip("numba_cuda")
    monkeypatch.setenv("IGLU_NP_CUDA_TOOLCHAIN", "numba-cuda")
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    if hasattr(np, "row_stack"):  # numpy < 2.5
        assert tc.problem() is None
    else:
        why = tc.problem()
        assert why and "row_stack" in why and "numba-cuda-mlir" in why, why


_CHILD = textwrap.dedent("""
    import numpy, sys
    if hasattr(numpy, "row_stack"):  # what numpy 2.5 removed (from __all__ too)
        del numpy.row_stack
        numpy.__all__ = [n for n in numpy.__all__ if n != "row_stack"]
    import iglu_np
    from iglu_np.cli.info import backend_status
    ok, why = backend_status()["numba_cuda"]
    print("INFO", ok, why)
    try:
        iglu_np.iglu(numpy.ones(3, numpy.float32), backend="numba_cuda")
    except Exception as e:
        print("CALL", type(e).__name__, e)
""")


def test_numpy_without_row_stack_gives_a_clear_error():
    pytest.importorskip("numba_cuda")
    env = {"IGLU_NP_CUDA_TOOLCHAIN": "numba-cuda", "PATH": "/usr/bin:/bin"}
    import os

    env = dict(os.environ, **env)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    r = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=300
    )
    out = r.stdout
    assert r.returncode == 0, r.stderr
    info = [ln for ln in out.splitlines() if ln.startswith("INFO")][0]
    call = [ln for ln in out.splitlines() if ln.startswith("CALL")][0]
    for line in (info, call):
        assert "row_stack" in line and "numba-cuda-mlir" in line and ".[cuda13]" in line, line
    assert info.startswith("INFO False") and call.startswith("CALL RuntimeError"), (info, call)
    assert "AttributeError" not in out
