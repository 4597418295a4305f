"""Reading a pipeline's data: a train/test split as numpy rows with labels.

Sources: ``digits`` (bundled with scikit-learn, nothing to download),
``moons`` (generated), and ``npz`` files with arrays ``x`` and ``y`` (read
with ``allow_pickle=False``). An ``.npz`` is a zip archive that numpy can
only read whole, so its rows are loaded once here; everything after this
(fit, projection, methods) streams by chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npt_dask.datasets import data_path, first_per_class, load_npz
from npt_dask.errors import InputError
from npt_dask.pipeline.config import DataConfig

__all__ = ["Split", "load_split"]


@dataclass(frozen=True)
class Split:
    """Training and test rows with their labels."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
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
    from pathlib import Path

    assert cfg.path is not None  # DataConfig requires it for source="npz"
    path = Path(cfg.path)
    if not path.is_absolute() and not path.is_file():
        path = data_path(cfg.path, cfg.data_dir)
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


def load_split(cfg: DataConfig) -> Split:
    """The train/test split a config describes."""
    if cfg.source == "npz":
        split = _npz(cfg)
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
