"""Loaders for ``.npz`` data sets with arrays ``x`` (samples) and ``y`` (labels).

npt-dask never ships data. Point these loaders at your own files, or set
``NPT_DATA_DIR`` to a folder holding them (on the development machines that
is ``../shared/data``: ``mnist.npz``, ``fashion_mnist_8class.npz``,
``covertype_odds.npz``). Files are read with ``allow_pickle=False``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from npt_dask.errors import InputError

__all__ = ["DATA_DIR_ENV", "data_path", "first_per_class", "load_npz"]

DATA_DIR_ENV = "NPT_DATA_DIR"


def data_path(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Path of ``name`` in ``data_dir`` or ``$NPT_DATA_DIR``; a clear error if absent."""
    base = data_dir or os.environ.get(DATA_DIR_ENV)
    if not base:
        raise InputError(
            f"No data directory given: pass data_dir or set {DATA_DIR_ENV} to the folder "
            f"holding {name!r}."
        )
    path = Path(base) / name
    if not path.is_file():
        raise InputError(f"{path} does not exist; check data_dir or ${DATA_DIR_ENV}.")
    return path


def _find(path: str | os.PathLike) -> Path:
    """``path`` itself if it is a file, else ``$NPT_DATA_DIR/path`` for a relative one."""
    given = Path(path)
    tried = [given.absolute()]
    if given.is_file():
        return given
    base = os.environ.get(DATA_DIR_ENV)
    if base and not given.is_absolute():
        candidate = Path(base) / given
        if candidate.is_file():
            return candidate
        tried.append(candidate.absolute())
    where = " or ".join(str(t) for t in tried)
    hint = (
        ""
        if base or given.is_absolute()
        else f"; set {DATA_DIR_ENV} to the folder holding it, or give its full path"
    )
    raise InputError(f"No file {os.fspath(path)!r}: looked for {where}{hint}.")


def load_npz(
    path: str | os.PathLike,
    *,
    rows: slice | None = None,
    scale: float | None = None,
    dtype: Any = np.float64,
) -> tuple[np.ndarray, np.ndarray]:
    """Load ``x`` flattened to ``(n, d)`` and ``y`` from an ``.npz`` file.

    Parameters
    ----------
    path : path-like
        File with arrays ``x`` (n, ...) and ``y`` (n,).
    rows : slice, optional
        Rows to keep (e.g. ``slice(0, 60000)`` for MNIST's training split).
    scale : float, optional
        Divide ``x`` by this (``255`` maps pixels to [0, 1]).
    dtype : dtype, default float64
        dtype of the returned ``x``.

    A relative ``path`` not found from the current directory is looked up in
    ``$NPT_DATA_DIR``: ``load_npz("mnist.npz")`` reads ``$NPT_DATA_DIR/mnist.npz``.
    """
    path = _find(path)
    with np.load(path, allow_pickle=False) as data:
        missing = {"x", "y"} - set(data.files)
        if missing:
            raise InputError(f"{path} lacks arrays {sorted(missing)}; it needs 'x' and 'y'.")
        x, y = data["x"], data["y"]
    if rows is not None:
        x, y = x[rows], y[rows]
    x = x.reshape(len(x), -1).astype(dtype)
    if scale is not None:
        x /= scale
    return x, y


def first_per_class(
    labels: np.ndarray, classes: tuple | list | None = None, per_class: int | None = None
) -> np.ndarray:
    """Indices (ascending) of the first ``per_class`` rows of each class in ``classes``.

    ``classes=None`` keeps every class, ``per_class=None`` every row of them.

    >>> first_per_class(np.array([2, 4, 2, 7, 2, 4]), classes=(2, 4), per_class=2)
    array([0, 1, 2, 5])
    """
    labels = np.asarray(labels)
    keep = np.unique(labels) if classes is None else np.asarray(classes)
    rows = [np.flatnonzero(labels == c)[:per_class] for c in keep]
    return np.sort(np.concatenate(rows)) if rows else np.zeros(0, dtype=np.intp)
