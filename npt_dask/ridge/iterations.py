"""The one iteration driver of kernel ridge's iterative routes, and their checkpoints.

An iterative route gives the driver (:class:`Iterations`) its method
(:class:`npt_dask.ridge.state.Method`: preconditioned CG, :class:`npt_dask.ridge.routes.cg.
ConjugateGradient`, or any other whose state has the fields of
:class:`~npt_dask.ridge.state.SolverState`), the operator product (``H P`` for a block of
columns: one pass over the kernel blocks) and a preconditioner; the driver owns
everything else, the same for every such route and method:

* the start, or the resume from a checkpoint (:mod:`npt_dask.ridge.checkpoint`: one
  file format for any route's state, pinned by the problem's fingerprint -- the route's
  name among its parts --, the kernel's values on a probe of the data, and the
  right-hand side), and a resumed state checked against the problem itself: ``H x``
  of the saved iterate against its saved residual (:mod:`npt_dask.ridge.resume`: one
  pass more at a resume);
* the method's steps, with the check of each
  converged column against its true residual ``b - H x`` and the measure of the columns
  that stop without converging, beside the next pass's products;
* a checkpoint and a progress line after every pass, and the solution's report
  (:func:`finish`: true residuals, the warnings of the columns that did not converge).

Layer rule: graph code over :mod:`npt_dask.ridge.state` and :mod:`npt_dask.ridge.checkpoint`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from npt_dask.arrays.host import to_host
from npt_dask.engine.consumers import Digest
from npt_dask.engine.passes import Centres, row_pass
from npt_dask.engine.rows import Rows
from npt_dask.errors import ConvergenceWarning, RidgeWarning, warn
from npt_dask.ridge import state as states
from npt_dask.ridge.checkpoint import Checkpoint, Snapshot, fingerprint
from npt_dask.ridge.problem import Clock, RidgePlan, RidgeProblem, RidgeSolution
from npt_dask.ridge.resume import check_resumed
from npt_dask.ridge.state import Method, SolverState
from npt_dask.runtime.progress import FitProgress, label_in_force

if TYPE_CHECKING:
    from npt_dask.ridge.routes.base import Route

__all__ = [
    "PROBE_ROWS",
    "Iterations",
    "data_digests",
    "finish",
    "kernel_probe",
    "problem_fingerprint",
]


PROBE_ROWS = 8
"""Rows of the first chunk (and centres) whose kernel values a checkpoint pins: a kernel
function is known by what it gives, not by its code (which says nothing of the values it
closes over or takes by default)."""


def _spread(count: int, limit: int) -> np.ndarray:
    """Up to ``limit`` indices spread evenly over ``range(count)``."""
    return np.unique(np.linspace(0, count - 1, min(count, limit)).astype(np.int64))


def kernel_probe(problem: RidgeProblem, rows: Rows) -> np.ndarray:
    """The kernel's values (float64) between :data:`PROBE_ROWS` rows of the first chunk and
    as many centres (the same rows on the exact route), on the host (the probe's rows
    cross once); empty for a precomputed kernel, whose values are the data (digested with
    them)."""
    if problem.kernel.precomputed or rows.n == 0:
        return np.zeros((0, 0))
    a = rows.take(_spread(rows.chunks[0], PROBE_ROWS), host=True)
    c = a
    if problem.centre_host is not None:
        c = problem.centre_host[_spread(len(problem.centre_host), PROBE_ROWS)]
    return np.asarray(problem.kernel(a, c.astype(a.dtype, copy=False)), dtype=np.float64)


def problem_fingerprint(problem: RidgeProblem, rows: Rows, digests: list[bytes], route: str) -> str:
    """The fingerprint a checkpoint pins its problem by (``route``: :attr:`Route.pin
    <npt_dask.ridge.routes.base.Route.pin>`)."""
    return fingerprint({
        "route": route,
        "kernel": problem.kernel.to_dict(), "precision": str(problem.dtype),
        "alphas": problem.alphas,
        "centres": problem.centres if problem.centres is not None else np.zeros(0, np.int64),
        "data": b"".join(digests), "shape": list(rows.data.shape), "k": problem.k,
    })  # fmt: skip


def data_digests(rows: Rows, problem: RidgeProblem) -> list[bytes]:
    """A digest of every row chunk with its targets and weights (reads the data only)."""
    aux = {"targets": problem.targets, "weights": problem.weights}
    return row_pass(rows, Centres.of(None, sizes=[0]), problem.kernel, {"digest": Digest()},
                    aux=aux).rows["digest"]  # fmt: skip


class Iterations:
    """The loop of an iterative route's ``method``: operator product, step, checkpoint,
    report."""

    def __init__(
        self, route: Route, method: Method, problem: RidgeProblem, rows: Rows | None,
        checkpoint: Checkpoint | None, progress: bool,
    ) -> None:  # fmt: skip
        self.route, self.method = route, method
        self.problem, self.rows, self.checkpoint = problem, rows, checkpoint
        self.report = FitProgress(
            0, problem.plan.tol, enabled=progress, prefix=label_in_force("npt ridge")
        )
        self.key: str | None = None
        self.probe = np.zeros((0, 0))
        self.passes = 0  # operator products: iterations and the checks of converged columns
        self.measured: dict[int, float] = {}  # stopped columns' true relative residuals
        self.resumed = False  # a saved state, to be checked against this problem's operator

    def start(
        self,
        b: Any,
        digests: list[bytes] | None,
        precondition: Callable[[Any], Any],
    ) -> SolverState:
        """The checkpointed state of this problem (``digests``: of the data's row chunks,
        when a checkpoint is held; ``b``: the right-hand side the data give), else the
        method's start at ``x = 0``. The state lives in ``b``'s namespace (the pass's, a
        device's): a resumed one is moved there (:meth:`Method.state_like
        <npt_dask.ridge.state.Method.state_like>`), ``b`` crossing once to be compared
        with the saved one."""
        tol, method = self.problem.plan.tol, self.method
        if self.checkpoint is None:
            return method.start(b, precondition, tol)
        assert digests is not None
        assert self.rows is not None
        self.key = problem_fingerprint(self.problem, self.rows, digests, self.route.pin)
        self.probe = kernel_probe(self.problem, self.rows)
        saved = self.checkpoint.resume(self.key, self.probe, to_host(b),
                                       precision=str(self.problem.dtype),
                                       read=method.from_arrays)  # fmt: skip
        if saved is None:
            return method.start(b, precondition, tol)
        state = method.state_like(saved, b)
        self.resumed = True
        method.retarget(state, tol)  # saved under another tol, perhaps; verified again
        self.report.stage(f"{method.label}: resuming at iteration {state.iteration} "
                          f"from {self.checkpoint.user_path}")  # fmt: skip
        return state

    def _line(self, state: SolverState, act: np.ndarray, unv: np.ndarray, stop: np.ndarray) -> str:
        """The progress line of a pass: the iteration, or the check of converged targets
        (and the measure of stopped ones)."""
        tol, k = self.problem.plan.tol, len(state.converged)
        done = int(np.sum(state.verified))
        checked = ""
        if unv.size:
            worst = float(states.relative_residuals(state)[unv].max())
            checked = f"; {unv.size} checked against b - H x (relative residual {worst:.2e})"
        if stop.size:
            worst = max(self.measured[int(c)] for c in stop)
            checked += (f"; {stop.size} stopped without converging, measured against b - H x "
                        f"(relative residual {worst:.2e})")  # fmt: skip
        label = self.method.label
        if not act.size:
            return f"{label}: check{checked[1:]}, {done}/{k} targets converged"
        return (f"{label}: iteration {state.iteration}, relative residual {state.history[-1]:.2e} "
                f"(tol {tol:g}){checked}, {done}/{k} targets converged")  # fmt: skip

    def _save(self, state: SolverState) -> None:
        """The state to the checkpoint: its vectors cross to host (the one crossing of
        vectors per iteration, only with a checkpoint)."""
        if self.checkpoint is not None:
            assert self.key is not None
            snapshot = Snapshot(self.method.arrays(state), state.iteration, state.history)
            self.checkpoint.save(snapshot, self.key, self.problem.centres, self.probe)

    def _check_resumed(self, state: SolverState, product: Callable[[Any, np.ndarray], Any]) -> None:
        """The saved state checked against this problem's operator, before any step
        (:func:`npt_dask.ridge.resume.check_resumed`: one pass more at a resume)."""
        assert self.checkpoint is not None
        gaps = check_resumed(state, product, precision=self.problem.plan.precision,
                             path=self.checkpoint.user_path)  # fmt: skip
        self.passes += 1
        self.resumed = False
        gap = gaps.max(initial=0.0)
        self.report.stage(f"{self.method.label}: the saved state checked against b - H x of "
                          f"this problem (largest gap {gap:.2e} of ||b||)")  # fmt: skip

    def _stopped(self, state: SolverState, at_end: bool) -> np.ndarray:
        """Columns stopped without a verified convergence whose true residual is not yet
        measured: broken down or diverged (their best iterate is final), and at
        ``max_iter`` (``at_end``) the ones still open."""
        stopped = state.breakdown.copy()
        if at_end:
            stopped |= ~(state.verified | state.converged)
        return np.array([c for c in np.flatnonzero(stopped) if int(c) not in self.measured],
                        dtype=np.intp)  # fmt: skip

    def _measure(self, state: SolverState, hx: Any, cols: np.ndarray) -> None:
        """The true relative residuals ``||b - H x|| / ||b||`` of stopped columns (k
        numbers cross)."""
        rel = states.residuals_of(state, hx, cols)
        self.measured.update({int(c): float(v) for c, v in zip(cols, rel, strict=True)})
        back = state.breakdown[cols]  # put back to their best iterates: r, best made theirs
        states.replace_residuals(state, hx, cols, cols[back])
        state.best[cols[back]] = rel[back]
        met = cols[rel <= self.problem.plan.tol]  # it met tol after all: converged
        state.converged[met] = state.verified[met] = True
        state.breakdown[met] = False

    def run(
        self,
        state: SolverState,
        product: Callable[[Any, np.ndarray], Any],
        precondition: Callable[[Any], Any],
    ) -> SolverState:
        """Iterate until every target's *true* residual ``b - H x`` meets tol or ``max_iter``
        iterations. A column the steps call converged is checked (:meth:`Method.verify
        <npt_dask.ridge.state.Method.verify>`) in the next pass, its ``H x`` beside the
        other columns' ``H p`` (the pass costs the kernel blocks, not the columns): one
        pass more than the iterations, at the end.
        A column that stops without it (breakdown, divergence, ``max_iter``) has the true
        residual of the iterate it returns measured the same way (:attr:`measured`),
        beside the next pass's products, or in one pass of its own at the end.
        Checkpointed and reported after every pass.

        The state stays in the namespace of ``product``'s results (a device's): the
        columns a pass takes are gathered there (:func:`npt_dask.ridge.state.gather`),
        ``precondition`` maps that namespace to itself, and each iteration crosses only
        k numbers at a time (the step's dots, the residuals checked)."""
        plan, method = self.problem.plan, self.method
        if self.resumed:
            self._check_resumed(state, product)
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
            q = product(states.gather(state, [("p", act), ("x", unv), ("x", stop)]), cols)
            self.passes += 1
            if act.size:
                method.step(state, q[:, : act.size], precondition, plan.tol, act)
            if unv.size:
                method.verify(state, q[:, act.size : act.size + unv.size], precondition,
                              plan.tol, unv)  # fmt: skip
                if at_end:  # a check that failed at max_iter: its true residual is r's
                    failed = unv[~state.verified[unv]]
                    rel = states.relative_residuals(state)
                    self.measured.update({int(c): float(rel[c]) for c in failed})
            if stop.size:
                self._measure(state, q[:, act.size + unv.size :], stop)
            self._save(state)
            self.report.stage(self._line(state, act, unv, stop))
        self.report.close()
        return state


def finish(
    state: SolverState, plan: RidgePlan, clock: Clock, details: dict, loop: Iterations
) -> RidgeSolution:
    """The solution, the true relative residual of every column reported (a verified
    column's from its check, a stopped one's from :attr:`Iterations.measured`) and
    quoted by the warnings of the columns that stopped without converging."""
    rel = states.relative_residuals(state)
    title = loop.method.title
    for col, value in loop.measured.items():
        rel[col] = value
    broken = np.flatnonzero(state.breakdown)
    if broken.size:
        warn(
            f"{title} stopped early for {broken.size} target(s): the operator's "
            "curvature was not positive, or the residual grew past "
            f"{loop.method.divergence:g} times the smallest it reached (a kernel that is not "
            "positive semi-definite, alpha near 0, or rounding in float32 kernel blocks). Their "
            f"best iterates are kept (true relative residual up to {rel[broken].max():.3g}). "
            "Use solver='direct', precision='float64', or raise alpha.",
            RidgeWarning,
        )
    open_ = np.flatnonzero(~state.verified & ~state.breakdown)
    if open_.size:
        warn(
            f"{title} stopped after max_iter={plan.max_iter} iterations with a "
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
        np.asarray(to_host(state.x)), iterations=state.iteration, residuals=list(state.history),
        converged=state.verified.copy(), seconds=clock.seconds, details=details,
    )  # fmt: skip
