"""The Krylov basis off the driver: the solver's tall panels as row-chunked dask arrays.

Layer rule: graph code. :class:`ChunkedPanels` implements
:class:`npt_dask.npt.eigen.Panels` with dask arrays chunked like the training
rows; every task sees numpy row chunks and calls :mod:`npt_dask.engine.blocks`. The
driver holds only small matrices (``cap x cap`` at most) and, at the end,
the ``n x r`` eigenvectors the model keeps.

Where a panel is held (:meth:`ChunkedPanels.keep`):

* under a ``distributed`` client, persisted on the workers (they spill to
  disk past their memory limit, and recompute from lineage after a loss);
* under a local scheduler, written to ``.npy`` files, one per chunk, in a
  scratch directory under dask's ``temporary-directory`` (else the system's
  temporary directory). A file goes when no array refers to it any more,
  and the directory when the panels are closed. (``allow_pickle=False``: no
  pickle is written or read.) The directory's name carries its owner
  (``npt-basis-<host>-<pid>-<start>-*``, :mod:`npt_dask.runtime.owners`): a SIGTERM
  removes this process's scratch before the process ends, and the scratch of
  processes killed outright (SIGKILL) is removed by the next chunked fit.

Every product is a dask array expression over those chunks: ``a.T @ b`` is a
sum over row chunks of ``a_i.T @ b_i``, ``a @ c`` a row-local product with a
small ``c``, the QR a tall-skinny QR (each chunk's triangle, their stacked QR
on the driver, each chunk's Q recomputed times its rows of that). What each
task holds: a row chunk of one column block of each operand (``chunk x b``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import threading
import uuid
import warnings
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask import delayed
from dask.array import PerformanceWarning

from npt_dask.arrays.host import to_host
from npt_dask.linalg.tall import (
    chunk_seeds,
    column_squares,
    gaussian_block,
    residual_squares,
    tsqr_q,
    tsqr_r,
)
from npt_dask.runtime.owners import OWNER_PATTERN, is_dead, owner_tag
from npt_dask.runtime.scheduler import blas_threads_for_tasks, compute, current_client

__all__ = ["ChunkedPanels", "remove_dead_scratch", "scratch_root"]

Apply = Callable[[da.Array, Callable[[da.Array], da.Array]], da.Array]


def scratch_root() -> str:
    """Where local panels are written: dask's ``temporary-directory``, else the system's."""
    return str(dask.config.get("temporary-directory", None) or tempfile.gettempdir())


_SCRATCH = re.compile(rf"^npt-basis-({OWNER_PATTERN})-[A-Za-z0-9_]+$")
_LIVE_SCRATCH: set[str] = set()  # this process's scratch directories, for SIGTERM


def remove_dead_scratch(root: str) -> list[str]:
    """Remove the scratch directories under ``root`` of processes that are gone
    (killed during a chunked fit); returns their paths. Others are left alone."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            match = _SCRATCH.match(entry.name)
            if match and entry.is_dir() and is_dead(match.group(1)):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return removed


def _on_sigterm(signum: int, frame: Any) -> None:
    """Remove this process's scratch, then do what SIGTERM did before (default: end)."""
    for path in list(_LIVE_SCRATCH):
        shutil.rmtree(path, ignore_errors=True)
    _LIVE_SCRATCH.clear()
    previous = _PREVIOUS.get("handler", signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
        return
    if previous == signal.SIG_IGN:
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


_PREVIOUS: dict[str, Any] = {}


def _remove_on_sigterm() -> None:
    """Install :func:`_on_sigterm` (chaining the handler it replaces); only the main
    thread can set handlers, elsewhere the next fit removes what a SIGTERM left."""
    if threading.current_thread() is not threading.main_thread():
        return
    current = signal.getsignal(signal.SIGTERM)
    if current is not _on_sigterm:
        _PREVIOUS["handler"] = current
        signal.signal(signal.SIGTERM, _on_sigterm)


class _ScratchFile:
    """A chunk's ``.npy`` file, removed when the last task graph naming it is gone."""

    def __init__(self, path: str) -> None:
        self.path = path
        weakref.finalize(self, _remove, path)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def _save(block: np.ndarray, path: str) -> tuple[int, int]:
    np.save(path, np.ascontiguousarray(block), allow_pickle=False)
    return block.shape


def _load(file: _ScratchFile) -> np.ndarray:
    return np.load(file.path, allow_pickle=False)


class _Columns:
    """A tall array written a column range at a time: segments of held panels."""

    def __init__(self) -> None:
        self.segments: list[tuple[int, int, da.Array]] = []

    def get(self, lo: int, hi: int) -> da.Array:
        pieces = [
            arr[:, max(lo, s) - s : min(hi, e) - s]
            for s, e, arr in self.segments
            if s < hi and e > lo
        ]
        covered = sum(p.shape[1] for p in pieces)
        if covered != hi - lo:
            raise AssertionError(f"columns {lo}:{hi} not written ({covered} present)")
        return pieces[0] if len(pieces) == 1 else da.concatenate(pieces, axis=1)

    def set(self, lo: int, x: da.Array) -> None:
        hi = lo + int(x.shape[1])
        kept: list[tuple[int, int, da.Array]] = []
        for s, e, arr in self.segments:
            if s < lo:
                kept.append((s, min(e, lo), arr[:, : min(e, lo) - s]))
            if e > hi:
                kept.append((max(s, hi), e, arr[:, max(s, hi) - s :]))
        kept.append((lo, hi, x))
        self.segments = sorted(kept, key=lambda seg: seg[0])


class WorkerHold:
    """Panels held on a cluster's workers: persisted (they spill to disk past the workers'
    memory limit and are recomputed from lineage after a loss)."""

    def hold(self, x: da.Array) -> da.Array:
        return x.persist()

    def gather(self, x: da.Array) -> np.ndarray:
        """``x`` on the driver (the workers cannot write into this process's memory)."""
        return np.asarray(to_host(compute(x)[0]), dtype=np.float64)

    def close(self) -> None:
        """Nothing to remove: persisted chunks go with the last reference to them."""


class DiskHold:
    """Panels held as ``.npy`` files, one per chunk, in a scratch directory under
    ``directory`` (default :func:`scratch_root`): for a local scheduler, whose
    "workers" are this process. Scratch of dead processes found there is removed."""

    def __init__(self, directory: str | None = None) -> None:
        root = directory or scratch_root()
        Path(root).mkdir(parents=True, exist_ok=True)
        remove_dead_scratch(root)
        self._scratch = tempfile.TemporaryDirectory(prefix=f"npt-basis-{owner_tag()}-", dir=root)
        _LIVE_SCRATCH.add(self._scratch.name)
        _remove_on_sigterm()

    def hold(self, x: da.Array) -> da.Array:
        token = uuid.uuid4().hex[:16]
        parts = x.to_delayed()
        paths = [
            [
                os.path.join(self._scratch.name, f"{token}-{i}-{j}.npy")
                for j in range(parts.shape[1])
            ]
            for i in range(parts.shape[0])
        ]
        saves = [
            delayed(_save, pure=True)(
                parts[i, j], paths[i][j], dask_key_name=f"npt-save-{token}-{i}-{j}"
            )
            for i in range(parts.shape[0])
            for j in range(parts.shape[1])
        ]
        compute(*saves)
        rows = [
            [
                da.from_delayed(
                    delayed(_load, pure=True)(
                        _ScratchFile(paths[i][j]), dask_key_name=f"npt-load-{token}-{i}-{j}"
                    ),
                    (x.chunks[0][i], x.chunks[1][j]),
                    dtype=x.dtype,
                )
                for j in range(parts.shape[1])
            ]
            for i in range(parts.shape[0])
        ]
        return da.block(rows)

    def gather(self, x: da.Array) -> np.ndarray:
        """``x`` on the driver, chunk by chunk into one preallocated array (no
        concatenated copy)."""
        out = np.empty(x.shape, dtype=np.float64)
        with blas_threads_for_tasks():
            da.store(x.astype(np.float64), out, lock=False)
        return out

    def close(self) -> None:
        """Remove the scratch directory with its files."""
        self._scratch.cleanup()
        _LIVE_SCRATCH.discard(self._scratch.name)


Hold = WorkerHold | DiskHold


class ChunkedPanels:
    """:class:`npt_dask.npt.eigen.Panels` as row-chunked dask arrays on the workers or on disk.

    Parameters
    ----------
    apply : callable
        ``apply(V, keep) -> K V`` for a row-chunked ``V``: one pass, its
        result held by ``keep`` (:meth:`npt_dask.engine.operator.KernelOperator.chunked_matmat`).
    row_chunks : sequence of int
        The training rows' chunks; every panel is chunked like them.
    block_size : int
        Column width of the blocks products are split into (the solver's b).
    directory : str, optional
        Scratch directory for a local scheduler (default :func:`scratch_root`).
    hold : WorkerHold or DiskHold, optional
        Where a panel used more than once is held; default the workers under a
        distributed client, else scratch files in ``directory``. Chosen here,
        once: nothing else in the class depends on the scheduler.

    Notes
    -----
    Disk (local scheduler) or worker memory (cluster): the basis and its
    image, ``16 n cap`` bytes, plus the n-row panels of the current step
    (a few ``n x b``, and ``n x r`` for the Ritz vectors). Per task: a row
    chunk of a column block of each operand. Each product reads its operands
    once; a panel used more than once is held (:meth:`keep`), one used once
    stays lazy (recomputed, never stored).

    The QR is a tall-skinny QR written out (each chunk's triangle, their
    stacked QR on the driver, each chunk's Q formed in the task that
    multiplies it by its rows of the small Q), not ``da.linalg.tsqr``: that
    one keeps every chunk's Q factor of the first stage in its graph until the
    product (held, or recomputed if computed apart from ``R``), and gives
    ``R`` as a dask array; here the first stage computes triangles only, ``R``
    lands on the driver, where the solver's small SVD needs it, and no n-row
    factor is held between the stages.
    """

    def __init__(
        self,
        apply: Apply,
        row_chunks: Sequence[int],
        block_size: int,
        directory: str | None = None,
        hold: Hold | None = None,
    ) -> None:
        self._apply = apply
        self.row_chunks = tuple(int(c) for c in row_chunks)
        self.n = sum(self.row_chunks)
        self.block_size = max(1, int(block_size))
        if hold is None:
            hold = WorkerHold() if current_client() is not None else DiskHold(directory)
        self._hold: Hold = hold
        self._held: set[str] = set()
        self._q, self._w = _Columns(), _Columns()
        self.writes = 0

    # --- where panels are held ---------------------------------------------------------

    def keep(self, x: da.Array) -> da.Array:
        if x.name in self._held:
            return x
        held = self._hold.hold(x.rechunk({0: self.row_chunks}))
        self._held.add(held.name)
        self.writes += 1
        return held

    def close(self) -> None:
        """Drop every held panel (the scratch directory with its files)."""
        self._q, self._w = _Columns(), _Columns()
        self._held.clear()
        self._hold.close()

    # --- the Panels interface ----------------------------------------------------------

    def allocate(self, cap: int) -> None:
        self._q, self._w = _Columns(), _Columns()

    def q(self, lo: int, hi: int) -> da.Array:
        return self._q.get(lo, hi)

    def w(self, lo: int, hi: int) -> da.Array:
        return self._w.get(lo, hi)

    def set_q(self, lo: int, x: da.Array) -> None:
        self._q.set(lo, x)

    def set_w(self, lo: int, x: da.Array) -> None:
        self._w.set(lo, x)

    def apply(self, lo: int, hi: int) -> None:
        self._w.set(lo, self._apply(self._q.get(lo, hi), self.keep))

    def random(self, rng: np.random.Generator, width: int) -> da.Array:
        seeds = chunk_seeds(rng, len(self.row_chunks))
        return da.concatenate(
            [
                da.from_delayed(
                    delayed(gaussian_block, pure=True)(int(seed), rows, width),
                    (rows, width),
                    dtype=np.float64,
                )
                for seed, rows in zip(seeds, self.row_chunks, strict=True)
            ]
        )

    def gram(self, a: da.Array, b: da.Array) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PerformanceWarning)
            product = a.T @ b
        return np.asarray(to_host(compute(product)[0]))

    def _small(self, c: np.ndarray, rows: tuple[int, ...]) -> da.Array:
        """A small matrix as a dask array: rows like the tall operand's columns."""
        c = np.asarray(c, dtype=np.float64)
        return da.from_array(c, chunks=(rows, self.block_size), name=False)

    def minus(self, x: da.Array, a: da.Array, c: np.ndarray) -> da.Array:
        return x - self.times(a, c)

    def times(self, a: da.Array, c: np.ndarray) -> da.Array:
        # dask warns that the product's partial blocks outnumber its inputs' (k / b column
        # blocks times the row chunks): that is the memory-safe sum it is meant to be
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PerformanceWarning)
            return a @ self._small(c, a.chunks[1])

    def qr(self, x: da.Array) -> tuple[da.Array, np.ndarray]:
        x = self.keep(x.rechunk({1: -1}))
        parts = list(x.to_delayed()[:, 0])
        triangles = compute(*[delayed(tsqr_r, pure=True)(p) for p in parts])
        q2, r = np.linalg.qr(np.vstack(triangles))
        bounds = np.cumsum([0] + [t.shape[0] for t in triangles])
        width = q2.shape[1]
        q = da.concatenate(
            [
                da.from_delayed(
                    delayed(tsqr_q, pure=True)(p, q2[bounds[i] : bounds[i + 1]]),
                    (self.row_chunks[i], width),
                    dtype=np.float64,
                )
                for i, p in enumerate(parts)
            ]
        )
        return self.keep(q), r

    def norms(self, x: da.Array) -> np.ndarray:
        squares = da.map_blocks(
            column_squares, x, chunks=((1,) * x.numblocks[0], x.chunks[1]), dtype=np.float64
        )
        return np.sqrt(np.asarray(to_host(compute(squares.sum(axis=0))[0])))

    def residual_norms(self, kv: da.Array, v: da.Array, theta: np.ndarray) -> np.ndarray:
        kv = kv.rechunk({1: -1})
        v = v.rechunk({1: -1})
        squares = da.map_blocks(
            residual_squares,
            kv,
            v,
            theta=np.asarray(theta, dtype=np.float64),
            chunks=((1,) * kv.numblocks[0], kv.chunks[1]),
            dtype=np.float64,
        )
        return np.sqrt(np.asarray(to_host(compute(squares.sum(axis=0))[0])))

    def hstack(self, parts: Sequence[da.Array]) -> da.Array:
        return da.concatenate(list(parts), axis=1)

    def take(self, x: da.Array, columns: slice | np.ndarray) -> da.Array:
        return x[:, columns]

    def to_numpy(self, x: da.Array) -> np.ndarray:
        return self._hold.gather(x)
