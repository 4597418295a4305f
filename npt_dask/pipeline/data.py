"""Reading a pipeline's data: a train/test split as rows with labels.

Sources: ``digits`` (bundled with scikit-learn, nothing to download),
``moons`` (generated), ``npz`` files with arrays ``x`` and ``y`` (read
with ``allow_pickle=False``), and ``zarr`` datasets with variables ``x`` and
``y``. An ``.npz`` is a zip archive that numpy can only read whole, so its
rows are loaded once here; a zarr store's rows stay lazy (an xarray
DataArray read chunk by chunk, labels in memory). Everything after this
(fit, projection, methods) streams by chunks. :func:`generate_if_absent`
writes a generated zarr store (``[data] generate``) before it is read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from npt_dask.datasets import (
    data_path,
    first_per_class,
    generated_mismatch,
    generator_params,
    load_npz,
    open_generated,
    write_deformed_mnist,
)
from npt_dask.errors import InputError
from npt_dask.pipeline.config import DataConfig

__all__ = ["Split", "generate_if_absent", "load_split"]


@dataclass(frozen=True)
class Split:
    """Training and test rows with their labels.

    Rows are numpy arrays, or (``source="zarr"``) lazy xarray DataArrays with
    the labels as a ``label`` coordinate; labels are numpy arrays.
    """

    x_train: Any
    y_train: np.ndarray
    x_test: Any
    y_test: np.ndarray
    description: str

    def summary(self) -> dict[str, object]:
        """Sizes and classes, for the report."""
        return {
            "description": self.description,
            "n_train": len(self.x_train),
            "n_test": len(self.x_test),
            "n_features": int(self.x_train.shape[1]),
            "classes": [int(c) for c in np.unique(self.y_train)],
        }


def _stratified(x: np.ndarray, y: np.ndarray, cfg: DataConfig) -> Split:
    from sklearn.model_selection import train_test_split

    parts = train_test_split(x, y, test_size=cfg.test_fraction, random_state=cfg.seed, stratify=y)
    return Split(parts[0], parts[2], parts[1], parts[3], "")


def _keep(x: np.ndarray, y: np.ndarray, classes: tuple[int, ...] | None, per_class: int | None):
    rows = first_per_class(y, classes, per_class)
    return x[rows], y[rows]


def _npz(cfg: DataConfig) -> Split:
    assert cfg.path is not None  # DataConfig requires it for source="npz"
    path = _located(cfg.path, cfg.data_dir)
    x, y = load_npz(path, scale=cfg.scale)
    if cfg.shift:
        x -= cfg.shift
    if cfg.train is None or cfg.test is None:
        x, y = _keep(x, y, cfg.classes, None)
        split = _stratified(x, y, cfg)
    else:
        if max(cfg.train[1], cfg.test[1]) > len(x):
            raise InputError(f"{path} has {len(x)} rows; [data] train/test ask for more.")
        x_tr, y_tr = x[slice(*cfg.train)], y[slice(*cfg.train)]
        x_te, y_te = x[slice(*cfg.test)], y[slice(*cfg.test)]
        split = Split(x_tr, y_tr, x_te, y_te, "")
    x_tr, y_tr = _keep(split.x_train, split.y_train, cfg.classes, cfg.per_class)
    x_te, y_te = _keep(split.x_test, split.y_test, cfg.classes, cfg.per_class_test)
    return Split(x_tr, y_tr, x_te, y_te, f"{path.name}")


def _located(name: str | os.PathLike, data_dir: str | None) -> Path:
    """A data file: as given if it exists or is absolute, else in ``data_dir``/``$NPT_DATA_DIR``."""
    path = Path(name)
    return path if path.is_absolute() or path.is_file() else data_path(str(name), data_dir)


def generate_if_absent(cfg: DataConfig) -> bool:
    """Write the ``[data] generate`` store at ``path`` if it is absent; whether it was written.

    Runs the generator's tasks on the current dask scheduler (the
    pipeline's cluster). A store already at ``path`` is checked against the
    generator's parameters and refused if it differs, never overwritten.
    """
    if cfg.generate is None:
        return False
    assert cfg.path is not None  # DataConfig requires it for source="zarr"
    params = generator_params(cfg.generate)
    params["source"] = _located(params["source"], cfg.data_dir)
    path = Path(cfg.path)
    if path.exists():
        differs = generated_mismatch(open_generated(path).attrs, params)
        if differs:
            raise InputError(
                f"{path} was generated with other parameters ({differs}); remove it to "
                "regenerate, or make [data] generate match it."
            )
        return False
    write_deformed_mnist(path, **params)
    return True


def _zarr_rows(path: Path, rows: tuple[int, int] | None, scale: float | None) -> tuple:
    import xarray as xr

    if not (path / "zarr.json").is_file():
        raise InputError(
            f"{path} is not a zarr store; write it first (benchmarks/make_mnist1m.py, "
            "npt_dask.datasets.write_deformed_mnist) or add a [data] generate table."
        )
    try:
        ds = xr.open_zarr(path, consolidated=False)
    except Exception as exc:
        raise InputError(f"{path} could not be opened as a zarr dataset: {exc}") from exc
    if not {"x", "y"} <= set(ds.data_vars) or ds["x"].ndim != 2:
        raise InputError(f"{path} needs variables x (sample, feature) and y (sample).")
    n = ds.sizes[ds["x"].dims[0]]
    start, stop = rows or (0, n)
    if stop > n:
        raise InputError(f"{path} has {n} rows; [data] train/test ask for rows up to {stop}.")
    y = np.asarray(ds["y"][start:stop].values)
    x = ds["x"][start:stop]
    x = (x / scale if scale is not None else x).assign_coords(label=(x.dims[0], y))
    return x, y


def _zarr(cfg: DataConfig) -> Split:
    assert cfg.path is not None  # DataConfig requires path and test for source="zarr"
    assert cfg.test is not None
    path = Path(cfg.path)
    x_tr, y_tr = _zarr_rows(path, cfg.train, cfg.scale)
    if cfg.test_path is None:
        x_te, y_te = _zarr_rows(path, cfg.test, cfg.scale)
        where = path.name
    else:
        test_file = _located(cfg.test_path, cfg.data_dir)
        x_te, y_te = load_npz(test_file, rows=slice(*cfg.test), scale=cfg.test_scale)
        if len(x_te) < cfg.test[1] - cfg.test[0]:
            raise InputError(f"{test_file} has too few rows for [data] test = {list(cfg.test)}.")
        where = f"{path.name} (test rows: {test_file.name})"
    if cfg.shift:
        x_tr, x_te = x_tr - cfg.shift, x_te - cfg.shift
    if x_tr.shape[1] != x_te.shape[1]:
        raise InputError(
            f"Training rows have {x_tr.shape[1]} features, test rows {x_te.shape[1]}; "
            "point [data] path and test_path at the same kind of data."
        )
    return Split(x_tr, y_tr, x_te, y_te, where)


def load_split(cfg: DataConfig) -> Split:
    """The train/test split a config describes."""
    if cfg.source == "npz":
        split = _npz(cfg)
    elif cfg.source == "zarr":
        split = _zarr(cfg)
    elif cfg.source == "digits":
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        x, y = _keep(x / 16.0, y, cfg.classes, None)
        split = _stratified(x, y, cfg)
        split = Split(split.x_train, split.y_train, split.x_test, split.y_test, "sklearn digits")
    else:
        from sklearn.datasets import make_moons

        x, y = make_moons(cfg.n_samples, noise=cfg.noise, random_state=cfg.seed)
        split = _stratified(x, y, cfg)
        split = Split(split.x_train, split.y_train, split.x_test, split.y_test, "two moons")
    if len(split.x_train) < 2 or len(split.x_test) < 1:
        raise InputError(
            f"The data selection leaves {len(split.x_train)} training and {len(split.x_test)} "
            "test rows; widen [data] train/test/classes."
        )
    return split
