"""What a zarr store holds, read from its metadata alone (no array is read): an npt model,
a kernel ridge model, a projection, or data (a plain zarr array, an xarray dataset, a
group of arrays). A loader given data says so and what to pass instead
(:func:`refuse_data`), rather than calling the store damaged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from npt_dask.errors import StoreError

__all__ = ["DATA_KINDS", "MODEL", "PROJECTION", "RIDGE", "refuse_data", "store_kind"]

MODEL, RIDGE, PROJECTION = "npt-model", "npt-kernel-ridge", "npt-projection"
"""The kinds npt-dask writes (the first two as the manifests' ``kind``)."""

DATA_KINDS = ("zarr-array", "xarray-dataset", "zarr-group")
"""The kinds that are data, not something npt-dask wrote."""


def _metadata(path: Path) -> dict[str, Any] | None:
    """The root ``zarr.json`` (zarr v3) as a dict; a zarr v2 array or group as
    ``{"node_type": ...}``; None where there is none, or it is not JSON."""
    if (path / ".zarray").is_file():
        return {"node_type": "array", "zarr_format": 2, **_json(path / ".zarray")}
    if (path / ".zgroup").is_file() and not (path / "zarr.json").is_file():
        return {"node_type": "group", "zarr_format": 2, "attributes": _json(path / ".zattrs")}
    found = _json(path / "zarr.json")
    return found or None


def _json(file: Path) -> dict[str, Any]:
    try:
        value = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def store_kind(path: str | Path) -> str | None:
    """What the zarr store at ``path`` holds: :data:`MODEL`, :data:`RIDGE`,
    :data:`PROJECTION`, one of :data:`DATA_KINDS`, or None (no zarr metadata there, or
    metadata that does not parse: a loader's own checks say which)."""
    path = Path(path)
    meta = _metadata(path)
    if meta is None:
        return None
    if meta.get("node_type") == "array":
        return "zarr-array"
    attrs = meta.get("attributes") or {}
    if not isinstance(attrs, dict):
        return None
    if "npt" in attrs:
        kind = attrs["npt"].get("kind", MODEL) if isinstance(attrs["npt"], dict) else None
        return kind if kind in (MODEL, RIDGE) else None  # another kind: the loader says
    if "npt_projection" in attrs:
        return PROJECTION
    return "xarray-dataset" if _variables(path) else "zarr-group"


def _variables(path: Path) -> list[str]:
    """The group's arrays that carry dimension names (xarray's variables)."""
    names = []
    for child in sorted(p for p in path.iterdir() if p.is_dir()):
        meta = _json(child / "zarr.json") or {"attributes": _json(child / ".zattrs")}
        attrs = meta.get("attributes") or {}
        if meta.get("dimension_names") or "_ARRAY_DIMENSIONS" in attrs:
            names.append(child.name)
    return names


_LOADERS = (
    "Models are what npt fit or model.save(path) write (npt.load reads them) and what "
    "npt ridge --out or estimator.save(path) write (npt_dask.load_ridge); npt info shows both"
)


def _what(path: Path, kind: str) -> tuple[str, str]:
    """How a store of ``kind`` reads in a message, and what to do with it."""
    if kind == PROJECTION:
        return (
            "an npt projection store (coordinates written by npt project)",
            "open it with xarray.open_zarr(path) (npt.project returns it so)",
        )
    if kind == "zarr-array":
        meta = _metadata(path) or {}
        dtype = meta.get("data_type") or meta.get("dtype") or "?"
        shape = "x".join(str(n) for n in meta.get("shape") or []) or "?"
        return (
            f"a plain zarr array (data: {shape} {dtype})",
            "pass it as DATA: npt fit PATH, npt project MODEL PATH, npt ridge PATH "
            "(in Python: npt.fit(zarr.open_array(path), ...))",
        )
    if kind == "xarray-dataset":
        names = ", ".join(_variables(path))
        return (
            f"an xarray dataset in zarr (data: variables {names})",
            "pass it as DATA with the variable to use: npt fit PATH --var NAME, npt project "
            "MODEL PATH --var NAME (in Python: xarray.open_zarr(path)[NAME])",
        )
    return (
        "a zarr group of data (no npt manifest)",
        "pass one of its arrays as DATA (npt fit PATH/NAME)",
    )


def refuse_data(path: str | Path, wanted: str) -> None:
    """Raise a :class:`~npt_dask.errors.StoreError` where the store at ``path`` is a
    projection or data, not ``wanted`` (``"an npt model"``, ``"a kernel ridge model"``):
    what it is, what to do with it, and which stores the loaders read. A model store, or
    anything unreadable (the loader's own checks say what is wrong), passes."""
    path = Path(path)
    kind = store_kind(path)
    if kind is None or kind in (MODEL, RIDGE):
        return
    what, instead = _what(path, kind)
    raise StoreError(f"{path} is {what}, not {wanted}: {instead}. {_LOADERS}.")
