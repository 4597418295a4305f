"""Run a test on the CuPy stand-in or on real CuPy: the ``xp_backend`` fixture.

``backend("standin")`` makes ``import cupy`` / ``import cupyx`` give the stand-in for the
duration of a ``with`` block and restores what was there before (a real CuPy included): the
stand-in's modules are imported once (from ``tests/standin``, which is on ``sys.path`` only
during that import) and swapped in and out of ``sys.modules`` with
``array_api_compat.cupy``, whose modules bind ``cupy`` at import. Each swap also clears
what caches the old ``cupy``: ``array_api_compat``'s type caches (its own and any vendored
copy), xarray's duck-array module cache, and re-registers dask's CuPy dispatch
(``dask.array.backends.register_cupy``, ``dask.sizeof``) and chunk type for the active
module, so the stand-in never shadows a real CuPy outside the block.

``backend("cupy")`` runs on the real CuPy; the fixture skips it unless CuPy sees a CUDA
device (and marks it ``gpu``).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
_STANDIN: dict[str, ModuleType] = {}


def _owned(name: str) -> bool:
    """``cupy``, ``cupyx`` and the ``array_api_compat.cupy`` wrappers (scipy's and
    scikit-learn's vendored copies too), with their submodules."""
    parts = name.split(".")
    if parts[0] in ("cupy", "cupyx"):
        return True
    return any(parts[i : i + 2] == ["array_api_compat", "cupy"] for i in range(len(parts) - 1))


def _take() -> dict[str, ModuleType]:
    """Remove (and return) every module :func:`_owned` names from ``sys.modules``, and the
    attributes that bind them on their parent packages."""
    taken = {k: v for k, v in sys.modules.items() if _owned(k)}
    for k in taken:
        del sys.modules[k]
        parent, _, child = k.rpartition(".")
        if parent and not _owned(parent) and parent in sys.modules:
            vars(sys.modules[parent]).pop(child, None)
    return taken


def _put(modules: dict[str, Any]) -> None:
    """Put ``modules`` in ``sys.modules`` and bind them on their parent packages."""
    for k, v in modules.items():
        sys.modules[k] = v
        parent, _, child = k.rpartition(".")
        if v is not None and parent and not _owned(parent) and parent in sys.modules:
            setattr(sys.modules[parent], child, v)


def _standin_modules() -> dict[str, ModuleType]:
    if not _STANDIN:
        before = _take()
        sys.path.insert(0, str(HERE))
        try:
            for name in ("cupy", "cupyx", "cupyx.scipy.linalg", "array_api_compat.cupy"):
                importlib.import_module(name)
            assert Path(sys.modules["cupy"].__file__).parent.parent == HERE
        finally:
            sys.path.remove(str(HERE))
            _STANDIN.update(_take())
            _put(before)
    return _STANDIN


def real_cupy() -> ModuleType | None:
    """The installed CuPy if it imports and sees a CUDA device, else None (never the
    stand-in: ``tests/standin`` is not on ``sys.path`` outside :func:`backend`)."""
    try:
        saved = _take()
        try:
            cupy = importlib.import_module("cupy")
            if Path(cupy.__file__).parent.parent == HERE:
                return None
            ok = cupy.cuda.runtime.getDeviceCount() > 0
        finally:
            _take()
            _put(saved)
        return cupy if ok else None
    except Exception:  # no CuPy, no driver, no device
        return None


def _forget_caches() -> None:
    for name, module in list(sys.modules.items()):
        if name.endswith("array_api_compat.common._helpers") and module is not None:
            for obj in vars(module).values():
                if hasattr(obj, "cache_clear"):
                    obj.cache_clear()
    pycompat = sys.modules.get("xarray.namedarray.pycompat")
    if pycompat is not None:
        pycompat._cached_duck_array_modules.pop("cupy", None)


def _register_with_dask() -> None:
    if sys.modules.get("cupy") is None:
        return
    import dask.array as da
    import dask.array.backends
    import dask.sizeof
    from dask.array import chunk_types

    dask.array.backends.register_cupy()
    dask.sizeof.register_cupy()
    cupy = sys.modules["cupy"]
    if cupy.ndarray not in chunk_types._HANDLED_CHUNK_TYPES:
        da.register_chunk_type(cupy.ndarray)


@contextlib.contextmanager
def backend(kind: str) -> Iterator[ModuleType]:
    """``cupy`` is the stand-in (``kind="standin"``) or the real CuPy (``"cupy"``) inside."""
    saved = _take()
    try:
        if kind == "standin":
            _put(_standin_modules())
        else:
            _put(saved)
            importlib.import_module("array_api_compat.cupy")
        _forget_caches()
        _register_with_dask()
        yield importlib.import_module("cupy")
    finally:
        _take()
        _put(saved)
        _forget_caches()
        _register_with_dask()


BACKENDS = [
    pytest.param("standin", id="standin"),
    pytest.param("cupy", id="cupy", marks=pytest.mark.gpu),
]


@pytest.fixture(params=BACKENDS)
def xp_backend(request: Any) -> Iterator[ModuleType]:
    """The ``cupy`` module a test runs on: the stand-in always, real CuPy where CUDA is."""
    if request.param == "cupy" and real_cupy() is None:
        pytest.skip("needs CuPy and a CUDA device")
    with backend(request.param) as cupy:
        yield cupy
