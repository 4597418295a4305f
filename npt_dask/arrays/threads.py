"""Threads of numeric work: elementwise passes over numpy blocks, and BLAS's threads.

**Elementwise passes.** numpy ufuncs release the GIL, so splitting a block into row
slices and running the ufuncs on a small thread pool uses every core for the elementwise
part of a kernel evaluation (``exp``, ``tanh``, powers), which numpy alone runs on one
(numexpr would do the same work at a dependency's cost).

**BLAS threads** (:func:`blas_threads`, :func:`blas_limit`): the one decision of how
many threads each kind of BLAS/LAPACK step runs with.

* ``"task"`` -- inside a task of dask's local threaded pool, which runs one task per
  core: one thread each (a BLAS call spawning a thread per core in every task
  oversubscribes the cores).
* ``"latency"`` -- a driver step made of many small synchronised BLAS calls: LAPACK's
  symmetric eigensolvers (the tridiagonal reduction is one threaded matrix-vector
  product per column) and triangular solves with a few right-hand sides (Falkon's,
  once per CG iteration): one thread. A threaded BLAS call ends at a barrier; on a
  machine busy with other work a descheduled BLAS thread makes the caller spin there
  (``exec_blas_async_wait``), once per column, and a busy machine makes such a step
  several times slower on two threads than on one.
* ``"product"`` -- a driver's wide matrix product (GEMM/SYRK panels, blocked
  factorisations): the process's own setting (every core unless the caller limited it):
  few calls, each long, about twice as fast on two cores when the machine is quiet and
  no slower than one thread when it is not.

The counts depend on the step only, never on the machine's load at the time: a thread
count changes a BLAS result's rounding, and a fit must give the same numbers (a resumed
checkpoint its iterates) however busy the machine was.

Numeric code only: numpy in, numpy out, no dask.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import numpy as np

from npt_dask.errors import InputError

__all__ = ["BLAS_THREADS", "BlasStep", "blas_limit", "blas_threads", "map_row_slices",
           "set_elementwise_threads"]  # fmt: skip

BlasStep = Literal["task", "latency", "product"]

BLAS_THREADS: dict[str, int | None] = {"task": 1, "latency": 1, "product": None}
"""BLAS threads per kind of step (None: the process's own setting); see the module doc."""

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


def blas_threads(step: BlasStep) -> int | None:
    """BLAS threads a step of kind ``step`` runs with (None: the process's own setting,
    left as it is); see the module doc.

    >>> blas_threads("latency"), blas_threads("product")
    (1, None)
    """
    if step not in BLAS_THREADS:
        raise InputError(f"step must be one of {sorted(BLAS_THREADS)}; got {step!r}.")
    return BLAS_THREADS[step]


_controller_lock = threading.Lock()
_controller: tuple[int, Any] | None = None  # (modules loaded when made, the controller)


def _blas_controller() -> Any:
    """threadpoolctl's view of the loaded BLAS libraries, made again only when modules
    were imported since (making one scans every loaded library: ~15 ms)."""
    global _controller
    from threadpoolctl import ThreadpoolController

    with _controller_lock:
        if _controller is None or _controller[0] != len(sys.modules):
            _controller = (len(sys.modules), ThreadpoolController())
        return _controller[1]


@contextlib.contextmanager
def blas_limit(step: BlasStep | int) -> Iterator[None]:
    """Run the block with :func:`blas_threads` ``(step)`` BLAS threads (every BLAS library
    loaded: numpy's and scipy's OpenBLAS alike), the previous counts restored after;
    nothing is changed for a ``"product"`` step. An int is a count a plan decided (the
    direct route's pass of one task at a time: every task thread in its BLAS calls)."""
    threads = max(1, step) if isinstance(step, int) else blas_threads(step)
    if threads is None:
        yield
        return
    with _blas_controller().limit(limits=threads, user_api="blas"):
        yield
