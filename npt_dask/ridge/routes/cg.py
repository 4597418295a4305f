"""The conjugate-gradient routes: preconditioned CG, one pass over the kernel blocks per
iteration, driven by :class:`npt_dask.ridge.iterations.Iterations` (progress,
checkpoints, the true-residual check).

* **Nyström** (:class:`NystromCG`): ``(K_nm^T W K_nm + alpha K_mm) c = K_nm^T W Y``,
  Falkon's preconditioner (two Cholesky factors sharing one ``m x m`` array in the kernel
  precision, built from :func:`npt_dask.ridge.centre_rows.problem_centre_kernel`: ``m^3``
  flops); per iteration the fused ``K_nm^T W (K_nm p)`` and ``K_mm p`` from the same
  blocks, ``2nmd + 4nmk`` (p) ``+ 4 m^2 k``. The plan expects
  :func:`~npt_dask.ridge.estimate.nystrom_prior` iterations; once built, the
  preconditioner updates that from a sample of the rows.
* **Exact** (:class:`ExactCG`): ``(S K S + alpha I) c' = S Y`` (``c = S c'``), the
  randomized Nyström preconditioner of a landmark NPT model of rank l
  (:class:`~npt_dask.linalg.preconditioners.LowRank`, its ``n x l`` factor in the kernel
  precision); per iteration the symmetric operator of
  :mod:`npt_dask.engine.operator`, ``n^2 d`` (upper triangle) on the blocks not kept
  between passes, ``+ 4 n^2 k`` (p).

**Where the rows live on a device** (CuPy), so do the iterates: ``b``, ``x``, ``r``, ``p``
and ``z`` stay there, the operator takes and gives its products there (the exact route's
``K V`` by :meth:`npt_dask.engine.operator.KernelOperator.uncentered_matmat` on a device
``V``; Nyström's pass sums), the preconditioner solves there (Falkon's two triangles
moved once; the landmark factor ``n x l`` built there, its ``l x l`` eigenproblem on the
host after one crossing), and an iteration crosses k numbers at a time (the step's
dots). The rows are held there for the fit (:func:`~npt_dask.ridge.centre_rows.held`),
the centres, weights and the centres' slots moved once.

**The exact route's rank** is the plan's (:func:`expected_iterations`,
:meth:`ExactCG.plan`): a larger l takes fewer iterations (about ``sqrt(n / l)``) but
its factor takes budget from the kernel blocks kept between passes, so each iteration
recomputes more of them. The plan tries ranks up to a tenth of n (and
:data:`RANK_MOST`) and keeps the one of least counted work: the preconditioner, plus
the expected iterations times the work of one (the share of kernel blocks not kept).
Once built, the preconditioner's own eigenvalues give a second estimate
(:func:`npt_dask.ridge.estimate.exact_iterations`), which the refined plan states.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from npt_dask.arrays.namespace import namespace_of
from npt_dask.engine.blocks import PREPARED_BYTES
from npt_dask.engine.budget import cached_fraction, in_flight_bytes, kept_bytes, kept_pairs
from npt_dask.engine.consumers import Apply, CentreRows, Consumer, Cross, Digest, Normal
from npt_dask.engine.passes import Centres, map_rows, row_pass
from npt_dask.engine.rows import Rows
from npt_dask.linalg import cg
from npt_dask.linalg.device_preconditioners import preconditioner_like
from npt_dask.linalg.preconditioners import FalkonCholesky, LowRank, low_rank_from_coordinates
from npt_dask.ridge.centre_rows import (
    assemble,
    centre_rows,
    centre_slots,
    centres_of,
    dense_values,
    held,
    nystrom_rows,
    problem_centre_kernel,
)
from npt_dask.ridge.checkpoint import Checkpoint
from npt_dask.ridge.estimate import exact_estimate, nystrom_estimate, nystrom_prior, updated
from npt_dask.ridge.iterations import Iterations, data_digests, finish
from npt_dask.ridge.problem import (
    Clock,
    RidgePlan,
    RidgeProblem,
    RidgeSizes,
    RidgeSolution,
    on_the_device,
    total_weight,
)
from npt_dask.ridge.routes.base import (
    Route,
    centre_bytes,
    device_memory,
    ridge_rows,
    row_chunks,
    task_bytes,
)
from npt_dask.ridge.state import COLUMNS, FLAGS, PER_TARGET, Method
from npt_dask.runtime.scheduler import compute, task_threads

__all__ = [
    "ASSUMED_ALPHA",
    "CG",
    "RANK_MOST",
    "SPECTRUM",
    "ConjugateGradient",
    "ExactCG",
    "NystromCG",
    "expected_iterations",
    "ranks_to_try",
]

RANK_MOST = 8192
"""Most rows of the landmark model that preconditions exact kernel ridge: its ``l x l``
eigendecomposition (``4 l^3`` flops) runs on the driver."""

SPECTRUM = 0.03
"""The plan's model of the kernel's spectrum before it has seen the data: the (l+1)-th
eigenvalue of the n x n kernel matrix is about ``SPECTRUM n / l`` times its mean diagonal
(a spectrum decaying as ``1/i``). Measured on MNIST (rbf, gamma 0.02, n = 8,000, alpha
1e-3, tol 1e-3): ranks 200, 800, 2,000 took 127, 62, 41 iterations, which
:func:`expected_iterations` gives within a tenth."""

ASSUMED_ALPHA = 1e-3
"""The alpha the rank rule assumes when the plan is not told it."""


def expected_iterations(eigenvalue: float, alpha: float, tol: float) -> int:
    """Iterations preconditioned CG takes to a relative residual ``tol`` when the
    preconditioner leaves a condition number ``(eigenvalue + alpha) / alpha``
    (``eigenvalue``: the largest the preconditioner does not capture, lambda_{l+1}):
    ``1/2 sqrt(kappa) ln(2 / tol)``, at least 1."""
    kappa = (max(eigenvalue, 0.0) + alpha) / alpha
    return max(1, math.ceil(0.5 * math.sqrt(kappa) * math.log(2.0 / tol)))


def ranks_to_try(n: int) -> tuple[int, ...]:
    """The ranks the plan weighs: powers of two times 1 and 1.5 from 16, up to a tenth of
    n and :data:`RANK_MOST` (that bound itself included)."""
    top = max(1, min(RANK_MOST, -(-n // 10)))
    grid = {r for base in (16, 24) for r in (base << i for i in range(16)) if r < top}
    return tuple(sorted(grid | {top}))


class ConjugateGradient:
    """Preconditioned CG (:mod:`npt_dask.linalg.cg`) as the iteration driver's method
    (:class:`npt_dask.ridge.state.Method`): its state a :class:`~npt_dask.linalg.cg.CGState`,
    whose own array beside the common fields is ``rz`` (``r^T z`` per target)."""

    label, title, divergence = "cg", "Conjugate gradient", cg.DIVERGENCE
    names = ("x", "r", "p", "rz", "b", "b_norm", "best", "best_x", *FLAGS)

    def start(self, b: Any, precondition: Any, tol: float) -> cg.CGState:
        return cg.start(b, precondition, tol)

    def step(self, state: Any, q: Any, precondition: Any, tol: float, cols: np.ndarray) -> Any:
        return cg.step(state, q, precondition, tol, cols)

    def verify(self, state: Any, hx: Any, precondition: Any, tol: float, cols: np.ndarray) -> Any:
        return cg.verify(state, hx, precondition, tol, cols)

    def retarget(self, state: Any, tol: float) -> Any:
        return cg.retarget(state, tol)

    def state_like(self, state: Any, like: Any) -> cg.CGState:
        return cg.state_like(state, like)

    def arrays(self, state: Any) -> dict[str, np.ndarray]:
        """The state's arrays on the host (its vectors cross once)."""
        host = cg.host_state(state)
        return {name: np.asarray(getattr(host, name)) for name in self.names}

    def from_arrays(
        self, arrays: Mapping[str, np.ndarray], iteration: int, history: list[float]
    ) -> cg.CGState:
        """The saved state (its common fields checked by the checkpoint), ``rz`` checked."""
        k = arrays["x"].shape[1]
        if "rz" not in arrays or arrays["rz"].shape != (k,):
            shape = arrays["rz"].shape if "rz" in arrays else None
            raise ValueError(f"'rz' has shape {shape}, not ({k},)")
        assert set(COLUMNS) | set(PER_TARGET) <= set(self.names)
        return cg.CGState(**{name: arrays[name] for name in self.names}, iteration=iteration,
                          history=history)  # fmt: skip


CG = ConjugateGradient()
"""The method both CG routes drive."""


class NystromCG(Route):
    """Preconditioned CG on the Nyström system, Falkon's preconditioner."""

    name, solver, exact, iterative = "nystrom-cg", "cg", False, True
    method: Method = CG
    description = (
        "preconditioned conjugate gradient, one pass per iteration (Falkon's preconditioner)"
    )

    def plan(self, sizes: RidgeSizes, base: RidgePlan) -> RidgePlan:
        """The preconditioner's two triangular factors share one m x m matrix (kernel
        precision); the blocks in flight have no float64 copy."""
        s = sizes
        rows = ridge_rows(s.m, s.itemsize, float64_copy=False)
        flops = {
            "preconditioner_p": 2.0 * s.m * s.m * s.d + float(s.m) ** 3,
            "rhs_p": 2.0 * s.n * s.m * s.d + 2.0 * s.n * s.m * s.k,
            "iteration_p": 2.0 * s.n * s.m * s.d + 4.0 * s.n * s.m * s.k + 4.0 * s.m * s.m * s.k,
        }
        memory = {
            "centres": centre_bytes(s),
            "preconditioner": s.m * s.m * s.itemsize,
            "blocks": s.threads * task_bytes(rows, s.m, s.d, s.itemsize, s.k, False),
            "sums": s.threads * 8 * s.m * s.k,
            "vectors": 8 * 8 * s.m * s.k,
        }
        if s.device_budget is not None:  # built on the host, its two triangles moved once
            memory["device_preconditioner"] = 2 * s.m * s.m * s.itemsize
        memory = device_memory(memory, s, ("centres", "sums", "vectors"))
        return replace(base, route=self.name, row_chunk=rows, flops=flops, memory=memory,
                       iterations=min(s.max_iter, nystrom_prior(s.tol)))  # fmt: skip

    def solve(
        self, problem: RidgeProblem, *, checkpoint: Checkpoint | None = None,
        progress: bool = False,
    ) -> RidgeSolution:  # fmt: skip
        """Falkon's preconditioner, then one pass over the rows per iteration. The
        centres, the weights and the centres' slots are moved to the rows' device once
        (every pass reuses them); the iterates live there (k numbers cross an iteration)."""
        plan, clock = problem.plan, Clock()
        idx = problem.centres
        assert idx is not None
        rows = held(nystrom_rows(problem))
        loop = Iterations(self, self.method, problem, rows, checkpoint, progress)
        loop.report.stage(f"cg: Falkon preconditioner of {len(idx):,} centres")
        pc = FalkonCholesky.build(problem_centre_kernel(problem),
                                  float(problem.alphas.min()) / total_weight(problem))  # fmt: skip
        refined = updated(plan, nystrom_estimate(problem, rows.data, pc))
        clock.lap("preconditioner")
        loop.report.stage(f"cg: about {refined.iterations} iterations expected "
                          f"(planned {plan.iterations})")  # fmt: skip
        centres = centres_of(problem)
        slots = centre_slots(rows, idx)
        weights = rows.aligned(problem.weights)
        rhs: dict[str, Consumer] = {"cross": Cross(block_precision=True)}
        if checkpoint is not None:  # the data's digest: only to pin one
            rhs["digest"] = Digest()
        first = row_pass(rows, centres, problem.kernel, rhs,
                         aux={"targets": problem.targets, "weights": weights},
                         chains=task_threads(), on_device=True)  # fmt: skip
        b = first.sums["cross"]  # m x k, where the rows live: the CG state lives there too
        precondition = preconditioner_like(pc, b)  # its factors copied there once
        state = loop.start(b, first.rows.get("digest"), precondition)
        clock.lap("rhs")
        m = len(idx)

        def product(p: Any, cols: np.ndarray) -> Any:
            """``(K_nm^T W K_nm + alpha K_mm) p``: the pass's sums and the centres' rows
            stay where the rows live (nothing crosses but the k alphas)."""
            out = row_pass(rows, centres, problem.kernel, {"q": Normal(p), "kp": CentreRows(p)},
                           aux={"weights": weights, **slots.aux}, chains=task_threads(),
                           on_device=True)  # fmt: skip
            kp = assemble(out.rows["kp"], m, np.float64)
            return out.sums["q"] + rows.put(problem.alphas[cols]) * kp

        state = loop.run(state, product, precondition)
        details = {"preconditioner": "falkon", "jitter": pc.jitter, "bytes": pc.nbytes,
                   "expected_iterations": refined.iterations,
                   "expected_iterations_prior": plan.iterations}  # fmt: skip
        solution = finish(state, plan, clock, details, loop)
        solution.plan = refined
        return solution


class ExactCG(Route):
    """Preconditioned CG on the exact system, a landmark preconditioner whose rank the
    plan chooses from the budget (see the module doc)."""

    name, solver, exact, iterative = "exact-cg", "cg", True, True
    method: Method = CG
    description = "preconditioned CG (a landmark NPT model's top eigenpairs)"

    def plan(self, sizes: RidgeSizes, base: RidgePlan) -> RidgePlan:
        """The plan at each rank of :func:`ranks_to_try`; the one that fits with the least
        counted work (else the smallest rank's, which does not fit)."""
        plans = [self.at_rank(sizes, base, rank) for rank in ranks_to_try(sizes.n)]
        fitting = [p for p in plans if self.fits(p, sizes)]
        if not fitting:
            return plans[0]
        return min(fitting, key=lambda p: sizes.cost(p.flops, p.iterations))

    def at_rank(self, sizes: RidgeSizes, base: RidgePlan, rank: int) -> RidgePlan:
        """Work, memory and kept kernel blocks at preconditioner rank ``rank``: the
        landmark model (``l x l`` float64 matrices and the landmarks' rows), its ``n x l``
        factor in the kernel precision (built in place, float64 a row panel at a time),
        the pass's blocks in flight (:func:`npt_dask.engine.budget.in_flight_bytes`), and
        the kernel blocks kept between passes in what the budget leaves."""
        s = sizes
        chunks = row_chunks(s.n, s.chunk)
        factor = s.n * rank * s.itemsize + min(s.n, 8192) * rank * 8  # Y, a float64 panel
        memory = {
            "preconditioner": factor + 5 * 8 * rank * rank + rank * s.d * s.itemsize,
            "prepared": min(PREPARED_BYTES, s.n * s.d * s.itemsize),
            "blocks": in_flight_bytes(max(chunks), s.threads),
            "vectors": 8 * 8 * s.n * s.k,
        }  # fmt: skip
        if s.device_budget is not None:  # the n x l factor where the rows live
            memory["preconditioner"] -= factor
            memory["device_preconditioner"] = factor
        memory = device_memory(memory, s, ("vectors",))
        room = s.budget - sum(memory.values())
        if s.device_budget is not None:  # the kept blocks live on the device, beside its parts
            room = s.device_budget - sum(v for k, v in memory.items() if on_the_device(k))
        kept = kept_pairs(chunks, s.itemsize, max(0, room))
        memory["kept_blocks"] = kept_bytes(chunks, kept, s.itemsize)
        fresh = 1.0 - cached_fraction(chunks, kept)
        flops = {
            "preconditioner_p": 2.0 * rank * rank * s.d + 4.0 * rank**3 + 4.0 * s.n * rank * s.d
            + 3.0 * s.n * rank * rank,
            "first_pass_p": float(s.n) * s.n * s.d,
            "iteration_p": fresh * s.n * s.n * s.d + 2.0 * s.n * s.n * s.k
            + 4.0 * s.n * rank * s.k,
        }  # fmt: skip
        alpha = s.alpha if s.alpha > 0 else ASSUMED_ALPHA
        # not capped at max_iter: the rule weighs what reaching tol costs at each rank
        iterations = expected_iterations(SPECTRUM * s.n / rank, alpha, s.tol)
        return replace(base, route=self.name, flops=flops, memory=memory, kept=kept,
                       preconditioner_rank=rank, iterations=iterations)  # fmt: skip

    def solve(
        self, problem: RidgeProblem, *, checkpoint: Checkpoint | None = None,
        progress: bool = False,
    ) -> RidgeSolution:  # fmt: skip
        """The landmark preconditioner, then one pass of the symmetric operator per
        iteration; the plan refined with the iterations the preconditioner predicts. The
        targets, weights, iterates and the preconditioner's ``n x l`` factor live where
        the rows do (the operator takes and gives ``K V`` there): k numbers cross an
        iteration."""
        from npt_dask.engine.operator import KernelOperator

        plan, clock = problem.plan, Clock()
        data = problem.rows.data.rechunk({0: plan.row_chunk})
        if problem.kernel.precomputed:
            data = data.rechunk({1: plan.row_chunk})
        rows = held(problem.rows.like(data))
        loop = Iterations(self, self.method, problem, rows, checkpoint, progress)
        loop.report.stage(f"cg: landmark preconditioner of rank "
                          f"{plan.preconditioner_rank:,}")  # fmt: skip
        s = _root_weights(rows, problem.weights)
        pc = _landmark_preconditioner(problem, rows, s)
        clock.lap("preconditioner")
        refined = updated(plan, exact_estimate(problem, rows.data, pc))
        loop.report.stage(f"cg: about {refined.iterations} iterations expected "
                          f"(planned {plan.iterations})")  # fmt: skip
        y = dense_values(rows, problem.targets)
        b = y if s is None else y * s[:, None]
        op = KernelOperator(rows, problem.kernel, center=False, kept=plan.kept,
                            products=problem.dtype)  # fmt: skip
        digests = data_digests(rows, problem) if checkpoint is not None else None
        precondition = preconditioner_like(pc, b)
        state = loop.start(b, digests, precondition)
        clock.lap("rhs")

        def product(p: Any, cols: np.ndarray) -> Any:
            v = p if s is None else p * s[:, None]
            kv = op.uncentered_matmat(v)
            if s is not None:
                kv *= s[:, None]
            return kv + rows.put(problem.alphas[cols]) * p

        try:
            state = loop.run(state, product, precondition)
        finally:
            op.release()
        if s is not None:
            state.x *= s[:, None]
        details = {"preconditioner": "landmark", "rank": int(pc.u.shape[1]), "bytes": pc.nbytes,
                   "cached_fraction": op.cached_fraction,
                   "expected_iterations": refined.iterations,
                   "expected_iterations_prior": plan.iterations}  # fmt: skip
        solution = finish(state, plan, clock, details, loop)
        solution.plan = refined
        return solution


def _root_weights(rows: Rows, weights: Any) -> Any:
    """``sqrt(w)`` where the rows live (float64; moved there once), or None."""
    if weights is None:
        return None
    w = dense_values(rows, weights)
    return namespace_of(w).sqrt(w)


def _landmark_preconditioner(problem: RidgeProblem, rows: Rows, s: Any) -> LowRank:
    """The randomized Nyström preconditioner from a landmark NPT model (uncentred, full
    rank) on ``plan.preconditioner_rank`` rows: its coordinates of every row,
    ``Y = kappa(X, L) A`` with ``A = U Lambda^-1/2`` (one pass, :class:`~npt_dask.engine.consumers.
    Apply`), give ``K ~ Y Y^T`` (``S K S`` with the weights' roots ``s``). The landmark
    model is fitted on the host (its ``l`` rows cross once); ``Y`` and the factor made of
    it stay where the rows live."""
    from npt_dask.engine.centres import select_landmarks
    from npt_dask.kernels.params import DEFAULT_RTOL, Precision
    from npt_dask.npt.fitting import fit

    plan, spec = problem.plan, problem.kernel
    rng = np.random.default_rng(problem.random_state)
    precision: Precision = "float32" if problem.dtype == np.float32 else "float64"
    params: dict[str, Any] = {
        "kernel": spec if not spec.precomputed else "precomputed", "center": False,
        "precision": precision, "chunk_size": None,
    }  # fmt: skip
    if not spec.precomputed:
        method = problem.landmark_method
        idx = select_landmarks(plan.preconditioner_rank, rows.data, spec, method=method, rng=rng)
        landmark_rows = centre_rows(rows, idx, host=True)
        model = fit(landmark_rows, **params)
        centres = Centres.of(landmark_rows, model.projection_matrix.astype(problem.dtype),
                             rows=rows)  # fmt: skip
        source = rows
    else:
        idx = np.sort(rng.choice(plan.n, plan.preconditioner_rank, replace=False))
        model = fit(rows.data[idx][:, idx], **params)
        centres = Centres.of(None, model.projection_matrix.astype(problem.dtype),
                             sizes=[len(idx)], rows=rows)  # fmt: skip
        source = rows.like(rows.data[:, idx].rechunk({1: -1}))
    lazy = map_rows(source, centres, spec, Apply(), width=model.n_components, dtype=problem.dtype)
    y = compute(lazy)[0]  # where the rows live: n x l
    if s is not None:
        y *= namespace_of(y).astype(s[:, None], y.dtype)
    return low_rank_from_coordinates(y, float(problem.alphas.min()), DEFAULT_RTOL[precision])
