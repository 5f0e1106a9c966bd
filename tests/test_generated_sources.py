"""``tools/generated_sources.py`` writes every generated source and its ``--check`` names
each file that differs from a stored copy (the proof that a refactoring of the backends
leaves the CuPy C++, the Numba modules and the Numba CUDA kernels byte-identical)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import generated_sources


def test_check_names_the_files_that_differ(tmp_path, capsys):
    names = generated_sources.write(tmp_path)
    kinds = {n.split("/")[0] for n in names}
    assert kinds == {"cpu", "cpu_fast", "cupy", "host_cxx", "numba_cuda"}
    assert "cupy/iglu/bwdall_vec_float32.cu" in names
    assert "numba_cuda/iglu/bwdall_1d.py" in names
    assert generated_sources.check(tmp_path) == 0
    edited = tmp_path / "cpu_fast" / "iglu.py"
    edited.write_text(edited.read_text() + "\n")
    (tmp_path / "cupy" / "iglu" / "fwd_float32.cu").unlink()
    capsys.readouterr()
    assert generated_sources.check(tmp_path) == 1
    out = capsys.readouterr().out
    assert "differs: cpu_fast/iglu.py" in out
    assert "only regenerated: cupy/iglu/fwd_float32.cu" in out
    assert "2 differences" in out
