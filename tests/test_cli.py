"""The command line as a new user meets it: --help texts, their speed, error messages."""

import argparse
import importlib
import importlib.util
import os
import subprocess
import sys
import types

import pytest

from iglu_np import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("numba", "sklearn", "matplotlib", "scipy")


def _parsers():
    """(label, parser) for every sub-command and every example script with options."""
    out = []
    for name, (modname, _) in cli.COMMANDS.items():
        p = argparse.ArgumentParser(prog=f"iglu-np {name}")
        importlib.import_module(modname).add_arguments(p)
        out.append((f"iglu-np {name}", p))
    for script in ("bench_vs_sklearn", "bench_vectorisation"):
        spec = importlib.util.spec_from_file_location(
            f"_example_{script}", os.path.join(ROOT, "examples", f"{script}.py")
        )
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out.append((f"examples/{script}.py", mod.build_parser()))
    return out


@pytest.mark.parametrize("label,parser", _parsers(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_option_has_help_and_states_its_default(label, parser):
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        assert a.help, f"{label}: {a.option_strings or a.dest} has no help text"
        valued = a.nargs != 0 and a.default not in (None, [], "", False)
        if valued and a.option_strings:
            assert "default" in a.help, f"{label}: {a.option_strings} does not state its default"
    assert "``" not in parser.format_help()


@pytest.mark.parametrize(
    "argv", [[], ["info"], ["bench"], ["train"], ["reproduce"], ["warmup"], ["cache"]]
)
def test_help_is_plain_text_and_fast(argv):
    """--help imports no sub-command but the one asked about, and never Numba, scikit-learn,
    scipy or matplotlib (each of which costs a large part of a second)."""
    code = (
        "import sys\nfrom iglu_np.cli import main\n"
        f"try:\n    main({argv + ['--help']!r})\nexcept SystemExit:\n    pass\n"
        f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout, r.stdout[-300:]
    text = r.stdout
    assert "``" not in text and ":func:" not in text
    assert "usage: iglu-np" in text


def test_top_level_help_lists_every_command(capsys):
    assert cli.main([]) == 0
    text = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert f"    {name}" in text
    assert "iglu-np COMMAND --help" in text


def test_plain_rewraps_and_keeps_examples():
    doc = (
        "``iglu-np x``: does :func:`run`\nin two lines.\n\nExamples::\n\n"
        "    iglu-np x --a 1\n    iglu-np x --b 2\n"
    )
    assert cli.plain(doc) == (
        "iglu-np x: does run in two lines.\n\nExamples:\n\n    iglu-np x --a 1\n    iglu-np x --b 2"
    )


def test_unknown_activation_suggests_the_nearest(capsys):
    import iglu_np

    with pytest.raises(KeyError, match="did you mean 'iglu'"):
        iglu_np.get("igul")
    with pytest.raises(KeyError, match="did you mean 'leaky_relu'\\?"):
        iglu_np.get("Leaky-ReLU")
    assert cli.main(["bench", "igul", "--quick"]) == 2
    assert "did you mean 'iglu'" in capsys.readouterr().err


def _fake_clf(curve, max_iter, stopped=False):
    return types.SimpleNamespace(
        loss_curve_=curve,
        n_iter_=len(curve),
        max_iter=max_iter,
        n_iter_no_change=10,
        tol=1e-4,
        _stopped=stopped,
    )


def test_train_says_when_it_stopped_at_the_epoch_limit_still_improving():
    from iglu_np.cli.train import EPOCHS, not_converged_note

    falling = [1.0 / (i + 1) for i in range(30)]
    note = not_converged_note(_fake_clf(falling, 30))
    assert note and "not converged" in note and "--epochs limit (30)" in note
    assert not_converged_note(_fake_clf(falling, 40)) is None  # stopped by itself earlier
    assert not_converged_note(_fake_clf(falling, 30, stopped=True)) is None
    assert not_converged_note(_fake_clf([0.5] * 30, 30)) is None  # flat: converged
    assert EPOCHS >= 200
