"""Module paths users import that now live in a layer's folder: one table, one finder.

``import npt_dask.datasets`` (or ``from npt_dask.plot import spectrum``) loads the
module from its folder and binds it under both names, so there is one module object.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

__all__ = ["MOVED", "install"]

MOVED = {
    "npt_dask.cli": "npt_dask.interface.cli",
    "npt_dask.cluster": "npt_dask.runtime.cluster",
    "npt_dask.datasets": "npt_dask.storage.datasets",
    "npt_dask.pipeline": "npt_dask.interface.pipeline",
    "npt_dask.plot": "npt_dask.interface.plot",
}
"""Public module path -> where the module lives."""


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when its own path was imported."""


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
