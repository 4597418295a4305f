"""Preconditioned conjugate gradient for several right-hand sides, one step at a time.

The caller owns the loop: it applies the operator (one pass over the kernel
blocks: :mod:`npt_dask.ridge.solvers`) and hands the product to :func:`step`,
so every iteration can be reported and checkpointed between passes, and a
killed job resumes from a saved :class:`CGState` to the same iterates. Each
column (target) is its own CG; a column stops once its relative residual
``||b - H x|| / ||b||`` is at most ``tol``, and the operator is then applied to
the active columns only.

The step is the flexible (Polak-Ribiere) variant,
``beta = z_new^T (r_new - r) / z^T r`` (Notay 2000): equal to the classical
one for a fixed, exact preconditioner, and robust when the preconditioner's
solves run in float32 (then it is not exactly the same linear map every time).

The residual the steps update (``r <- r - a H p``) drifts from the true ``b - H x``
by the rounding of every product, most with float32 kernel blocks. So a column whose
updated residual meets ``tol`` is only a candidate: :func:`verify` takes the true
residual (one more operator product, the caller's pass), and a column that does not
meet ``tol`` by it goes on from that residual (residual replacement, as Falkon
recomputes its residual every few iterations). The caller takes ``H x`` of those columns
in the same operator product as ``H p`` of the others (one pass: its cost is the kernel,
not the extra columns), so the check costs one pass at the end. A column whose residual
grows past
:data:`DIVERGENCE` times the smallest it reached has diverged (rounding in an
ill-conditioned system) and stops at its best iterate, as a breakdown does. A column
that stops without a verified convergence (breakdown, divergence, the caller's
``max_iter``) is reported by the caller with the true residual of its iterate, ``H x``
taken beside the next pass's products or in one pass of its own at the end: the
updated residual of such a column is the drifted one.

Layer rule: numpy in, numpy out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["DIVERGENCE", "CGState", "relative_residuals", "retarget", "start", "step", "verify"]

DIVERGENCE = 1e4
"""A column whose relative residual exceeds this many times the smallest it reached has
diverged: it stops, at the iterate of that smallest residual."""


@dataclass
class CGState:
    """Iterates of preconditioned CG: ``x``, the residual ``r`` (``b - H x`` as the steps
    update it), the search direction ``p``, ``rz = r^T z`` per column, the right-hand
    side ``b`` and ``||b||`` per column, the iteration count, per-column convergence
    (``converged``: the updated residual met tol; ``verified``: the true one did too),
    breakdown, each column's smallest relative residual and its iterate (``best``,
    ``best_x``), and the largest relative residual of the columns still iterating after
    each iteration (``history``)."""

    x: np.ndarray
    r: np.ndarray
    p: np.ndarray
    rz: np.ndarray
    b: np.ndarray
    b_norm: np.ndarray
    best: np.ndarray
    best_x: np.ndarray
    iteration: int = 0
    converged: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    verified: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    breakdown: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    history: list[float] = field(default_factory=list)

    @property
    def active(self) -> np.ndarray:
        """Columns still iterating."""
        return ~(self.converged | self.breakdown)

    @property
    def done(self) -> bool:
        return not bool(self.active.any())

    @property
    def unverified(self) -> np.ndarray:
        """Columns whose updated residual met tol, not yet checked against ``b - H x``."""
        return self.converged & ~self.verified


def relative_residuals(state: CGState) -> np.ndarray:
    """``||r|| / ||b||`` per column (0 for a zero right-hand side)."""
    norms = np.sqrt(np.einsum("ij,ij->j", state.r, state.r))
    return np.divide(norms, state.b_norm, out=np.zeros_like(norms), where=state.b_norm > 0)


def start(b: np.ndarray, precondition: Callable[[np.ndarray], np.ndarray], tol: float) -> CGState:
    """The state at ``x = 0`` (``r = b``, ``p = P^-1 b``); no operator product."""
    b = np.asarray(b, dtype=np.float64)
    z = precondition(b)
    norms = np.sqrt(np.einsum("ij,ij->j", b, b))
    k = b.shape[1]
    state = CGState(
        x=np.zeros_like(b), r=b.copy(), p=z, rz=np.einsum("ij,ij->j", b, z), b=b,
        b_norm=norms, best=np.ones(k), best_x=np.zeros_like(b), converged=norms == 0,
        verified=norms == 0, breakdown=np.zeros(k, dtype=bool),
    )  # fmt: skip
    state.converged |= relative_residuals(state) <= tol
    state.verified |= state.converged  # at x = 0 the residual is b itself
    return state


def retarget(state: CGState, tol: float) -> CGState:
    """A resumed state under ``tol`` (perhaps not the one it was saved under): columns
    whose residual is above it iterate again (their direction and ``rz`` still hold),
    and no column counts as verified until it is checked again."""
    rel = relative_residuals(state)
    state.converged = (rel <= tol) & ~state.breakdown
    state.verified = (state.b_norm == 0) & state.converged
    return state


def verify(
    state: CGState,
    hx: np.ndarray,
    precondition: Callable[[np.ndarray], np.ndarray],
    tol: float,
    cols: np.ndarray | None = None,
) -> CGState:
    """Check columns ``cols`` (default: the :attr:`~CGState.unverified` ones) against their
    true residual, given ``hx = H x[:, cols]``: each takes ``r = b - H x``; one within
    ``tol`` is verified, one above it iterates again from there (a restart:
    ``p = P^-1 r``)."""
    cols = np.flatnonzero(state.unverified) if cols is None else np.asarray(cols)
    r = state.b[:, cols] - hx
    state.r[:, cols] = r
    rel = relative_residuals(state)[cols]
    ok = rel <= tol
    state.verified[cols[ok]] = True
    again = cols[~ok]
    state.converged[again] = False
    if again.size:
        z = precondition(state.r[:, again])
        state.p[:, again] = z
        state.rz[again] = np.einsum("ij,ij->j", state.r[:, again], z)
    return state


def step(
    state: CGState,
    q: np.ndarray,
    precondition: Callable[[np.ndarray], np.ndarray],
    tol: float,
    cols: np.ndarray | None = None,
) -> CGState:
    """One iteration, in place, of columns ``cols`` (default: the active ones) given
    ``q = H p[:, cols]``.

    A column whose curvature ``p^T H p`` is not positive (an indefinite operator: a
    kernel that is not positive semi-definite, or rounding at alpha near 0) stops with
    ``breakdown`` set, its iterate kept.
    """
    cols = np.flatnonzero(state.active) if cols is None else np.asarray(cols)
    considered = cols
    p = state.p[:, cols]
    curvature = np.einsum("ij,ij->j", p, q)
    good = curvature > 0
    broken = cols[~good]
    state.breakdown[broken] = True
    state.x[:, broken] = state.best_x[:, broken]  # its best iterate, not where it turned
    cols, p, q, curvature = cols[good], p[:, good], q[:, good], curvature[good]
    a = state.rz[cols] / curvature
    state.x[:, cols] += a * p
    r_old = state.r[:, cols]
    r_new = r_old - a * q
    state.r[:, cols] = r_new
    state.iteration += 1
    rel = relative_residuals(state)
    better = cols[rel[cols] < state.best[cols]]
    state.best[better] = rel[better]
    state.best_x[:, better] = state.x[:, better]
    diverged = cols[rel[cols] > DIVERGENCE * state.best[cols]]
    state.breakdown[diverged] = True
    state.x[:, diverged] = state.best_x[:, diverged]
    state.converged[cols] |= rel[cols] <= tol
    z = precondition(r_new)
    rz_new = np.einsum("ij,ij->j", r_new, z)
    beta = np.maximum(np.einsum("ij,ij->j", z, r_new - r_old) / state.rz[cols], 0.0)
    state.p[:, cols] = z + beta * p
    state.rz[cols] = rz_new
    state.history.append(float(rel[considered].max(initial=0.0)))  # a broken column: its last
    return state
