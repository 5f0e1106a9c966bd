"""No import cycle inside iglu_np (lazy imports inside functions count): the dtype rules
live in ``_dtypes`` and parameter validation in ``_params``, which import no backend, and
no backend (the dispatcher included) imports ``_api``; nothing outside ``iglu_np.cli``
imports the commands."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import import_graph  # noqa: E402


def test_tool_reports_no_cycle():
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "import_graph.py")], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no import cycle" in r.stdout


def test_no_backend_imports_api_and_dtypes_imports_nothing_of_ours():
    graph = import_graph.edges(import_graph.modules())
    for mod, targets in graph.items():
        if mod.startswith("iglu_np.backends"):
            assert "iglu_np._api" not in dict(targets), mod
    assert graph["iglu_np._dtypes"] == []
    # the backends that apply the dtype rules take them from _dtypes
    for mod in ("cpu.backend", "cuda.cupy", "cuda.numba_cuda._thin_path", "lazy.dask"):
        assert "iglu_np._dtypes" in dict(graph["iglu_np.backends." + mod]), mod
    # validation needs the specs (and the registry filled) only
    assert set(dict(graph["iglu_np._params"])) == {"iglu_np._spec", "iglu_np.activations"}
    # the public objects reach the backends through the dispatcher alone
    assert [t for t in dict(graph["iglu_np._api"]) if t.startswith("iglu_np.backends")] == [
        "iglu_np.backends"
    ]


def test_only_the_command_line_imports_its_commands():
    graph = import_graph.edges(import_graph.modules())
    for mod, targets in graph.items():
        if mod == "iglu_np.cli" or mod.startswith("iglu_np.cli.") or mod == "iglu_np.__main__":
            continue
        cli = [t for t, _ in targets if t == "iglu_np.cli" or t.startswith("iglu_np.cli.")]
        assert cli == [], mod
    # the commands are where the tool finds them
    assert {"iglu_np.cli.info", "iglu_np.cli.bench", "iglu_np.cli.train"} <= set(graph)


def test_tool_finds_a_lazy_cycle(tmp_path):
    pkg = tmp_path / "iglu_np"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import g\n")
    (pkg / "c.py").write_text("import iglu_np.a\n")
    graph = import_graph.edges(import_graph.modules(tmp_path))
    assert dict(graph["iglu_np.sub.b"]) == {"iglu_np.a": 2}
    assert dict(graph["iglu_np.c"]) == {"iglu_np.a": 1}
    assert import_graph.cycles(graph) == [["iglu_np.a", "iglu_np.sub.b"]]
