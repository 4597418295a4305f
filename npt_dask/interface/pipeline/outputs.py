"""What a pipeline keeps in its output folder, by name, so that nothing else is written
there: a stage's own output (the ``[grow]`` stage's ``out``) and the rows a config
reads must be none of these.

Layer rule: standard library and :mod:`npt_dask.errors` only.
"""

from __future__ import annotations

import os
from pathlib import Path

from npt_dask.errors import InputError

__all__ = ["CHECKPOINT_SUFFIX", "OUTPUTS", "STORES", "check_free", "owner_of"]

STORES = ("input_train.zarr", "input_test.zarr", "model.zarr", "train.zarr", "test.zarr")
"""The zarr stores a run writes in its output folder."""

OUTPUTS = {
    "model.zarr": "the pipeline's fitted model",
    "train.zarr": "the projected training rows",
    "test.zarr": "the projected test rows",
    "input_train.zarr": "the staged training rows",
    "input_test.zarr": "the staged test rows",
    "report.json": "the run's report",
    "summary.txt": "the run's summary",
}
"""Every name a run writes in its output folder (beside its figures, ``*.png``, and the
``kernel_ridge`` stages' checkpoints, ``*.cg.npz``), and what it holds."""

CHECKPOINT_SUFFIX = ".cg.npz"
"""A ``kernel_ridge`` stage's CG checkpoint: ``<stage>.<digest>.cg.npz``."""


def owner_of(name: str) -> str | None:
    """What the pipeline keeps at ``name`` (relative to the output folder), or in the
    store ``name`` lies inside; None when the pipeline writes nothing there."""
    parts = Path(os.path.normpath(name)).parts
    first = parts[0] if parts else ""
    if first in OUTPUTS:
        return f"{OUTPUTS[first]} ({first})"
    if first.endswith(".png"):
        return f"a figure of the report ({first})"
    if first.endswith(CHECKPOINT_SUFFIX):
        return f"a kernel_ridge stage's checkpoint ({first})"
    return None


def check_free(where: str, path: str | os.PathLike, out_dir: str | os.PathLike) -> None:
    """Refuse ``path`` (named ``where`` in the config) when it is, links to, or lies inside
    something the pipeline writes in ``out_dir``; the message names both and the fix."""
    target = Path(os.path.realpath(path))
    folder = Path(os.path.realpath(out_dir))
    if target != folder and folder not in target.parents:
        return
    if target == folder:
        raise InputError(
            f"{where} is the output folder {folder} itself, where the pipeline writes its "
            "stores: choose another [output] dir (npt run --output)."
        )
    owner = owner_of(str(target.relative_to(folder)))
    if owner is None:
        return
    raise InputError(
        f"{where} is {owner} in the output folder {folder}, which the pipeline writes: "
        "the two would replace each other. Choose another name or place for it, e.g. "
        "[grow] out = 'grown.zarr', or another [output] dir."
    )
