"""The stand-in's host<->device entries (written out, not generated): ``array``/``asarray``
(a host operand is one counted host->device copy), ``asnumpy``, ``get_array_module``,
``from_dlpack``, ``ascontiguousarray``/``asfortranarray`` (device arrays only, as CuPy types
the argument), the memory pools, ``is_available``."""

from __future__ import annotations

from typing import Any

import numpy as _np
from cupy import _standin
from cupy._core import ndarray, supported, unwrap


def is_available() -> bool:
    """True: the stand-in's one fake device (``cupy._standin.AVAILABLE``)."""
    return _standin.AVAILABLE


def _is_standin_tree(obj: Any) -> bool:
    if isinstance(obj, ndarray):
        return True
    if isinstance(obj, list | tuple):
        return any(_is_standin_tree(v) for v in obj)
    return False


def array(obj: Any, dtype: Any = None, copy: Any = True, order: str = "K", subok: bool = False,
          ndmin: int = 0, *, blocking: bool = False) -> ndarray:  # fmt: skip
    """A device array of ``obj``: a stand-in array copied on the device (or itself when no
    copy is needed), anything else copied from the host (one counted host→device copy)."""
    if isinstance(obj, ndarray):
        a = obj._a
        out = _np.array(a, dtype=dtype, copy=copy, order=order, ndmin=ndmin)
        return obj if out is a else ndarray._wrap(out)
    if _is_standin_tree(obj):
        return ndarray._wrap(_np.array(unwrap(obj), dtype=dtype, order=order, ndmin=ndmin))
    if copy is False:
        raise ValueError("Unable to avoid copy while creating an array as requested.")
    if hasattr(obj, "__cuda_array_interface__"):
        raise TypeError(f"Unsupported type {type(obj)}")
    host = _np.array(obj, dtype=dtype, order=order, ndmin=ndmin, copy=True)
    supported(host.dtype)
    _standin.host_to_device(host.nbytes)
    return ndarray._wrap(host)


def asarray(a: Any, dtype: Any = None, order: Any = None, *, copy: Any = None,
            blocking: bool = False) -> ndarray:  # fmt: skip
    """``array(a, dtype, copy=None, order)``: no copy of a stand-in array when none is
    needed; a host array is copied to the device (counted)."""
    return array(a, dtype=dtype, copy=copy, order=order or "K")


asanyarray = asarray


def asnumpy(a: Any, stream: Any = None, order: str = "C", out: Any = None, *,
            blocking: bool = True) -> _np.ndarray:  # fmt: skip
    """``a`` in host memory: a stand-in array copied back (counted), anything else through
    ``numpy.asarray``."""
    if isinstance(a, ndarray):
        return a.get(order=order, out=out)
    return _np.asarray(a, order=order)


def get_array_module(*args: Any) -> Any:
    """This module if any argument is a stand-in array, else numpy."""
    import cupy

    return cupy if any(isinstance(a, ndarray) for a in args) else _np


def from_dlpack(x: Any, *, device: Any = None, copy: Any = None) -> ndarray:
    """A stand-in array as itself; the stand-in imports no host DLPack tensor."""
    if isinstance(x, ndarray):
        return x
    raise TypeError(f"Unsupported type {type(x)}: the stand-in imports only its own arrays")


def ascontiguousarray(a: Any, dtype: Any = None) -> ndarray:
    """A C-contiguous device array (a stand-in array only: CuPy types the argument)."""
    if not isinstance(a, ndarray):
        raise TypeError(f"Argument 'a' has incorrect type (expected cupy._core.core."
                        f"_ndarray_base, got {type(a).__name__})")  # fmt: skip
    out = _np.ascontiguousarray(a._a, dtype=dtype)
    return a if out is a._a else ndarray._wrap(out)


def asfortranarray(a: Any, dtype: Any = None) -> ndarray:
    """A Fortran-contiguous device array (a stand-in array only)."""
    if not isinstance(a, ndarray):
        raise TypeError(f"Argument 'a' has incorrect type (expected cupy._core.core."
                        f"_ndarray_base, got {type(a).__name__})")  # fmt: skip
    out = _np.asfortranarray(a._a, dtype=dtype)
    return a if out is a._a else ndarray._wrap(out)


class _MemoryPool:
    """``get_default_memory_pool()``: reads the live device bytes."""

    def used_bytes(self) -> int:
        return _standin.live_bytes()

    def total_bytes(self) -> int:
        return _standin.live_bytes()

    def free_bytes(self) -> int:
        return 0

    def free_all_blocks(self, stream: Any = None) -> None:
        return None

    def n_free_blocks(self) -> int:
        return 0

    def set_limit(self, size: Any = None, fraction: Any = None) -> None:
        return None

    def get_limit(self) -> int:
        return _standin.DEVICE_BYTES


_POOL = _MemoryPool()
_PINNED = _MemoryPool()


def get_default_memory_pool() -> _MemoryPool:
    return _POOL


def get_default_pinned_memory_pool() -> _MemoryPool:
    return _PINNED
