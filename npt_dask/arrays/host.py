"""The one host boundary: every device-to-host crossing of the library goes through here.

A pass keeps its blocks, products and running sums in the namespace of its rows (numpy,
or CuPy on a GPU); what the driver needs -- a sum, a chunk's per-row output that the
driver writes -- crosses to host memory once, through :func:`to_host`. numpy arrays move
nothing, but the call still counts as a crossing point, so a test on the CPU sees where
a GPU run would copy (:func:`count_crossings`: a per-chunk crossing shows as one per
chunk, not one per pass).

The count is per process and thread-safe (tasks of the local threaded scheduler run in
this process; a distributed worker counts its own).

Numeric helpers only: no dask, xarray or zarr.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import array_api_compat
import numpy as np

from npt_dask.arrays.namespace import to_numpy

__all__ = ["Crossings", "count_crossings", "to_host"]

_LOCK = threading.Lock()
_TOTAL = [0]
_OPEN: list[Crossings] = []  # the counters open now, each recording the crossings' sizes


def to_host(a: Any) -> Any:
    """``a`` in host memory: an array of any namespace as numpy (numpy's own as it is), a
    tuple or list element by element; anything else (a number, bytes, a host object such
    as :class:`~npt_dask.linalg.tiles.TiledUpper`) as it is. One call is one crossing.

    >>> with count_crossings() as seen:
    ...     out = to_host((np.ones(2), 3.0))
    >>> seen.count, type(out[0]).__name__
    (1, 'ndarray')
    """
    with _LOCK:
        _TOTAL[0] += 1
        if _OPEN:
            size = _size(a)
            for seen in _OPEN:
                seen.sizes.append(size)
    return _moved(a)


def _size(a: Any) -> int:
    """The values ``a`` holds: an array's size, a tuple's or list's total, else 0."""
    if isinstance(a, tuple | list):
        return sum(_size(v) for v in a)
    return int(getattr(a, "size", 0) or 0) if hasattr(a, "shape") else 0


def _moved(a: Any) -> Any:
    if isinstance(a, np.ndarray):
        return a
    if isinstance(a, tuple | list):
        return type(a)(_moved(v) for v in a)
    if array_api_compat.is_array_api_obj(a) and not isinstance(a, np.generic):
        return to_numpy(a)
    return a


class Crossings:
    """The crossings through :func:`to_host` since the counter was opened; ``sizes``: the
    values each one moved (an array's size, a tuple's total; 0 for bytes or a number), in
    order, so a test sees a vector crossing where k scalars were meant to."""

    def __init__(self) -> None:
        self._start = _TOTAL[0]
        self.sizes: list[int] = []

    @property
    def count(self) -> int:
        return _TOTAL[0] - self._start


@contextmanager
def count_crossings() -> Iterator[Crossings]:
    """Count the host crossings of the block (this process, every thread): ``.count``."""
    with _LOCK:
        seen = Crossings()
        _OPEN.append(seen)
    try:
        yield seen
    finally:
        with _LOCK:
            _OPEN.remove(seen)
