"""The ``npt`` command: its parser (one subparser per command module of :data:`COMMANDS`)
and :func:`main`, which runs a command, prints its JSON result, and turns the library's
errors into one line and exit status 2 (:mod:`~npt_dask.interface.cli.messages`)."""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from npt_dask._version import __version__
from npt_dask.errors import NPTError
from npt_dask.interface.cli import fit, grow, info, project, ridge, run
from npt_dask.interface.cli.messages import for_the_command_line, one_line_warnings
from npt_dask.interface.cli.signals import exit_status, signal_name, stop_on_signals

__all__ = ["COMMANDS", "Parser", "build_parser", "main"]

COMMANDS: dict[str, ModuleType] = {
    "fit": fit, "project": project, "grow": grow, "info": info, "ridge": ridge, "run": run,
}  # fmt: skip
"""Each subcommand's module, in the order ``npt --help`` lists them: each has ``add(sub)``
(its parser) and ``run(args)`` (the command, returning its JSON result)."""


class Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for a misspelled option (Python 3.14's, on any Python)."""

    commands: dict[str, argparse.ArgumentParser]  # the sub-commands' parsers, by name

    def error(self, message: str) -> Any:
        match = re.match(r"unrecognized arguments: (.*)", message)
        if match:
            known = [o for a in self._actions for o in a.option_strings]
            for word in match.group(1).split():
                close = difflib.get_close_matches(word.split("=")[0], known, n=1, cutoff=0.6)
                if word.startswith("-") and close:
                    message += f" (did you mean {close[0]}?)"
                    break
        super().error(message)


def build_parser() -> Parser:
    """The ``npt`` parser: one subparser per command of :data:`COMMANDS`, in its order."""
    parser = Parser(
        prog="npt",
        description="Nonlinear Projection Trick on Dask: fit a kernel model, persist it to "
        "zarr, and project data chunk by chunk.",
    )
    parser.add_argument("--version", action="version", version=f"npt-dask {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    parser.commands = {name: command.add(sub) for name, command in COMMANDS.items()}
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the command's parser knows its options: it suggests the nearest
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        with stop_on_signals(), one_line_warnings(args.command):
            result = COMMANDS[args.command].run(args)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM (signals.py): one way out
        print(file=sys.stderr)  # end a progress line rewritten in place
        out = getattr(args, "out", None)
        hint = ridge.interrupted_hint(args) if args.command == "ridge" else ""
        if args.command == "project":
            hint = (
                f"; chunks already written are kept in {out}: run the same command again to "
                "resume (they are checked, not projected again)"
            )
        how = "" if signal_name(exc) == "SIGINT" else f" by {signal_name(exc)}"
        print(f"npt {args.command}: interrupted{how}{hint}.", file=sys.stderr)
        return exit_status(exc)
    except (NPTError, OSError) as exc:  # the library's own errors and files; a bug propagates
        text = str(exc) if args.command == "run" else for_the_command_line(exc)
        print(f"npt {args.command}: error: {text}", file=sys.stderr)  # run: the config's keys
        return 2
    print(json.dumps(result, indent=2, default=str))
    return 0
