"""CuPy's compiler appends ``-ftz=true`` after the caller's options and NVRTC takes the
last occurrence: the CuPy backend drops it for its own kernels (found on an H200, where
float32 results that should be subnormal came back as 0). No GPU or CuPy needed here."""

from __future__ import annotations

import sys
import types

from iglu_np.backends.codegen import cxx
from iglu_np.backends.cuda import cupy as cb


def test_our_options_ask_for_ieee_subnormals_and_carry_the_marker():
    assert "--ftz=false" in cb.OPTIONS and cb.NO_FTZ_MARK in cb.OPTIONS
    assert cb.OPTIONS[: len(cxx.NVRTC_OPTIONS)] == cxx.NVRTC_OPTIONS


def test_the_appended_flag_is_dropped_for_our_kernels_only():
    assert cb._drop_ftz(cb.OPTIONS + ("-ftz=true",)) == cb.OPTIONS
    theirs = ("--std=c++17", "-ftz=true")
    assert cb._drop_ftz(theirs) == theirs


def test_the_wrapper_reaches_nvrtc_once(monkeypatch):
    seen = []

    class _NVRTCProgram:
        def compile(self, options=(), log_stream=None):
            seen.append(options)

    compiler = types.SimpleNamespace(_NVRTCProgram=_NVRTCProgram)
    cuda = types.ModuleType("cupy.cuda")
    cuda.compiler = compiler
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.compiler", compiler)
    cb._keep_subnormals()
    wrapped = _NVRTCProgram.compile
    cb._keep_subnormals()  # idempotent: not wrapped twice
    assert _NVRTCProgram.compile is wrapped
    _NVRTCProgram().compile(cb.OPTIONS + ("-ftz=true",), None)
    _NVRTCProgram().compile(("-ftz=true",))
    assert seen == [cb.OPTIONS, ("-ftz=true",)]
