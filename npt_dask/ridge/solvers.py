"""Kernel ridge at any n and m: the direct and iterative routes of :mod:`npt_dask.ridge.planning`.

Every pass over the training rows goes through the kernel-operator seam
(:func:`npt_dask.engine.row_pass.row_pass`): each row chunk's kernel block against
the centres is evaluated once per pass and given to the consumers the route
needs.

* **Direct, Nyström** (:func:`solve_direct_nystrom`): one pass gives
  ``G = K_nm^T W K_nm`` (float64 symmetric rank-k updates of the kernel-precision
  blocks), ``K_nm^T W Y`` and the rows of ``K_mm`` (the centres are rows of X);
  then ``(G + alpha K_mm) c = K_nm^T W Y`` by a blocked Cholesky factorisation
  per distinct alpha. No coordinates are formed and no eigendecomposition is
  made. float32 blocks with float64 sums: the rounding of float32 *normal
  equations* is above ``alpha K_mm`` in the directions where ``K_mm`` is nearly
  singular (the Cholesky factorisation fails at MNIST's best alpha), that of
  float32 *blocks* is a kernel perturbed by ``6e-8`` relative.
* **Direct, exact** (:func:`solve_direct_exact`): scikit-learn's solve of
  ``(S K S + alpha I) c' = S Y`` on the n x n matrix (small n).
* **Iterative** (:func:`solve_cg_nystrom`, :func:`solve_cg_exact`): preconditioned
  conjugate gradient (:mod:`npt_dask.linalg.cg`), one pass per iteration (Nyström: the
  fused ``K_nm^T W (K_nm p)`` and ``K_mm p`` from the same blocks; exact: the
  symmetric kernel operator of :mod:`npt_dask.engine.pair_pass`, its blocks kept within the
  memory budget), preconditioned by Falkon's Cholesky pair of ``K_mm`` or by the
  top eigenpairs of a landmark NPT model (:mod:`npt_dask.linalg.preconditioners`);
  stopping on ``tol``, reporting every iteration, checkpointed after each
  (:mod:`npt_dask.ridge.checkpoint`) so a killed job resumes to the same iterates.

Layer rule: graph code; numbers from :mod:`npt_dask.engine.blocks`,
:mod:`npt_dask.engine.consumers`, :mod:`npt_dask.linalg.preconditioners` and
:mod:`npt_dask.linalg.cg`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg

from npt_dask.arrays.host import to_host
from npt_dask.engine.consumers import Apply, CentreRows, Cross, Digest, Gram, Normal
from npt_dask.engine.row_pass import Centres, map_rows, row_pass
from npt_dask.errors import ConvergenceWarning, RidgeWarning, warn
from npt_dask.kernels import KernelSpec
from npt_dask.linalg import cg
from npt_dask.linalg.dense import cholesky_upper, upper_from_lower
from npt_dask.linalg.preconditioners import FalkonCholesky, LowRank, low_rank_from_coordinates
from npt_dask.linalg.tiles import TiledUpper
from npt_dask.ridge.checkpoint import Checkpoint, fingerprint
from npt_dask.ridge.planning import RidgePlan
from npt_dask.runtime.progress import FitProgress, ProgressBar, label_in_force
from npt_dask.runtime.scheduler import compute, task_threads

__all__ = [
    "JITTER_WARN",
    "RIDGE_JITTER",
    "RidgeProblem",
    "RidgeSolution",
    "centre_rows",
    "solve_moments",
    "solve_ridge",
    "solve_symmetric",
]


@dataclass(frozen=True)
class RidgeProblem:
    """A kernel ridge problem as the solvers take it.

    ``rows``: the training rows, row-chunked, in the kernel precision (for a precomputed
    kernel the given ``n x n`` matrix, its columns chunked like its rows). ``targets``
    ``(n, k)`` float64, ``weights`` ``(n,)`` or None, ``alphas`` one per target column,
    ``centres`` the sorted landmark row indices (None: every row), ``plan`` the route,
    ``centre_x`` the landmarks' rows (numpy, gathered once: :func:`centre_rows`; None for
    a precomputed kernel or without landmarks).
    """

    rows: da.Array
    kernel: KernelSpec
    targets: Any
    weights: Any
    alphas: np.ndarray
    centres: np.ndarray | None
    plan: RidgePlan
    random_state: Any = None
    landmark_method: str = "uniform"
    centre_x: np.ndarray | None = None

    @property
    def k(self) -> int:
        return int(self.targets.shape[1])


@dataclass
class RidgeSolution:
    """Dual coefficients ``coef`` (``m x k``, one row per centre) and how they were found:
    ``iterations`` and the relative residual after each (iterative routes), per-column
    ``converged``, seconds per stage, the preconditioner's size and jitter."""

    coef: np.ndarray
    iterations: int = 0
    residuals: list[float] = field(default_factory=list)
    converged: np.ndarray | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)


class _Clock:
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


def _slot_array(rows: da.Array, centres: np.ndarray) -> da.Array:
    """Lazy ``(n,)`` slots chunked like ``rows`` (nothing of size n on the driver)."""
    template = da.zeros(rows.shape[0], chunks=(rows.chunks[0],), dtype=np.int64)
    return template.map_blocks(_slots, centres, dtype=np.int64)


def _assemble(
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


def centre_rows(rows: da.Array, centres: np.ndarray) -> np.ndarray:
    """The centres' own rows, dense numpy in the rows' dtype: one gather of m rows (it
    reads every chunk holding one; do it once)."""
    got = compute(rows[centres])[0]
    return np.asarray(got.toarray() if hasattr(got, "toarray") else got)


# --- direct ----------------------------------------------------------------------------


RIDGE_JITTER = 1e-8
"""Largest jitter (relative to the mean of the diagonal) the Nyström direct solve adds when
``K_nm^T W K_nm + alpha K_mm`` is singular to rounding (nearly repeated centres: its null
space changes no prediction), from ``m`` times float64's epsilon up, tenfold a try, before
it falls back to least squares."""


JITTER_WARN = 1e-10
"""A direct solve's jitter above this share of the mean diagonal is said (a
:class:`~npt_dask.errors.RidgeWarning`): below it, only directions that are null to
rounding are touched."""


def solve_symmetric(
    system: np.ndarray, rhs: np.ndarray, what: str, *, jitter_up_to: float = 0.0
) -> tuple[np.ndarray, float]:
    """``system x = rhs`` for a symmetric ``system`` (Fortran order, both triangles, used
    up) and the jitter added to its diagonal (0: none; NaN: least squares).

    A Cholesky factorisation; when it fails (singular to rounding, as at alpha = 0), one
    of the matrix plus a jitter up to ``jitter_up_to`` of the mean diagonal; else least
    squares with scikit-learn's warning (its ``KernelRidge`` takes no jitter:
    ``jitter_up_to=0`` solves as it does).
    """
    m = system.shape[0]
    diag = system[np.diag_indices(m)].copy()
    scale = float(np.mean(np.abs(diag))) if m else 0.0
    jitter, top = 0.0, jitter_up_to * scale
    while True:
        if cholesky_upper(system):
            trsm = scipy.linalg.blas.dtrsm
            y = trsm(1.0, system, rhs, lower=0, trans_a=1)
            return trsm(1.0, system, y, lower=0, trans_a=0), jitter
        upper_from_lower(system)  # the strictly lower part still holds the matrix
        jitter = 10.0 * jitter if jitter else np.finfo(np.float64).eps * m * scale
        if not 0.0 < jitter <= top:
            break
        system[np.diag_indices(m)] = diag + jitter
    warn(
        f"Singular matrix in solving dual problem ({what}). Using least-squares solution "
        "instead (as scikit-learn's KernelRidge does); raise alpha for a unique solution.",
        RidgeWarning,
    )
    system[np.diag_indices(m)] = diag
    return scipy.linalg.lstsq(system, rhs)[0], float("nan")


def _solve_tiled(
    gram: TiledUpper, kmm: np.ndarray, alpha: float, rhs: np.ndarray
) -> tuple[np.ndarray, float]:
    """``(G + alpha K_mm) c = rhs`` on a copy of ``G``'s tiles: a tile Cholesky
    factorisation; when it fails (singular to rounding: nearly repeated centres, alpha 0)
    again with a jitter up to :data:`RIDGE_JITTER` of the mean diagonal, tenfold a try;
    then least squares with scikit-learn's warning. Returns ``c`` and the jitter (NaN:
    least squares)."""
    scale = float(np.mean(np.abs(gram.diagonal() + alpha * np.diag(kmm))))
    jitter, top = 0.0, RIDGE_JITTER * scale
    while True:
        system = gram.plus_full(kmm, alpha)
        if jitter:
            system.add_diagonal(jitter)
        if system.cholesky():
            if jitter > JITTER_WARN * scale:
                warn(
                    f"The normal equations (alpha={alpha:g}) are singular to rounding: solved "
                    f"with a jitter of {jitter / scale:.2g} of their mean diagonal, which damps "
                    "the directions of smallest curvature (nearly repeated centres, or alpha "
                    "too small for the precision). Raise alpha, or use fewer landmarks.",
                    RidgeWarning,
                )
            return system.solve(rhs), jitter
        jitter = 10.0 * jitter if jitter else np.finfo(np.float64).eps * gram.m * scale
        if not 0.0 < jitter <= top:
            break
    warn(
        f"Singular matrix in solving dual problem (alpha={alpha:g}). Using least-squares "
        "solution instead (as scikit-learn's KernelRidge does); raise alpha for a unique "
        "solution.",
        RidgeWarning,
    )
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


def solve_direct_nystrom(problem: RidgeProblem, *, progress: bool = False) -> RidgeSolution:
    """The moments route: one pass, then a Cholesky factorisation per distinct alpha."""
    plan, clock = problem.plan, _Clock()
    report = FitProgress(0, 0.0, enabled=progress, prefix=label_in_force("npt ridge"))
    idx = problem.centres
    assert idx is not None
    rows = _nystrom_rows(problem)
    centres = _centres_of(problem)
    clock.lap("centres")
    report.stage(f"direct route: one pass over {problem.rows.shape[0]:,} rows, "
                 f"m = {len(idx):,} centres")  # fmt: skip
    bar = ProgressBar(f"{report.prefix}: moments pass", len(rows.chunks[0]), "chunks", progress)
    result = row_pass(
        rows, centres, problem.kernel,
        {"gram": Gram(), "cross": Cross(), "kmm": CentreRows()},
        aux={"targets": problem.targets, "weights": problem.weights,
             "slot": _slot_array(rows, idx)},
        chains=plan.chains, blas_threads=plan.blas_threads, progress=bar,
    )  # fmt: skip
    clock.lap("pass")
    kmm = _assemble(result.rows["kmm"], len(idx), problem.rows.dtype, symmetric=True)
    report.stage(f"direct route: factoring the {len(idx):,} x {len(idx):,} system")
    coef, jitter = solve_moments(result.sums["gram"], kmm, result.sums["cross"], problem.alphas)
    clock.lap("solve")
    report.close()
    return RidgeSolution(coef, seconds=clock.seconds, details={"jitter": jitter})


def solve_direct_exact(problem: RidgeProblem) -> RidgeSolution:
    """scikit-learn's ``_solve_cholesky_kernel``: ``(S K S + alpha I) c' = S Y``,
    ``c = S c'`` (``S`` the square roots of the weights), on the n x n matrix."""
    from npt_dask.engine.pair_pass import kernel_matrix

    clock = _Clock()
    rows = problem.rows
    if problem.kernel.evaluated:
        k = np.asarray(
            to_host(compute(kernel_matrix(rows, rows, problem.kernel))[0]), dtype=np.float64
        )
    else:
        k = np.array(to_host(compute(rows)[0]), dtype=np.float64)
    clock.lap("kernel")
    y = np.asarray(to_host(compute(da.asarray(problem.targets))[0]), dtype=np.float64)
    s = None
    if problem.weights is not None:
        s = np.sqrt(np.asarray(to_host(compute(da.asarray(problem.weights))[0]), dtype=np.float64))
        k *= s[:, None]
        k *= s[None, :]
        y = y * s[:, None]
    coef = np.empty_like(y)
    distinct = np.unique(problem.alphas)
    for i, alpha in enumerate(distinct):
        cols = np.flatnonzero(problem.alphas == alpha)
        system = np.asfortranarray((k if i == len(distinct) - 1 else k.copy()).T)  # symmetric
        system[np.diag_indices(len(system))] += alpha
        coef[:, cols] = solve_symmetric(system, y[:, cols], f"alpha={alpha:g}")[0]
    if s is not None:
        coef *= s[:, None]
    clock.lap("solve")
    return RidgeSolution(coef, seconds=clock.seconds)


# --- iterative -------------------------------------------------------------------------


def _nystrom_rows(problem: RidgeProblem) -> da.Array:
    """The rows of a Nyström pass, in the plan's row chunks: X, or for a precomputed
    kernel the given matrix's centre columns ``K[:, idx]`` (one column chunk)."""
    rows = problem.rows.rechunk({0: problem.plan.row_chunk})
    if not problem.kernel.evaluated:
        rows = rows[:, problem.centres].rechunk({1: -1})
    return rows


def _centres_of(problem: RidgeProblem) -> Centres:
    """The operator's centres: the landmark rows (evaluated kernels), or one panel of the
    given matrix's landmark columns (a precomputed kernel, :func:`_nystrom_rows`)."""
    idx = problem.centres
    assert idx is not None
    if problem.kernel.evaluated:
        assert problem.centre_x is not None
        return Centres.of(problem.centre_x)
    return Centres.of(None, sizes=[len(idx)])


def _total_weight(problem: RidgeProblem) -> float:
    if problem.weights is None:
        return float(problem.rows.shape[0])
    return float(compute(da.asarray(problem.weights).sum())[0])


def _centre_kernel(problem: RidgeProblem) -> np.ndarray:
    """``K_mm`` in the kernel precision, Fortran order (for the preconditioner)."""
    idx = problem.centres
    assert idx is not None
    if not problem.kernel.evaluated:
        block = compute(problem.rows[idx][:, idx])[0]
        return np.asfortranarray(block, dtype=problem.rows.dtype)
    c = problem.centre_x
    assert c is not None
    out = np.empty((len(idx), len(idx)), dtype=problem.rows.dtype, order="F")
    step = 2048
    for i0 in range(0, len(idx), step):
        out[i0 : i0 + step] = problem.kernel(c[i0 : i0 + step], c)
    return out


PROBE_ROWS = 8
"""Rows of the first chunk (and centres) whose kernel values a checkpoint pins: a kernel
function is known by what it gives, not by its code (which says nothing of the values it
closes over or takes by default)."""


def _spread(count: int, limit: int) -> np.ndarray:
    """Up to ``limit`` indices spread evenly over ``range(count)``."""
    return np.unique(np.linspace(0, count - 1, min(count, limit)).astype(np.int64))


def _dense(block: Any) -> np.ndarray:
    return np.asarray(block.toarray() if hasattr(block, "toarray") else block)


def kernel_probe(problem: RidgeProblem, rows: da.Array) -> np.ndarray:
    """The kernel's values (float64) between :data:`PROBE_ROWS` rows of the first chunk and
    as many centres (the same rows on the exact route); empty for a precomputed kernel,
    whose values are the data (digested with them)."""
    if not problem.kernel.evaluated or rows.shape[0] == 0:
        return np.zeros((0, 0))
    a = _dense(compute(rows[_spread(int(rows.chunks[0][0]), PROBE_ROWS)])[0])
    c = a
    if problem.centre_x is not None:
        c = _dense(problem.centre_x[_spread(len(problem.centre_x), PROBE_ROWS)])
    return np.asarray(problem.kernel(a, c.astype(a.dtype, copy=False)), dtype=np.float64)


def _problem_fingerprint(problem: RidgeProblem, rows: da.Array, digests: list[bytes]) -> str:
    return fingerprint({
        "route": f"{problem.plan.route}-{'exact' if problem.plan.exact else 'nystrom'}",
        "kernel": problem.kernel.to_dict(), "precision": str(problem.rows.dtype),
        "alphas": problem.alphas,
        "centres": problem.centres if problem.centres is not None else np.zeros(0, np.int64),
        "data": b"".join(digests), "shape": list(rows.shape), "k": problem.k,
    })  # fmt: skip


def _data_digests(rows: da.Array, problem: RidgeProblem) -> list[bytes]:
    """A digest of every row chunk with its targets and weights (reads the data only)."""
    aux = {"targets": problem.targets, "weights": problem.weights}
    return row_pass(rows, Centres.of(None, sizes=[0]), problem.kernel, {"digest": Digest()},
                    aux=aux).rows["digest"]  # fmt: skip


class _Iterations:
    """The CG loop: operator product, step, checkpoint, report."""

    def __init__(
        self, problem: RidgeProblem, rows: da.Array, checkpoint: Checkpoint | None,
        progress: bool,
    ) -> None:  # fmt: skip
        self.problem, self.rows, self.checkpoint = problem, rows, checkpoint
        self.report = FitProgress(
            0, problem.plan.tol, enabled=progress, prefix=label_in_force("npt ridge")
        )
        self.key: str | None = None
        self.probe = np.zeros((0, 0))
        self.passes = 0  # operator products: iterations and the checks of converged columns
        self.measured: dict[int, float] = {}  # stopped columns' true relative residuals

    def start(
        self,
        b: np.ndarray,
        digests: list[bytes] | None,
        precondition: Callable[[np.ndarray], np.ndarray],
    ) -> cg.CGState:
        """The checkpointed state of this problem (``digests``: of the data's row chunks,
        when a checkpoint is held; ``b``: the right-hand side the data give), else CG's
        start at ``x = 0``."""
        tol = self.problem.plan.tol
        if self.checkpoint is None:
            return cg.start(b, precondition, tol)
        assert digests is not None
        self.key = _problem_fingerprint(self.problem, self.rows, digests)
        self.probe = kernel_probe(self.problem, self.rows)
        state = self.checkpoint.resume(self.key, self.probe, b,
                                       precision=str(self.rows.dtype))  # fmt: skip
        if state is None:
            return cg.start(b, precondition, tol)
        cg.retarget(state, tol)  # saved under another tol, perhaps; verified again
        self.report.stage(f"cg: resuming at iteration {state.iteration} "
                          f"from {self.checkpoint.given}")  # fmt: skip
        return state

    def _line(self, state: cg.CGState, act: np.ndarray, unv: np.ndarray, stop: np.ndarray) -> str:
        """The progress line of a pass: the iteration, or the check of converged targets
        (and the measure of stopped ones)."""
        tol, k = self.problem.plan.tol, len(state.converged)
        done = int(np.sum(state.verified))
        checked = ""
        if unv.size:
            worst = float(cg.relative_residuals(state)[unv].max())
            checked = f"; {unv.size} checked against b - H x (relative residual {worst:.2e})"
        if stop.size:
            worst = max(self.measured[int(c)] for c in stop)
            checked += (f"; {stop.size} stopped without converging, measured against b - H x "
                        f"(relative residual {worst:.2e})")  # fmt: skip
        if not act.size:
            return f"cg: check{checked[1:]}, {done}/{k} targets converged"
        return (f"cg: iteration {state.iteration}, relative residual {state.history[-1]:.2e} "
                f"(tol {tol:g}){checked}, {done}/{k} targets converged")  # fmt: skip

    def _save(self, state: cg.CGState) -> None:
        if self.checkpoint is not None:
            assert self.key is not None
            self.checkpoint.save(state, self.key, self.problem.centres, self.probe)

    def _stopped(self, state: cg.CGState, at_end: bool) -> np.ndarray:
        """Columns stopped without a verified convergence whose true residual is not yet
        measured: broken down or diverged (their best iterate is final), and at
        ``max_iter`` (``at_end``) the ones still open."""
        stopped = state.breakdown.copy()
        if at_end:
            stopped |= ~(state.verified | state.converged)
        return np.array([c for c in np.flatnonzero(stopped) if int(c) not in self.measured],
                        dtype=np.intp)  # fmt: skip

    def _measure(self, state: cg.CGState, hx: np.ndarray, cols: np.ndarray) -> None:
        """The true relative residuals ``||b - H x|| / ||b||`` of stopped columns."""
        r = state.b[:, cols] - hx
        norms = np.sqrt(np.einsum("ij,ij->j", r, r))
        b_norm = state.b_norm[cols]
        rel = np.divide(norms, b_norm, out=np.zeros_like(norms), where=b_norm > 0)
        self.measured.update({int(c): float(v) for c, v in zip(cols, rel, strict=True)})
        met = cols[rel <= self.problem.plan.tol]  # it met tol after all: converged
        state.converged[met] = state.verified[met] = True
        state.breakdown[met] = False

    def run(
        self,
        state: cg.CGState,
        product: Callable[[np.ndarray, np.ndarray], np.ndarray],
        precondition: Callable[[np.ndarray], np.ndarray],
    ) -> cg.CGState:
        """Iterate until every target's *true* residual ``b - H x`` meets tol or ``max_iter``
        iterations. A column the steps call converged is checked (:func:`npt_dask.linalg.cg.verify`)
        in the next pass, its ``H x`` beside the other columns' ``H p`` (the pass costs the
        kernel blocks, not the columns): one pass more than the iterations, at the end.
        A column that stops without it (breakdown, divergence, ``max_iter``) has the true
        residual of the iterate it returns measured the same way (:attr:`measured`),
        beside the next pass's products, or in one pass of its own at the end.
        Checkpointed and reported after every pass."""
        plan = self.problem.plan
        while True:
            act, unv = np.flatnonzero(state.active), np.flatnonzero(state.unverified)
            at_end = state.iteration >= plan.max_iter
            if at_end:
                act = act[:0]  # no more steps; the converged ones are still checked
            stop = self._stopped(state, at_end)
            if not (act.size or unv.size or stop.size):
                break
            # H p of the active, H x of the unverified and of the stopped
            cols = np.concatenate([act, unv, stop])
            q = product(np.hstack([state.p[:, act], state.x[:, unv], state.x[:, stop]]), cols)
            self.passes += 1
            if act.size:
                cg.step(state, q[:, : act.size], precondition, plan.tol, act)
            if unv.size:
                cg.verify(state, q[:, act.size : act.size + unv.size], precondition, plan.tol,
                          unv)  # fmt: skip
                if at_end:  # a check that failed at max_iter: its true residual is r's
                    failed = unv[~state.verified[unv]]
                    rel = cg.relative_residuals(state)
                    self.measured.update({int(c): float(rel[c]) for c in failed})
            if stop.size:
                self._measure(state, q[:, act.size + unv.size :], stop)
            self._save(state)
            self.report.stage(self._line(state, act, unv, stop))
        self.report.close()
        return state


def _finish(
    state: cg.CGState, plan: RidgePlan, clock: _Clock, details: dict, loop: _Iterations
) -> RidgeSolution:
    """The solution, the true relative residual of every column reported (a verified
    column's from its check, a stopped one's from :attr:`_Iterations.measured`) and
    quoted by the warnings of the columns that stopped without converging."""
    rel = cg.relative_residuals(state)
    for col, value in loop.measured.items():
        rel[col] = value
    broken = np.flatnonzero(state.breakdown)
    if broken.size:
        warn(
            f"Conjugate gradient stopped early for {broken.size} target(s): the operator's "
            "curvature was not positive, or the residual grew past "
            f"{cg.DIVERGENCE:g} times the smallest it reached (a kernel that is not positive "
            "semi-definite, alpha near 0, or rounding in float32 kernel blocks). Their best "
            f"iterates are kept (true relative residual up to {rel[broken].max():.3g}). "
            "Use solver='direct', precision='float64', or raise alpha.",
            RidgeWarning,
        )
    open_ = np.flatnonzero(~state.verified & ~state.breakdown)
    if open_.size:
        warn(
            f"Conjugate gradient stopped after max_iter={plan.max_iter} iterations with a "
            f"true relative residual of {rel[open_].max():.3g} > tol={plan.tol:g} for "
            f"{open_.size} target(s). Raise max_iter, or loosen tol"
            + (
                " (float32 kernel blocks resolve residuals down to about 1e-6 to 1e-5; use "
                "precision='float64' for a tighter tol)."
                if plan.precision == "float32"
                else "."
            ),
            ConvergenceWarning,
        )
    clock.lap("iterations")
    details = {**details, "passes": loop.passes, "relative_residuals": rel.tolist()}
    return RidgeSolution(
        state.x, iterations=state.iteration, residuals=list(state.history),
        converged=state.verified.copy(), seconds=clock.seconds, details=details,
    )  # fmt: skip


def solve_cg_nystrom(
    problem: RidgeProblem, *, checkpoint: Checkpoint | None = None, progress: bool = False
) -> RidgeSolution:
    """Preconditioned CG on ``(K_nm^T W K_nm + alpha K_mm) c = K_nm^T W Y``, Falkon's
    preconditioner; one pass over the rows per iteration."""
    plan, clock = problem.plan, _Clock()
    idx = problem.centres
    assert idx is not None
    rows = _nystrom_rows(problem)
    loop = _Iterations(problem, rows, checkpoint, progress)
    loop.report.stage(f"cg: Falkon preconditioner of {len(idx):,} centres")
    pc = FalkonCholesky.build(_centre_kernel(problem),
                              float(problem.alphas.min()) / _total_weight(problem))  # fmt: skip
    clock.lap("preconditioner")
    centres = _centres_of(problem)
    slots = _slot_array(rows, idx)
    rhs = {"cross": Cross(block_precision=True), "digest": Digest()}
    first = row_pass(rows, centres, problem.kernel, rhs,
                     aux={"targets": problem.targets, "weights": problem.weights},
                     chains=task_threads())  # fmt: skip
    state = loop.start(first.sums["cross"], first.rows["digest"], pc)
    clock.lap("rhs")
    m = len(idx)

    def product(p: np.ndarray, cols: np.ndarray) -> np.ndarray:
        out = row_pass(rows, centres, problem.kernel, {"q": Normal(p), "kp": CentreRows(p)},
                       aux={"weights": problem.weights, "slot": slots},
                       chains=task_threads())  # fmt: skip
        kp = _assemble(out.rows["kp"], m, np.float64)
        return out.sums["q"] + problem.alphas[cols] * kp

    state = loop.run(state, product, pc)
    details = {"preconditioner": "falkon", "jitter": pc.jitter, "bytes": pc.nbytes}
    return _finish(state, plan, clock, details, loop)


def _landmark_preconditioner(problem: RidgeProblem, rows: da.Array) -> LowRank:
    """The randomized Nyström preconditioner from a landmark NPT model (uncentred, full
    rank) on ``plan.preconditioner_rank`` rows: its coordinates of every row,
    ``Y = kappa(X, L) A`` with ``A = U Lambda^-1/2`` (one pass, :class:`~npt_dask.engine.consumers.
    Apply`), give ``K ~ Y Y^T``."""
    from npt_dask.npt.fitting import fit_params
    from npt_dask.npt.landmarks import select_landmarks
    from npt_dask.runtime.params import DEFAULT_RTOL, FitParams, Precision

    plan, spec = problem.plan, problem.kernel
    rng = np.random.default_rng(problem.random_state)
    precision: Precision = "float32" if rows.dtype == np.float32 else "float64"
    params = FitParams(kernel=spec if spec.evaluated else "precomputed", center=False,
                       precision=precision, chunk_size=None)  # fmt: skip
    if spec.evaluated:
        method = problem.landmark_method
        idx = select_landmarks(plan.preconditioner_rank, rows, spec, method=method, rng=rng)
        landmark_rows = centre_rows(rows, idx)
        model = fit_params(landmark_rows, params)
        centres = Centres.of(landmark_rows, model.projection_matrix.astype(rows.dtype))
        source = rows
    else:
        idx = np.sort(rng.choice(plan.n, plan.preconditioner_rank, replace=False))
        model = fit_params(rows[idx][:, idx], params)
        centres = Centres.of(None, model.projection_matrix.astype(rows.dtype),
                             sizes=[len(idx)])  # fmt: skip
        source = rows[:, idx].rechunk({1: -1})
    lazy = map_rows(source, centres, spec, Apply(), width=model.n_components, dtype=rows.dtype)
    y = np.asarray(to_host(compute(lazy)[0]))
    if problem.weights is not None:
        s = np.sqrt(np.asarray(to_host(compute(da.asarray(problem.weights))[0]), dtype=np.float64))
        y *= s[:, None].astype(y.dtype)
    return low_rank_from_coordinates(y, float(problem.alphas.min()), DEFAULT_RTOL[precision])


def solve_cg_exact(
    problem: RidgeProblem, *, checkpoint: Checkpoint | None = None, progress: bool = False
) -> RidgeSolution:
    """Preconditioned CG on ``(S K S + alpha I) c' = S Y`` (``c = S c'``), the landmark
    model's low-rank preconditioner; one pass of the symmetric operator per iteration."""
    from npt_dask.engine.pair_pass import KernelOperator

    plan, clock = problem.plan, _Clock()
    rows = problem.rows.rechunk({0: plan.row_chunk})
    if not problem.kernel.evaluated:
        rows = rows.rechunk({1: plan.row_chunk})
    loop = _Iterations(problem, rows, checkpoint, progress)
    loop.report.stage(f"cg: landmark preconditioner of rank "
                      f"{plan.preconditioner_rank:,}")  # fmt: skip
    pc = _landmark_preconditioner(problem, rows)
    clock.lap("preconditioner")
    s = None
    if problem.weights is not None:
        s = np.sqrt(np.asarray(to_host(compute(da.asarray(problem.weights))[0]), dtype=np.float64))
    y = np.asarray(to_host(compute(da.asarray(problem.targets))[0]), dtype=np.float64)
    b = y if s is None else y * s[:, None]
    op = KernelOperator(rows, problem.kernel, center=False, kept=plan.kept,
                        products=rows.dtype)  # fmt: skip
    digests = _data_digests(rows, problem) if checkpoint is not None else None
    state = loop.start(b, digests, pc)
    clock.lap("rhs")

    def product(p: np.ndarray, cols: np.ndarray) -> np.ndarray:
        v = p if s is None else p * s[:, None]
        kv = op.uncentered_matmat(v)
        if s is not None:
            kv *= s[:, None]
        return kv + problem.alphas[cols] * p

    try:
        state = loop.run(state, product, pc)
    finally:
        op.release()
    if s is not None:
        state.x *= s[:, None]
    details = {"preconditioner": "landmark", "rank": int(pc.u.shape[1]), "bytes": pc.nbytes,
               "cached_fraction": op.cached_fraction}  # fmt: skip
    return _finish(state, plan, clock, details, loop)


def solve_ridge(
    problem: RidgeProblem, *, checkpoint: Checkpoint | None = None, progress: bool = False
) -> RidgeSolution:
    """The route the plan chose."""
    plan = problem.plan
    if plan.route == "direct":
        return solve_direct_exact(problem) if plan.exact else solve_direct_nystrom(
            problem, progress=progress)  # fmt: skip
    if plan.exact:
        return solve_cg_exact(problem, checkpoint=checkpoint, progress=progress)
    return solve_cg_nystrom(problem, checkpoint=checkpoint, progress=progress)
