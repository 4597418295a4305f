"""Where an output may be written: one rule for every writer, checked before any work.

Every writer of npt-dask -- a model's ``save`` (``npt fit``/``npt grow --out``), a kernel
ridge estimator's ``save`` (``npt ridge --out``), a projection (``npt.project``,
``npt project --out``), a generated data set, a solver's checkpoint, a prediction file,
a pipeline's output folder -- asks :func:`check_output_place` first. An output path is
refused (:class:`~npt_dask.errors.OutputPathError`, naming the path and the fix):

* inside a zarr store or array: a folder above it (links resolved) holds zarr metadata
  (``zarr.json``, or zarr v2's ``.zgroup``/``.zarray``). Writing there would add a
  member to that store -- an input's rows, a saved model's array -- or damage it;
* below a file (a path ``data.npy/out.zarr``);
* in a folder that accepts no new file (read-only, ``/proc``, another user's): found
  by creating and removing an empty, owner-tagged file there
  (:func:`npt_dask.runtime.atomic.sibling`, which a killed process's sweep removes), since
  permissions alone do not tell (``root`` passes ``os.access`` on ``/proc``);
* with ``folder=True`` (a folder the writer fills, a pipeline's ``[output] dir``): a
  path that is a file, or is itself a zarr store.

A writer that replaces a store of its own kind checks what is *at* the path itself
(:func:`npt_dask.storage.store.check_target`); the command line checks its outputs
against its inputs and each other (:mod:`npt_dask.interface.cli.checks`).

Layer rule: standard library, :mod:`npt_dask.errors` and :mod:`npt_dask.runtime.atomic`.
"""

from __future__ import annotations

import os
from pathlib import Path

from npt_dask.errors import NPTError, OutputPathError
from npt_dask.runtime.atomic import real, sibling

__all__ = ["ZARR_MARKERS", "check_output_place", "enclosing_store", "is_zarr_node"]

ZARR_MARKERS = ("zarr.json", ".zgroup", ".zarray")
"""The files that make a folder a zarr group or array (zarr v3, then v2)."""


def is_zarr_node(folder: Path) -> bool:
    """Whether ``folder`` is a zarr group or array (holds one of :data:`ZARR_MARKERS`)."""
    return any((folder / marker).is_file() for marker in ZARR_MARKERS)


def enclosing_store(path: str | os.PathLike) -> Path | None:
    """The outermost zarr store (group or array) that ``path`` lies inside, links
    resolved; None when no folder above ``path`` is one."""
    found = None
    for folder in real(path).parents:
        if is_zarr_node(folder):
            found = folder
    return found


def check_output_place(
    path: str | os.PathLike,
    what: str | None = None,
    *,
    folder: bool = False,
    error: type[NPTError] = OutputPathError,
) -> None:
    """Refuse, before anything is written, an output ``path`` that lies inside a zarr
    store or array, below a file, or where no file can be created (see the module
    notes); ``what`` names it in the message (default: the path).

    ``folder``: the path is a folder the writer fills (it may exist, as a folder that is
    no zarr store). ``error``: the writer's own kind of refusal (a model's save refuses
    with :class:`~npt_dask.errors.StoreError`, a projection with
    :class:`~npt_dask.errors.ProjectionError`), :class:`~npt_dask.errors.OutputPathError`
    by default.
    """
    given = os.fspath(path)
    label = what or given
    target = real(path)
    store = enclosing_store(target)
    if store is not None:
        raise error(
            f"{label} lies inside the zarr store {store}: writing there would add to that "
            "store (an input's rows, a saved model's arrays) or damage it. Choose a path "
            "outside every zarr store, e.g. beside it."
        )
    if folder and target.exists() and not target.is_dir():
        raise error(
            f"{label} is a file, and it names a folder to write into: choose a folder (it "
            "is created if absent), or move the file away."
        )
    if folder and is_zarr_node(target):
        raise error(
            f"{label} is a zarr store, and it names a folder to write stores into: choose "
            "another folder (it is created if absent)."
        )
    _check_creatable(target, label, error)


def _check_creatable(target: Path, label: str, error: type[NPTError]) -> None:
    """The folder the writer creates its first new entry in (the nearest existing folder
    above ``target``) takes a new file."""
    existing = next(p for p in target.parents if p.exists())  # "/" at the latest
    if not existing.is_dir():
        raise error(
            f"Cannot write {label}: {existing} is a file, not a folder. Choose a path in a folder."
        )
    below = next(p for p in (target, *target.parents) if p.parent == existing)
    probe = sibling(below, "tmp")  # an owner-tagged name: a killed process's is swept
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise error(
            f"Cannot write {label}: the folder {existing} accepts no new file ({reason}). "
            "Choose a path in a folder you can write to."
        ) from None
    os.close(fd)
    os.unlink(probe)
