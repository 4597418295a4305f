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

import dask.array as da
import numpy as np

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import is_numpy, namespace_and_device, on_device_of
from npt_dask.engine.consumers import CentreRows, Cross, Gram
from npt_dask.engine.passes import row_pass
from npt_dask.engine.rows import Rows
from npt_dask.linalg.symmetric import normal_matrix_dtype, plus_diagonal
from npt_dask.linalg.tiles import tiled_bytes
from npt_dask.ridge.centre_rows import assemble, assemble_like, centres_of, nystrom_rows, slot_array
from npt_dask.ridge.checkpoint import Checkpoint
from npt_dask.ridge.normal_solve import (
    solve_moments,
    solve_moments_like,
    solve_symmetric,
    solve_there,
)
from npt_dask.ridge.problem import Clock, RidgePlan, RidgeProblem, RidgeSizes, RidgeSolution
from npt_dask.ridge.routes.base import Route, centre_bytes, ridge_rows, task_bytes
from npt_dask.runtime.progress import FitProgress, ProgressBar, label_in_force
from npt_dask.runtime.scheduler import compute

__all__ = ["EXACT_WORK_VECTORS", "ExactDirect", "NystromDirect"]

EXACT_WORK_VECTORS = 64
"""n-vectors of float64 the direct exact route holds besides its n x n arrays: the kernel
evaluation's row norms and prepared rows, the solve's diagonal, LAPACK's and dask's
bookkeeping, with room to spare."""


class NystromDirect(Route):
    """The moments route of Nyström kernel ridge; see the module doc."""

    name, exact, iterative = "direct", False, False

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
            del memory["sums"], memory["kmm"], memory["factor"]
            memory |= {
                "device_sums": max(chains, 1) * 8 * s.m * s.m,  # the whole m x m sum
                "device_kmm": s.m * s.m * s.itemsize,
                "device_factor": 2 * 8 * s.m * s.m,  # G + alpha K_mm and its factor
            }
        return replace(base, route=self.name, row_chunk=rows, chains=max(chains, 1),
                       flops=flops, memory=memory)  # fmt: skip

    def solve(
        self, problem: RidgeProblem, *, checkpoint: Checkpoint | None = None,
        progress: bool = False,
    ) -> RidgeSolution:  # fmt: skip
        """One pass, then a Cholesky factorisation per distinct alpha."""
        plan, clock = problem.plan, Clock()
        report = FitProgress(0, 0.0, enabled=progress, prefix=label_in_force("npt ridge"))
        idx = problem.centres
        assert idx is not None
        rows = nystrom_rows(problem)
        centres = centres_of(problem)
        clock.lap("centres")
        report.stage(f"direct route: one pass over {problem.rows.shape[0]:,} rows, "
                     f"m = {len(idx):,} centres")  # fmt: skip
        bar = ProgressBar(f"{report.prefix}: moments pass", len(rows.chunks[0]), "chunks", progress)
        there = not is_numpy(namespace_and_device(rows)[0])  # the rows on a device
        result = row_pass(
            rows, centres, problem.kernel,
            {"gram": Gram(), "cross": Cross(), "kmm": CentreRows()},
            aux={"targets": problem.targets, "weights": problem.weights,
                 "slot": Rows.of(rows).aligned(slot_array(rows, idx), host=True)},
            chains=plan.chains, blas_threads=plan.blas_threads, progress=bar, on_device=there,
        )  # fmt: skip
        clock.lap("pass")
        report.stage(f"direct route: factoring the {len(idx):,} x {len(idx):,} system")
        if there:  # G, K_mm and B on the device: factored there, c crosses once
            kmm = assemble_like(result.rows["kmm"], len(idx))
            coef, jitter = solve_moments_like(result.sums["gram"], kmm, result.sums["cross"],
                                              problem.alphas)  # fmt: skip
        else:
            kmm = assemble(result.rows["kmm"], len(idx), problem.rows.dtype, symmetric=True)
            coef, jitter = solve_moments(result.sums["gram"], kmm, result.sums["cross"],
                                         problem.alphas)  # fmt: skip
        clock.lap("solve")
        report.close()
        return RidgeSolution(coef, seconds=clock.seconds, details={"jitter": jitter})


class ExactDirect(Route):
    """scikit-learn's exact solve on the n x n matrix; see the module doc."""

    name, exact, iterative = "direct", True, False

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
        matrix, factor = ("kernel_matrix", "factor")
        if s.device_budget is not None:  # the rows on a device: K built and factored there
            matrix, factor = ("device_matrix", "device_factor")
        memory = {
            matrix: 8 * s.n * s.n,
            factor: 8 * s.n * s.n,
            "vectors": 8 * 3 * s.n * s.k,
            "work": 8 * EXACT_WORK_VECTORS * s.n,
        }
        return replace(base, route=self.name, flops=flops, memory=memory)

    def solve(
        self, problem: RidgeProblem, *, checkpoint: Checkpoint | None = None,
        progress: bool = False,
    ) -> RidgeSolution:  # fmt: skip
        """scikit-learn's ``_solve_cholesky_kernel``: ``(S K S + alpha I) c' = S Y``,
        ``c = S c'``."""
        from npt_dask.engine.kernel_matrix import kernel_matrix

        clock = Clock()
        rows = problem.rows
        if not is_numpy(namespace_and_device(rows)[0]):
            return _exact_on_device(problem, clock)
        if not problem.kernel.precomputed:
            k = np.asarray(
                to_host(compute(kernel_matrix(rows, rows, problem.kernel))[0]), dtype=np.float64
            )
        else:
            k = np.array(to_host(compute(rows)[0]), dtype=np.float64)
        clock.lap("kernel")
        y = np.asarray(to_host(compute(da.asarray(problem.targets))[0]), dtype=np.float64)
        s = None
        if problem.weights is not None:
            s = np.sqrt(
                np.asarray(to_host(compute(da.asarray(problem.weights))[0]), dtype=np.float64)
            )
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


def _exact_on_device(problem: RidgeProblem, clock: Clock) -> RidgeSolution:
    """:meth:`ExactDirect.solve` where the rows live (a device, whose budget the plan
    counted the ``n x n`` matrix and its factor against): ``K`` built there
    (:func:`npt_dask.engine.kernel_matrix.kernel_matrix` keeps the rows' array type), in
    :func:`~npt_dask.linalg.symmetric.normal_matrix_dtype` (float64), weighted and
    factored there (no jitter, least squares on the host when singular, as scikit-learn);
    ``c`` crosses once."""
    from npt_dask.engine.kernel_matrix import kernel_matrix

    rows = problem.rows
    xp, device = namespace_and_device(rows)
    dtype = normal_matrix_dtype(xp)
    lazy = rows if problem.kernel.precomputed else kernel_matrix(rows, rows, problem.kernel)
    k = xp.astype(compute(lazy)[0], dtype)
    clock.lap("kernel")
    y = xp.astype(on_device_of(compute(da.asarray(problem.targets))[0], k), dtype)
    s = None
    if problem.weights is not None:
        s = xp.sqrt(xp.astype(on_device_of(compute(da.asarray(problem.weights))[0], k), dtype))
        k *= s[:, None]  # in place: no n x n temporary
        k *= s[None, :]
        y = y * s[:, None]
    n = int(k.shape[0])
    coef = np.empty((n, len(problem.alphas)))
    distinct = np.unique(problem.alphas)
    for i, alpha in enumerate(distinct):
        cols = np.flatnonzero(problem.alphas == alpha)
        rhs = xp.take(y, xp.asarray(cols, device=device), axis=1)
        system = k if i == len(distinct) - 1 else xp.asarray(k, copy=True)  # as on numpy
        system = plus_diagonal(system, float(alpha))
        c, _ = solve_there(system, rhs, float(alpha), jitter_up_to=0.0)
        if s is not None:  # c = S c' (least squares came back on the host)
            c = c * (np.asarray(to_host(s))[:, None] if isinstance(c, np.ndarray) else s[:, None])
        coef[:, cols] = np.asarray(to_host(c), dtype=np.float64)  # c crosses once
    clock.lap("solve")
    return RidgeSolution(coef, seconds=clock.seconds)
