"""Deprecated: ``npt_dask.pipeline.report`` is now :mod:`npt_dask.interface.pipeline.report`.

This path warns and goes in npt-dask 0.3.0.
"""

from __future__ import annotations

import warnings
from typing import Any

from npt_dask.interface.pipeline import report as _moved
from npt_dask.interface.pipeline.report import *  # noqa: F403

__all__ = list(_moved.__all__)

warnings.warn(
    "npt_dask.pipeline.report is deprecated and goes in npt-dask 0.3.0; "
    f"import {_moved.__name__} instead.",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    """Any other name of the module, from where it lives now."""
    return getattr(_moved, name)
