"""Which dask scheduler is in effect, and shipping numpy blocks to it.

Graph code only: no zarr, no xarray.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import array_api_compat
import dask
import dask.array as da
import numpy as np
from dask import delayed
from dask.array.core import normalize_chunks
from dask.base import get_scheduler

from npt_dask.arrays.buffers import clear_scratch
from npt_dask.arrays.threads import blas_limit

with contextlib.suppress(ImportError):
    # dask's first compute imports its distributed scheduler to look for a client (about
    # 12 MB of modules): imported with the package, not inside the first fit, whose
    # peak memory is then the arrays its plan counts against memory_budget
    import distributed  # noqa: F401

__all__ = [
    "LOST_DATA_ATTEMPTS",
    "blas_threads_for_tasks",
    "compute",
    "current_client",
    "keep_blocks",
    "lost_data",
    "numpy_rows",
    "persist_blocks",
    "retry_on_lost_data",
    "ship_blocks",
    "task_threads",
    "worker_processes",
]

LOST_DATA_ATTEMPTS = 4
"""Times :func:`retry_on_lost_data` runs a job whose scattered inputs a dead worker took."""

_log = logging.getLogger("npt_dask")
T = TypeVar("T")


def current_client() -> Any | None:
    """The ``distributed.Client`` that ``dask.compute`` would use, or None."""
    scheduler = get_scheduler()
    owner = getattr(scheduler, "__self__", None)
    if owner is not None and type(owner).__name__ == "Client":
        return owner
    return None


def task_threads() -> int:
    """How many tasks run at once: the cluster's worker threads, else the local pool's."""
    client = current_client()
    if client is not None:
        info = (
            client.scheduler_info(n_workers=-1)
            if _takes_n_workers(client)
            else (client.scheduler_info())
        )
        return max(1, sum(int(w.get("nthreads", 1)) for w in info["workers"].values()))
    from dask.system import CPU_COUNT

    return max(1, int(dask.config.get("num_workers", None) or CPU_COUNT))


def worker_processes() -> int:
    """How many processes run tasks: the cluster's workers, else 1 (local threads)."""
    client = current_client()
    if client is None:
        return 1
    info = client.scheduler_info(n_workers=-1) if _takes_n_workers(client) else (
        client.scheduler_info())  # fmt: skip
    return max(1, len(info["workers"]))


def _takes_n_workers(client: Any) -> bool:
    import inspect

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def ship_blocks(blocks: Sequence[np.ndarray]) -> list[Any]:
    """Make numpy blocks available to tasks without hashing or copying them.

    Under a distributed client the blocks are scattered to the workers and
    futures are returned, so task graphs carry only small references, never
    the data. Locally the arrays themselves are returned: tasks of the
    threaded scheduler share them by reference.

    Every worker gets a copy up front (``broadcast``: the tasks need most
    blocks on every worker). Scattered data have no lineage, and the Active
    Memory Manager later drops the copies no queued task waits for, so a
    worker's death can lose them: the caller must ship them again,
    :func:`retry_on_lost_data` does. Data that must outlive one job belong in
    :func:`keep_blocks`, :func:`numpy_rows` or :func:`persist_blocks`, which keep
    lineage.
    """
    client = current_client()
    if client is not None:
        return client.scatter(list(blocks), hash=False, broadcast=True)
    return list(blocks)


def numpy_rows(array: np.ndarray, rows: Any) -> da.Array:
    """A numpy array as a dask array of row chunks (``rows`` as ``da.from_array`` takes it).

    Locally the chunks are views of the array, shared by reference (no copy:
    ``da.from_array`` copies a numpy array whole since dask 2024.12, an ``n x d``
    array no plan counts; :func:`_shared_rows`). Under a distributed client each row
    block is sent to the cluster once, as the literal value of its own task
    (:func:`keep_blocks`): task graphs built on the array name its keys, never carry
    the data ("Sending large graph" on every compute), and the blocks keep their
    lineage.

    Notes
    -----
    Lineage is why this is not ``client.scatter``: scattered data exist only
    on workers, and the Active Memory Manager (on by default, policy
    ``ReduceReplicas``) drops every replica no queued task waits for, however
    many were broadcast. A worker's death then loses blocks for good and every
    later task on them is cancelled ("lost dependencies"). A kept block is
    recomputed from the scheduler's copy instead. The cost: the scheduler
    keeps one copy of the array (``n * d`` values) while the array is alive;
    data larger than that should come as zarr or dask arrays, whose chunks
    are read where they are used.
    """
    chunks = normalize_chunks((rows, -1), array.shape, dtype=array.dtype)
    client = current_client()
    if client is None:
        return _shared_rows(array, chunks)
    return _literal_rows(client, array, chunks)


def _shared_rows(array: np.ndarray, chunks: tuple[tuple[int, ...], ...]) -> da.Array:
    """``array``'s row blocks, views of it, as the literal values of a dask array's keys,
    named by its contents as ``da.from_array`` names them."""
    from dask.base import tokenize

    name = f"array-{tokenize(array, chunks)}"
    starts = np.concatenate([[0], np.cumsum(chunks[0])]).astype(int)
    graph = {(name, i, 0): array[a:b] for i, (a, b) in enumerate(itertools.pairwise(starts))}
    return da.Array(graph, name, chunks, meta=array[:0, :0])


def _literal_rows(client: Any, array: np.ndarray, chunks: tuple[tuple[int, ...], ...]) -> da.Array:
    """``array``'s row blocks as a dask array on :func:`keep_blocks` futures."""
    starts = np.concatenate([[0], np.cumsum(chunks[0])]).astype(int)
    blocks = [array[a:b] for a, b in itertools.pairwise(starts)]
    parts = [
        da.from_delayed(delayed(kept), shape=block.shape, dtype=array.dtype)
        for block, kept in zip(blocks, keep_blocks(blocks), strict=True)
    ]
    return da.concatenate(parts, axis=0)


def keep_blocks(blocks: Sequence[np.ndarray]) -> list[Any]:
    """Numpy blocks that tasks will use for a long time, sent once and never lost.

    Under a distributed client each block becomes the literal value of a task
    computed on the cluster, and futures are returned: task graphs carry only
    their keys, and the scheduler keeps each block's value as the task's
    specification, so a worker's death makes it rerun the task rather than
    lose the block (scattered data, :func:`ship_blocks`, have no such
    lineage). Locally the arrays themselves are returned.

    Notes
    -----
    The scheduler holds one copy of the blocks while their futures are alive;
    the graph is sent once ("Sending large graph" is expected here and
    silenced).
    """
    client = current_client()
    if client is None:
        return list(blocks)
    import uuid
    import warnings

    name = f"npt-kept-{uuid.uuid4().hex}"
    literals = [delayed(_contiguous(b), name=f"{name}-{i}") for i, b in enumerate(blocks)]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
        return client.compute(literals)


def _contiguous(block: Any) -> Any:
    """A numpy block in its own C-contiguous memory; another library's array (a device's)
    as it is (numpy cannot read it; it is pickled by its own library)."""
    if isinstance(block, np.ndarray | np.generic):
        return np.ascontiguousarray(block)
    return block if array_api_compat.is_array_api_obj(block) else np.ascontiguousarray(block)


def persist_blocks(blocks: Sequence[Any]) -> list[Any]:
    """Compute dask blocks (Delayed) where tasks will use them, keeping their lineage.

    Under a distributed client this returns futures: passed as task arguments
    they stay alive as long as the tasks (a persisted *Delayed* does not: the
    tasks built on it name its key, and the data are released once the
    Delayed itself is garbage), and a worker's death only makes the scheduler
    recompute them. Locally the Delayed objects are returned unchanged.
    """
    client = current_client()
    if client is None:
        return list(blocks)
    return client.compute(list(blocks))


def lost_data(exc: BaseException) -> bool:
    """Whether ``exc`` says a task's inputs died with a worker (not a user's cancel).

    The scheduler cancels the dependents of a lost scattered block with
    "lost dependencies"; a result further down the same graph (a tree sum)
    may reach the client first as "already forgotten" (seen on a loaded
    machine). Both mean the job's own inputs are gone.
    """
    return type(exc).__name__ == "FutureCancelledError" and (
        getattr(exc, "reason", None) in ("lost dependencies", "already forgotten")
    )


def retry_on_lost_data(job: Callable[[], T], *, attempts: int = LOST_DATA_ATTEMPTS) -> T:
    """Run ``job`` (which ships its blocks and computes), again if a worker took them along.

    Blocks scattered by :func:`ship_blocks` exist only on the workers that
    received them and have no lineage: when such a worker dies, every task
    that needs them is cancelled with "lost dependencies" (persisted graph
    results, by contrast, are recomputed by the scheduler). ``job`` must
    therefore scatter afresh on each call and be deterministic; then a retry
    gives bit-for-bit the result the fault-free run would have given.
    """
    for attempt in range(1, attempts + 1):
        try:
            return job()
        except Exception as exc:
            if not lost_data(exc) or attempt == attempts:
                raise
            _log.warning("npt-dask: %s; a worker died, rerunning (attempt %d)", exc, attempt + 1)
    raise AssertionError("unreachable")  # pragma: no cover


@contextlib.contextmanager
def blas_threads_for_tasks(per_task: int | None = None) -> Iterator[None]:
    """BLAS threads per task while the local threaded scheduler runs tasks: the ``"task"``
    count of :func:`npt_dask.arrays.threads.blas_threads` (one), or ``per_task`` where a
    plan decided it.

    dask's threaded scheduler runs one task per core; each task's BLAS call
    spawning a thread per core as well oversubscribes the machine. Distributed
    workers already start with ``OPENBLAS_NUM_THREADS=1``; the synchronous
    scheduler keeps BLAS's own threads.
    """
    scheduler = dask.config.get("scheduler", None)
    if current_client() is not None or scheduler in ("sync", "synchronous", "single-threaded"):
        yield
        return
    with blas_limit("task" if per_task is None else int(per_task)):
        yield


def compute(
    *collections: Any, release_scratch: bool = False, blas_threads: int | None = None
) -> tuple[Any, ...]:
    """``dask.compute`` with the ``"task"`` BLAS threads per task (one), or
    ``blas_threads`` where a plan decided it, on the local threaded scheduler.

    ``release_scratch`` drops the per-thread block buffers afterwards (local
    threads only; workers keep theirs until the next fit releases them).
    """
    with blas_threads_for_tasks(blas_threads):
        results = dask.compute(*collections)
    if release_scratch:
        clear_scratch()
    return results
