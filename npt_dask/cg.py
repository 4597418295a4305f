"""Preconditioned conjugate gradient for several right-hand sides, one step at a time.

The caller owns the loop: it applies the operator (one pass over the kernel
blocks: :mod:`npt_dask.ridge_solvers`) and hands the product to :func:`step`,
so every iteration can be reported and checkpointed between passes, and a
killed job resumes from a saved :class:`CGState` to the same iterates. Each
column (target) is its own CG; a column stops once its relative residual
``||b - H x|| / ||b||`` is at most ``tol``, and the operator is then applied to
the active columns only.

The step is the flexible (Polak-Ribiere) variant,
``beta = z_new^T (r_new - r) / z^T r`` (Notay 2000): equal to the classical
one for a fixed, exact preconditioner, and robust when the preconditioner's
solves run in float32 (then it is not exactly the same linear map every time).

Layer rule: numpy in, numpy out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["CGState", "relative_residuals", "start", "step"]


@dataclass
class CGState:
    """Iterates of preconditioned CG: ``x``, the residual ``r = b - H x``, the search
    direction ``p``, ``rz = r^T z`` per column, ``||b||`` per column, the iteration
    count, per-column convergence and the largest active relative residual after
    each iteration (``history``)."""

    x: np.ndarray
    r: np.ndarray
    p: np.ndarray
    rz: np.ndarray
    b_norm: np.ndarray
    iteration: int = 0
    converged: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    breakdown: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    history: list[float] = field(default_factory=list)

    @property
    def active(self) -> np.ndarray:
        """Columns still iterating."""
        return ~(self.converged | self.breakdown)

    @property
    def done(self) -> bool:
        return not bool(self.active.any())


def relative_residuals(state: CGState) -> np.ndarray:
    """``||r|| / ||b||`` per column (0 for a zero right-hand side)."""
    norms = np.sqrt(np.einsum("ij,ij->j", state.r, state.r))
    return np.divide(norms, state.b_norm, out=np.zeros_like(norms), where=state.b_norm > 0)


def start(b: np.ndarray, precondition: Callable[[np.ndarray], np.ndarray], tol: float) -> CGState:
    """The state at ``x = 0`` (``r = b``, ``p = P^-1 b``); no operator product."""
    b = np.asarray(b, dtype=np.float64)
    z = precondition(b)
    norms = np.sqrt(np.einsum("ij,ij->j", b, b))
    state = CGState(
        x=np.zeros_like(b), r=b.copy(), p=z, rz=np.einsum("ij,ij->j", b, z), b_norm=norms,
        converged=norms == 0, breakdown=np.zeros(b.shape[1], dtype=bool),
    )  # fmt: skip
    state.converged |= relative_residuals(state) <= tol
    return state


def step(
    state: CGState,
    q: np.ndarray,
    precondition: Callable[[np.ndarray], np.ndarray],
    tol: float,
) -> CGState:
    """One iteration, in place, given ``q = H p[:, active]`` (the active columns' product).

    A column whose curvature ``p^T H p`` is not positive (an indefinite operator: a
    kernel that is not positive semi-definite, or rounding at alpha near 0) stops with
    ``breakdown`` set, its iterate kept.
    """
    cols = np.flatnonzero(state.active)
    p = state.p[:, cols]
    curvature = np.einsum("ij,ij->j", p, q)
    good = curvature > 0
    state.breakdown[cols[~good]] = True
    cols, p, q, curvature = cols[good], p[:, good], q[:, good], curvature[good]
    a = state.rz[cols] / curvature
    state.x[:, cols] += a * p
    r_old = state.r[:, cols]
    r_new = r_old - a * q
    state.r[:, cols] = r_new
    state.iteration += 1
    rel = relative_residuals(state)
    state.converged[cols] |= rel[cols] <= tol
    z = precondition(r_new)
    rz_new = np.einsum("ij,ij->j", r_new, z)
    beta = np.maximum(np.einsum("ij,ij->j", z, r_new - r_old) / state.rz[cols], 0.0)
    state.p[:, cols] = z + beta * p
    state.rz[cols] = rz_new
    live = state.active
    shown = rel[live] if live.any() else rel[cols]
    state.history.append(float(shown.max(initial=0.0)))
    return state
