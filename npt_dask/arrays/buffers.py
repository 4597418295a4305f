"""Big numpy buffers without paying for page faults one page at a time.

Where transparent huge pages are not granted, the first touch of a fresh
kernel block takes one page fault per 4 KiB page, a cost of the order of the block's
own matrix product. Two remedies:

* :func:`scratch` -- a per-thread buffer reused by every task the thread runs
  (kernel blocks that are consumed inside the task);
* :func:`populated_empty` -- an array whose pages the kernel maps in one go
  (``MAP_POPULATE``), for blocks that are kept.

A mapping is not numpy's allocation, so :mod:`tracemalloc` would not see it: each is
reported to it as numpy's own buffers are (its peak, the memory tests' measure, includes
the kernel blocks).

Numeric helpers only: numpy in, numpy out.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
import weakref

import numpy as np

__all__ = ["clear_scratch", "populated_empty", "scratch"]

_lock = threading.Lock()
_pools: dict[int, dict[str, np.ndarray]] = {}  # thread id -> name -> raw buffer
_POPULATE_MIN_BYTES = 1 << 24
_NUMPY_DOMAIN = 389047  # numpy's tracemalloc domain (NPY_TRACE_DOMAIN)


def _traced(array: np.ndarray) -> np.ndarray:
    """``array`` (over a mapping) reported to :mod:`tracemalloc` while it lives, as numpy
    reports its own buffers (nothing is done while tracemalloc is not tracing)."""
    api = ctypes.pythonapi
    api.PyTraceMalloc_Track.argtypes = [ctypes.c_uint, ctypes.c_size_t, ctypes.c_size_t]
    api.PyTraceMalloc_Untrack.argtypes = [ctypes.c_uint, ctypes.c_size_t]
    address = int(array.ctypes.data)
    if api.PyTraceMalloc_Track(_NUMPY_DOMAIN, address, array.nbytes) == 0:
        weakref.finalize(array, api.PyTraceMalloc_Untrack, _NUMPY_DOMAIN, address)
    return array


def populated_empty(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """Uninitialised array with its pages mapped up front (Linux), else ``np.empty``."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    flag = getattr(mmap, "MAP_POPULATE", 0)
    if nbytes < _POPULATE_MIN_BYTES or not flag:
        return np.empty(shape, dtype=dtype)
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | flag)
    return _traced(np.frombuffer(buf, dtype=dtype)).reshape(shape)


def scratch(name: str, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """This thread's reusable buffer ``name`` viewed as ``shape``/``dtype``.

    The contents are undefined; the buffer grows when needed and is reused
    by the next call with the same name on the same thread, so a caller must
    be done with it (or have copied out of it) before it calls again.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    with _lock:
        pool = _pools.setdefault(threading.get_ident(), {})
    raw = pool.get(name)
    if raw is None or raw.nbytes < nbytes:
        raw = populated_empty((max(nbytes, 1),), np.uint8)
        pool[name] = raw
    return raw[:nbytes].view(dtype).reshape(shape)


def clear_scratch() -> None:
    """Drop every thread's scratch buffers (call when no task is running)."""
    with _lock:
        _pools.clear()
