"""``iglu-np warmup`` builds the kernel cache ahead of the first call, ``iglu-np cache``
and ``iglu-np info`` say where it is and how big, ``iglu-np cache --clear`` empties it.
A cache built by warmup and then read read-only (another user, an image layer) is used
as it is: no compile, no warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from .compile_counter import COUNT_COMPILES
from .test_cache_heal import _read_only_runner, _writable_again


def _env(cache, home):
    env = dict(os.environ, IGLU_NP_CACHE_DIR=str(cache), HOME=str(home))
    for k in ("XDG_CACHE_HOME", "NUMBA_CACHE_DIR", "IGLU_NP_FAST_NOCACHE"):
        env.pop(k, None)
    return env


def _cli(env, *argv, wrap=None):
    cmd = [sys.executable, "-m", "iglu_np", *argv]
    return subprocess.run(
        wrap(cmd) if wrap else cmd, env=env, capture_output=True, text=True, timeout=900
    )


# Every call a user makes after warmup: large ones on all threads, backward_all, then
# small calls past the ufunc tier (the loop then loads); counted compiles must be 0.
USER = (
    textwrap.dedent("""
    import json, warnings
    import numpy as np
""")
    + COUNT_COMPILES
    + textwrap.dedent("""
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        import iglu_np
        from iglu_np.backends.cpu import backend as cpu_backend
        from iglu_np.backends.cpu import loops as cpu_fast
        cpu_backend.set_threshold(1 << 16)
        a = iglu_np.leaky_relu
        small = np.linspace(-3, 3, 10, dtype=np.float32)
        big = np.linspace(-3, 3, 1 << 17, dtype=np.float32)
        for _ in range(3):
            a(big), a.backward(big, big), a.backward_all(big, big), a.backward_params(big, big)
        for _ in range(12):  # after large calls (Numba loaded): past the tier, the loop loads
            a(small)
        loop = ("leaky_relu", "fwd", "f", None) in cpu_fast.plans
    print(json.dumps({"compiles": n[0], "warnings": [str(w.message) for w in caught],
                      "small_calls_reach_the_loop": loop}))
""")
)


def test_warmup_builds_a_cache_that_a_read_only_reader_uses(tmp_path):
    cache, home = tmp_path / "image", tmp_path / "home"
    env = _env(cache, home)
    r = _cli(env, "warmup", "leaky_relu", "--dtype", "float32")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[1/1] leaky_relu" in r.stderr  # not a terminal: a plain line per activation
    assert str(cache) in r.stdout
    ro = _read_only_runner(tmp_path, cache)
    try:
        cmd = [sys.executable, "-c", USER]
        u = subprocess.run(
            ro(cmd),
            env=_env(cache, tmp_path / "reader"),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert u.returncode == 0, u.stderr[-3000:]
        got = json.loads(u.stdout.strip().splitlines()[-1])
        assert got == {"compiles": 0, "warnings": [], "small_calls_reach_the_loop": True}
        info = _cli(env, "cache", "--json", wrap=ro)
        assert info.returncode == 0, info.stderr
        assert json.loads(info.stdout)["writable"] is False
    finally:
        _writable_again(cache)


GATED_USER = COUNT_COMPILES + textwrap.dedent("""
    import json
    import numpy as np
    import iglu_np
    from iglu_np.backends.cpu import backend as cpu_backend
    cpu_backend.set_threshold(1 << 16)
    x = np.linspace(-3, 3, 1 << 18, dtype=np.float32).reshape(2, -1)
    go = np.ones((2, x.shape[1] // 2), np.float32)
    for _ in range(3):  # the guard's one-thread call, then threaded ones
        for lay in ("halves", "interleaved"):
            iglu_np.leaky_relu.glu(x, layout=lay)
            iglu_np.leaky_relu.glu.backward_all(x, go, layout=lay)
        iglu_np.leaky_relu.glu(x, x)
    print(json.dumps({"compiles": n[0]}))
""")


@pytest.mark.slow
def test_warmup_gated_compiles_what_the_gated_calls_run(tmp_path):
    env = _env(tmp_path / "c", tmp_path / "h")
    r = _cli(env, "warmup", "leaky_relu", "--dtype", "float32", "--gated")
    assert r.returncode == 0, r.stderr[-3000:]
    u = subprocess.run(
        [sys.executable, "-c", GATED_USER], env=env, capture_output=True, text=True, timeout=600
    )
    assert u.returncode == 0, u.stderr[-3000:]
    assert json.loads(u.stdout.strip().splitlines()[-1]) == {"compiles": 0}


JAX_USER = COUNT_COMPILES + textwrap.dedent("""
    import json
    import jax, jax.numpy as jnp
    import iglu_np.jax as ij
    x = jnp.linspace(-3, 3, 4096, dtype=jnp.float32).reshape(2, -1)
    f, g = ij.leaky_relu, ij.leaky_relu_glu
    calls = [
        (jax.jit(f), x),
        (jax.jit(jax.grad(lambda v: f(v).sum())), x),
        (jax.jit(jax.grad(lambda a: f(x, negative_slope=a).sum())), jnp.float32(0.1)),
        (jax.jit(g), x),
        (jax.jit(jax.grad(lambda v: g(v).sum())), x),
        (jax.jit(lambda v: g(v, v)), x),
    ]
    for fn, arg in calls:
        jax.block_until_ready(fn(arg))
    print(json.dumps({"compiles": n[0]}))
""")


@pytest.mark.slow
def test_warmup_jax_compiles_what_the_jax_calls_run(tmp_path):
    env = _env(tmp_path / "c", tmp_path / "h")
    r = _cli(env, "warmup", "leaky_relu", "--dtype", "float32", "--gated", "--jax")
    assert r.returncode == 0, r.stderr[-3000:]
    u = subprocess.run(
        [sys.executable, "-c", JAX_USER], env=env, capture_output=True, text=True, timeout=600
    )
    assert u.returncode == 0, u.stderr[-3000:]
    assert json.loads(u.stdout.strip().splitlines()[-1]) == {"compiles": 0}


def test_warmup_rejects_an_unknown_activation(tmp_path):
    r = _cli(_env(tmp_path / "c", tmp_path / "h"), "warmup", "igul")
    assert r.returncode == 2 and "did you mean 'iglu'" in r.stderr


def test_cache_command_and_info_say_where_the_cache_is_and_clear_it(tmp_path):
    cache = tmp_path / "cache"
    env = _env(cache, tmp_path / "home")
    r = subprocess.run(
        [sys.executable, "-c", "import numpy as np, iglu_np; iglu_np.relu(np.ones(3))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(_cli(env, "cache", "--json").stdout)
    assert d["directory"] == str(cache) and d["files"] > 0 and d["bytes"] > 0
    assert d["clear"] == "iglu-np cache --clear"
    text = _cli(env, "cache").stdout
    assert str(cache) in text and "MiB" in text and "iglu-np cache --clear" in text
    info = _cli(env, "info")
    assert (
        info.returncode == 0
        and str(cache) in info.stdout
        and "iglu-np cache --clear" in info.stdout
    )
    assert json.loads(_cli(env, "info", "--json").stdout)["cache"]["directory"] == str(cache)
    cleared = _cli(env, "cache", "--clear")
    assert cleared.returncode == 0 and f"deleted {d['files']} files" in cleared.stdout
    assert not (cache / "cpu").exists()
    assert cache.exists()  # the directory the user named stays; only iglu_np's files go
    assert json.loads(_cli(env, "cache", "--json").stdout)["files"] == 0
