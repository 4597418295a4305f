"""Multi-threaded elementwise passes over numpy blocks.

numpy ufuncs release the GIL, so splitting a block into row slices and running
the ufuncs on a small thread pool uses every core for the elementwise part of a
kernel evaluation (``exp``, ``tanh``, powers), which numpy alone runs on one
(numexpr would do the same work at a dependency's cost).

Numeric code only: numpy in, numpy out, no dask.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from npt_dask.errors import InputError

__all__ = ["map_row_slices", "set_elementwise_threads"]

_MIN_ELEMENTS_PER_THREAD = 1 << 16
_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_n_threads: int = max(1, min(os.cpu_count() or 1, 8))


def set_elementwise_threads(n_threads: int) -> None:
    """Set the number of threads for elementwise passes (1 disables threading)."""
    global _pool, _n_threads
    if int(n_threads) < 1:
        raise InputError(f"n_threads must be an int >= 1; got {n_threads!r}.")
    with _lock:
        _n_threads = int(n_threads)
        if _pool is not None:
            _pool.shutdown(wait=False)
            _pool = None


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_n_threads, thread_name_prefix="npt-elementwise")
        return _pool


def map_row_slices(func: Callable[[slice], None], n_rows: int, n_cols: int) -> None:
    """Call ``func(rows)`` on contiguous row slices covering ``range(n_rows)``.

    ``func`` must write its result in place; slices are disjoint, so no two
    threads touch the same memory. Small blocks run inline.
    """
    n_parts = min(_n_threads, max(1, (n_rows * max(n_cols, 1)) // _MIN_ELEMENTS_PER_THREAD))
    if n_parts <= 1 or threading.current_thread().name.startswith("npt-elementwise"):
        func(slice(0, n_rows))
        return
    bounds = np.linspace(0, n_rows, n_parts + 1).astype(int)
    slices = [slice(a, b) for a, b in itertools.pairwise(bounds) if b > a]
    for future in [_get_pool().submit(func, s) for s in slices]:
        future.result()
