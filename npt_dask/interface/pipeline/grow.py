"""The ``[grow]`` stage: grow a stored full-rank model by new files, one batch each.

    [grow]
    model = "models/digits_full.zarr"   # 'npt fit --n-components none', or an earlier grow
    files = ["day1.npy", "day2.npy"]    # .npy, .npz (array x), zarr; relative: data_dir
    residual_tol = 0.01                 # optional (npt_dask.npt.growth.RESIDUAL_TOL)
    max_landmarks = 5000                # optional
    out = "grown.zarr"                  # in the output folder (a path that leaves it is refused)

The grown model is saved (its lineage and batch records in the manifest) and
the stage's record -- rows seen and added and the certificate per batch --
goes into the report under ``"grow"``. The rest of the pipeline is not
changed by it: the projections and methods use the pipeline's own model.
A grown model already at ``out`` is replaced only with ``[output] overwrite =
true`` (``npt run --overwrite``); without it the run stops before any work.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npt_dask.arrays.device import to_device
from npt_dask.errors import InputError
from npt_dask.interface.pipeline.outputs import check_free
from npt_dask.npt.model import load
from npt_dask.npt.projection_store import open_data
from npt_dask.storage.datasets import data_path
from npt_dask.storage.store import check_target

__all__ = ["GrowConfig", "check_grow_target", "grow_stored", "resolve"]


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
        out = Path(self.out) if isinstance(self.out, str) else None
        if out is None or not self.out or out.is_absolute() or ".." in out.parts:
            raise InputError(
                f"[grow] out = {self.out!r} must name a store inside the pipeline's output "
                "folder (a relative path without '..'), e.g. out = 'grown.zarr'; the output "
                "folder is [output] dir (npt run --output)."
            )


def resolve(name: str, data_dir: str | None) -> Path:
    """A ``[grow] files`` entry's path: as given if absolute or here, else in ``data_dir``
    (``$NPT_DATA_DIR``)."""
    path = Path(name)
    return path if path.is_absolute() or path.exists() else data_path(name, data_dir)


def check_grow_target(cfg: GrowConfig, out_dir: Path, overwrite: bool) -> Path:
    """The grown model's path, refused before any work when it leaves ``out_dir`` (through
    a symbolic link too), holds something other than a model, or holds a model and
    ``overwrite`` is not set."""
    path = out_dir / cfg.out
    inside = out_dir.resolve()
    if inside not in path.resolve().parents:
        raise InputError(
            f"[grow] out = {cfg.out!r} resolves to {path.resolve()}, outside the output "
            f"folder {inside}; name a store inside it, e.g. out = 'grown.zarr'."
        )
    check_free(f"[grow] out = {cfg.out!r}", path, out_dir)  # through links too
    if path.resolve() == Path(cfg.model).resolve():
        raise InputError(
            f"[grow] out = {cfg.out!r} is [grow] model {cfg.model!r}: the parent model is kept "
            "as it was; choose another out, e.g. out = 'grown.zarr'."
        )
    check_target(path)
    if (path / "zarr.json").is_file() and not overwrite:
        raise InputError(
            f"{path} already holds a grown model (from an earlier run); set [output] "
            "overwrite = true (npt run --overwrite) to replace it, or choose another "
            "[grow] out."
        )
    return path


def grow_stored(
    cfg: GrowConfig,
    out_dir: Path,
    data_dir: str | None = None,
    overwrite: bool = False,
    device: str | None = None,
) -> dict[str, Any]:
    """Grow ``cfg.model`` by ``cfg.files`` (in order), save it to ``out_dir / cfg.out``
    (replacing a model there only with ``overwrite``), and return the record for the
    report. ``device="gpu"``: each batch's chunks on the CUDA device, as the fit's."""
    path = check_grow_target(cfg, out_dir, overwrite)
    grown: Any = load(cfg.model)
    for name in cfg.files:
        batch = to_device(open_data(resolve(name, data_dir)), device)
        grown = grown.partial_fit(
            batch, residual_tol=cfg.residual_tol, max_landmarks=cfg.max_landmarks
        )
    path = grown.save(path, overwrite=overwrite)
    record = grown.model.diagnostics.landmarks
    return {
        "model": str(path),
        "parent": record["lineage"][-1]["parent"],
        "n": grown.n_samples,
        "r": grown.n_components,
        "rows_added": grown.rows_added,
        "batches": [dict(b) for b in record["batches"]],
    }
