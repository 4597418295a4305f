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
from typing import Any

__all__ = ["MOVED", "install", "moved_to"]

MOVED = {
    "npt_dask.cli": "npt_dask.interface.cli",
    "npt_dask.cluster": "npt_dask.runtime.cluster",
    "npt_dask.datasets": "npt_dask.storage.datasets",
    "npt_dask.pipeline": "npt_dask.interface.pipeline",
    "npt_dask.plot": "npt_dask.interface.plot",
}
"""Public module path -> where the module lives."""


def moved_to(fullname: str) -> str | None:
    """Where the module ``fullname`` lives (a moved module or one inside a moved package),
    or None when it did not move.

    >>> moved_to("npt_dask.pipeline.config"), moved_to("npt_dask.kernels")
    ('npt_dask.interface.pipeline.config', None)
    """
    for old, new in MOVED.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old) :]
    return None


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers for the moved paths only, ahead of the path finder (which would load a
    second copy of a moved package's submodule through the alias's ``__path__``)."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if moved_to(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(str(moved_to(spec.name)))
        spec.loader_state = module.__spec__  # put back once the import system sets ours
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when its own path was imported: only its own spec comes back."""
        module.__spec__ = module.__spec__.loader_state  # type: ignore[union-attr]

    def get_code(self, fullname: str) -> Any:
        """The moved module's code (``python -m npt_dask.cli`` runs through it)."""
        target = str(moved_to(fullname))
        spec = importlib.util.find_spec(target)
        assert spec is not None
        assert spec.loader is not None
        return spec.loader.get_code(target)  # type: ignore[attr-defined]


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
