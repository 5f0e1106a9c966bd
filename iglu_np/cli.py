"""``iglu-np`` command line (also ``python -m iglu_np``).

Sub-commands live in their own modules and are imported only when used; each exposes
``add_arguments(parser)`` and ``main(args) -> int``.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
COMMANDS = {
    "info": ("iglu_np._info", "activations, parameters, backends and versions"),
    "bench": ("iglu_np.bench", "the paper's speed table measured on this machine"),
    "train": ("iglu_np.nn.cli", "train the numpy MLP on a dataset with any activation"),
    "reproduce": ("iglu_np.reproduce", "regenerate the paper's figures and tables"),
}


def _available():
    out = {}
    for name, (mod, help_) in COMMANDS.items():
        try:
            out[name] = (importlib.import_module(mod), help_)
        except ImportError as e:  # a sub-command whose optional deps are missing
            if getattr(e, "name", "") and e.name.startswith("iglu_np"):
                continue
            out[name] = (None, f"{help_} (unavailable: {e})")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="iglu-np", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    mods = _available()
    for name, (mod, help_) in mods.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if mod is not None:
            mod.add_arguments(p)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    mod, help_ = mods[args.command]
    if mod is None:
        print(f"iglu-np {args.command}: {help_}", file=sys.stderr)
        return 2
    return int(mod.main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
