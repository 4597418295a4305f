"""The installed npt-dask version: a leaf module (it imports no npt_dask module), read by
the package facade (``npt_dask.__version__``), by :mod:`npt_dask.storage.store` (each manifest's
``package_version``) and by ``npt --version``, so none of them imports the facade."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("npt-dask")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
