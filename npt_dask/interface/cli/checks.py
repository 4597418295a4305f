"""Checks of output paths made before any work: an output folder that exists, and an
output that is none of the command's inputs (nor a link to one, nor inside one)."""

from __future__ import annotations

import os
from pathlib import Path

from npt_dask.errors import InputError

__all__ = ["check_not_an_input", "check_parent"]


def check_parent(out: str, option: str = "--out") -> None:
    """Refuse an output path whose folder does not exist (a typo would create a tree)."""

    parent = Path(os.path.realpath(Path(out).expanduser())).parent  # where a link points
    if not parent.is_dir():
        raise InputError(
            f"{option} {out}: the folder {parent} does not exist; create it first or fix the path."
        )


def check_not_an_input(option: str, out: str, inputs: dict[str, Path]) -> None:
    """Refuse an output path that is, links to, or lies inside one of ``inputs``."""

    target = Path(os.path.realpath(Path(out).expanduser()))
    for name, source in inputs.items():
        if _same_place(target, source):
            raise InputError(
                f"{option} {out} is the input {name} ({source}): writing it would destroy "
                f"that input. Choose another path for {option}."
            )


def _same_place(target: Path, source: Path) -> bool:
    """Whether writing ``target`` would write ``source``: the same path once links are
    resolved, the same file (a hard link), or a path inside the store ``source``."""
    real = Path(os.path.realpath(source))
    if target == real or real in target.parents:
        return True
    try:
        return target.exists() and os.path.samefile(target, real)
    except OSError:
        return False
