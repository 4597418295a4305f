"""The ``[grow]`` stage: grow a stored full-rank model by new files, one batch each.

    [grow]
    model = "models/digits_full.zarr"   # 'npt fit --n-components none', or an earlier grow
    files = ["day1.npy", "day2.npy"]    # .npy, .npz (array x), zarr; relative: data_dir
    residual_tol = 0.01                 # optional (npt_dask.growth.RESIDUAL_TOL)
    max_landmarks = 5000                # optional
    out = "grown.zarr"                  # in the output folder

The grown model is saved (its lineage and batch records in the manifest) and
the stage's record -- rows seen and added and the certificate per batch --
goes into the report under ``"grow"``. The rest of the pipeline is not
changed by it: the projections and methods use the pipeline's own model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npt_dask.datasets import data_path
from npt_dask.errors import InputError
from npt_dask.model import load
from npt_dask.projection import open_data

__all__ = ["GrowConfig", "grow_stored"]


@dataclass(frozen=True)
class GrowConfig:
    """The ``[grow]`` table (see the module docstring)."""

    model: str
    files: tuple[str, ...]
    residual_tol: float | None = None
    max_landmarks: int | None = None
    out: str = "grown.zarr"

    def __post_init__(self) -> None:
        files = self.files
        if isinstance(files, str) or not files or not all(isinstance(f, str) for f in files):
            raise InputError(
                "[grow] files must be a non-empty list of data files, e.g. "
                "files = ['day1.npy', 'day2.npy'] (one batch each)."
            )
        object.__setattr__(self, "files", tuple(files))


def _resolve(name: str, data_dir: str | None) -> Path:
    path = Path(name)
    return path if path.is_absolute() or path.exists() else data_path(name, data_dir)


def grow_stored(cfg: GrowConfig, out_dir: Path, data_dir: str | None = None) -> dict[str, Any]:
    """Grow ``cfg.model`` by ``cfg.files`` (in order), save it to ``out_dir / cfg.out``,
    and return the record for the report."""
    grown: Any = load(cfg.model)
    for name in cfg.files:
        batch = open_data(_resolve(name, data_dir))
        grown = grown.partial_fit(
            batch, residual_tol=cfg.residual_tol, max_landmarks=cfg.max_landmarks
        )
    path = grown.save(out_dir / cfg.out)
    record = grown.model.diagnostics.landmarks
    return {
        "model": str(path),
        "parent": record["lineage"][-1]["parent"],
        "n": grown.n_samples,
        "r": grown.n_components,
        "rows_added": grown.rows_added,
        "batches": [dict(b) for b in record["batches"]],
    }
