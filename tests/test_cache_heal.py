"""A damaged kernel cache heals: each way a cache file can be spoiled (what a full disk, a
killed writer or a copied image leaves) is applied to a cache built by one process, and the
next process must compute the same bits with at most one CacheWarning naming the
directory, and leave the entry rebuilt (the process after it neither warns nor
compiles). A cache on a read-only file system is read without compiling or warning."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .compile_counter import COUNT_COMPILES

# The child computes relu through its ufunc (small arrays, both dtypes) and through the
# single-thread loop (10,000 elements), and counts Numba compiles (each compile_extra,
# the entry point of every compile; a cache hit never reaches it).
CHILD = (
    textwrap.dedent("""
    import hashlib, json, sys, warnings
    import numpy as np
""")
    + COUNT_COMPILES
    + textwrap.dedent("""
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        import iglu_np
        names = sys.argv[1:] or ["relu"]
        out = []
        for name in names:
            act = iglu_np.get(name)
            for dt in (np.float32, np.float64):
                out.append(act(np.linspace(-5, 5, 101).astype(dt)))
            out.append(act(np.linspace(-5, 5, 10_000).astype(np.float32)))
    print(json.dumps({
        "bits": hashlib.sha256(b"".join(a.tobytes() for a in out)).hexdigest(),
        "compiles": n[0],
        "warnings": [(type(w.message).__name__, str(w.message)) for w in caught],
    }))
""")
)


def _env(cache, home):
    env = dict(os.environ, IGLU_NP_CACHE_DIR=str(cache), HOME=str(home))
    for k in ("XDG_CACHE_HOME", "NUMBA_CACHE_DIR", "IGLU_NP_FAST_NOCACHE"):
        env.pop(k, None)
    return env


def _child(cache, home, *names, wrap=None):
    import json

    cmd = [sys.executable, "-c", CHILD, *names]
    if wrap is not None:
        cmd = wrap(cmd)
    r = subprocess.run(cmd, env=_env(cache, home), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """(cache built by one process, what a process reading it computes)."""
    base = tmp_path_factory.mktemp("heal")
    cache, home = base / "clean", base / "home"
    first = _child(cache, home)
    assert first["compiles"] > 0 and first["warnings"] == []
    again = _child(cache, home)
    assert again == {**first, "compiles": 0}, "a clean cache must load without compiling"
    return cache, home, again


def _files(cache: Path, what: str) -> list:
    d = cache / "cpu"
    pat = {
        "nbi": "__pycache__/*relu_*.nbi",
        "nbc": "__pycache__/*relu_*.nbc",
        "py": "*relu_*.py",
        "ufunc": "relu_*.ufunc",
    }[what]
    files = sorted(d.glob(pat))
    assert files, f"no {what} file of relu in {d}"
    return files


def _rewrite_index(p: Path, version=None, stamp=None):
    with open(p, "rb") as f:
        v = pickle.load(f)
        st, overloads = pickle.loads(f.read())
    with open(p, "wb") as f:
        pickle.dump(v if version is None else version(v), f, protocol=-1)
        f.write(pickle.dumps((st if stamp is None else stamp, overloads)))


DAMAGE = {
    "garbled": lambda p: p.write_bytes(b"\xde\xad\xbe\xef" * 4 + p.read_bytes()[16:]),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "emptied": lambda p: p.write_bytes(b""),
    "one byte flipped": lambda p: p.write_bytes(
        (lambda b: b[: len(b) // 2] + bytes([b[len(b) // 2] ^ 0xFF]) + b[len(b) // 2 + 1 :])(
            p.read_bytes()
        )
    ),
}
# another Numba / llvmlite wrote it: the version stamp at the head of the index differs
OTHER_VERSION = {
    "another numba": lambda p: _rewrite_index(p, version=lambda v: "0.58.1" + v[v.index(" ") :]),
    "another llvmlite": lambda p: _rewrite_index(
        p, version=lambda v: v.replace("llvmlite ", "llvmlite 0.41.0+")
    ),
    "another source stamp": lambda p: _rewrite_index(p, stamp=b"\0" * 32),
}
QUICK = {
    ("nbi", "garbled"),
    ("nbc", "truncated"),
    ("py", "garbled"),
    ("ufunc", "one byte flipped"),
    ("nbi", "another llvmlite"),
}
# nbi/nbc: Numba's index and data files; py: the generated module; ufunc: a ufunc's loop
# objects (iglu_np.backends.cpu._direct)
CASES = [
    pytest.param(w, h, marks=() if (w, h) in QUICK else pytest.mark.slow, id=f"{w}-{h}")
    for w in ("nbi", "nbc", "py", "ufunc")
    for h in DAMAGE
    if not (w == "py" and h == "one byte flipped")
]
CASES += [
    pytest.param("nbi", h, marks=() if ("nbi", h) in QUICK else pytest.mark.slow, id=f"nbi-{h}")
    for h in OTHER_VERSION
]


@pytest.mark.parametrize("what,how", CASES)
def test_a_damaged_entry_is_rebuilt_with_the_same_bits(clean, tmp_path, what, how):
    src, home, want = clean
    cache = tmp_path / "cache"
    shutil.copytree(src, cache)
    for p in _files(cache, what):
        {**DAMAGE, **OTHER_VERSION}[how](p)
    got = _child(cache, home)
    assert got["bits"] == want["bits"], "a damaged cache changed the results"
    if what == "py":  # the module is written again; its compiled kernels still match it
        assert all(p.read_text().startswith("# generated") for p in _files(cache, what))
    elif what != "ufunc":  # a ufunc's objects come back from Numba's cache, uncompiled
        assert got["compiles"] > 0, "the damaged entry was not rebuilt"
    warned = got["warnings"]
    assert [c for c, _ in warned] == ["CacheWarning"] * len(warned) and len(warned) <= 1, warned
    if how in DAMAGE:  # damage is reported, naming the directory; a version change is not damage
        assert len(warned) == 1 and str(cache / "cpu") in warned[0][1], warned
    healed = _child(cache, home)
    assert healed == want, "the entry was not saved again: the next process still compiles or warns"


def _read_only_runner(tmp_path, d: Path):
    """A wrapper running a command with ``d`` read-only, or a skip saying why none works.
    As root, file modes do not stop writes: a read-only bind mount in a private mount
    namespace (unshare -m), which ends with the command. Otherwise chmod."""
    if os.geteuid() != 0:
        for p in [d, *d.rglob("*")]:
            p.chmod(p.stat().st_mode & ~0o222)
        return lambda cmd: cmd
    if shutil.which("unshare") is None:
        pytest.skip("running as root without unshare(1): no way to make a directory read-only")
    probe = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            f"mount --bind '{d}' '{d}' && mount -o "
            f"remount,ro,bind '{d}' && ! touch '{d}/probe' 2>/dev/null",
        ],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(
            f"cannot mount read-only here (unshare -m, mount --bind): {probe.stderr.strip()}"
        )
    return lambda cmd: [
        "unshare",
        "-m",
        "sh",
        "-c",
        f"mount --bind '{d}' '{d}' && mount -o remount,ro,bind '{d}' && exec \"$@\"",
        "sh",
        *cmd,
    ]


def _writable_again(d: Path):
    for p in [d, *d.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)


def test_a_read_only_prebuilt_cache_is_used_without_compiling(clean, tmp_path):
    src, _, want = clean
    cache, home = tmp_path / "image-cache", tmp_path / "other-user"
    shutil.copytree(src, cache)
    ro = _read_only_runner(tmp_path, cache)
    try:
        got = _child(cache, home, wrap=ro)
        assert got == want, "a read-only cache must be read, not recompiled or warned about"
        # an activation the prebuilt cache lacks compiles into a writable directory, with
        # one warning naming the read-only one
        more = _child(cache, home, "relu", "hardtanh", wrap=ro)
        assert more["bits"] != want["bits"] and more["compiles"] > 0
        assert len(more["warnings"]) == 1 and str(cache / "cpu") in more["warnings"][0][1], more
        assert list((home / ".cache" / "iglu_np" / "cpu").glob("hardtanh_*.py"))
        assert not list((cache / "cpu").glob("hardtanh_*.py"))
    finally:
        _writable_again(cache)


def test_an_unusable_cache_dir_falls_back(tmp_path):
    """IGLU_NP_CACHE_DIR under a regular file: the next candidate directory, silently."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code = (
        "import numpy as np, iglu_np\nfrom iglu_np.backends.cpu import ufuncs as cpu\n"
        "iglu_np.relu(np.ones(3))\nprint(cpu._gen_dir())"
    )
    r = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        env=_env(blocker / "cache", tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == str(tmp_path / "home" / ".cache" / "iglu_np" / "cpu")


def test_the_first_small_call_loads_the_ufunc_without_numba(clean, tmp_path):
    """A warm cache: a process calling one activation on a small array links that ufunc's
    cached machine code without importing Numba (the 0.6 s of a Numba cache load), with
    the same bits as Numba's own build of it (IGLU_NP_DIRECT_LOAD=0)."""
    src, home, _ = clean
    code = (
        "import hashlib, sys, numpy as np, iglu_np\n"
        "r = [iglu_np.relu(np.linspace(-5, 5, 101).astype(t)) for t in (np.float32, np.float64)]\n"
        "print(hashlib.sha256(b''.join(a.tobytes() for a in r)).hexdigest(), 'numba' in sys.modules)"
    )
    got = {}
    for direct in ("1", "0"):
        r = subprocess.run(
            [sys.executable, "-W", "error", "-c", code],
            env={**_env(src, home), "IGLU_NP_DIRECT_LOAD": direct},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        got[direct] = r.stdout.split()
    assert got["1"][1] == "False", "the first small call imported Numba"
    assert got["0"][1] == "True" and got["1"][0] == got["0"][0]
