"""The examples in README.md and the documentation pages run as doctests.

Every ``>>>`` example in README.md (inside its fenced code blocks) and in docs/**/*.rst is
executed and its output compared, so an example that stops working fails the suite.
Python code shown without prompts (the GPU examples, which need a GPU) must say in its
first line why it is not run. A page whose examples need an optional package says so in
an rst comment, ``.. doctest-requires: torch``, and is skipped where that is missing.
"""

import doctest
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# docs/activations is generated from the registry (the docstrings' examples are tested
# by test_registry); docs/_build is the build's output.
SKIP_DIRS = {DOCS / "_build", DOCS / "activations"}


def _pages():
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    pages += sorted(p for p in DOCS.rglob("*.rst") if not any(d in p.parents for d in SKIP_DIRS))
    return [p for p in pages if p.exists()]


PAGES = _pages()
_FENCE = re.compile(r"^```(\w*)\s*$")
_REQUIRES = re.compile(r"^\.\. doctest-requires: *(.+?)\s*$", re.M)


def _markdown_blocks(text: str):
    """(info, first line number, lines) of each fenced code block of a Markdown text."""
    blocks, cur = [], None
    for i, line in enumerate(text.splitlines()):
        m = _FENCE.match(line)
        if cur is None and m:
            cur = (m.group(1), i + 1, [])
        elif cur is not None and line.startswith("```"):
            blocks.append(cur)
            cur = None
        elif cur is not None:
            cur[2].append(line)
    return blocks


def _doctest_text(path: Path) -> str:
    """The file's doctest source with its line numbers kept: for Markdown, the text of
    the fenced blocks that hold ``>>>`` prompts, every other line blanked."""
    text = path.read_text()
    if path.suffix != ".md":
        return text
    out = [""] * len(text.splitlines())
    for _, start, lines in _markdown_blocks(text):
        if any(ln.lstrip().startswith(">>>") for ln in lines):
            out[start : start + len(lines)] = lines
    return "\n".join(out)


def _python_blocks_without_prompts(path: Path):
    """(line, first line of code) of every Python block shown without ``>>>`` prompts."""
    text = path.read_text()
    if path.suffix == ".md":
        for info, start, lines in _markdown_blocks(text):
            if info in ("python", "py") and not any(">>>" in ln for ln in lines):
                yield start + 1, next((ln for ln in lines if ln.strip()), "")
        return
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if re.match(r"\s*\.\. code-block:: (python|py)\s*$", ln):
            body = [b for b in lines[i + 1 : i + 40] if b.strip() and not b.strip().startswith(":")]
            yield i + 1, body[0].strip() if body else ""


def _has_examples(path: Path) -> bool:
    return bool(doctest.DocTestParser().get_examples(_doctest_text(path)))


WITH_EXAMPLES = [p for p in PAGES if _has_examples(p)]


@pytest.mark.parametrize(
    "path", WITH_EXAMPLES, ids=[str(p.relative_to(ROOT)) for p in WITH_EXAMPLES]
)
def test_page_examples_run(path):
    name = str(path.relative_to(ROOT))
    for line in _REQUIRES.findall(path.read_text()):
        for module in line.replace(",", " ").split():
            pytest.importorskip(module, reason=f"{name}'s examples need {module}")
    test = doctest.DocTestParser().get_doctest(
        _doctest_text(path), {"__name__": "__docs__"}, name, name, 0
    )
    report = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS, verbose=False)
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_pages_have_examples():
    """The README and the user guide pages do show running code."""
    have = {str(p.relative_to(ROOT)) for p in WITH_EXAMPLES}
    for must in [
        "README.md",
        "docs/getting_started.rst",
        "docs/user_guide/cpu.rst",
        "docs/user_guide/dask.rst",
        "docs/user_guide/gated.rst",
        "docs/user_guide/trainer.rst",
    ]:
        assert must in have, f"{must} has no >>> examples"


def test_python_shown_without_prompts_says_why_it_is_not_run():
    bad = [
        f"{p.relative_to(ROOT)}:{line}: {first!r}"
        for p in PAGES
        for line, first in _python_blocks_without_prompts(p)
        if not (first.startswith("#") and "not run" in first)
    ]
    assert not bad, (
        "Python examples without >>> are not tested; start such a block with a "
        "comment saying why it is not run (e.g. it needs a GPU):\n" + "\n".join(bad)
    )
