"""Eigensolvers for symmetric kernel matrices: dense and randomized block Krylov.

Layer rule: numeric code over numpy arrays and a ``matmat`` callable. The
solvers know nothing of dask, kernels, xarray or zarr; the operator that
streams kernel blocks is :class:`npt_dask.gram.KernelOperator`.

The pieces, each small and pure:

* :func:`dense_eigh` -- scipy's ``eigh`` on an explicit matrix (small n);
* :func:`block_krylov_eigh` -- block Lanczos with full re-orthogonalisation
  (CGS2 panels), Rayleigh-Ritz only at checkpoints chosen by a flop model and
  by residual estimates from the block recurrence, thick Krylov-Schur restarts
  with locking; ``r >= n / 4`` goes through identity blocks and one dense
  ``eigh``. The products ``W = K Q`` are kept, so the returned residuals
  ``||K u - theta u||`` are exact and cost no extra pass;
* :func:`krylov_shape` -- the block width and basis cap the solver wants;
* :func:`select_eigenpairs` -- positivity check, truncation to
  ``lambda > rtol * lambda_1`` (Lemma 1: r <= rank) and deterministic signs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import scipy.linalg

from npt_dask.errors import (
    InputError,
    NegativeEigenvalueError,
    NegativeEigenvalueWarning,
    RankWarning,
    warn,
)

__all__ = [
    "EigenResult",
    "block_krylov_eigh",
    "dense_eigh",
    "flip_signs",
    "krylov_shape",
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
    ``info`` counts the Krylov solver's work: Rayleigh-Ritz steps, restarts,
    locked pairs, and ``checks`` as ``(pass, basis columns, worst residual
    estimate)``; ``"dense": True`` when the operator was applied to identity
    blocks.
    """

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    residuals: np.ndarray
    passes: int
    converged: bool
    solver: str
    min_eigenvalue: float
    block_size: int = 0
    info: dict = field(default_factory=dict, compare=False)


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


LARGE_R = 200
"""From this many wanted pairs on, :func:`krylov_shape` picks blocks narrower than r."""

RR_FLOPS_PER_K3 = 30.0
"""Flop-equivalents of a dense ``eigh`` of order k, per ``k**3`` (tridiagonal reduction is
half BLAS-2, so LAPACK's ~4 k^3 run at about half the matrix-product rate)."""


def krylov_shape(n: int, n_components: int) -> tuple[int, int]:
    """Block width ``b`` and basis cap the Krylov solver wants for ``n_components`` of ``n``.

    * ``r < 200``: ``b = r + max(10, r // 5)``, ``cap = max(12 b, 2 r + 2 b)`` -- the
      shape of earlier releases; the Rayleigh-Ritz steps are cheap at this size.
    * ``r >= 200``: ``b = max(100, r // 10)``, ``cap = 4 r + 2 b``. Narrow blocks need the
      fewest operator columns for a given accuracy (the polynomial degree grows with the
      passes; MNIST RBF r = 1000: 3,400 columns at b = 100, 4,400 at b = 200), and the
      driver's algebra grows with the columns (re-orthogonalisation as k^2, Rayleigh-Ritz
      as k^3) while a kept-block pass costs about the same per column from b = 100 on.
      Block Lanczos reaches a 1e-8 residual within about 4 r columns on kernel spectra,
      so the basis rarely restarts. A restart (thick, Krylov-Schur style,
      with locking) stays correct when memory planning caps the basis lower.

    Both are capped by ``n`` and ``cap >= r + 2 b`` (what a thick restart needs).
    Memory: the basis and its image take ``16 n cap`` bytes on the driver.
    """
    r = int(n_components)
    if r < LARGE_R:
        b = r + max(10, r // 5)
        cap = max(12 * b, 2 * r + 2 * b)
    else:
        b = max(LARGE_R // 2, r // 10)
        cap = 4 * r + 2 * b
    b = min(n, b)
    return b, min(n, max(cap, r + 2 * b))


WEAK = 1e-3
"""Directions of a projected block below this share of the block's largest column get a
third Gram-Schmidt projection (two can leave rounding above ~1e-13 in them)."""


def _orthonormalize(
    block: np.ndarray,
    basis: np.ndarray,
    width: int,
    rng: np.random.Generator,
    coef: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormal ``width`` columns spanning ``block`` minus its part in ``basis``.

    Classical Gram-Schmidt twice (CGS2) as matrix products against ``basis``,
    reusing ``coef = basis.T @ block`` when the caller has it; then a QR and
    an SVD of the small triangle. Only the weak directions (singular value
    below ``WEAK`` times the block's largest column) get a third projection,
    not the whole block. Directions below 1e-10 of the block vanish (an
    invariant subspace was reached) and are replaced by random ones
    orthogonal to everything so far. Returns the columns ``U`` and
    ``R = U.T @ x`` (``x`` the projected block: the coupling of the new
    columns to the block, the Lanczos residual factor).
    """
    scale = float(np.max(np.linalg.norm(block, axis=0), initial=0.0))
    x = block
    if basis.shape[1]:
        c = basis.T @ block if coef is None else coef
        x = block - basis @ c
        x -= basis @ (basis.T @ x)
    # QR first: LAPACK's SVD of a tall n x b block is several times slower than its QR
    qx, rx = np.linalg.qr(x)
    ur, s, _ = np.linalg.svd(rx)
    # a direction is new only if it is well above the rounding left by the projection
    good = min(int(np.sum(s > 1e-10 * scale)) if scale > 0 else 0, width)
    u = qx @ ur[:, :good]
    strong = int(np.sum(s[:good] >= WEAK * scale))
    if good > strong and basis.shape[1]:
        weak = u[:, strong:]
        weak -= basis @ (basis.T @ weak)
        weak -= u[:, :strong] @ (u[:, :strong].T @ weak)
        u[:, strong:] = np.linalg.qr(weak)[0]
    if good < width:
        extra = rng.standard_normal((block.shape[0], width - good))
        for _ in range(2):
            extra = extra - basis @ (basis.T @ extra)
            extra = extra - u @ (u.T @ extra)
        u = np.hstack([u, np.linalg.qr(extra)[0]])
    return u, u.T @ x


DENSE_FRACTION = 0.25
"""From ``r >= DENSE_FRACTION * n`` on, :func:`block_krylov_eigh` decomposes the operator
explicitly (see its ``dense_fraction``)."""

FULL_EIGH_ORDER = 400
"""Projected matrices up to this order get a full ``eigh``; larger ones only the pairs
needed (LAPACK's ``syevx``: bisection and inverse iteration, back-transforming only
those vectors) and, at the end, the smallest eigenvalue in a values-only call."""


def _ritz(t: np.ndarray, need: int) -> tuple[np.ndarray, np.ndarray, float | None]:
    """Top ``need`` eigenpairs of the projected matrix, largest first, and its smallest
    eigenvalue when it came for free (else None)."""
    k = t.shape[0]
    t = (t + t.T) / 2
    if k <= FULL_EIGH_ORDER or 2 * need >= k:
        theta, s = scipy.linalg.eigh(t, check_finite=False, overwrite_a=True)
        return theta[::-1][:need], s[:, ::-1][:, :need], float(theta[0])
    theta, s = scipy.linalg.eigh(
        t, check_finite=False, overwrite_a=True, driver="evx", subset_by_index=[k - need, k - 1]
    )
    return theta[::-1], s[:, ::-1], None


def _smallest(t: np.ndarray) -> float:
    """Smallest eigenvalue of the projected matrix (a values-only bisection)."""
    low = scipy.linalg.eigh(
        (t + t.T) / 2, eigvals_only=True, check_finite=False, driver="evx", subset_by_index=[0, 0]
    )
    return float(low[0])


class _Schedule:
    """When to run the next Rayleigh-Ritz step (an ``eigh`` of the projected matrix).

    Ski rental on a flop model: an ``eigh`` of order k costs about
    ``RR_FLOPS_PER_K3 k^3``; a pass at least its products ``2 n^2 b`` and the
    re-orthogonalisation ``8 n k b``. The next check comes once the passes
    since the last one cost as much as a check, or sooner when the residual
    estimates, extrapolated linearly in the passes, say the wanted pairs
    converge sooner. So the checks cost at most about what the passes cost,
    and convergence is seen at most one check-worth of passes late.
    Deterministic: it depends on sizes and residuals, never on timings.
    """

    def __init__(self, n: int, b: int, tol: float) -> None:
        self.n, self.b, self.tol = n, b, tol
        self.history: list[tuple[int, float]] = []
        self.next = 0

    def gap(self, k: int, hi: int) -> int:
        check = RR_FLOPS_PER_K3 * float(k) ** 3
        per_pass = 2.0 * self.n * self.n * self.b + 8.0 * self.n * hi * self.b
        return max(1, math.ceil(check / per_pass))

    def after_check(self, passes: int, worst: float, k: int, hi: int) -> None:
        gap = self.gap(k, hi)
        self.history.append((passes, max(worst, 1e-300)))
        if len(self.history) >= 2:
            (p0, e0), (p1, e1) = self.history[-2:]
            if e1 < e0 and p1 > p0:
                rate = (math.log(e0) - math.log(e1)) / (p1 - p0)
                gap = max(1, min(gap, math.ceil((math.log(e1) - math.log(self.tol)) / rate)))
        self.next = passes + gap


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
    dense_fraction: float = DENSE_FRACTION,
) -> EigenResult:
    """Top ``n_components`` eigenpairs of a symmetric operator by block Lanczos.

    Block Lanczos with full re-orthogonalisation (CGS2 panels), thick
    Krylov-Schur restarts with locking, and Rayleigh-Ritz only at checkpoints:

    * every pass applies the operator to the newest block only and keeps
      ``W = K Q``; the projected matrix ``T = Q^T W`` grows by the first
      Gram-Schmidt coefficients of the next block (no extra product);
    * the residual of a Ritz pair ``(theta, s)`` of ``T`` is
      ``||R s_last||`` (``R`` the coupling of the next block to the newest
      one, ``s_last`` the newest block's rows of ``s``): an estimate that
      costs no product of length n. An ``eigh`` of ``T`` runs only when a
      flop model says it has been paid for (:class:`_Schedule`), when the
      basis is full, or when the passes run out;
    * a full basis restarts on its best Ritz vectors; wanted pairs whose
      exact residual (from ``W S``) already meets ``tol`` are locked there:
      kept, no longer in ``T``, but still orthogonalised against;
    * the returned residuals are exact, ``||W s - theta Q s||`` from the kept
      ``W``: no extra pass.

    Parameters
    ----------
    matmat : callable
        ``V -> K V`` for ``(n, b)`` float64 blocks. Each call is one pass.
    n : int
        Order of the operator.
    n_components : int
        Number of eigenpairs wanted (largest algebraic eigenvalues).
    block_size : int, optional
        Block width ``b``; default from :func:`krylov_shape`. A block narrower
        than ``n_components`` is allowed: the basis grows by ``b`` per pass
        and the wanted pairs are taken from all of it once it holds
        ``n_components`` columns (``max_passes`` is extended until then).
    tol : float
        Stop when every wanted pair has ``||K u - theta u|| / |theta_1| <= tol``.
    max_passes : int
        Stop after this many operator applications (ConvergenceWarning is the
        caller's business: ``converged`` is False).
    max_basis : int, optional
        Largest Krylov basis kept (columns, locked ones included); past it the
        basis is thick-restarted on its best Ritz vectors. Default from
        :func:`krylov_shape` (``max(12 b, 2 n_components + 2 b)`` when only
        ``block_size`` is given).
    start : ndarray, optional
        ``(n, b)`` starting block; default Gaussian from ``random_state``.
    callback : callable, optional
        ``callback(passes, ritz_values, residuals)`` after every pass, with the
        latest check's values and residual estimates (infinite before the first).
    dense_fraction : float
        From ``n_components >= dense_fraction * n`` on (and when the basis may
        take half of ``n`` columns), the operator is applied to identity
        blocks (``ceil(n / b)`` passes) and the explicit matrix decomposed:
        a Krylov basis for that many pairs fills the space anyway (MNIST RBF,
        r = 0.3 n, tol 1e-8: the basis reached n), and this way saves the
        re-orthogonalisation and the Rayleigh-Ritz checks.

    Notes
    -----
    Memory: the basis ``Q`` and its image ``W = K Q`` are ``n x max_basis``
    float64 each, plus ``max_basis**2`` for the projected matrix. Per pass the
    driver spends ``8 n k b`` flops on re-orthogonalisation (k basis columns);
    a check ``~ RR_FLOPS_PER_K3 k^3``; the end ``4 n k r`` for ``Q S`` and ``W S``.
    """
    r = n_components
    if r < 1 or r > n:
        raise InputError(f"n_components must be in [1, {n}]; got {r}.")
    shape_b, shape_cap = krylov_shape(n, r)
    b = min(n, block_size or shape_b)
    if max_basis is not None:
        cap = min(n, max_basis)
    elif block_size is None:
        cap = shape_cap
    else:
        cap = min(n, max(12 * b, 2 * r + 2 * b))
    if cap < min(n, r + 2 * b):
        raise InputError(
            f"max_basis={cap} must be at least n_components + 2 * block_size = "
            f"{r + 2 * b} (or n = {n})."
        )
    rng = np.random.default_rng(random_state)
    if start is not None and np.shape(start) != (n, b):
        raise InputError(f"start must have shape ({n}, {b}); got {np.shape(start)}.")
    if r >= dense_fraction * n and 2 * cap >= n:
        return _eigh_through_operator(matmat, n, r, b, tol, callback)
    # column-major: a block of columns is contiguous, and columns never used
    # are never touched (row-major would touch every page of the whole cap)
    q = np.empty((n, cap), order="F")
    w = np.empty((n, cap), order="F")
    first = rng.standard_normal((n, b)) if start is None else np.asarray(start, float)
    q[:, :b] = _orthonormalize(first, q[:, :0], b, rng)[0]
    t = np.zeros((cap, cap))
    schedule = _Schedule(n, b, tol)
    m = 0  # locked columns q[:, :m]: converged Ritz vectors, out of T
    locked_theta, locked_res = np.empty(0), np.empty(0)
    lo, hi, passes = 0, b, 0
    min_seen, scale = np.inf, 0.0
    values, estimates = np.full(r, np.nan), np.full(r, np.inf)
    info: dict[str, Any] = {"rayleigh_ritz": 0, "restarts": 0, "locked": 0, "checks": []}
    while True:
        w[:, lo:hi] = matmat(q[:, lo:hi])
        passes += 1
        coef = q[:, :hi].T @ w[:, lo:hi]  # T's new columns and CGS's first coefficients
        t[m:hi, lo:hi] = coef[m:]
        t[lo:hi, m:lo] = coef[m:lo].T
        width = min(b, n - hi)
        if width:
            q_next, coupling = _orthonormalize(w[:, lo:hi], q[:, :hi], width, rng, coef)
        wanted = r - m
        enough = hi >= r  # a block narrower than r needs several passes first
        full = hi + width > cap
        out_of_passes = passes >= max_passes
        if enough and (not width or full or out_of_passes or passes >= schedule.next):
            keep = min(hi - m, max(wanted + b, (cap - m) // 2), cap - m - width)
            theta, s, low = _ritz(t[m:hi, m:hi], keep if full else wanted)
            info["rayleigh_ritz"] += 1
            if low is not None:
                min_seen = min(min_seen, low)
            scale = max(float(np.max(np.abs(theta))), float(np.max(locked_theta, initial=0.0)))
            scale = max(scale, -min_seen if low is not None else 0.0, np.finfo(np.float64).tiny)
            if width:
                est = np.linalg.norm(coupling @ s[lo - m : hi - m, :wanted], axis=0) / scale
            else:
                est = np.zeros(wanted)
            values = np.concatenate([locked_theta, theta[:wanted]])
            estimates = np.concatenate([locked_res, est])
            if not width or out_of_passes or bool(np.all(est <= tol)):
                sw = s[:, :wanted]
                u = q[:, m:hi] @ sw
                res = _relative_residuals(w[:, m:hi] @ sw, u, theta[:wanted], scale)
                estimates = np.concatenate([locked_res, res])
                if not width or out_of_passes or bool(np.all(res <= tol)):
                    if low is None:
                        min_seen = min(min_seen, _smallest(t[m:hi, m:hi]))
                        if -min_seen > scale:  # an indefinite operator: rescale
                            estimates = estimates * scale / -min_seen
                    if callback is not None:
                        callback(passes, values.copy(), estimates.copy())
                    return _finish(q[:, :m], u, values, estimates, passes, min_seen, b, tol, info)
            worst = float(np.max(est, initial=0.0))
            info["checks"].append((passes, hi - m, worst))
            schedule.after_check(passes, worst, hi - m, hi)
            if full:  # thick restart on the best Ritz vectors, locking the converged
                sk = s[:, :keep]
                ka = q[:, m:hi] @ sk
                kw = w[:, m:hi] @ sk
                res = _relative_residuals(kw[:, :wanted], ka[:, :wanted], theta[:wanted], scale)
                lock = np.flatnonzero(res <= tol)
                order = np.concatenate([lock, np.setdiff1d(np.arange(keep), lock)])
                q[:, m : m + keep], w[:, m : m + keep] = ka[:, order], kw[:, order]
                locked_theta = np.concatenate([locked_theta, theta[lock]])
                locked_res = np.concatenate([locked_res, res[lock]])
                info["restarts"] += 1
                info["locked"] += lock.size
                m += lock.size
                hi = m + keep - lock.size
                t[m:hi, m:hi] = np.diag(theta[order[lock.size :]])
                del ka, kw
                more = min(b, n - hi) - width  # cap was near n: the next block may widen
                if more > 0:
                    basis = np.hstack([q[:, :hi], q_next])
                    extra = _orthonormalize(rng.standard_normal((n, more)), basis, more, rng)[0]
                    q_next, width = np.hstack([q_next, extra]), width + more
        if callback is not None:
            callback(passes, values.copy(), estimates.copy())
        q[:, hi : hi + width] = q_next
        lo, hi = hi, hi + width


def _eigh_through_operator(
    matmat: Matmat, n: int, r: int, b: int, tol: float, callback: Callable | None
) -> EigenResult:
    """All of ``K`` through ``ceil(n / b)`` passes on identity blocks, then ``eigh``."""
    k = np.empty((n, n), order="F")
    passes = 0
    for lo in range(0, n, b):
        hi = min(n, lo + b)
        block = np.zeros((n, hi - lo))
        block[np.arange(lo, hi), np.arange(hi - lo)] = 1.0
        k[:, lo:hi] = matmat(block)
        passes += 1
        if callback is not None:
            callback(passes, np.full(r, np.nan), np.full(r, np.inf))
    k += k.T.copy()  # symmetrise: the operator's rounding is not
    k *= 0.5
    theta, s = scipy.linalg.eigh(k, check_finite=False, driver="evd")
    low = float(theta[0])
    theta, s = theta[::-1][:r].copy(), s[:, ::-1][:, :r].copy()
    scale = max(float(np.max(np.abs(theta))), -low, np.finfo(np.float64).tiny)
    res = _relative_residuals(k @ s, s, theta, scale)
    if callback is not None:
        callback(passes, theta.copy(), res.copy())
    info: dict[str, Any] = {
        "rayleigh_ritz": 1,
        "restarts": 0,
        "locked": 0,
        "checks": [],
        "dense": True,
    }
    return EigenResult(
        theta, s, res, passes, bool(np.all(res <= tol)), "krylov", low, block_size=b, info=info
    )


def _finish(
    locked: np.ndarray,
    active: np.ndarray,
    values: np.ndarray,
    residuals: np.ndarray,
    passes: int,
    min_seen: float,
    b: int,
    tol: float,
    info: dict,
) -> EigenResult:
    order = np.argsort(-values, kind="stable")
    vectors = np.hstack([locked, active]) if locked.shape[1] else active
    residuals = residuals[order]
    return EigenResult(
        values[order],
        vectors[:, order] if locked.shape[1] else vectors,
        residuals,
        passes,
        bool(np.all(residuals <= tol)),
        "krylov",
        min_seen,
        block_size=b,
        info=info,
    )


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
        warn(msg, NegativeEigenvalueWarning)
    keep = np.flatnonzero(values > rtol * lam1)
    keep = keep[keep == np.arange(keep.size)]  # a prefix: values are sorted
    wanted = values.size if n_components is None else n_components
    if keep.size < wanted and n_components is not None:
        warn(
            f"Only {keep.size} eigenvalues exceed rtol * lambda_1 = {rtol * lam1:.3g}; "
            f"keeping {keep.size} of the {n_components} requested components "
            "(the kernel matrix's effective rank bounds the dimension, Lemma 1).",
            RankWarning,
        )
    keep = keep[:wanted]
    vectors = flip_signs(result.eigenvectors[:, keep])
    return values[keep].copy(), vectors, result.residuals[keep].copy()
