"""Kernel ridge's shared pieces: the problem and solution records, the symmetric solves,
the one ``K_mm`` builder, the centres' rows and slots.

The routes that use them are :mod:`npt_dask.ridge.routes` (one module each); the plan
that picks one is :mod:`npt_dask.ridge.planning`; the loop of the iterative ones is
:mod:`npt_dask.ridge.iterations`.

* :func:`solve_symmetric` and :func:`solve_moments` factor a symmetric system by the
  one jittered Cholesky (:func:`npt_dask.linalg.jitter.jittered_cholesky`: from no
  jitter, up to :data:`RIDGE_JITTER` of the mean diagonal), else least squares with
  scikit-learn's warning.
* :func:`centre_kernel` is the one ``K_mm`` builder (the centres' kernel matrix, in the
  kernel precision, Fortran order): for the Falkon preconditioner and the certificate.
  The direct Nyström route takes the same rows from its pass instead
  (:class:`~npt_dask.engine.consumers.CentreRows`: the centres are rows of X, so the
  pass evaluates them anyway), assembled by :func:`assemble`.

Layer rule: graph code; numbers from :mod:`npt_dask.engine.blocks`,
:mod:`npt_dask.engine.consumers` and :mod:`npt_dask.linalg.symmetric`.
"""

from __future__ import annotations

import time
from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of
from npt_dask.engine.passes import Centres
from npt_dask.errors import RidgeWarning, warn
from npt_dask.kernels import KernelSpec
from npt_dask.linalg.cholesky import cho_solve, cholesky, normal_matrix_dtype, plus_diagonal
from npt_dask.linalg.jitter import dense_attempt, jittered_cholesky
from npt_dask.linalg.tiles import TiledUpper
from npt_dask.ridge.problem import RidgeProblem, RidgeSolution
from npt_dask.runtime.scheduler import compute

__all__ = [
    "JITTER_WARN",
    "RIDGE_JITTER",
    "Clock",
    "RidgeProblem",
    "RidgeSolution",
    "assemble",
    "assemble_like",
    "centre_kernel",
    "centre_rows",
    "centres_of",
    "nystrom_rows",
    "problem_centre_kernel",
    "slot_array",
    "solve_moments",
    "solve_moments_like",
    "solve_symmetric",
    "solve_there",
    "total_weight",
]


class Clock:
    """Seconds per stage."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._start = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - self._start
        self._start = now


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


RIDGE_JITTER = 1e-8
"""Largest jitter (relative to the mean of the diagonal) a direct solve adds when its
system is singular to rounding (nearly repeated centres: its null space changes no
prediction), up the one ladder of :func:`npt_dask.linalg.jitter.jittered_cholesky` (no
jitter, then ``m`` times float64's epsilon, tenfold a try), before it falls back to
least squares."""


JITTER_WARN = 1e-10
"""A direct solve's jitter above this share of the mean diagonal is said (a
:class:`~npt_dask.errors.RidgeWarning`): below it, only directions that are null to
rounding are touched."""


def _lstsq_warning(what: str) -> None:
    warn(
        f"Singular matrix in solving dual problem ({what}). Using least-squares solution "
        "instead (as scikit-learn's KernelRidge does); raise alpha for a unique solution.",
        RidgeWarning,
    )


def solve_symmetric(
    system: np.ndarray, rhs: np.ndarray, what: str, *, jitter_up_to: float = 0.0
) -> tuple[np.ndarray, float]:
    """``system x = rhs`` for a symmetric ``system`` (Fortran order, both triangles, used
    up) and the jitter added to its diagonal (0: none; NaN: least squares).

    The one jittered Cholesky (:func:`npt_dask.linalg.jitter.jittered_cholesky`) up to
    ``jitter_up_to`` of the mean diagonal; when it ends, least squares with
    scikit-learn's warning (its ``KernelRidge`` takes no jitter: ``jitter_up_to=0``
    solves as it does).
    """
    m = system.shape[0]
    scale = float(np.mean(np.abs(system[np.diag_indices(m)]))) if m else 0.0
    attempt = dense_attempt(system)  # a failed attempt leaves the matrix as it was
    jitter = jittered_cholesky(attempt, m=m, scale=scale, most=jitter_up_to)
    if jitter is not None:
        trsm = scipy.linalg.blas.dtrsm
        y = trsm(1.0, system, rhs, lower=0, trans_a=1)
        return trsm(1.0, system, y, lower=0, trans_a=0), jitter
    _lstsq_warning(what)
    return scipy.linalg.lstsq(system, rhs)[0], float("nan")


def _jitter_warning(alpha: float, jitter: float, scale: float) -> None:
    """Say a jitter above :data:`JITTER_WARN` of the mean diagonal ``scale``."""
    if jitter > JITTER_WARN * scale:
        warn(
            f"The normal equations (alpha={alpha:g}) are singular to rounding: solved "
            f"with a jitter of {jitter / scale:.2g} of their mean diagonal, which damps "
            "the directions of smallest curvature (nearly repeated centres, or alpha "
            "too small for the precision). Raise alpha, or use fewer landmarks.",
            RidgeWarning,
        )


def _solve_tiled(
    gram: TiledUpper, kmm: np.ndarray, alpha: float, rhs: np.ndarray
) -> tuple[np.ndarray, float]:
    """``(G + alpha K_mm) c = rhs`` on a copy of ``G``'s tiles: the one jittered Cholesky
    up to :data:`RIDGE_JITTER` of the mean diagonal, then least squares with
    scikit-learn's warning. Returns ``c`` and the jitter (NaN: least squares)."""
    scale = float(np.mean(np.abs(gram.diagonal() + alpha * np.diag(kmm))))
    held: list[TiledUpper] = []

    def attempt(jitter: float) -> bool:
        held.clear()
        system = gram.plus_full(kmm, alpha)
        if jitter:
            system.add_diagonal(jitter)
        held.append(system)
        return bool(system.cholesky())

    jitter = jittered_cholesky(attempt, m=gram.m, scale=scale, most=RIDGE_JITTER)
    if jitter is not None:
        _jitter_warning(alpha, jitter, scale)
        return held[0].solve(rhs), jitter
    held.clear()
    _lstsq_warning(f"alpha={alpha:g}")
    full = gram.copy().add_full(kmm, alpha).to_full()
    return scipy.linalg.lstsq(full, rhs)[0], float("nan")


def solve_moments(
    gram: TiledUpper, kmm: np.ndarray, cross: np.ndarray, alphas: np.ndarray
) -> tuple[np.ndarray, float]:
    """``(G + alpha_j K_mm) c_j = B_j`` for each column j (one factorisation per distinct
    alpha, on a copy of ``gram``'s tiles) and the largest jitter one needed
    (:data:`RIDGE_JITTER`)."""
    coef = np.empty(cross.shape)
    jitters = []
    for alpha in np.unique(alphas):
        cols = np.flatnonzero(alphas == alpha)
        coef[:, cols], jitter = _solve_tiled(gram, kmm, float(alpha), cross[:, cols])
        jitters.append(jitter)
    return coef, max(jitters)


def solve_there(
    system: Any, rhs: Any, alpha: float, *, jitter_up_to: float = RIDGE_JITTER
) -> tuple[Any, float]:
    """``system c = rhs`` in their namespace: the one jittered Cholesky up to
    ``jitter_up_to`` of the mean diagonal (:func:`npt_dask.linalg.cholesky.cholesky`,
    None when not positive definite), :func:`~npt_dask.linalg.cholesky.cho_solve`;
    least squares on the host (the system crosses once, with scikit-learn's warning)
    when the ladder ends. Returns ``c`` (the system's namespace, or host numpy) and the jitter."""
    xp = namespace_of(system)
    m = int(system.shape[0])
    scale = float(to_host(xp.mean(xp.abs(xp.linalg.diagonal(system))))) if m else 0.0
    held: list[Any] = []

    def attempt(jitter: float) -> bool:  # a jittered copy only when a jitter is tried
        held.clear()
        factor = cholesky(plus_diagonal(xp.asarray(system, copy=True), jitter) if jitter
                          else system)  # fmt: skip
        if factor is not None:
            held.append(factor)
        return factor is not None

    jitter = jittered_cholesky(attempt, m=m, scale=scale, most=jitter_up_to)
    if jitter is not None:
        _jitter_warning(alpha, jitter, scale)
        return cho_solve(held[0], rhs), jitter
    _lstsq_warning(f"alpha={alpha:g}")
    full, b = to_host((system, rhs))
    return scipy.linalg.lstsq(np.asarray(full), np.asarray(b))[0], float("nan")


def solve_moments_like(
    gram: Any, kmm: Any, cross: Any, alphas: np.ndarray
) -> tuple[np.ndarray, float]:
    """:func:`solve_moments` where the pass's sums live (a device): ``G`` (the whole
    ``m x m`` sum), ``K_mm`` and ``B`` in their namespace; ``G + alpha K_mm`` in
    :func:`~npt_dask.linalg.cholesky.normal_matrix_dtype` (float64) factored there,
    one per distinct alpha. ``c`` (host numpy, ``m x k``) crosses once."""
    xp, device = namespace_of(gram), device_of(gram)
    dtype = normal_matrix_dtype(xp)
    gram, kmm, cross = (xp.astype(a, dtype) for a in (gram, kmm, cross))
    parts: list[tuple[np.ndarray, Any]] = []
    host_parts: list[tuple[np.ndarray, np.ndarray]] = []
    jitters: list[float] = []
    for alpha in np.unique(alphas):
        cols = np.flatnonzero(alphas == alpha)
        rhs = xp.take(cross, xp.asarray(cols, device=device), axis=1)
        c, jitter = solve_there(gram + float(alpha) * kmm, rhs, float(alpha))
        (host_parts if isinstance(c, np.ndarray) else parts).append((cols, c))
        jitters.append(jitter)
    coef = np.empty(tuple(int(v) for v in cross.shape))
    if parts:
        order = [cols for cols, _ in parts]
        joined = to_host(xp.concat([c for _, c in parts], axis=1))  # the one crossing
        coef[:, np.concatenate(order)] = np.asarray(joined, dtype=np.float64)
    for cols, c in host_parts:
        coef[:, cols] = c
    return coef, max(jitters)


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


def total_weight(problem: RidgeProblem) -> float:
    if problem.weights is None:
        return float(problem.rows.shape[0])
    return float(compute(da.asarray(problem.weights).sum())[0])


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
