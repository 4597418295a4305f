"""Deprecated: ``npt_dask.cli`` is now :mod:`npt_dask.interface.cli`.

This path warns and goes in npt-dask 0.3.0.
"""

from __future__ import annotations

import warnings
from typing import Any

from npt_dask.interface import cli as _moved
from npt_dask.interface.cli import *  # noqa: F403
from npt_dask.interface.cli.messages import for_the_command_line  # noqa: F401
from npt_dask.interface.cli.program import main

__all__ = list(_moved.__all__)

warnings.warn(
    f"npt_dask.cli is deprecated and goes in npt-dask 0.3.0; import {_moved.__name__} instead.",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    """Any other name of the module, from where it lives now."""
    return getattr(_moved, name)


if __name__ == "__main__":
    raise SystemExit(main())
