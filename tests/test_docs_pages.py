"""The documentation's per-activation pages are generated from the registry
(docs/_ext/activation_pages.py); these checks run its generator without a Sphinx build."""

import json
import sys
from pathlib import Path

import pytest

import iglu_np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
pages = pytest.importorskip("activation_pages", reason="needs the docs extra (sphinx)")


def _accuracy(names):
    rows = []
    for n in names:
        a = iglu_np.get(n)
        for kind in ["fwd", "dx", *("d_" + p for p in a.param_names)]:
            for dt in ["float32", "float64"]:
                rows.append(
                    {
                        "activation": n,
                        "kind": kind,
                        "dtype": dt,
                        "backend": "cpu",
                        "param_sets": 1,
                        "domain": [-1e6, 1e6],
                        "points": 100,
                        "worst_ulp": 1.25,
                        "worst_at": {"x": -3.5, "params": a.defaults},
                        "rms_ulp": 0.25,
                        "bound": 4.0 if kind == "fwd" else 8.0,
                    }
                )
    return {
        "schema": 1,
        "date": "2026-01-01T00:00:00Z",
        "machine": "test machine",
        "command": "c",
        "versions": {},
        "bounds": {"fwd": 4.0, "derivative": 8.0},
        "rows": rows,
    }


def test_missing_accuracy_data_stops_the_build_with_the_command_to_run(tmp_path):
    with pytest.raises(pages.ExtensionError, match="tools/accuracy_sweep.py"):
        pages.load_accuracy(tmp_path / "accuracy.json")


def test_accuracy_data_of_another_schema_is_refused(tmp_path):
    p = tmp_path / "accuracy.json"
    p.write_text(json.dumps({"schema": 2, "rows": []}))
    with pytest.raises(pages.ExtensionError, match="schema 1"):
        pages.load_accuracy(p)


def test_index_lists_every_activation_with_its_formula():
    text = pages.index(iglu_np.ACTIVATIONS)
    for n, a in iglu_np.ACTIVATIONS.items():
        assert f":doc:`{n}`" in text and a.formula in text
        assert f"\n   {n}\n" in text or text.endswith(f"   {n}\n")  # in the toctree


@pytest.mark.parametrize("name", ["iglu", "xielu", "gelu"])
def test_activation_page_has_reference_plot_accuracy_and_backends(name):
    a = iglu_np.get(name)
    text = pages.page(a, _accuracy([name]))
    assert f".. autofunction:: iglu_np.{name}" in text
    assert f".. figure:: _plots/{name}.png" in text
    assert "Measured accuracy" in text and "test machine" in text
    n_rows = 2 * (2 + len(a.param_names))
    assert text.count("     - 1.25") == n_rows  # one table row per kind and dtype
    assert "**CuPy**" in text and "**Numba CUDA**" in text and "**Dask / xarray**" in text
    if isinstance(a.spec.torch, str) and a.spec.torch:
        assert f"torch.nn.functional.{a.spec.torch}" in text


def test_activation_without_accuracy_rows_says_so():
    text = pages.page(iglu_np.get("relu"), _accuracy(["iglu"]))
    assert "has no rows" in text


def test_plot_shows_each_parameter_derivative(tmp_path):
    out = tmp_path / "softplus.png"
    pages.plot(iglu_np.get("softplus"), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_derivatives_section_becomes_a_rubric_before_the_parameters():
    lines = iglu_np.iglu.__doc__.splitlines()[2:]
    pages.move_derivatives(None, "function", "iglu_np.iglu", iglu_np.iglu, {}, lines)
    assert "Derivatives" not in lines and ".. rubric:: Derivatives" in lines
    rubric, params = lines.index(".. rubric:: Derivatives"), lines.index("Parameters")
    assert rubric < params
    assert any("iglu.backward(" in ln for ln in lines[rubric:params])
    assert "Returns" in lines and "Examples" in lines  # the other sections stay


def test_bars_in_plain_docstring_text_are_escaped_but_not_in_math_or_literals():
    lines = [
        "Softsign x/(1 + |x|).",
        "",
        ".. math::",
        "",
        "    f = |x|",
        "",
        "uses ``|x|`` here",
        "Examples",
        "--------",
        ">>> abs(-1)  # |x|",
    ]
    pages.escape_bars(None, "function", "iglu_np.softsign", None, {}, lines)
    assert lines[0] == r"Softsign x/(1 + \|x\|)."
    assert lines[4] == "    f = |x|" and lines[6] == "uses ``|x|`` here"
    assert lines[-1] == ">>> abs(-1)  # |x|"


mathml = pytest.importorskip("mathml", reason="needs the docs extra (sphinx)")


@pytest.mark.parametrize("name", iglu_np.ACTIVATIONS)
def test_every_formula_typesets_as_mathml(name):
    spec = iglu_np.get(name).spec
    for tex in filter(None, (spec.formula, spec.derivative_formula)):
        assert mathml.latex2mathml.tex2mathml(tex).startswith("<math"), tex


def test_built_page_carries_mathml_and_loads_no_script(tmp_path):
    from sphinx.application import Sphinx

    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'docs' / '_ext')!r})\n"
        "extensions = ['mathml']\nhtml_math_renderer = 'mathml'\n"
    )
    (src / "index.rst").write_text(
        "Page\n====\n\nInline :math:`x\\sigma`.\n\n.. math::\n\n   \\frac{1}{\\pi}\\arctan(x)\n"
    )
    app = Sphinx(
        str(src),
        str(src),
        str(tmp_path / "html"),
        str(tmp_path / "doctrees"),
        "html",
        status=None,
        warning=None,
        warningiserror=True,
    )
    app.build()
    html = (tmp_path / "html" / "index.html").read_text()
    assert html.count("<math") == 2 and "mathjax" not in html.lower()
    assert "\\arctan" not in html and "\\(" not in html
