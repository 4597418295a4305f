"""The centres of a Nyström problem as rows: gathered once (:func:`centre_rows`, through
the one gather :meth:`~npt_dask.engine.rows.Rows.take`), their kernel matrix ``K_mm``
(:func:`centre_kernel`, the one builder, in the kernel precision, Fortran order: for the
Falkon preconditioner and the certificate), and the centres' rows that a pass evaluates
anyway, put back in order (:func:`centre_slots` once per fit, :func:`assemble` after each
pass: the direct Nyström route takes ``K_mm`` from its pass through
:class:`~npt_dask.engine.consumers.CentreRows`, conjugate gradient ``K_mm P``).

Layer rule: graph code; numbers from :mod:`npt_dask.engine.consumers`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np

from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of
from npt_dask.engine.passes import Centres
from npt_dask.engine.rows import Aligned, Rows
from npt_dask.kernels import KernelSpec
from npt_dask.ridge.problem import RidgeProblem
from npt_dask.runtime.scheduler import compute, current_client, keep_blocks

__all__ = [
    "CentreSlots",
    "assemble",
    "centre_kernel",
    "centre_rows",
    "centre_slots",
    "centres_of",
    "dense_values",
    "held",
    "nystrom_rows",
    "problem_centre_kernel",
    "slot_array",
]


def _slots(block: np.ndarray, centres: np.ndarray, block_info: Any = None) -> np.ndarray:
    """Each row's place among the sorted centre indices (-1: not a centre)."""
    start = block_info[0]["array-location"][0][0] if block_info else 0
    rows = np.arange(start, start + len(block))
    at = np.searchsorted(centres, rows)
    at = np.minimum(at, len(centres) - 1)
    return np.where(centres[at] == rows, at, -1)


def slot_array(rows: da.Array, centres: np.ndarray) -> da.Array:
    """Lazy ``(n,)`` slots chunked like ``rows`` (nothing of size n on the driver)."""
    template = da.zeros(rows.shape[0], chunks=(rows.chunks[0],), dtype=np.int64)
    return template.map_blocks(_slots, centres, dtype=np.int64)


@dataclass(frozen=True)
class CentreSlots:
    """Where the centres sit among the row chunks of a pass, found once per fit and reused
    by every pass: ``slot`` each row's place among the centres (host blocks, lazy: what
    :class:`~npt_dask.engine.consumers.CentreRows` reads), and on a device ``at``, each
    chunk's centre positions already there (moved once: no index crosses per chunk or
    pass). ``aux`` is what a pass takes."""

    slot: Aligned
    at: Aligned | None = None

    @property
    def aux(self) -> dict[str, Aligned]:
        return {"slot": self.slot} if self.at is None else {"slot": self.slot, "at": self.at}


def centre_slots(rows: Rows, centres: np.ndarray) -> CentreSlots:
    """The :class:`CentreSlots` of the sorted centre indices ``centres`` among ``rows``'
    chunks: ``m`` positions on the rows' device, one copy per chunk, once."""
    slot = rows.aligned(slot_array(rows.data, centres), host=True)
    assert slot is not None
    if rows.numpy:
        return CentreSlots(slot)
    starts = np.concatenate([[0], np.cumsum(rows.chunks)]).astype(np.int64)
    bounds = np.searchsorted(centres, starts)
    at = [rows.put(np.asarray(centres[a:b] - s, dtype=np.int64))
          for (a, b), s in zip(itertools.pairwise(bounds), starts, strict=False)]  # fmt: skip
    if current_client() is not None:
        at = keep_blocks(at)
    return CentreSlots(slot, Aligned(tuple(at)))


def assemble(
    parts: list[tuple[np.ndarray, Any]], m: int, dtype: Any, *, symmetric: bool = False
) -> Any:
    """The ``m`` centre rows, in slot order and ``dtype``, from a pass's ``(slots, rows)``
    outputs (:class:`~npt_dask.engine.consumers.CentreRows`, in row order), emptying
    ``parts`` as they are used: the rows are held once, not twice (``m x m`` values at
    m = 20,000 are 1.6 GB in float32).

    On numpy the rows are written whole into one array (C order); a ``symmetric`` matrix
    (``K_mm``) is handed back as its transpose, the same matrix up to rounding in Fortran
    order, as the tile solves read it (rows scattered into a Fortran array were strided
    writes: seconds at m = 20,000). Elsewhere (a device) the chunks' rows are joined where
    they live: sorted centres in row order are in slot order already (else one gather puts
    them there); nothing crosses.
    """
    xp = namespace_of(*(v for _, v in parts))
    if is_numpy(xp):
        return _scattered(parts, m, dtype, symmetric)
    slots = np.concatenate([np.asarray(s) for s, _ in parts]) if parts else np.zeros(0, int)
    assert len(slots) == m, "every centre is a row of the data"
    values = [v for _, v in parts if int(v.shape[0])]
    parts.clear()
    joined = xp.concat(values, axis=0) if len(values) > 1 else values[0]
    del values
    if (np.diff(slots) <= 0).any():  # not in slot order: one gather
        order = xp.asarray(np.argsort(slots, kind="stable"), device=device_of(joined))
        joined = xp.take(joined, order, axis=0)
    return xp.astype(joined, getattr(xp, np.dtype(dtype).name), copy=False)


def _scattered(
    parts: list[tuple[np.ndarray, np.ndarray]], m: int, dtype: Any, symmetric: bool
) -> np.ndarray:
    """:func:`assemble` on numpy: rows written whole into one C-order array."""
    width = next(v.shape[1] for _, v in parts if len(v)) if parts else 0
    out = np.empty((m, width), dtype=dtype)
    seen = 0
    while parts:
        slots, values = parts.pop()
        out[slots] = values
        seen += len(slots)
        del values
    assert seen == m, "every centre is a row of the data"
    return out.T if symmetric else out


def centre_rows(rows: Rows, centres: np.ndarray, *, host: bool = False) -> Any:
    """The centres' own rows, dense, in the rows' dtype: one gather of m rows
    (:meth:`~npt_dask.engine.rows.Rows.take`; it reads every chunk holding one: do it
    once), in the rows' namespace on their device, or with ``host`` in host memory."""
    return rows.take(centres, host=host)


def dense_values(rows: Rows, values: Any) -> Any:
    """Targets or weights (numpy, dask, or a device's) as one float64 array where the
    rows live: on numpy the host array (a lazy one computed), elsewhere moved there once
    (:meth:`~npt_dask.engine.rows.Rows.put`). None stays None."""
    if values is None:
        return None
    if isinstance(values, da.Array):
        values = compute(values)[0]
    if rows.numpy:
        return np.asarray(rows.host(values), dtype=np.float64)
    xp = rows.xp
    return xp.astype(rows.put(values), xp.float64, copy=False)


def held(rows: Rows) -> Rows:
    """Rows that several passes read, held where they live for the fit: on a device their
    chunks persisted there once (the plan's ``device_rows``), so no pass moves, checks or
    rechunks them again (each would cross a flag a chunk); numpy rows as they are (read by
    each pass, within the host budget)."""
    return rows if rows.numpy else rows.like(rows.data.persist())


def nystrom_rows(problem: RidgeProblem) -> Rows:
    """The rows of a Nyström pass, in the plan's row chunks: X, or for a precomputed
    kernel the given matrix's centre columns ``K[:, idx]`` (one column chunk)."""
    rows = problem.rows.data.rechunk({0: problem.plan.row_chunk})
    if problem.kernel.precomputed:
        rows = rows[:, problem.centres].rechunk({1: -1})
    return problem.rows.like(rows)


def centres_of(problem: RidgeProblem) -> Centres:
    """The operator's centres: the landmark rows (evaluated kernels, where the rows
    live), or one panel of the given matrix's landmark columns (a precomputed kernel,
    :func:`nystrom_rows`)."""
    idx = problem.centres
    assert idx is not None
    if not problem.kernel.precomputed:
        assert problem.centre_x is not None
        return Centres.of(problem.centre_x, rows=problem.rows)
    return Centres.of(None, sizes=[len(idx)])


def centre_kernel(kernel: KernelSpec, centres: np.ndarray, dtype: Any = None) -> np.ndarray:
    """``K_mm``: the kernel between the centres' rows ``centres`` (numpy), Fortran order,
    in ``dtype`` (default: the rows'), one panel of rows at a time. The one builder of
    the centres' kernel matrix (the Falkon preconditioner, the certificate)."""
    dtype = centres.dtype if dtype is None else np.dtype(dtype)
    m = len(centres)
    out = np.empty((m, m), dtype=dtype, order="F")
    step = 2048
    for i0 in range(0, m, step):
        out[i0 : i0 + step] = kernel(centres[i0 : i0 + step], centres)
    return out


def problem_centre_kernel(problem: RidgeProblem) -> np.ndarray:
    """``K_mm`` of a problem in the kernel precision, in host memory: :func:`centre_kernel`
    of its centres' rows, or the given matrix's centre block for a precomputed kernel
    (``m x m`` values gathered, crossing once from a device)."""
    idx = problem.centres
    assert idx is not None
    if problem.kernel.precomputed:
        block = problem.rows.take(idx, host=True, columns=idx)
        return np.asfortranarray(block, dtype=problem.dtype)
    assert problem.centre_host is not None
    return centre_kernel(problem.kernel, problem.centre_host, problem.dtype)
