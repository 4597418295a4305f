"""Eigensolvers for symmetric kernel matrices: dense and randomized block Krylov.

Layer rule: numeric code over numpy arrays and a ``matmat`` callable. The
solvers know nothing of dask, kernels, xarray or zarr; the operator that
streams kernel blocks is :class:`npt_dask.gram.KernelOperator`.

The pieces, each small and pure:

* :func:`dense_eigh` -- scipy's ``eigh`` on an explicit matrix (small n);
* :func:`block_krylov_eigh` -- block Lanczos with full re-orthogonalisation
  and Rayleigh-Ritz over the whole Krylov basis. Every pass applies the
  operator to the newest block only; the products ``W = K Q`` are kept, so
  the Ritz residuals ``||K u - theta u||`` are exact and cost no extra pass;
* :func:`select_eigenpairs` -- positivity check, truncation to
  ``lambda > rtol * lambda_1`` (Lemma 1: r <= rank) and deterministic signs.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.linalg

from npt_dask.errors import (
    InputError,
    NegativeEigenvalueError,
    NegativeEigenvalueWarning,
    RankWarning,
)
from npt_dask.planning import default_block_size

__all__ = [
    "EigenResult",
    "block_krylov_eigh",
    "dense_eigh",
    "flip_signs",
    "select_eigenpairs",
]

Matmat = Callable[[np.ndarray], np.ndarray]
NEGATIVE_RATIO = 1e-5  # as scikit-learn's _check_psd_eigenvalues, float64


@dataclass(frozen=True)
class EigenResult:
    """Top eigenpairs of a symmetric matrix, largest first.

    ``residuals[i]`` is ``||K u_i - lambda_i u_i|| / max_j |lambda_j|`` (the
    largest eigenvalue for a PSD matrix);
    ``min_eigenvalue`` is the smallest eigenvalue seen (exact for the dense
    solver, the smallest Ritz value -- an upper bound -- for Krylov).
    """

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    residuals: np.ndarray
    passes: int
    converged: bool
    solver: str
    min_eigenvalue: float
    block_size: int = 0


def flip_signs(vectors: np.ndarray) -> np.ndarray:
    """Make the largest-magnitude entry of every column positive (as svd_flip)."""
    if vectors.shape[1] == 0:
        return vectors
    rows = np.argmax(np.abs(vectors), axis=0)
    signs = np.sign(vectors[rows, np.arange(vectors.shape[1])])
    signs[signs == 0] = 1.0
    return vectors * signs


def _relative_residuals(
    kv: np.ndarray, v: np.ndarray, theta: np.ndarray, scale: float
) -> np.ndarray:
    return np.linalg.norm(kv - v * theta, axis=0) / scale


def dense_eigh(k: np.ndarray, n_components: int | None = None) -> EigenResult:
    """All eigenpairs of an explicit symmetric matrix, top ``n_components`` returned."""
    n = k.shape[0]
    values, vectors = scipy.linalg.eigh(k, overwrite_a=False, check_finite=False)
    # (k is kept: the residuals below need it)
    values, vectors = values[::-1], vectors[:, ::-1]
    r = n if n_components is None else min(n_components, n)
    scale = max(float(np.max(np.abs(values))), np.finfo(np.float64).tiny)
    top_v = vectors[:, :r]
    residuals = _relative_residuals(k @ top_v, top_v, values[:r], scale)
    return EigenResult(
        values[:r].copy(), top_v.copy(), residuals, 1, True, "dense", float(values[-1])
    )


def _orthonormalize(
    block: np.ndarray, basis: np.ndarray, width: int, rng: np.random.Generator
) -> np.ndarray:
    """Orthonormal ``width`` columns spanning ``block`` minus its part in ``basis``.

    Classical Gram-Schmidt twice (CGS2) against ``basis``, then the leading
    left singular vectors. Directions that vanish (an invariant subspace was
    reached) are replaced by random ones orthogonal to everything so far.
    """
    scale = float(np.max(np.linalg.norm(block, axis=0), initial=0.0))
    for _ in range(2):
        block = block - basis @ (basis.T @ block)
    u, s, _ = np.linalg.svd(block, full_matrices=False)
    # a direction is new only if it is well above the rounding left by the projection
    good = int(np.sum(s > 1e-10 * scale)) if scale > 0 else 0
    u = u[:, : min(good, width)]
    u = u - basis @ (basis.T @ u)  # third pass: keeps Q orthonormal to machine precision
    u = np.linalg.qr(u)[0] if u.shape[1] else u
    if u.shape[1] < width:
        extra = rng.standard_normal((block.shape[0], width - u.shape[1]))
        for _ in range(2):
            extra = extra - basis @ (basis.T @ extra)
            extra = extra - u @ (u.T @ extra)
        u = np.hstack([u, np.linalg.qr(extra)[0]])
    return u


def block_krylov_eigh(
    matmat: Matmat,
    n: int,
    n_components: int,
    *,
    block_size: int | None = None,
    tol: float = 1e-8,
    max_passes: int = 50,
    max_basis: int | None = None,
    start: np.ndarray | None = None,
    random_state: int | np.random.Generator | None = None,
    callback: Callable[[int, np.ndarray, np.ndarray], None] | None = None,
) -> EigenResult:
    """Top ``n_components`` eigenpairs of a symmetric operator by block Krylov.

    Parameters
    ----------
    matmat : callable
        ``V -> K V`` for ``(n, b)`` float64 blocks. Each call is one pass.
    n : int
        Order of the operator.
    n_components : int
        Number of eigenpairs wanted (largest algebraic eigenvalues).
    block_size : int, optional
        Block width ``b``; default :func:`npt_dask.planning.default_block_size`.
        A narrower block is allowed: the basis grows by ``b`` per pass and
        the wanted pairs are taken from all of it once it holds
        ``n_components`` columns (``max_passes`` is extended until then).
    tol : float
        Stop when every wanted pair has ``||K u - theta u|| / |theta_1| <= tol``.
    max_passes : int
        Stop after this many operator applications (ConvergenceWarning is the
        caller's business: ``converged`` is False).
    max_basis : int, optional
        Largest Krylov basis kept (columns); past it the basis is thick-
        restarted on its best Ritz vectors. Default
        ``max(12 b, 2 n_components + 2 b)``.
    start : ndarray, optional
        ``(n, b)`` starting block; default Gaussian from ``random_state``.
    callback : callable, optional
        ``callback(passes, ritz_values, residuals)`` after every pass.

    Notes
    -----
    Memory: the basis ``Q`` and its image ``W = K Q`` are ``n x max_basis``
    float64 each, plus ``max_basis**2`` for the projected matrix. A Rayleigh-
    Ritz step costs ``O(n k^2)`` for ``k`` basis columns; an operator pass
    costs one sweep over the kernel.
    """
    if n_components < 1 or n_components > n:
        raise InputError(f"n_components must be in [1, {n}]; got {n_components}.")
    b = min(n, block_size or default_block_size(n_components))
    default_cap = max(12 * b, 2 * n_components + 2 * b)
    cap = min(n, max_basis if max_basis is not None else default_cap)
    if cap < min(n, n_components + 2 * b):
        raise InputError(
            f"max_basis={cap} must be at least n_components + 2 * block_size = "
            f"{n_components + 2 * b} (or n = {n})."
        )
    rng = np.random.default_rng(random_state)
    # column-major: a block of columns is contiguous, and columns never used
    # are never touched (row-major would touch every page of the whole cap)
    q = np.empty((n, cap), order="F")
    w = np.empty((n, cap), order="F")
    first = rng.standard_normal((n, b)) if start is None else np.asarray(start, float)
    if first.shape != (n, b):
        raise InputError(f"start must have shape ({n}, {b}); got {first.shape}.")
    q[:, :b] = _orthonormalize(first, q[:, :0], b, rng)
    t = np.zeros((cap, cap))
    lo, hi, passes = 0, b, 0
    while True:
        w[:, lo:hi] = matmat(q[:, lo:hi])
        passes += 1
        t[:hi, lo:hi] = q[:, :hi].T @ w[:, lo:hi]  # only the new columns change
        t[lo:hi, :lo] = t[:lo, lo:hi].T
        theta, s = np.linalg.eigh((t[:hi, :hi] + t[:hi, :hi].T) / 2)
        theta, s = theta[::-1], s[:, ::-1]
        scale = max(float(np.max(np.abs(theta))), np.finfo(np.float64).tiny)
        sr = s[:, :n_components]
        u = q[:, :hi] @ sr
        res = _relative_residuals(w[:, :hi] @ sr, u, theta[:n_components], scale)
        if callback is not None:
            callback(passes, theta[:n_components].copy(), res.copy())
        enough = hi >= n_components  # a block narrower than r needs several passes first
        converged = (enough and bool(np.all(res <= tol))) or hi >= n
        if converged or (passes >= max_passes and enough):
            return EigenResult(
                theta[:n_components].copy(),
                u,
                res,
                passes,
                converged,
                "krylov",
                float(theta[-1]),
                block_size=b,
            )
        if hi + min(b, n - hi) > cap:  # thick restart on the best Ritz vectors
            keep = min(hi, max(n_components + b, cap // 2), cap - b)
            sk = s[:, :keep]
            q[:, :keep], w[:, :keep] = q[:, :hi] @ sk, w[:, :hi] @ sk
            t[:keep, :keep] = np.diag(theta[:keep])
            candidate = w[:, :keep] - q[:, :keep] * theta[:keep]
            hi = keep
        else:
            candidate = w[:, lo:hi]
        width = min(b, n - hi)
        q[:, hi : hi + width] = _orthonormalize(candidate, q[:, :hi], width, rng)
        lo, hi = hi, hi + width


def select_eigenpairs(
    result: EigenResult,
    n_components: int | None,
    *,
    rtol: float = 1e-10,
    on_negative: Literal["warn", "raise"] = "warn",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keep eigenpairs with ``lambda > rtol * lambda_1``, fix signs, report negatives.

    Returns eigenvalues, eigenvectors (signs fixed so the largest-magnitude
    entry of each is positive) and residuals of the kept pairs.
    """
    values = result.eigenvalues
    lam1 = float(values[0]) if values.size else 0.0
    if lam1 <= 0.0:
        raise NegativeEigenvalueError(
            f"The kernel matrix has no positive eigenvalue (largest is {lam1:.3g}); "
            "there is no subspace to project on. After centring it is zero when all rows "
            "are identical (constant data) or the kernel is constant on them; check the "
            "data and the kernel and its parameters."
        )
    if result.min_eigenvalue < -NEGATIVE_RATIO * lam1:
        msg = (
            f"The kernel matrix is not positive semi-definite: it has an eigenvalue of "
            f"{result.min_eigenvalue:.6g} (largest {lam1:.6g}, ratio "
            f"{result.min_eigenvalue / lam1:.3g}). NPT coordinates exist only for positive "
            "eigenvalues; the negative part of the spectrum is excluded from the model."
        )
        if on_negative == "raise":
            raise NegativeEigenvalueError(msg + " Use a PSD kernel or on_negative='warn'.")
        warnings.warn(msg, NegativeEigenvalueWarning, stacklevel=3)
    keep = np.flatnonzero(values > rtol * lam1)
    keep = keep[keep == np.arange(keep.size)]  # a prefix: values are sorted
    wanted = values.size if n_components is None else n_components
    if keep.size < wanted and n_components is not None:
        warnings.warn(
            f"Only {keep.size} eigenvalues exceed rtol * lambda_1 = {rtol * lam1:.3g}; "
            f"keeping {keep.size} of the {n_components} requested components "
            "(the kernel matrix's effective rank bounds the dimension, Lemma 1).",
            RankWarning,
            stacklevel=3,
        )
    keep = keep[:wanted]
    vectors = flip_signs(result.eigenvectors[:, keep])
    return values[keep].copy(), vectors, result.residuals[keep].copy()
