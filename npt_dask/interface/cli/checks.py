"""The command line's checks, made before any work (before the first pass over the data):
its paths, all at once (:func:`check_paths`), and the widths of its rows
(:func:`check_width`).

Paths: each output (``--out``, ``--checkpoint``, ``--predictions``) is refused when its
folder does not exist (a typo would create a tree), when it lies inside a zarr store or
array or no file can be created where it goes (the writers' one rule,
:func:`npt_dask.runtime.places.check_output_place`), when it is, links to, lies inside or
holds one of the command's inputs (``DATA``, ``--labels``, ``--test``, ``--model``,
``--start``, ...), and when two outputs name the same place (or one lies inside the
other). Every message names the options and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from npt_dask.errors import InputError, OutputPathError
from npt_dask.runtime.places import check_output_place

__all__ = ["check_not_an_input", "check_parent", "check_paths", "check_width"]


def check_paths(
    outputs: Mapping[str, str | os.PathLike | None],
    inputs: Mapping[str, str | os.PathLike | None],
) -> None:
    """Refuse, before any work, an output path (by option; None: not given) that another
    path option of the command names, or that cannot be written (see the module notes)."""

    given = {name: os.fspath(out) for name, out in outputs.items() if out is not None}
    sources = {name: Path(path) for name, path in inputs.items() if path is not None}
    for index, (option, out) in enumerate(given.items()):
        check_not_an_input(option, out, sources)
        for other, path in list(given.items())[index + 1 :]:
            _check_apart(option, out, other, path)
    for option, out in given.items():
        check_parent(out, option)
        check_output_place(out, f"{option} {out}")


def check_parent(out: str, option: str = "--out") -> None:
    """Refuse an output path whose folder does not exist (a typo would create a tree)."""

    parent = Path(os.path.realpath(Path(out).expanduser())).parent  # where a link points
    if parent.exists() and not parent.is_dir():
        raise OutputPathError(f"{option} {out}: {parent} is a file, not a folder; fix the path.")
    if not parent.is_dir():
        raise OutputPathError(
            f"{option} {out}: the folder {parent} does not exist; create it first or fix the path."
        )


def check_not_an_input(option: str, out: str, inputs: Mapping[str, Path]) -> None:
    """Refuse an output path that is, links to, lies inside or holds one of ``inputs``."""

    target = _real(out)
    for name, source in inputs.items():
        if _same_place(target, source):
            raise OutputPathError(
                f"{option} {out} is the input {name} ({source}): writing it would destroy "
                f"that input. Choose another path for {option}."
            )
        if target in _real(source).parents:
            raise OutputPathError(
                f"{option} {out} holds the input {name} ({source}): writing it would "
                f"destroy that input. Choose another path for {option}."
            )


def _check_apart(option: str, out: str, other: str, path: str) -> None:
    """Two outputs of one command: never the same place, nor one inside the other."""

    first, second = _real(out), _real(path)
    if _same_place(first, second) or _same_place(second, first):
        where = "name the same path" if first == second else "overlap (one lies inside the other)"
        raise OutputPathError(
            f"{option} {out} and {other} {path} {where}: each output would replace the other. "
            "Give each its own path."
        )


def check_width(option: str, source: Any, rows: Any, width: int, against: str) -> None:
    """Refuse rows (of ``option``, read from ``source``) whose number of columns is not
    ``width``, the one of ``against``: before the fit, not in a prediction after it."""

    found = int(rows.shape[1])
    if found != width:
        raise InputError(
            f"{option} {source} has {found} columns per row and {against} has {width}: the "
            "rows to predict must have the training rows' columns (the same features, in the "
            f"same order, flattened alike). Check {option} (and --key/--var)."
        )


def _real(path: str | os.PathLike) -> Path:
    return Path(os.path.realpath(Path(path).expanduser()))


def _same_place(target: Path, source: Path) -> bool:
    """Whether writing ``target`` would write ``source``: the same path once links are
    resolved, the same file (a hard link), or a path inside the store ``source``."""
    real = _real(source)
    if target == real or real in target.parents:
        return True
    try:
        return target.exists() and os.path.samefile(target, real)
    except OSError:
        return False
