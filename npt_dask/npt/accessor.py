"""The ``.npt`` accessor on xarray objects: the functional API where it reads naturally.

Usage (``images`` a DataArray of rows, ``dataset`` a Dataset)::

    coords = images.npt.transform(model)
    ds = images.npt.project(model, "proj.zarr")
    ds = dataset.npt.project(model, "proj.zarr", var="pixels")

Each method is one line over :mod:`npt_dask`'s functions; nothing is
duplicated here.
"""

from __future__ import annotations

from typing import Any

import xarray as xr

__all__ = ["NPTDataArrayAccessor", "NPTDatasetAccessor"]


@xr.register_dataarray_accessor("npt")
class NPTDataArrayAccessor:
    """``da.npt.transform(model)``, ``.residual(model)``, ``.project(model, out)``."""

    def __init__(self, obj: xr.DataArray) -> None:
        self._obj = obj

    def transform(self, model: Any) -> xr.DataArray:
        """NPT coordinates of the rows (see :meth:`npt_dask.NPTModel.transform`)."""
        return model.transform(self._obj)

    def residual(self, model: Any) -> xr.DataArray:
        """Lemma 5 residuals of the rows (see :meth:`npt_dask.NPTModel.residual`)."""
        return model.residual(self._obj)

    def project(self, model: Any, out: Any, **kwargs: Any) -> xr.Dataset:
        """Chunked projection into ``out`` (see :func:`npt_dask.project`)."""
        from npt_dask.npt.projection_store import project

        return project(model, self._obj, out, **kwargs)


@xr.register_dataset_accessor("npt")
class NPTDatasetAccessor:
    """``ds.npt.project(model, out, var="pixels")``."""

    def __init__(self, obj: xr.Dataset) -> None:
        self._obj = obj

    def project(self, model: Any, out: Any, *, var: str, **kwargs: Any) -> xr.Dataset:
        """Chunked projection of variable ``var`` into ``out`` (see :func:`npt_dask.project`)."""
        from npt_dask.npt.projection_store import project

        return project(model, self._obj[var], out, **kwargs)
