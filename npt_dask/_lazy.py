"""Packages whose public names are imported on first use (PEP 562).

A package ``__init__`` that imports its own modules can deadlock, or hand another
thread a half-initialised module, when two threads import the package and one of
those modules for the first time at once: the importing thread takes the module's
lock before it runs the package's ``__init__``. So the package ``npt_dask`` and the
sub-packages that re-export names (``kernels``, ``methods``, the command line, the
pipeline) import nothing of their own when imported; each name is imported from
its module when first asked for (``from npt_dask import fit``, ``npt.fit``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    namespace: MutableMapping[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` of the package whose globals are ``namespace``,
    its public names mapped by ``exports`` to the modules that define them; a name
    once imported is kept in ``namespace``.

    >>> space = {"__name__": "pkg"}
    >>> getattr_, dir_ = lazy_exports(space, {"sqrt": "math"})
    >>> getattr_("sqrt")(4.0), "sqrt" in dir_(), "sqrt" in space
    (2.0, True, True)
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
