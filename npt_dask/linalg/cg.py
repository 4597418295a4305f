"""Preconditioned conjugate gradient for several right-hand sides, one step at a time.

The caller owns the loop: it applies the operator (one pass over the kernel
blocks: :mod:`npt_dask.ridge.normal_solve`) and hands the product to :func:`step`,
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

Where the state lives: the vectors (``x``, ``r``, ``p``, ``b``, ``best_x``: n x k) stay
in the array namespace of the right-hand side (:func:`start`), so when the operator's
products come back from a device pass (CuPy on a GPU) the iterates, the updates and the
preconditioner's solves stay on that device. The per-column bookkeeping (``rz``,
``||b||``, the flags, the best residuals, the history: k numbers each) is host numpy:
a step reads its scalars through the one host boundary
(:func:`npt_dask.arrays.host.to_host`) twice -- the curvatures ``p^T H p``, then
``||r||^2``, ``r^T z`` and ``z^T (r_new - r)`` in one array -- k numbers at a time,
never a vector. On numpy the arithmetic is today's, bit for bit (``einsum`` column dots,
fancy-indexed updates in place).

Layer rule: arrays of one namespace in, the same namespace out; k-scalars on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of, on_device

__all__ = [
    "DIVERGENCE",
    "CGState",
    "gather",
    "host_state",
    "relative_residuals",
    "replace_residuals",
    "residuals_of",
    "retarget",
    "start",
    "state_like",
    "step",
    "verify",
]

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
    each iteration (``history``).

    ``x``, ``r``, ``p``, ``b`` and ``best_x`` are arrays of the right-hand side's namespace
    (numpy, or a device's); every other field is host numpy (k numbers)."""

    x: Any
    r: Any
    p: Any
    rz: np.ndarray
    b: Any
    b_norm: np.ndarray
    best: np.ndarray
    best_x: Any
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


# --- column operations in the vectors' namespace -------------------------------------------


def _column_dots(xp: Any, a: Any, b: Any) -> Any:
    """``a^T b`` column by column (numpy: ``einsum``, as always)."""
    if is_numpy(xp):
        return np.einsum("ij,ij->j", a, b)
    return xp.sum(a * b, axis=0)


def _columns(xp: Any, a: Any, cols: np.ndarray) -> Any:
    """``a[:, cols]`` (``cols`` host integers; a copy)."""
    if is_numpy(xp):
        return a[:, cols]
    return xp.take(a, xp.asarray(cols, dtype=xp.int64, device=device_of(a)), axis=1)


def _set_columns(xp: Any, a: Any, cols: np.ndarray, values: Any) -> Any:
    """``a`` with ``a[:, cols] = values``: numpy in place; elsewhere a new array (the
    standard has no integer-array assignment: a gather and a ``where``)."""
    if is_numpy(xp):
        a[:, cols] = values
        return a
    if cols.size == 0:
        return a
    k = a.shape[1]
    source = np.zeros(k, dtype=np.int64)
    source[cols] = np.arange(cols.size)
    mask = np.zeros(k, dtype=bool)
    mask[cols] = True
    device = device_of(a)
    spread = xp.take(values, xp.asarray(source, device=device), axis=1)
    return xp.where(xp.asarray(mask, device=device), spread, a)


def _scalars(xp: Any, device: Any, values: np.ndarray) -> Any:
    """Host k-scalars as a row the vectors' namespace can multiply (numpy: as they are)."""
    return on_device(np.asarray(values, dtype=np.float64), xp, device)


def _fetch(xp: Any, *parts: Any) -> list[np.ndarray]:
    """Column scalars of the vectors' namespace on the host: one crossing for all of
    them (one array off a device, split here)."""
    if is_numpy(xp):
        return list(to_host(tuple(parts)))
    sizes = [int(p.shape[0]) for p in parts]
    joined = to_host(xp.concat(list(parts)) if len(parts) > 1 else parts[0])
    return np.split(np.asarray(joined, dtype=np.float64), np.cumsum(sizes)[:-1])


def _relative(squares: np.ndarray, b_norm: np.ndarray) -> np.ndarray:
    """``||r|| / ||b||`` from ``||r||^2`` (0 for a zero right-hand side)."""
    norms = np.sqrt(squares)
    return np.divide(norms, b_norm, out=np.zeros_like(norms), where=b_norm > 0)


def relative_residuals(state: CGState) -> np.ndarray:
    """``||r|| / ||b||`` per column (0 for a zero right-hand side), host numpy (one
    crossing of k numbers)."""
    xp = namespace_of(state.r)
    (squares,) = _fetch(xp, _column_dots(xp, state.r, state.r))
    return _relative(squares, state.b_norm)


def residuals_of(state: CGState, hx: Any, cols: np.ndarray) -> np.ndarray:
    """The true relative residuals ``||b - H x|| / ||b||`` of columns ``cols`` given
    ``hx = H x[:, cols]`` (host numpy, one crossing); the state is not changed."""
    xp = namespace_of(state.b)
    r = _columns(xp, state.b, cols) - hx
    (squares,) = _fetch(xp, _column_dots(xp, r, r))
    return _relative(squares, state.b_norm[cols])


def gather(state: CGState, parts: Sequence[tuple[str, np.ndarray]]) -> Any:
    """The columns ``parts`` of the state's vectors side by side, e.g.
    ``gather(state, [("p", act), ("x", unverified)])`` for one operator product of the
    directions of the active columns and the iterates to check: ``np.hstack`` of the
    pieces on numpy, the same in the vectors' namespace elsewhere."""
    xp = namespace_of(state.x)
    pieces = [_columns(xp, getattr(state, name), np.asarray(cols)) for name, cols in parts]
    if is_numpy(xp):
        return np.hstack(pieces)
    return xp.concat(pieces, axis=1)


# --- the state on the host and on the device -------------------------------------------------


def host_state(state: CGState) -> CGState:
    """The state with its vectors in host numpy (one crossing), to save: a checkpoint
    holds numpy. On numpy the state itself."""
    if is_numpy(namespace_of(state.x)):
        return state
    x, r, p, b, best_x = to_host((state.x, state.r, state.p, state.b, state.best_x))
    return replace(state, x=x, r=r, p=p, b=b, best_x=best_x)


def state_like(state: CGState, like: Any) -> CGState:
    """The state with its vectors in the namespace and on the device of ``like`` (the
    right-hand side or an operator product): a resumed checkpoint onto the device the
    passes run on. On numpy the state itself."""
    xp, device = namespace_of(like), device_of(like)
    if is_numpy(xp):
        return state
    moved = {name: on_device(getattr(state, name), xp, device)
             for name in ("x", "r", "p", "b", "best_x")}  # fmt: skip
    return replace(state, **moved)


# --- the steps ---------------------------------------------------------------------------------


def start(b: Any, precondition: Callable[[Any], Any], tol: float) -> CGState:
    """The state at ``x = 0`` (``r = b``, ``p = P^-1 b``); no operator product. The
    vectors live in ``b``'s namespace (``precondition`` maps that namespace to itself)."""
    xp = namespace_of(b)
    if is_numpy(xp):
        b = np.asarray(b, dtype=np.float64)
        x, r, best_x = np.zeros_like(b), b.copy(), np.zeros_like(b)
    else:
        b = xp.asarray(b, dtype=xp.float64)
        x, r, best_x = xp.zeros_like(b), xp.asarray(b, copy=True), xp.zeros_like(b)
    z = precondition(b)
    squares, rz = _fetch(xp, _column_dots(xp, b, b), _column_dots(xp, b, z))
    norms = np.sqrt(squares)
    k = b.shape[1]
    state = CGState(
        x=x, r=r, p=z, rz=rz, b=b, b_norm=norms, best=np.ones(k), best_x=best_x,
        converged=norms == 0, verified=norms == 0, breakdown=np.zeros(k, dtype=bool),
    )  # fmt: skip
    state.converged |= _relative(squares, norms) <= tol
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
    hx: Any,
    precondition: Callable[[Any], Any],
    tol: float,
    cols: np.ndarray | None = None,
) -> CGState:
    """Check columns ``cols`` (default: the :attr:`~CGState.unverified` ones) against their
    true residual, given ``hx = H x[:, cols]``: each takes ``r = b - H x``; one within
    ``tol`` is verified, one above it iterates again from there (a restart:
    ``p = P^-1 r``)."""
    xp = namespace_of(state.r)
    cols = np.flatnonzero(state.unverified) if cols is None else np.asarray(cols)
    r = _columns(xp, state.b, cols) - hx
    state.r = _set_columns(xp, state.r, cols, r)
    rel = relative_residuals(state)[cols]
    ok = rel <= tol
    state.verified[cols[ok]] = True
    again = cols[~ok]
    state.converged[again] = False
    if again.size:
        r_again = _columns(xp, state.r, again)
        z = precondition(r_again)
        state.p = _set_columns(xp, state.p, again, z)
        (state.rz[again],) = _fetch(xp, _column_dots(xp, r_again, z))
    return state


def step(
    state: CGState,
    q: Any,
    precondition: Callable[[Any], Any],
    tol: float,
    cols: np.ndarray | None = None,
) -> CGState:
    """One iteration, in place, of columns ``cols`` (default: the active ones) given
    ``q = H p[:, cols]``.

    A column whose curvature ``p^T H p`` is not positive (an indefinite operator: a
    kernel that is not positive semi-definite, or rounding at alpha near 0) stops with
    ``breakdown`` set, its iterate kept.
    """
    xp, device = namespace_of(state.x), device_of(state.x)
    cols = np.flatnonzero(state.active) if cols is None else np.asarray(cols)
    considered = cols
    p = _columns(xp, state.p, cols)
    (curvature,) = _fetch(xp, _column_dots(xp, p, q))
    good = curvature > 0
    broken = cols[~good]
    state.breakdown[broken] = True
    # its best iterate, not where it turned
    state.x = _set_columns(xp, state.x, broken, _columns(xp, state.best_x, broken))
    if is_numpy(xp):  # always the masked copies: their layout fixes einsum's sums
        p, q = p[:, good], q[:, good]
    elif not good.all():
        kept = np.flatnonzero(good)
        p, q = _columns(xp, p, kept), _columns(xp, q, kept)
    cols, curvature = cols[good], curvature[good]
    a = _scalars(xp, device, state.rz[cols] / curvature)
    state.x = _set_columns(xp, state.x, cols, _columns(xp, state.x, cols) + a * p)
    r_old = _columns(xp, state.r, cols)
    r_new = r_old - a * q
    state.r = _set_columns(xp, state.r, cols, r_new)
    state.iteration += 1
    z = precondition(r_new)
    squares, rz_new, turn = _fetch(
        xp,
        _column_dots(xp, state.r, state.r),
        _column_dots(xp, r_new, z),
        _column_dots(xp, z, r_new - r_old),
    )
    rel = _relative(squares, state.b_norm)
    better = cols[rel[cols] < state.best[cols]]
    state.best[better] = rel[better]
    state.best_x = _set_columns(xp, state.best_x, better, _columns(xp, state.x, better))
    diverged = cols[rel[cols] > DIVERGENCE * state.best[cols]]
    state.breakdown[diverged] = True
    state.x = _set_columns(xp, state.x, diverged, _columns(xp, state.best_x, diverged))
    state.converged[cols] |= rel[cols] <= tol
    beta = _scalars(xp, device, np.maximum(turn / state.rz[cols], 0.0))
    state.p = _set_columns(xp, state.p, cols, z + beta * p)
    state.rz[cols] = rz_new
    state.history.append(float(rel[considered].max(initial=0.0)))  # a broken column: its last
    return state


def replace_residuals(state: CGState, hx: Any, cols: np.ndarray, which: np.ndarray) -> CGState:
    """``r = b - H x`` for the columns ``which`` (some of ``cols``, whose ``H x`` is ``hx``),
    in place: a column whose iterate was put back to its best (breakdown, divergence),
    once measured, holds that iterate's residual, as every other column does."""
    if not which.size:
        return state
    xp = namespace_of(state.r)
    at = {int(c): i for i, c in enumerate(cols)}
    part = _columns(xp, hx, np.array([at[int(c)] for c in which], dtype=np.intp))
    state.r = _set_columns(xp, state.r, which, _columns(xp, state.b, which) - part)
    return state
