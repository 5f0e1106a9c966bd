"""The ``iglu-np`` command line (also ``python -m iglu_np`` and ``python -m iglu_np.cli``).

Each sub-command is one module of this package (``info``, ``bench`` with ``bench_gpu``,
``train``, ``reproduce``, ``warmup``, ``cache``) and only the one named on the command line is
imported (``iglu-np --help`` imports none of them, nor Numba, scikit-learn or
matplotlib); each module exposes ``add_arguments(parser)`` and ``main(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import textwrap

DESCRIPTION = "IGLU and the activation zoo as fast, accurate numpy ufuncs: command line."

# name -> (module, one-line help)
COMMANDS = {
    "info": (
        "iglu_np.cli.info",
        "list the activations, their parameters, the usable backends and versions",
    ),
    "bench": ("iglu_np.cli.bench", "measure the paper's speed table (Table 1) on this machine"),
    "train": ("iglu_np.cli.train", "train the numpy MLP on a dataset with any activation"),
    "reproduce": (
        "iglu_np.cli.reproduce",
        "regenerate the paper's figures and tables into a report",
    ),
    "warmup": (
        "iglu_np.cli.warmup",
        "compile activations into the kernel cache ahead of their first call",
    ),
    "cache": (
        "iglu_np.cli.cache",
        "show where the compiled kernels are cached and their size, or clear them",
    ),
}

EPILOG = """\
examples:
  iglu-np reproduce --quick        figures and tables in reproduce_out/report.md
  iglu-np info                     the activations and their parameters
  iglu-np bench --quick iglu gelu  speed of two activations against a memory copy
  iglu-np train --activation iglu --param sigma=0.5
  iglu-np warmup                   compile every activation into the cache (e.g. in an image)
  iglu-np cache --clear            delete the compiled kernels

Run 'iglu-np COMMAND --help' for a command's options."""


def plain(text: str, width: int = 79) -> str:
    """A docstring as plain text for ``--help``: ``code`` and :role:`name` markup removed,
    paragraphs re-wrapped, indented blocks (examples) and bullet lists kept as they are."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", textwrap.dedent(text))
    text = text.replace("``", "").replace("::\n", ":\n")
    out = []
    for para in re.split(r"\n\s*\n", text.strip("\n")):
        lines = para.splitlines()
        if any(ln.startswith((" ", "* ", "- ")) for ln in lines):
            out.append(para.rstrip())
        else:
            out.append(textwrap.fill(" ".join(ln.strip() for ln in lines), width))
    return "\n\n".join(out)


def _command(argv) -> str | None:
    """The sub-command named in argv (the first argument that is not an option)."""
    for a in argv:
        if not a.startswith("-"):
            return a if a in COMMANDS else None
    return None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(
        prog="iglu-np",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _command(argv)
    mod = None
    for name, (modname, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".")
        if name != chosen:
            continue
        try:
            mod = importlib.import_module(modname)
        except ImportError as e:  # a sub-command whose optional dependencies are missing
            print(f"iglu-np {name}: unavailable ({e})", file=sys.stderr)
            return 2
        doc = plain((mod.__doc__ or "").split("Examples::")[0]).strip()
        if doc:
            p.description = doc
            p.formatter_class = argparse.RawDescriptionHelpFormatter
        mod.add_arguments(p)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return int(mod.main(args) or 0)
