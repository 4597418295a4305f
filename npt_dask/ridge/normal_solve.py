"""Kernel ridge's symmetric solves: the normal equations of the direct routes and the
search, factored by the one jittered Cholesky.

* :func:`solve_symmetric` (numpy, in place) and :func:`solve_there` (any namespace: a
  device's) factor a symmetric system by the one jittered Cholesky
  (:func:`npt_dask.linalg.jitter.jittered_cholesky`: from no jitter, up to
  :data:`RIDGE_JITTER` of the mean diagonal), else least squares with scikit-learn's
  warning;
* :func:`solve_moments` solves the Nyström normal equations of the direct route, one
  factorisation per distinct alpha, where the pass's sums live: numpy's tiles
  (:class:`~npt_dask.linalg.tiles.TiledUpper`), or the device's whole ``m x m`` sum, the
  system built there in place.

The routes that use them are :mod:`npt_dask.ridge.routes` (one module each); the
centres' rows and their kernel ``K_mm`` are :mod:`npt_dask.ridge.centre_rows`'.

Layer rule: graph code; numbers from :mod:`npt_dask.engine.blocks`,
:mod:`npt_dask.engine.consumers` and :mod:`npt_dask.linalg.symmetric`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of
from npt_dask.errors import RidgeWarning, warn
from npt_dask.linalg.cholesky import cho_solve, cholesky
from npt_dask.linalg.jitter import dense_attempt, jittered_cholesky
from npt_dask.linalg.symmetric import normal_matrix_dtype, set_diagonal
from npt_dask.linalg.tiles import TiledUpper

__all__ = [
    "JITTER_WARN",
    "RIDGE_JITTER",
    "columns",
    "joined_columns",
    "solve_moments",
    "solve_symmetric",
    "solve_there",
]


RIDGE_JITTER = 1e-8
"""Largest jitter (relative to the mean of the diagonal) a direct solve adds when its
system is singular to rounding (nearly repeated centres: its null space changes no
prediction), up the one ladder of :func:`npt_dask.linalg.jitter.jittered_cholesky` (no
jitter, then ``m`` times float64's epsilon, tenfold a try), before it falls back to
least squares."""


PANEL_BYTES = 64 * 2**20
"""Bytes of a column panel of ``alpha K_mm`` added into a device system at a time (no
``m x m`` temporary)."""


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


def solve_moments(gram: Any, kmm: Any, cross: Any, alphas: np.ndarray) -> tuple[np.ndarray, float]:
    """``(G + alpha_j K_mm) c_j = B_j`` for each column j, one factorisation per distinct
    alpha, and the largest jitter one needed (:data:`RIDGE_JITTER`); ``c`` (``m x k``)
    host numpy.

    Where the pass's sums live: on numpy ``G`` is the host tiles
    (:class:`~npt_dask.linalg.tiles.TiledUpper`), each system a copy of them
    (:func:`_solve_tiled`); elsewhere (a device) ``G`` is the whole ``m x m`` sum and
    ``K_mm`` and ``B`` arrays there: the system ``G + alpha K_mm`` is built in
    :func:`~npt_dask.linalg.symmetric.normal_matrix_dtype` (float64) in place -- in ``G``
    itself for the last alpha, which uses ``G`` up -- and factored there
    (:func:`_solve_device`); the coefficients cross once.
    """
    tiled = isinstance(gram, TiledUpper)
    if not tiled:
        xp = namespace_of(gram)
        dtype = normal_matrix_dtype(xp)
        gram, cross = xp.astype(gram, dtype, copy=False), xp.astype(cross, dtype, copy=False)
    distinct = np.unique(alphas)
    solved: list[tuple[np.ndarray, Any]] = []
    jitters = []
    for i, alpha in enumerate(distinct):
        cols = np.flatnonzero(alphas == alpha)
        if tiled:
            c, jitter = _solve_tiled(gram, kmm, float(alpha), cross[:, cols])
        else:
            c, jitter = _solve_device(gram, kmm, float(alpha), columns(cross, cols),
                                      last=i == len(distinct) - 1)  # fmt: skip
        solved.append((cols, c))
        jitters.append(jitter)
    return joined_columns(solved, tuple(int(v) for v in cross.shape)), max(jitters)


def _solve_device(gram: Any, kmm: Any, alpha: float, rhs: Any, *, last: bool
                  ) -> tuple[Any, float]:  # fmt: skip
    """``(G + alpha K_mm) c = rhs`` where ``G`` lives (a device): the system built in
    place -- in ``G`` itself for the ``last`` alpha, else in one copy -- ``alpha K_mm``
    added a column panel at a time (no ``m x m`` temporary), then :func:`solve_there`."""
    xp = namespace_of(gram)
    system = gram if last else xp.asarray(gram, copy=True)
    del gram
    m = int(system.shape[0])
    step = max(1, PANEL_BYTES // max(8 * m, 1))
    for j0 in range(0, m, step):
        j1 = min(m, j0 + step)
        panel = xp.astype(kmm[:, j0:j1], system.dtype, copy=True)
        panel *= alpha
        system[:, j0:j1] += panel
    return solve_there(system, rhs, alpha)


def solve_there(
    system: Any, rhs: Any, alpha: float, *, jitter_up_to: float = RIDGE_JITTER
) -> tuple[Any, float]:
    """``system c = rhs`` in their namespace: the one jittered Cholesky up to
    ``jitter_up_to`` of the mean diagonal (:func:`npt_dask.linalg.cholesky.cholesky`,
    None when not positive definite), :func:`~npt_dask.linalg.cholesky.cho_solve`;
    least squares on the host (the system crosses once, with scikit-learn's warning)
    when the ladder ends. A jitter is written on ``system``'s diagonal in place (the
    diagonal kept here, ``m`` numbers, to be written again: no second ``m x m`` array),
    so ``system`` is the caller's no more. Returns ``c`` (the system's namespace, or host
    numpy) and the jitter."""
    xp = namespace_of(system)
    m = int(system.shape[0])
    diagonal = xp.asarray(xp.linalg.diagonal(system), copy=True)
    scale = float(to_host(xp.mean(xp.abs(diagonal)))) if m else 0.0
    held: list[Any] = []

    def attempt(jitter: float) -> bool:
        nonlocal system
        held.clear()
        if jitter:
            system = set_diagonal(system, diagonal + jitter)
        factor = cholesky(system)
        if factor is not None:
            held.append(factor)
        return factor is not None

    jitter = jittered_cholesky(attempt, m=m, scale=scale, most=jitter_up_to)
    if jitter is not None:
        _jitter_warning(alpha, jitter, scale)
        system = None  # used up: the factor alone is held while it solves
        return cho_solve(held.pop(), rhs), jitter
    _lstsq_warning(f"alpha={alpha:g}")
    full, b = to_host((set_diagonal(system, diagonal), rhs))
    return scipy.linalg.lstsq(np.asarray(full), np.asarray(b))[0], float("nan")


def columns(a: Any, cols: np.ndarray) -> Any:
    """``a[:, cols]`` for host integers ``cols``, in ``a``'s namespace (a copy)."""
    xp = namespace_of(a)
    if is_numpy(xp):
        return a[:, cols]
    return xp.take(a, xp.asarray(cols, device=device_of(a)), axis=1)


def joined_columns(solved: list[tuple[np.ndarray, Any]], shape: tuple[int, ...]) -> np.ndarray:
    """Host ``(m, k)`` coefficients from ``(cols, c)`` pieces: numpy ones written in, a
    device's joined there and crossing once."""
    coef = np.empty(shape)
    there = [(cols, c) for cols, c in solved if not isinstance(c, np.ndarray)]
    for cols, c in solved:
        if isinstance(c, np.ndarray):
            coef[:, cols] = c
    if there:
        xp = namespace_of(*(c for _, c in there))
        joined = to_host(xp.concat([c for _, c in there], axis=1))  # the one crossing
        coef[:, np.concatenate([cols for cols, _ in there])] = np.asarray(joined, np.float64)
    return coef
