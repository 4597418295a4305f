"""What the iteration driver, the checkpoint and the resume check know of an iterative
route: its *method* (:class:`Method`: start, step, check, and its state as named host
arrays and back) and the fields every method's state has (:class:`SolverState`).

A state is a dataclass of named arrays and scalars the method defines: the iterate
``x``, the residual ``r`` its steps update, the direction ``p`` whose operator product
the next step takes, the right-hand side ``b`` (``n x k`` or ``m x k``, in the
namespace of the right-hand side), and per target (host numpy) ``||b||``, the smallest
relative residual reached and its iterate (``best``, ``best_x``), the flags
``converged`` (the updated residual met tol), ``verified`` (the true one did too) and
``breakdown``; the iteration count and the largest relative residual after each
(``history``). A method may keep more (CG's ``rz``): its :meth:`Method.arrays` names
them, :meth:`Method.from_arrays` checks and reads them back. The column helpers below
(:func:`gather`, :func:`relative_residuals`, :func:`residuals_of`,
:func:`replace_residuals`) read only these fields, for any method.

Layer rule: protocols and column helpers over :mod:`npt_dask.linalg.cg`'s; no dask.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

import numpy as np

from npt_dask.linalg import cg

__all__ = [
    "COLUMNS",
    "FLAGS",
    "PER_TARGET",
    "Method",
    "SolverState",
    "gather",
    "relative_residuals",
    "replace_residuals",
    "residuals_of",
]

COLUMNS = ("x", "r", "p", "b", "best_x")
"""A state's vectors: ``n x k`` (or ``m x k``) float64 each."""
PER_TARGET = ("b_norm", "best")
"""A state's float64 numbers per target."""
FLAGS = ("converged", "verified", "breakdown")
"""A state's flags per target."""


class SolverState(Protocol):
    """The fields every iterative method's state has (see the module doc)."""

    x: Any
    r: Any
    p: Any
    b: Any
    best_x: Any
    b_norm: np.ndarray
    best: np.ndarray
    converged: np.ndarray
    verified: np.ndarray
    breakdown: np.ndarray
    iteration: int
    history: list[float]

    @property
    def active(self) -> np.ndarray:
        """Columns still iterating."""

    @property
    def unverified(self) -> np.ndarray:
        """Columns whose updated residual met tol, not yet checked against ``b - H x``."""


class Method(Protocol):
    """An iterative method the one driver (:class:`npt_dask.ridge.iterations.Iterations`)
    runs: its steps on a state given the operator's products, and the state as named
    host arrays and back (what the checkpoint keeps). ``label`` starts its progress
    lines (``"cg"``); ``title`` names it in warnings; a column whose residual grows past
    ``divergence`` times the smallest it reached stops at its best iterate."""

    label: str
    title: str
    divergence: float

    def start(self, b: Any, precondition: Callable[[Any], Any], tol: float) -> SolverState:
        """The state at ``x = 0`` in ``b``'s namespace; no operator product."""

    def step(
        self, state: Any, q: Any, precondition: Callable[[Any], Any], tol: float,
        cols: np.ndarray,
    ) -> Any:  # fmt: skip
        """One iteration of columns ``cols`` in place, given ``q = H p[:, cols]``."""

    def verify(
        self, state: Any, hx: Any, precondition: Callable[[Any], Any], tol: float,
        cols: np.ndarray,
    ) -> Any:  # fmt: skip
        """Columns ``cols`` checked against their true residual (``hx = H x[:, cols]``):
        verified within tol, else iterating again from ``r = b - H x``."""

    def retarget(self, state: Any, tol: float) -> Any:
        """A resumed state under ``tol``: no column verified until checked again."""

    def state_like(self, state: Any, like: Any) -> SolverState:
        """The state with its vectors in the namespace and on the device of ``like``."""

    def arrays(self, state: Any) -> dict[str, np.ndarray]:
        """The state as named host numpy arrays (:data:`COLUMNS`, :data:`PER_TARGET`,
        :data:`FLAGS` and the method's own), without ``iteration`` and ``history``."""

    def from_arrays(
        self, arrays: Mapping[str, np.ndarray], iteration: int, history: list[float]
    ) -> SolverState:
        """The state :meth:`arrays` gave (its own arrays checked: a ValueError naming
        what is wrong otherwise)."""


def _cg(state: SolverState) -> cg.CGState:
    """``state`` for :mod:`npt_dask.linalg.cg`'s column helpers, which read only the
    fields of :class:`SolverState`."""
    return cast(cg.CGState, state)


def gather(state: SolverState, parts: Sequence[tuple[str, np.ndarray]]) -> Any:
    """The columns ``parts`` of the state's vectors side by side
    (:func:`npt_dask.linalg.cg.gather`)."""
    return cg.gather(_cg(state), parts)


def relative_residuals(state: SolverState) -> np.ndarray:
    """``||r|| / ||b||`` per column, host numpy (:func:`npt_dask.linalg.cg.relative_residuals`)."""
    return cg.relative_residuals(_cg(state))


def residuals_of(state: SolverState, hx: Any, cols: np.ndarray) -> np.ndarray:
    """True relative residuals of columns ``cols`` given ``hx = H x[:, cols]``."""
    return cg.residuals_of(_cg(state), hx, cols)


def replace_residuals(state: SolverState, hx: Any, cols: np.ndarray, which: np.ndarray) -> None:
    """``r = b - H x`` for the columns ``which`` (:func:`npt_dask.linalg.cg.replace_residuals`)."""
    cg.replace_residuals(_cg(state), hx, cols, which)
