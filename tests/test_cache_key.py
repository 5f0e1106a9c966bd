"""The on-disk kernel cache is keyed per activation (iglu_np.backends.cpu.ufuncs.kernel_hash):
an edit to one activation's file recompiles that activation (and its family in the same
file) alone; an edit to a helper recompiles the activations that use it."""

from pathlib import Path

import pytest

import iglu_np
from iglu_np.backends.cpu import ufuncs as cpu

PKG = Path(iglu_np.__file__).resolve().parent


def _edited(*rels):
    """A file reader that sees ``rels`` (package-relative) edited."""
    targets = {(PKG / r).resolve() for r in rels}

    def read(p):
        b = Path(p).read_bytes()
        return b + b"\n# edited\n" if Path(p).resolve() in targets else b

    return read


def _key(name, read=None, extra=()):
    return cpu.kernel_hash(iglu_np.get(name).spec, extra=extra, read=read)


def _changed(names, read, extra=()):
    return {n for n in names if _key(n, read, extra) != _key(n, None, extra)}


NAMES = ["iglu", "gelu", "gelu_tanh", "relu", "atlu", "silu", "elu"]


def test_key_is_stable_and_short():
    k = _key("iglu")
    assert k == _key("iglu") == _key("iglu", Path.read_bytes) and len(k) == 16
    int(k, 16)


def test_editing_one_activation_file_changes_only_its_keys():
    assert _changed(NAMES, _edited("activations/gelu.py")) == {"gelu"}
    assert _changed(NAMES, _edited("activations/gelu_tanh.py")) == {"gelu_tanh"}
    # helper modules of the folder key the activations whose kernels they hold
    assert _changed(NAMES, _edited("activations/_normal_cdf.py")) == {"gelu"}
    assert _changed(NAMES, _edited("activations/_double_word.py")) == {"gelu", "gelu_tanh"}
    assert _changed(NAMES, _edited("activations/relu.py")) == {"relu"}
    # the trainer, the CLI, the GPU backends, the public API, the dispatcher, parameter
    # validation and the CPU backend's choices: no kernel recompiles
    from iglu_np.backends.cpu.loops import KEY_FILES as fast

    for rel in (
        "_api.py",
        "cli/__init__.py",
        "nn/autodiff.py",
        "backends/cuda/numba_cuda/_run.py",
        "backends/codegen/cxx.py",
        "backends/__init__.py",
        "_params.py",
        "backends/cpu/backend.py",
        "backends/cpu/tiers.py",
    ):
        assert not _changed(NAMES, _edited(rel)), rel
        assert not _changed(NAMES, _edited(rel), fast), rel


def test_editing_a_helper_changes_the_keys_of_its_users():
    # _math.py: gelu uses horner/two_prod, iglu is_f32 (since #22); relu uses nothing from it
    ch = _changed(NAMES, _edited("_math.py"))
    assert {"gelu", "gelu_tanh", "iglu"} <= ch and "relu" not in ch
    # _vmath.py replaces math.* for kernels that call those (iglu: atan); relu calls only
    # math.isnan, which _vmath leaves to Numba
    ch = _changed(NAMES, _edited("_vmath.py"))
    assert "iglu" in ch and "relu" not in ch
    # atlu is built from iglu's kernels (another activation's module is a helper too)
    assert _changed(["atlu"], _edited("activations/iglu.py")) == {"atlu"}
    assert not _changed(["iglu"], _edited("activations/atlu.py"))


def test_generators_change_every_key():
    assert _changed(NAMES, _edited("backends/cpu/ufuncs.py")) == set(NAMES)
    assert _changed(NAMES, _edited("_spec.py")) == set(NAMES)
    # the loops' module and the source it compiles key the njit loops, not the ufuncs
    from iglu_np.backends.cpu.loops import KEY_FILES as fast

    for rel in ("backends/cpu/loops.py", "backends/cpu/loop_source.py"):
        assert _changed(NAMES, _edited(rel), fast) == set(NAMES), rel
        assert not _changed(NAMES, _edited(rel)), rel


def test_global_values_read_by_kernels_are_in_the_key(monkeypatch):
    from iglu_np.activations import _normal_cdf

    before = _key("gelu", Path.read_bytes)
    monkeypatch.setattr(_normal_cdf, "LN_64H", _normal_cdf.LN_64H * (1 + 2**-50))
    assert _key("gelu", Path.read_bytes) != before
    assert _key("iglu", Path.read_bytes) == _key("iglu")


def test_generated_module_files_carry_the_key():
    spec = iglu_np.get("relu").spec
    assert cpu.kernel_hash(spec) in cpu._module(spec).__file__
    from iglu_np.backends.cpu import loops as cpu_fast

    assert cpu.kernel_hash(spec, extra=cpu_fast.KEY_FILES) in cpu_fast._module(spec).__file__


@pytest.mark.parametrize("name", list(iglu_np.ACTIVATIONS))
def test_every_activation_key_names_its_spec_file(name):
    spec = iglu_np.get(name).spec
    files, _ = cpu.kernel_sources(spec)
    import sys

    assert Path(sys.modules[spec.module].__file__).resolve() in files


def test_kernels_without_a_source_file_are_keyed_on_their_code():
    from iglu_np._spec import ActivationSpec, kernel

    def make(src):
        ns = {"kernel": kernel, "math": __import__("math")}
        exec(compile(src, "<string>", "exec"), ns)
        a = iglu_np.get("relu").spec
        return ActivationSpec(
            **{
                **a.__dict__,
                "name": "tmp",
                "f": ns["f"],
                "dx": ns["dx"],
                "dparams": {},
                "module": "__no_such_module__",
            }
        )

    base = "@kernel\ndef f(x):\n    return x * {}\n@kernel\ndef dx(x):\n    return x * 0.0 + {}\n"
    k1 = cpu.kernel_hash(make(base.format(2.0, 2.0)), read=Path.read_bytes)
    k2 = cpu.kernel_hash(make(base.format(3.0, 3.0)), read=Path.read_bytes)
    k1b = cpu.kernel_hash(make(base.format(2.0, 2.0)), read=Path.read_bytes)
    assert k1 != k2 and k1 == k1b


def test_key_follows_the_loaded_code_not_only_the_file():
    """A process that imported a module before it was edited compiles the old code: its
    key must differ from the edited file's (keyed by the file alone, a test run during an
    edit would store stale machine code under the new key)."""
    import dataclasses
    import types

    from iglu_np.backends.cpu import ufuncs as cpu

    spec = iglu_np.get("iglu").spec
    f = spec.dx
    code = f.__code__
    consts = tuple(0.25 if c == 0.5 else c for c in code.co_consts)
    assert consts != code.co_consts, "iglu_dx has no 0.5 constant to change"
    edited = types.FunctionType(code.replace(co_consts=consts), f.__globals__, f.__name__)
    assert cpu._code_file(edited) == cpu._code_file(f)  # the same file on disk
    same_files = lambda p: p.read_bytes()  # noqa: E731 (bypasses the memo)
    k_loaded = cpu.kernel_hash(spec, read=same_files)
    k_edited = cpu.kernel_hash(dataclasses.replace(spec, dx=edited), read=same_files)
    assert k_loaded != k_edited


def test_a_new_key_prunes_the_stale_keys_of_its_module_only(tmp_path, monkeypatch):
    import os
    import time

    from iglu_np.backends.cpu import ufuncs as cpu

    monkeypatch.setitem(cpu._state, "dir", tmp_path)
    (tmp_path / "__pycache__").mkdir()
    old = time.time() - cpu.PRUNE_AFTER_S - 3600

    def touch(name, mtime):
        p = tmp_path / name
        p.write_text("x")
        os.utime(p, (mtime, mtime))
        return p

    h0, h1, h2 = "0" * 16, "1" * 16, "2" * 16
    stale = [
        touch(f"relu_{h0}.py", old),
        touch(f"__pycache__/relu_{h0}.run_fwd-9.py311.nbi", old),
        touch(f"__pycache__/relu_{h0}.run_fwd-9.py311.1.nbc", old),
    ]
    h3 = "3" * 16
    kept = [
        touch(f"relu_{h1}.py", time.time()),  # another key, written recently
        # one file of a key written recently keeps the whole key
        touch(f"relu_{h3}.py", old),
        touch(f"__pycache__/relu_{h3}.f-1.nbi", time.time()),
        touch(f"relu_a_{h0}.py", old),
        touch(f"fast_relu_{h0}.py", old),
    ]  # other modules
    path = cpu.write_generated("relu", h2, "src = 1\n")
    assert path.read_text() == "src = 1\n"
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in kept)
    # an existing key prunes nothing
    again = touch(f"relu_{h0}.py", old)
    cpu.write_generated("relu", h2, "src = 1\n")
    assert again.exists()


_SERIAL_THEN_PARALLEL = r"""
import sys, numba, numpy as np
from iglu_np.backends.cpu import loops as cpu_fast
stage = sys.argv[1]
x = np.linspace(-3, 3, 1 << 17).astype(np.float32)
o = np.empty_like(x)
k = cpu_fast.kernel("relu", "fwd", parallel=(stage == "parallel"))
k(x, o, stage == "parallel")
if stage == "parallel":
    sig = k.signatures[0]
    # a parfor build calls Numba's gufunc scheduler; the single-thread build has no such call
    print("PARFOR" if "do_scheduling" in k.inspect_asm(sig) else "SERIAL")
"""


def test_serial_and_parallel_builds_do_not_share_a_cache_entry(tmp_path):
    """Numba's cache key has no `parallel` flag: under one name the single-thread build of
    run_<kind>, saved first, would be loaded as the threaded one by the next process (a 2x
    slower 'threaded' gelu). Serial build in one process, parallel in the next, one cache
    directory."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, IGLU_NP_CACHE_DIR=str(tmp_path))
    env.pop("IGLU_NP_FAST_NOCACHE", None)
    for stage in ("serial", "parallel"):
        r = subprocess.run(
            [sys.executable, "-c", _SERIAL_THEN_PARALLEL, stage],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "PARFOR"
    idx = sorted(p.name for p in tmp_path.rglob("fast_relu_*run_fwd*.nbi"))
    assert len(idx) == 2 and any("_serial" in n for n in idx), idx
