"""Reading a pipeline's data: a train/test split as rows with labels.

Sources: ``digits`` (bundled with scikit-learn, nothing to download),
``moons`` (generated), ``npz`` files with arrays ``x`` and ``y`` (read
with ``allow_pickle=False``), and ``zarr`` datasets with the variables the
config names (``x_var``/``y_var``, default ``x`` and ``y``; labels and test
rows optional where no stage needs them). An ``.npz`` is a zip archive that
numpy can only read whole, so its rows are loaded once here; a zarr store's
rows stay lazy (an xarray
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

from npt_dask.errors import InputError
from npt_dask.interface.pipeline.config import DataConfig
from npt_dask.storage.datasets import (
    data_path,
    first_per_class,
    generated_mismatch,
    generator_params,
    load_npz,
    open_generated,
    write_deformed_mnist,
)

__all__ = ["Split", "generate_if_absent", "load_split", "located"]


@dataclass(frozen=True)
class Split:
    """Training and test rows with their labels.

    Rows are numpy arrays, or (``source="zarr"``) lazy xarray DataArrays with
    the labels as a ``label`` coordinate; labels are numpy arrays. A zarr
    source may have no labels (``y_train`` and ``y_test`` None) and no test
    rows (``x_test`` None) when no stage needs them.
    """

    x_train: Any
    y_train: np.ndarray | None
    x_test: Any
    y_test: np.ndarray | None
    description: str

    def summary(self) -> dict[str, object]:
        """Sizes and classes, for the report."""
        return {
            "description": self.description,
            "n_train": len(self.x_train),
            "n_test": 0 if self.x_test is None else len(self.x_test),
            "n_features": int(self.x_train.shape[1]),
            "classes": [] if self.y_train is None else np.unique(self.y_train).tolist(),
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
    path = located(cfg.path, cfg.data_dir)
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
    assert split.y_train is not None  # an npz split has labels
    assert split.y_test is not None
    x_tr, y_tr = _keep(split.x_train, split.y_train, cfg.classes, cfg.per_class)
    x_te, y_te = _keep(split.x_test, split.y_test, cfg.classes, cfg.per_class_test)
    return Split(x_tr, y_tr, x_te, y_te, f"{path.name}")


def located(name: str | os.PathLike, data_dir: str | None) -> Path:
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
    params["source"] = located(params["source"], cfg.data_dir)
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


def _zarr_rows(
    path: Path, rows: tuple[int, int] | None, cfg: DataConfig, needs_labels: bool
) -> tuple:
    """Rows ``rows`` of the store's ``x_var`` (lazy) and its ``y_var`` labels (None when the
    store has none and no stage needs them)."""
    import xarray as xr

    if not (path / "zarr.json").is_file():
        raise InputError(
            f"{path} is not a zarr store; write it first (benchmarks/make_mnist1m.py, "
            "npt_dask.storage.datasets.write_deformed_mnist) or add a [data] generate table."
        )
    try:
        ds = xr.open_zarr(path, consolidated=False)
    except Exception as exc:
        raise InputError(f"{path} could not be opened as a zarr dataset: {exc}") from exc
    x_var, y_var = cfg.x_var or "x", cfg.y_var or "y"
    found = sorted(str(v) for v in ds.data_vars)
    if x_var not in ds.data_vars or ds[x_var].ndim != 2:
        raise InputError(
            f"{path} has no 2-D variable {x_var!r} of rows (sample, feature); its variables "
            f"are {found}: set [data] x_var to the one holding the rows."
        )
    labelled = y_var in ds.data_vars
    if not labelled and (needs_labels or cfg.y_var is not None):
        raise InputError(
            f"{path} has no variable {y_var!r} of labels; its variables are {found}. Set [data] "
            "y_var to the one holding the labels, or run only stages that need none (kpca, "
            "kpcal1)."
        )
    n = ds.sizes[ds[x_var].dims[0]]
    start, stop = rows or (0, n)
    if stop > n:
        raise InputError(f"{path} has {n} rows; [data] train/test ask for rows up to {stop}.")
    x = ds[x_var][start:stop]
    x = x / cfg.scale if cfg.scale is not None else x
    if not labelled:
        return x, None
    y = np.asarray(ds[y_var][start:stop].values)
    return x.assign_coords(label=(x.dims[0], y)), y


def _zarr(cfg: DataConfig, needs_labels: bool) -> Split:
    assert cfg.path is not None  # DataConfig requires path for source="zarr"
    path = Path(cfg.path)
    x_tr, y_tr = _zarr_rows(path, cfg.train, cfg, needs_labels)
    if cfg.test is None:  # no stage scores test rows (checked with the config)
        x_te, y_te, where = None, None, path.name
    elif cfg.test_path is None:
        x_te, y_te = _zarr_rows(path, cfg.test, cfg, needs_labels)
        where = path.name
    else:
        test_file = located(cfg.test_path, cfg.data_dir)
        x_te, y_te = load_npz(test_file, rows=slice(*cfg.test), scale=cfg.test_scale)
        if len(x_te) < cfg.test[1] - cfg.test[0]:
            raise InputError(f"{test_file} has too few rows for [data] test = {list(cfg.test)}.")
        where = f"{path.name} (test rows: {test_file.name})"
    if cfg.shift:
        x_tr = x_tr - cfg.shift
        x_te = None if x_te is None else x_te - cfg.shift
    if x_te is not None and x_tr.shape[1] != x_te.shape[1]:
        raise InputError(
            f"Training rows have {x_tr.shape[1]} features, test rows {x_te.shape[1]}; "
            "point [data] path and test_path at the same kind of data."
        )
    return Split(x_tr, y_tr, x_te, y_te, where)


def load_split(cfg: DataConfig, *, needs_labels: bool = True) -> Split:
    """The train/test split a config describes; ``needs_labels``: some stage needs class
    labels (a zarr store without them is then refused)."""
    if cfg.source == "npz":
        split = _npz(cfg)
    elif cfg.source == "zarr":
        split = _zarr(cfg, needs_labels)
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
    n_test = None if split.x_test is None else len(split.x_test)
    if len(split.x_train) < 2 or n_test == 0:
        raise InputError(
            f"The data selection leaves {len(split.x_train)} training and {n_test} "
            "test rows; widen [data] train/test/classes."
        )
    return split
