"""The centres of a Nyström problem as rows: gathered once (:func:`centre_rows`), their
kernel matrix ``K_mm`` (:func:`centre_kernel`, the one builder, in the kernel precision,
Fortran order: for the Falkon preconditioner and the certificate), and the centres'
rows that a pass evaluates anyway, put back in order (:func:`slot_array`,
:func:`assemble`: the direct Nyström route takes ``K_mm`` from its pass through
:class:`~npt_dask.engine.consumers.CentreRows`).

Layer rule: graph code; numbers from :mod:`npt_dask.engine.consumers`.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np

from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of
from npt_dask.engine.passes import Centres
from npt_dask.kernels import KernelSpec
from npt_dask.ridge.problem import RidgeProblem
from npt_dask.runtime.scheduler import compute

__all__ = [
    "assemble",
    "assemble_like",
    "centre_kernel",
    "centre_rows",
    "centres_of",
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


def assemble(
    parts: list[tuple[np.ndarray, np.ndarray]], m: int, dtype: Any, *, symmetric: bool = False
) -> np.ndarray:
    """The ``m`` centre rows from the pass's ``(slots, rows)`` outputs, emptying ``parts``
    as they are copied (the rows are held once, not twice: ``m x m`` values at m = 20,000
    are 1.6 GB in float32). Rows are written whole (C order); a ``symmetric`` matrix
    (``K_mm``) is handed back as its transpose, the same matrix up to rounding in Fortran
    order, as the tile solves read it (rows scattered into a Fortran array were strided
    writes: seconds at m = 20,000)."""
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


def assemble_like(parts: list[tuple[np.ndarray, Any]], m: int) -> Any:
    """The ``m`` centre rows (float64) in the namespace of the pass's outputs
    (:func:`npt_dask.engine.passes.row_pass` with ``on_device``): :func:`assemble` on
    numpy; elsewhere the chunks' rows joined there and put in slot order by one gather
    (the slots are host integers; nothing crosses)."""
    xp = namespace_of(*(v for _, v in parts))
    if is_numpy(xp):
        return assemble(parts, m, np.float64)
    slots = np.concatenate([np.asarray(s) for s, _ in parts])
    assert len(slots) == m, "every centre is a row of the data"
    joined = xp.concat([v for _, v in parts], axis=0)
    order = xp.asarray(np.argsort(slots, kind="stable"), device=device_of(joined))
    return xp.astype(xp.take(joined, order, axis=0), xp.float64)


def centre_rows(rows: da.Array, centres: np.ndarray) -> np.ndarray:
    """The centres' own rows, dense numpy in the rows' dtype: one gather of m rows (it
    reads every chunk holding one; do it once)."""
    got = compute(rows[centres])[0]
    return np.asarray(got.toarray() if hasattr(got, "toarray") else got)


def nystrom_rows(problem: RidgeProblem) -> da.Array:
    """The rows of a Nyström pass, in the plan's row chunks: X, or for a precomputed
    kernel the given matrix's centre columns ``K[:, idx]`` (one column chunk)."""
    rows = problem.rows.rechunk({0: problem.plan.row_chunk})
    if problem.kernel.precomputed:
        rows = rows[:, problem.centres].rechunk({1: -1})
    return rows


def centres_of(problem: RidgeProblem) -> Centres:
    """The operator's centres: the landmark rows (evaluated kernels), or one panel of the
    given matrix's landmark columns (a precomputed kernel, :func:`nystrom_rows`)."""
    idx = problem.centres
    assert idx is not None
    if not problem.kernel.precomputed:
        assert problem.centre_x is not None
        return Centres.of(problem.centre_x)
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
    """``K_mm`` of a problem in the kernel precision: :func:`centre_kernel` of its centres'
    rows, or the given matrix's centre block for a precomputed kernel."""
    idx = problem.centres
    assert idx is not None
    if problem.kernel.precomputed:
        block = compute(problem.rows[idx][:, idx])[0]
        return np.asfortranarray(block, dtype=problem.rows.dtype)
    assert problem.centre_x is not None
    return centre_kernel(problem.kernel, problem.centre_x, problem.rows.dtype)
