"""The direct routes: one factorisation, exact to rounding.

* **Nyström** (:class:`NystromDirect`): one pass gives ``G = K_nm^T W K_nm`` (float64
  symmetric rank-k updates of the kernel-precision blocks), ``K_nm^T W Y`` and the rows
  of ``K_mm`` (the centres are rows of X); then ``(G + alpha K_mm) c = K_nm^T W Y`` by a
  blocked Cholesky factorisation per distinct alpha. No coordinates are formed and no
  eigendecomposition is made. float32 blocks with float64 sums: the rounding of float32
  *normal equations* is above ``alpha K_mm`` in the directions where ``K_mm`` is nearly
  singular (the factorisation fails at MNIST's best alpha), that of float32 *blocks* is
  a kernel perturbed by ``6e-8`` relative. Work: kernel ``2nmd`` (p), moments ``n m^2``,
  factor ``m^3/3`` per distinct alpha; memory: ``chains`` ``m x m`` float64 sums,
  ``K_mm`` and the factored copy.
* **Exact** (:class:`ExactDirect`): scikit-learn's solve of ``(S K S + alpha I) c' = S Y``
  (``S`` the square roots of the weights) on the n x n matrix: kernel ``2 n^2 d`` (p),
  factor ``n^3/3``; memory the n x n matrix and, at its peak, a second one.

Layer rule: graph code over :mod:`npt_dask.ridge.normal_solve`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import dask.array as da
import numpy as np

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import namespace_of
from npt_dask.engine.consumers import CentreRows, Cross, Gram
from npt_dask.engine.passes import row_pass
from npt_dask.engine.rows import Rows
from npt_dask.linalg.symmetric import normal_matrix_dtype, set_diagonal
from npt_dask.linalg.tiles import tiled_bytes
from npt_dask.ridge.centre_rows import (
    assemble,
    centre_slots,
    centres_of,
    dense_values,
    nystrom_rows,
)
from npt_dask.ridge.checkpoint import Checkpoint
from npt_dask.ridge.normal_solve import (
    columns,
    joined_columns,
    solve_moments,
    solve_symmetric,
    solve_there,
)
from npt_dask.ridge.problem import Clock, RidgePlan, RidgeProblem, RidgeSizes, RidgeSolution
from npt_dask.ridge.routes.base import (
    Route,
    centre_bytes,
    device_memory,
    ridge_rows,
    task_bytes,
)
from npt_dask.runtime.progress import FitProgress, ProgressBar, label_in_force
from npt_dask.runtime.scheduler import compute

__all__ = ["EXACT_WORK_VECTORS", "ExactDirect", "NystromDirect"]

EXACT_WORK_VECTORS = 64
"""n-vectors of float64 the direct exact route holds besides its n x n arrays: the kernel
evaluation's row norms and prepared rows, the solve's diagonal, LAPACK's and dask's
bookkeeping, with room to spare."""


class NystromDirect(Route):
    """The moments route of Nyström kernel ridge; see the module doc."""

    name, solver, exact, iterative = "nystrom-direct", "direct", False, False
    description = (
        "the normal equations' moments in one pass (n m^2 flops) and a Cholesky factorisation"
    )

    def plan(self, sizes: RidgeSizes, base: RidgePlan) -> RidgePlan:
        """``chains`` float64 sums of ``G``'s upper tiles while the pass runs
        (:func:`npt_dask.linalg.tiles.tiled_bytes`, about ``4 m^2``; the first becomes
        ``G``), one per worker process that the budget affords, ``K_mm`` in the kernel
        precision, and the factored copy of ``G + alpha K_mm`` (one at a time)."""
        s = sizes
        rows = ridge_rows(s.m, s.itemsize, float64_copy=True)
        square = tiled_bytes(s.m)
        # one running sum per worker process, its threads all in its BLAS calls: two tasks
        # of one thread each ran the tile products at a quarter of the rate of one task of
        # two threads (2 cores)
        fixed = {
            "centres": centre_bytes(s),
            "kmm": s.m * s.m * s.itemsize,
            "factor": square,
            "blocks": s.threads * task_bytes(rows, s.m, s.d, s.itemsize, s.k, True),
            "vectors": 8 * 4 * s.m * s.k,
        }
        spare = s.budget - sum(fixed.values())
        chains = int(min(s.workers, spare // square)) if spare > 0 else 0
        flops = {
            "kernel_p": 2.0 * s.n * s.m * s.d,
            "moments": float(s.n) * s.m * s.m + 2.0 * s.n * s.m * s.k,
            "factor": s.alphas * s.m**3 / 3.0,
            "solve": 2.0 * s.alphas * s.m * s.m * s.k,
        }
        memory = {"sums": max(chains, 1) * square, **fixed}
        if s.device_budget is not None:  # the rows on a device: G, K_mm, the system there
            memory |= {
                "sums": max(chains, 1) * 8 * s.m * s.m,  # the whole m x m sum
                "kmm": s.m * s.m * s.itemsize,  # the centres' rows of the blocks
                "factor": 2 * 8 * s.m * s.m,  # G + alpha K_mm (a copy but for the last
            }  # alpha, built in G) and its factor
        memory = device_memory(memory, s, ("sums", "kmm", "factor", "centres", "vectors"))
        return replace(base, route=self.name, row_chunk=rows, chains=max(chains, 1),
                       flops=flops, memory=memory)  # fmt: skip

    def solve(
        self, problem: RidgeProblem, *, checkpoint: Checkpoint | None = None,
        progress: bool = False,
    ) -> RidgeSolution:  # fmt: skip
        """One pass, then a Cholesky factorisation per distinct alpha, where the pass's
        sums live (:func:`~npt_dask.ridge.normal_solve.solve_moments`: numpy's tiles, or
        the rows' device, whose ``G``, ``K_mm`` and ``B`` never cross; the coefficients
        cross once)."""
        plan, clock = problem.plan, Clock()
        report = FitProgress(0, 0.0, enabled=progress, prefix=label_in_force("npt ridge"))
        idx = problem.centres
        assert idx is not None
        rows = nystrom_rows(problem)
        centres = centres_of(problem)
        slots = centre_slots(rows, idx)
        clock.lap("centres")
        report.stage(f"direct route: one pass over {rows.n:,} rows, m = {len(idx):,} centres")
        bar = ProgressBar(f"{report.prefix}: moments pass", len(rows.chunks), "chunks", progress)
        result = row_pass(
            rows, centres, problem.kernel,
            {"gram": Gram(), "cross": Cross(), "kmm": CentreRows()},
            aux={"targets": problem.targets, "weights": problem.weights, **slots.aux},
            chains=plan.chains, blas_threads=plan.blas_threads, progress=bar,
            on_device=not rows.numpy,
        )  # fmt: skip
        clock.lap("pass")
        report.stage(f"direct route: factoring the {len(idx):,} x {len(idx):,} system")
        sums, kmm = dict(result.sums), assemble(result.rows["kmm"], len(idx), problem.dtype,
                                                symmetric=True)  # fmt: skip
        del result  # G is used up by the last alpha's system (on a device: in place)
        coef, jitter = solve_moments(sums.pop("gram"), kmm, sums.pop("cross"), problem.alphas)
        clock.lap("solve")
        report.close()
        return RidgeSolution(coef, seconds=clock.seconds, details={"jitter": jitter})


class ExactDirect(Route):
    """scikit-learn's exact solve on the n x n matrix; see the module doc."""

    name, solver, exact, iterative = "exact-direct", "direct", True, False
    description = "scikit-learn's solve on the n x n matrix"

    def plan(self, sizes: RidgeSizes, base: RidgePlan) -> RidgePlan:
        """The n x n kernel matrix, factored in place; at its peak a second n x n array
        (the blocks while they are gathered, an evaluated block's temporary, or the copy
        an extra alpha factors), and n-vectors of work."""
        s = sizes
        flops = {
            "kernel_p": 2.0 * s.n * s.n * s.d,
            "factor": s.alphas * s.n**3 / 3.0,
            "solve": 2.0 * s.alphas * s.n * s.n * s.k,
        }
        memory = {
            "kernel_matrix": 8 * s.n * s.n,
            "factor": 8 * s.n * s.n,
            "vectors": 8 * 3 * s.n * s.k,
            "work": 8 * EXACT_WORK_VECTORS * s.n,
        }
        if s.device_budget is not None:  # the rows on a device: K built and factored there
            memory["matrix"] = memory.pop("kernel_matrix")
            memory = device_memory(memory, s, ("matrix", "factor", "vectors", "work"))
        return replace(base, route=self.name, flops=flops, memory=memory)

    def solve(
        self, problem: RidgeProblem, *, checkpoint: Checkpoint | None = None,
        progress: bool = False,
    ) -> RidgeSolution:  # fmt: skip
        """scikit-learn's ``_solve_cholesky_kernel``: ``(S K S + alpha I) c' = S Y``,
        ``c = S c'``, where the rows live: on numpy the host matrix, factored in place
        (:func:`~npt_dask.ridge.normal_solve.solve_symmetric`); on a device ``K`` built
        there, weighted and factored there (no jitter, least squares on the host when
        singular, as scikit-learn), ``K`` and its factor the two ``n x n`` arrays the plan
        counts; ``c`` crosses once."""
        clock = Clock()
        rows = problem.rows
        k = _kernel_matrix(problem)
        clock.lap("kernel")
        y = dense_values(rows, problem.targets)
        s = None
        if problem.weights is not None:
            w = dense_values(rows, problem.weights)
            s = namespace_of(w).sqrt(w)
            k *= s[:, None]  # in place: no n x n temporary
            k *= s[None, :]
            y = y * s[:, None]
        solved = []
        distinct = np.unique(problem.alphas)
        for i, alpha in enumerate(distinct):
            cols = np.flatnonzero(problem.alphas == alpha)
            c = _solve_exact(k, columns(y, cols), float(alpha), last=i == len(distinct) - 1)
            if s is not None:  # c = S c' (least squares comes back on the host)
                c = c * (np.asarray(rows.host(s)) if isinstance(c, np.ndarray) else s)[:, None]
            solved.append((cols, c))
        del k
        coef = joined_columns(solved, tuple(int(v) for v in y.shape))
        clock.lap("solve")
        return RidgeSolution(coef, seconds=clock.seconds)


def _kernel_matrix(problem: RidgeProblem) -> Any:
    """The exact route's ``n x n`` float64 kernel matrix where the rows live: gathered to
    the host on numpy; built on the rows' device there
    (:func:`npt_dask.engine.kernel_matrix.kernel_matrix` keeps their array type), in
    :func:`~npt_dask.linalg.symmetric.normal_matrix_dtype`. A given matrix is copied (it
    is weighted and factored in place)."""
    from npt_dask.engine.kernel_matrix import kernel_matrix

    rows, given = problem.rows, problem.kernel.precomputed
    lazy = rows.data if given else kernel_matrix(rows.data, rows.data, problem.kernel)
    if rows.numpy:
        got = to_host(compute(lazy)[0])
        return np.array(got, dtype=np.float64) if given else np.asarray(got, dtype=np.float64)
    return _joined_blocks(lazy, rows)


def _joined_blocks(lazy: da.Array, rows: Rows) -> Any:
    """A lazy square matrix of the rows' device as one float64 array there, its blocks
    written into it one by one and let go (the blocks and the matrix: two ``n x n``
    arrays at most, where joining them through dask holds three)."""
    xp = rows.xp
    grid = lazy.to_delayed()
    places = [(i, j) for i in range(grid.shape[0]) for j in range(grid.shape[1])]
    blocks = list(compute(*(grid[i, j] for i, j in places)))
    rs, cs = (np.concatenate([[0], np.cumsum(c)]).astype(int) for c in lazy.chunks)
    out = xp.empty(tuple(int(v) for v in lazy.shape), dtype=normal_matrix_dtype(xp),
                   device=rows.device)  # fmt: skip
    for i, j in reversed(places):
        out[rs[i] : rs[i + 1], cs[j] : cs[j + 1]] = blocks.pop()
    return out


def _solve_exact(k: Any, rhs: Any, alpha: float, *, last: bool) -> Any:
    """``(K + alpha I) c = rhs`` (scikit-learn's: no jitter, least squares with its
    warning when singular). numpy: a Fortran system (``K`` itself for the ``last``
    alpha, else a copy) factored in place. Elsewhere: ``alpha`` on ``K``'s diagonal in
    place, factored by the namespace's Cholesky (the factor the second ``n x n``
    array), the diagonal written back for the next alpha."""
    n = int(k.shape[0])
    if isinstance(k, np.ndarray):
        system = np.asfortranarray((k if last else k.copy()).T)  # symmetric
        system[np.diag_indices(n)] += alpha
        return solve_symmetric(system, rhs, f"alpha={alpha:g}")[0]
    xp = namespace_of(k)
    diagonal = xp.asarray(xp.linalg.diagonal(k), copy=True)
    system = set_diagonal(k, diagonal + alpha)
    c, _ = solve_there(system, rhs, alpha, jitter_up_to=0.0)
    if not last:
        set_diagonal(system, diagonal)
    return c
