"""Kernel ridge's symmetric solves: the normal equations of the direct routes and the
search, factored by the one jittered Cholesky.

* :func:`solve_symmetric` and :func:`solve_moments` factor a symmetric system by the
  one jittered Cholesky (:func:`npt_dask.linalg.jitter.jittered_cholesky`: from no
  jitter, up to :data:`RIDGE_JITTER` of the mean diagonal), else least squares with
  scikit-learn's warning; :func:`solve_moments_like` and :func:`solve_there` do it in
  the namespace of the pass's outputs (a device's).

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
from npt_dask.arrays.namespace import device_of, namespace_of
from npt_dask.errors import RidgeWarning, warn
from npt_dask.linalg.cholesky import cho_solve, cholesky
from npt_dask.linalg.jitter import dense_attempt, jittered_cholesky
from npt_dask.linalg.symmetric import normal_matrix_dtype, plus_diagonal
from npt_dask.linalg.tiles import TiledUpper

__all__ = [
    "JITTER_WARN",
    "RIDGE_JITTER",
    "solve_moments",
    "solve_moments_like",
    "solve_symmetric",
    "solve_there",
]


RIDGE_JITTER = 1e-8
"""Largest jitter (relative to the mean of the diagonal) a direct solve adds when its
system is singular to rounding (nearly repeated centres: its null space changes no
prediction), up the one ladder of :func:`npt_dask.linalg.jitter.jittered_cholesky` (no
jitter, then ``m`` times float64's epsilon, tenfold a try), before it falls back to
least squares."""


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


def solve_there(
    system: Any, rhs: Any, alpha: float, *, jitter_up_to: float = RIDGE_JITTER
) -> tuple[Any, float]:
    """``system c = rhs`` in their namespace: the one jittered Cholesky up to
    ``jitter_up_to`` of the mean diagonal (:func:`npt_dask.linalg.cholesky.cholesky`,
    None when not positive definite), :func:`~npt_dask.linalg.cholesky.cho_solve`;
    least squares on the host (the system crosses once, with scikit-learn's warning)
    when the ladder ends. Returns ``c`` (the system's namespace, or host numpy) and the jitter."""
    xp = namespace_of(system)
    m = int(system.shape[0])
    scale = float(to_host(xp.mean(xp.abs(xp.linalg.diagonal(system))))) if m else 0.0
    held: list[Any] = []

    def attempt(jitter: float) -> bool:  # a jittered copy only when a jitter is tried
        held.clear()
        factor = cholesky(plus_diagonal(xp.asarray(system, copy=True), jitter) if jitter
                          else system)  # fmt: skip
        if factor is not None:
            held.append(factor)
        return factor is not None

    jitter = jittered_cholesky(attempt, m=m, scale=scale, most=jitter_up_to)
    if jitter is not None:
        _jitter_warning(alpha, jitter, scale)
        return cho_solve(held[0], rhs), jitter
    _lstsq_warning(f"alpha={alpha:g}")
    full, b = to_host((system, rhs))
    return scipy.linalg.lstsq(np.asarray(full), np.asarray(b))[0], float("nan")


def solve_moments_like(
    gram: Any, kmm: Any, cross: Any, alphas: np.ndarray
) -> tuple[np.ndarray, float]:
    """:func:`solve_moments` where the pass's sums live (a device): ``G`` (the whole
    ``m x m`` sum), ``K_mm`` and ``B`` in their namespace; ``G + alpha K_mm`` in
    :func:`~npt_dask.linalg.symmetric.normal_matrix_dtype` (float64) factored there,
    one per distinct alpha. ``c`` (host numpy, ``m x k``) crosses once."""
    xp, device = namespace_of(gram), device_of(gram)
    dtype = normal_matrix_dtype(xp)
    gram, kmm, cross = (xp.astype(a, dtype) for a in (gram, kmm, cross))
    parts: list[tuple[np.ndarray, Any]] = []
    host_parts: list[tuple[np.ndarray, np.ndarray]] = []
    jitters: list[float] = []
    for alpha in np.unique(alphas):
        cols = np.flatnonzero(alphas == alpha)
        rhs = xp.take(cross, xp.asarray(cols, device=device), axis=1)
        c, jitter = solve_there(gram + float(alpha) * kmm, rhs, float(alpha))
        (host_parts if isinstance(c, np.ndarray) else parts).append((cols, c))
        jitters.append(jitter)
    coef = np.empty(tuple(int(v) for v in cross.shape))
    if parts:
        order = [cols for cols, _ in parts]
        joined = to_host(xp.concat([c for _, c in parts], axis=1))  # the one crossing
        coef[:, np.concatenate(order)] = np.asarray(joined, dtype=np.float64)
    for cols, c in host_parts:
        coef[:, cols] = c
    return coef, max(jitters)
