"""Eigensolvers for symmetric kernel matrices: dense and randomized block Krylov.

Layer rule: numeric code over numpy arrays and a ``matmat`` callable. The
solvers know nothing of dask, kernels, xarray or zarr; the operator that
streams kernel blocks is :class:`npt_dask.engine.operator.KernelOperator`.

The pieces, each small and pure:

* :func:`dense_eigh` -- scipy's ``eigh`` on an explicit matrix (small n);
* :func:`block_krylov_eigh` -- block Lanczos with full re-orthogonalisation
  (CGS2 panels), Rayleigh-Ritz only at checkpoints chosen by a flop model and
  by residual estimates from the block recurrence, thick Krylov-Schur restarts
  with locking; ``r >= n / 4`` goes through identity blocks and one dense
  ``eigh``. The products ``W = K Q`` are kept, so the returned residuals
  ``||K u - theta u||`` are exact and cost no extra pass;
* :func:`krylov_shape` -- the block width and basis cap the solver wants
  (sizes only: defined in :mod:`npt_dask.npt.planning`, re-exported here);
* :func:`select_eigenpairs` -- positivity check, truncation to
  ``lambda > rtol * lambda_1`` (Lemma 1: r <= rank) and deterministic signs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import scipy.linalg

from npt_dask.arrays.threads import blas_limit
from npt_dask.errors import (
    DegenerateKernelError,
    InputError,
    NegativeDefiniteKernelError,
    NegativeEigenvalueError,
    NegativeEigenvalueWarning,
    RankWarning,
    warn,
)
from npt_dask.kernels.params import DEFAULT_RTOL
from npt_dask.linalg.tall import gaussian_rows
from npt_dask.npt.params import OnNegative
from npt_dask.npt.planning import (
    DENSE_FRACTION,
    krylov_cap,
    krylov_shape,
    min_basis,
    takes_explicit_path,
)
from npt_dask.params.constraints import (
    ARRAY_TYPES,
    INT,
    NONE,
    InstanceOf,
    Interval,
    Param,
    check_table,
)

__all__ = [
    "KRYLOV_PARAMS",
    "DriverPanels",
    "EigenResult",
    "Panels",
    "block_krylov_eigh",
    "dense_eigh",
    "flip_signs",
    "krylov_shape",
    "select_eigenpairs",
    "takes_explicit_path",
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


RESIDUAL_PANEL_COLUMNS = 64
"""Columns of ``K u - theta u`` :func:`dense_eigh` forms at once: two ``n x 64`` panels,
not three ``n x r`` arrays beside the matrix and its eigenvectors
(:func:`~npt_dask.npt.planning.dense_bytes` counts the rest)."""


def _relative_residuals(
    k: np.ndarray, v: np.ndarray, theta: np.ndarray, scale: float
) -> np.ndarray:
    """``||k v_i - theta_i v_i|| / scale`` per column, a panel of columns at a time."""
    out = np.empty(v.shape[1])
    for lo in range(0, v.shape[1], RESIDUAL_PANEL_COLUMNS):
        hi = min(v.shape[1], lo + RESIDUAL_PANEL_COLUMNS)
        panel = k @ v[:, lo:hi]
        panel -= v[:, lo:hi] * theta[lo:hi]
        out[lo:hi] = np.linalg.norm(panel, axis=0)
    return out / scale


def dense_eigh(k: np.ndarray, n_components: int | None = None) -> EigenResult:
    """All eigenpairs of an explicit symmetric matrix, top ``n_components`` returned."""
    n = k.shape[0]
    r = n if n_components is None else min(n_components, n)
    top = _top_eigh(k, r) if n > FULL_EIGH_ORDER and 2 * r < n else None
    if top is not None:  # the wanted pairs and the smallest value from one reduction
        values, vectors, low = top
        scale = max(float(np.max(np.abs(values))), -low, np.finfo(np.float64).tiny)
        residuals = _relative_residuals(k, vectors, values, scale)
        return EigenResult(values, vectors, residuals, 1, True, "dense", low)
    with blas_limit("latency"):
        values, vectors = scipy.linalg.eigh(k, overwrite_a=False, check_finite=False,
                                            driver="evd")  # fmt: skip
    # (k is kept: the residuals below need it)
    values, vectors = values[::-1], vectors[:, ::-1]
    scale = max(float(np.max(np.abs(values))), np.finfo(np.float64).tiny)
    top_v = vectors[:, :r]
    residuals = _relative_residuals(k, top_v, values[:r], scale)
    return EigenResult(
        values[:r].copy(), top_v.copy(), residuals, 1, True, "dense", float(values[-1])
    )


RR_FLOPS_PER_K3 = 30.0
"""Flop-equivalents of a dense ``eigh`` of order k, per ``k**3`` (tridiagonal reduction is
half BLAS-2, so LAPACK's ~4 k^3 run at about half the matrix-product rate)."""


class Panels(Protocol):
    """Where the solver's tall (n-row) arrays live, and the few ways it combines them.

    :func:`block_krylov_eigh` is written once against this interface. Its
    tall arrays are the basis ``Q`` and its image ``W = K Q`` (``cap``
    columns each, written a block at a time) and n-row panels a block or r
    wide; everything else it holds is small (``cap x cap`` at most).
    :class:`DriverPanels` keeps them as numpy arrays in this process;
    :class:`npt_dask.npt.panels.ChunkedPanels` as row-chunked dask arrays on a
    cluster's workers or on local disk, so the driver holds only the small
    matrices. Tall values are opaque to the solver: it only passes them back
    in, reads ``.shape`` and calls :meth:`to_numpy` on the result.
    """

    n: int

    def allocate(self, cap: int) -> None:
        """Room for ``Q`` and ``W``, ``cap`` columns each."""

    def q(self, lo: int, hi: int) -> Any:
        """Columns ``lo:hi`` of ``Q``."""

    def w(self, lo: int, hi: int) -> Any:
        """Columns ``lo:hi`` of ``W``."""

    def set_q(self, lo: int, x: Any) -> None:
        """Write ``x`` into ``Q`` from column ``lo`` on."""

    def set_w(self, lo: int, x: Any) -> None:
        """Write ``x`` into ``W`` from column ``lo`` on."""

    def apply(self, lo: int, hi: int) -> None:
        """``W[:, lo:hi] = K Q[:, lo:hi]``: one pass over the kernel."""

    def random(self, rng: np.random.Generator, width: int) -> Any:
        """A Gaussian ``n x width`` panel."""

    def gram(self, a: Any, b: Any) -> np.ndarray:
        """``a.T @ b`` (small)."""

    def minus(self, x: Any, a: Any, c: np.ndarray) -> Any:
        """``x - a @ c``."""

    def times(self, a: Any, c: np.ndarray) -> Any:
        """``a @ c``."""

    def keep(self, x: Any) -> Any:
        """``x`` computed and held, for a value used more than once."""

    def qr(self, x: Any) -> tuple[Any, np.ndarray]:
        """Thin QR: an orthonormal panel and the small triangle."""

    def norms(self, x: Any) -> np.ndarray:
        """Column norms."""

    def residual_norms(self, kv: Any, v: Any, theta: np.ndarray) -> np.ndarray:
        """Column norms of ``kv - v * theta``."""

    def hstack(self, parts: Sequence[Any]) -> Any:
        """Panels side by side."""

    def take(self, x: Any, columns: slice | np.ndarray) -> Any:
        """``x[:, columns]``."""

    def to_numpy(self, x: Any) -> np.ndarray:
        """``x`` as a numpy array on the driver."""


class DriverPanels:
    """:class:`Panels` as numpy arrays in this process: ``16 n cap`` bytes for Q and W.

    ``row_chunks`` only shapes :meth:`random`: one seeded Gaussian block per
    row chunk (:func:`npt_dask.linalg.tall.gaussian_rows`), as the chunked panels
    draw them, so both give the same start for the same seed.
    """

    def __init__(self, matmat: Matmat, n: int, row_chunks: Sequence[int] | None = None) -> None:
        self.matmat, self.n = matmat, n
        self.row_chunks = tuple(row_chunks) if row_chunks is not None else (n,)
        self._q = self._w = np.empty((n, 0))

    def allocate(self, cap: int) -> None:
        # column-major: a block of columns is contiguous, and columns never used
        # are never touched (row-major would touch every page of the whole cap)
        self._q = np.empty((self.n, cap), order="F")
        self._w = np.empty((self.n, cap), order="F")

    def q(self, lo: int, hi: int) -> np.ndarray:
        return self._q[:, lo:hi]

    def w(self, lo: int, hi: int) -> np.ndarray:
        return self._w[:, lo:hi]

    def set_q(self, lo: int, x: np.ndarray) -> None:
        self._q[:, lo : lo + x.shape[1]] = x

    def set_w(self, lo: int, x: np.ndarray) -> None:
        self._w[:, lo : lo + x.shape[1]] = x

    def apply(self, lo: int, hi: int) -> None:
        self._w[:, lo:hi] = self.matmat(self._q[:, lo:hi])

    def random(self, rng: np.random.Generator, width: int) -> np.ndarray:
        return gaussian_rows(rng, self.row_chunks, width)

    def gram(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a.T @ b

    def minus(self, x: np.ndarray, a: np.ndarray, c: np.ndarray) -> np.ndarray:
        return x - a @ c

    def times(self, a: np.ndarray, c: np.ndarray) -> np.ndarray:
        return a @ c

    def keep(self, x: np.ndarray) -> np.ndarray:
        return x

    def qr(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q, r = np.linalg.qr(x)
        return q, r

    def norms(self, x: np.ndarray) -> np.ndarray:
        return np.linalg.norm(x, axis=0)

    def residual_norms(self, kv: np.ndarray, v: np.ndarray, theta: np.ndarray) -> np.ndarray:
        return np.linalg.norm(kv - v * theta, axis=0)

    def hstack(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        return np.hstack(list(parts))

    def take(self, x: np.ndarray, columns: slice | np.ndarray) -> np.ndarray:
        return x[:, columns]

    def to_numpy(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x)


WEAK = 1e-3
"""Directions of a projected block below this share of the block's largest column get a
third Gram-Schmidt projection (two can leave rounding above ~1e-13 in them)."""


def _orthonormalize(
    tall: Panels,
    block: Any,
    basis: Any | None,
    width: int,
    rng: np.random.Generator,
    coef: np.ndarray | None = None,
    start: int = 0,
) -> tuple[Any, np.ndarray, int]:
    """Orthonormal ``width`` columns spanning ``block`` minus its part in ``basis``.

    Classical Gram-Schmidt twice (CGS2) as matrix products: the first
    projection against ``basis[:, start:]`` only, reusing
    ``coef = basis[:, start:].T @ block`` when the caller has it (a Lanczos
    block couples to the previous block and itself alone; its other
    coefficients are rounding, which the second, full projection removes),
    the second against all of ``basis``; then a QR and an SVD of the small
    triangle. Only the weak directions (singular value below ``WEAK`` times
    the block's largest column) get a third projection, not the whole block.
    Directions below 1e-10 of the block vanish (an invariant subspace was
    reached) and are replaced by random ones orthogonal to everything so
    far. Returns the columns ``U``, ``R = U.T @ x`` (``x`` the projected
    block: the coupling of the new columns to the block, the Lanczos
    residual factor) and how many columns came from ``block`` (the rest are
    random).
    """
    scale = float(np.max(tall.norms(block), initial=0.0))
    projected = basis is not None and basis.shape[1] > 0
    x = block
    if projected:
        near = basis if start == 0 else tall.take(basis, slice(start, None))
        c = tall.gram(near, block) if coef is None else coef
        x = tall.keep(tall.minus(block, near, c))
        x = tall.keep(tall.minus(x, basis, tall.gram(basis, x)))
    # QR first: LAPACK's SVD of a tall n x b block is several times slower than its QR
    qx, rx = tall.qr(x)
    ur, s, _ = np.linalg.svd(rx)
    # a direction is new only if it is well above the rounding left by the projection
    good = min(int(np.sum(s > 1e-10 * scale)) if scale > 0 else 0, width)
    u = tall.times(qx, ur[:, :good])
    strong = int(np.sum(s[:good] >= WEAK * scale))
    if good > strong and projected:
        u = tall.keep(u)
        head, weak = tall.take(u, slice(0, strong)), tall.take(u, slice(strong, good))
        weak = tall.keep(tall.minus(weak, basis, tall.gram(basis, weak)))
        weak = tall.keep(tall.minus(weak, head, tall.gram(head, weak)))
        u = tall.hstack([head, tall.qr(weak)[0]])
    if good < width:
        u = tall.keep(u)
        extra = tall.random(rng, width - good)
        for _ in range(2):
            if projected:
                extra = tall.keep(tall.minus(extra, basis, tall.gram(basis, extra)))
            extra = tall.keep(tall.minus(extra, u, tall.gram(u, extra)))
        u = tall.hstack([u, tall.qr(extra)[0]])
    u = tall.keep(u)
    return u, tall.gram(u, x), good


FULL_EIGH_ORDER = 400
"""Projected matrices up to this order get a full ``eigh``; larger ones only the pairs
needed, and the smallest eigenvalue, from one tridiagonal reduction (:func:`_top_eigh`)."""


def _top_eigh(
    a: np.ndarray, need: int, overwrite: bool = False
) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Top ``need`` eigenpairs of the symmetric ``a`` (largest first) and its smallest
    eigenvalue, from ONE tridiagonal reduction; None if LAPACK's MRRR fails.

    LAPACK's ``dsyevr`` takes MRRR (``dstemr``) only for all eigenpairs and falls back to
    bisection and inverse iteration (as ``syevx``) for a subset; calling the pieces
    directly (``dsytrd``, ``dstemr`` for the wanted pairs, ``dstebz`` for the smallest
    value, ``dormqr`` to back-transform the wanted vectors only) does the same work as
    ``syevr`` on all pairs minus the unwanted vectors: less than ``syevx`` on the subset
    plus a values-only call for the smallest eigenvalue.
    """
    lapack = scipy.linalg.lapack
    k = a.shape[0]
    # a symmetric C-ordered matrix is its own transpose: hand LAPACK the Fortran view
    a = a.T if a.flags.c_contiguous and not a.flags.f_contiguous else a
    lwork = int(lapack.dsytrd_lwork(k, lower=1)[0])
    with blas_limit("latency"):  # the reduction: a matrix-vector product per column
        c, d, e, tau, info = lapack.dsytrd(a, lower=1, lwork=lwork, overwrite_a=overwrite)
    if info:
        return None
    _m, low, _blocks, _splits, info = lapack.dstebz(d, e, 2, 0.0, 0.0, 1, 1, 0.0, "E")
    if info:
        return None
    m, theta, z, info = lapack.dstemr(d, np.append(e, 0.0), 2, 0.0, 0.0, k - need + 1, k)
    if info or m != need:
        return None
    z = np.asfortranarray(z[:, need - 1 :: -1] if need else z[:, :0])  # largest first
    if k > 1 and need:
        h = np.asfortranarray(c[1:, : k - 1])  # the reflectors (dormtr, uplo = "L")
        lwork = int(lapack.dormqr("L", "N", h, tau, z[1:], -1)[1][0])
        z[1:], _work, info = lapack.dormqr("L", "N", h, tau, z[1:], lwork)
        if info:
            return None
    return theta[need - 1 :: -1].copy() if need else theta[:0], z, float(low[0])


def _ritz(t: np.ndarray, need: int) -> tuple[np.ndarray, np.ndarray, float | None]:
    """Top ``need`` eigenpairs of the projected matrix, largest first, and its smallest
    eigenvalue when it came for free (else None)."""
    k = t.shape[0]
    sym = (t + t.T) / 2
    if k <= FULL_EIGH_ORDER or 2 * need >= k:
        with blas_limit("latency"):
            theta, s = scipy.linalg.eigh(sym, check_finite=False, overwrite_a=True)
        return theta[::-1][:need], s[:, ::-1][:, :need], float(theta[0])
    top = _top_eigh(sym, need, overwrite=True)
    if top is not None:
        return top
    with blas_limit("latency"):
        theta, s = scipy.linalg.eigh(
            (t + t.T) / 2, check_finite=False, driver="evx", subset_by_index=[k - need, k - 1]
        )
    return theta[::-1], s[:, ::-1], None


def _smallest(t: np.ndarray) -> float:
    """Smallest eigenvalue of the projected matrix (a values-only bisection)."""
    with blas_limit("latency"):
        low = scipy.linalg.eigh((t + t.T) / 2, eigvals_only=True, check_finite=False,
                                driver="evx", subset_by_index=[0, 0])  # fmt: skip
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
    matmat: Matmat | None,
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
    panels: Panels | None = None,
    explicit: Callable[[], np.ndarray] | None = None,
    explicit_path: bool | None = None,
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
    matmat : callable or None
        ``V -> K V`` for ``(n, b)`` float64 blocks. Each call is one pass.
        Unused (may be None) when ``panels`` is given.
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
    panels : Panels, optional
        Where ``Q``, ``W`` and the other n-row panels live and how the
        operator is applied to them; default :class:`DriverPanels` over
        ``matmat`` (numpy, this process). The results do not depend on it
        beyond rounding. (The identity-block path above is for driver panels only.)
    explicit : callable, optional
        ``() -> K`` as an ``(n, n)`` float64 array, for the identity-block path:
        one blockwise evaluation of the matrix instead of ``ceil(n / b)`` products
        with identity blocks (:meth:`npt_dask.engine.operator.KernelOperator.explicit`).
    explicit_path : bool, optional
        Whether to take the identity-block path, as a fit plan decided it
        (:attr:`npt_dask.npt.planning.FitPlan.explicit`); the solver obeys it. Default:
        decided here by :func:`~npt_dask.npt.planning.takes_explicit_path` (``dense_fraction``).

    Notes
    -----
    Memory: the basis ``Q`` and its image ``W = K Q`` are ``n x max_basis``
    float64 each, where ``panels`` keep them (this process by default), plus
    ``max_basis**2`` for the projected matrix on the driver. Per pass the
    driver spends ``8 n k b`` flops on re-orthogonalisation (k basis columns);
    a check ``~ RR_FLOPS_PER_K3 k^3``; the end ``4 n k r`` for ``Q S`` and ``W S``.
    """
    r = n_components
    b, cap = _krylov_sizes(n, r, block_size, max_basis, start)
    if panels is None:
        if matmat is None:
            raise InputError("block_krylov_eigh needs matmat or panels.")
        panels = DriverPanels(matmat, n)
    if explicit_path is None:
        explicit_path = takes_explicit_path(n, r, cap, dense_fraction)
    if explicit_path and isinstance(panels, DriverPanels):
        return _eigh_through_operator(panels.matmat, n, r, b, tol, callback, explicit)
    st = _Lanczos(panels, n, r, b, cap, tol, np.random.default_rng(random_state))
    st.begin(start)
    schedule = _Schedule(n, b, tol)
    while True:
        q_next, coupling, width = st.extend()
        full = st.hi + width > cap
        out_of_passes = st.passes >= max_passes
        final = not width or out_of_passes
        if st.hi >= r and (final or full or st.passes >= schedule.next):
            ritz = st.rayleigh_ritz(coupling, width, full)
            if final or bool(np.all(ritz.estimates <= tol)):
                result = st.finish(ritz, final)
                if result is not None:
                    if callback is not None:
                        callback(st.passes, st.values.copy(), st.estimates.copy())
                    return result
            worst = float(np.max(ritz.estimates, initial=0.0))
            st.info["checks"].append((st.passes, st.hi - st.m, worst))
            schedule.after_check(st.passes, worst, st.hi - st.m, st.hi)
            if full:
                q_next, width = st.restart(ritz, q_next, width)
        if callback is not None:
            callback(st.passes, st.values.copy(), st.estimates.copy())
        st.tall.set_q(st.hi, q_next)
        st.lo, st.hi = st.hi, st.hi + width


KRYLOV_PARAMS: tuple[Param, ...] = (
    Param(
        "n_components", (Interval(INT, 1, None),), None,
        "eigenpairs wanted: at most n, the operator's order",
        hint="Ask for at least 1 and at most n eigenpairs.",
    ),
    Param("block_size", (Interval(INT, 1, None), NONE), None,
          "block width b (None: krylov_shape's)"),
    Param(
        "max_basis", (Interval(INT, 1, None), NONE), None,
        "most basis columns: at least n_components + 2 * block_size, or n (None: the "
        "plan's)",
    ),
    Param("start", (InstanceOf(ARRAY_TYPES, "an (n, block_size) array"), NONE), None,
          "the start block"),
)  # fmt: skip
""":func:`block_krylov_eigh`'s sizes and start block; the bounds that depend on ``n``,
``n_components`` and ``block_size`` are set once they are known (:func:`_krylov_sizes`)."""

_KRYLOV = {p.name: p for p in KRYLOV_PARAMS}


def _krylov_sizes(
    n: int, r: int, block_size: int | None, max_basis: int | None, start: Any
) -> tuple[int, int]:
    """The block width and basis cap, checked with the start block by
    :data:`KRYLOV_PARAMS` (validation apart)."""
    check_table(KRYLOV_PARAMS, {"block_size": block_size, "max_basis": max_basis})
    _KRYLOV["n_components"].within(n).check(r)
    shape_b, shape_cap = krylov_shape(n, r)
    b = min(n, block_size or shape_b)
    if max_basis is not None:
        least = min(n, min_basis(r, b))
        dataclasses.replace(
            _KRYLOV["max_basis"], constraints=(Interval(INT, least, None),),
            hint=f"A thick restart needs n_components + 2 * block_size = {r} + 2 * {b} "
            f"columns (or n = {n}).",
        ).check(max_basis)  # fmt: skip
        cap = min(n, max_basis)
    elif block_size is None:
        cap = shape_cap
    else:
        cap = krylov_cap(n, r, b)
    if start is not None and tuple(np.shape(start)) != (n, b):
        wanted = f"The 'start' parameter must be an array of shape ({n}, {b}) (n rows, "
        dataclasses.replace(
            _KRYLOV["start"], message=wanted + "block_size columns) or None. Got shape {value}."
        ).refuse(tuple(np.shape(start)))
    return b, cap


@dataclass
class _Ritz:
    """One Rayleigh-Ritz step: Ritz values ``theta`` and vectors ``s`` of the active part
    of ``T``, its smallest eigenvalue when it came free, the residual estimates of the
    wanted pairs (relative to ``scale``), and how many pairs a restart keeps."""

    theta: np.ndarray
    s: np.ndarray
    low: float | None
    scale: float
    estimates: np.ndarray
    keep: int


@dataclass
class _Lanczos:
    """The state of :func:`block_krylov_eigh` and its steps.

    Columns ``Q[:, :m]`` are locked (converged Ritz vectors, out of ``T``),
    ``Q[:, m:hi]`` active, ``Q[:, lo:hi]`` the newest block; the newest
    block couples to the columns from ``near`` on (block tridiagonal; all
    active ones after a restart or a random refill).
    """

    tall: Panels
    n: int
    r: int
    b: int
    cap: int
    tol: float
    rng: np.random.Generator
    t: np.ndarray = field(init=False)
    m: int = 0
    lo: int = 0
    hi: int = 0
    near: int = 0
    passes: int = 0
    min_seen: float = np.inf
    locked_theta: np.ndarray = field(default_factory=lambda: np.empty(0))
    locked_res: np.ndarray = field(default_factory=lambda: np.empty(0))
    values: np.ndarray = field(init=False)
    estimates: np.ndarray = field(init=False)
    info: dict[str, Any] = field(
        default_factory=lambda: {"rayleigh_ritz": 0, "restarts": 0, "locked": 0, "checks": []}
    )

    def __post_init__(self) -> None:
        self.t = np.zeros((self.cap, self.cap))
        self.values = np.full(self.r, np.nan)
        self.estimates = np.full(self.r, np.inf)

    @property
    def wanted(self) -> int:
        return self.r - self.m

    def begin(self, start: np.ndarray | None) -> None:
        """The first block: ``start`` or Gaussian, orthonormalised."""
        tall, b = self.tall, self.b
        tall.allocate(self.cap)
        first = tall.random(self.rng, b) if start is None else start
        tall.set_q(0, _orthonormalize(tall, first, None, b, self.rng)[0])
        self.hi = b

    def extend(self) -> tuple[Any, np.ndarray | None, int]:
        """One pass: ``W = K Q`` for the newest block, ``T``'s new columns, and the next
        block orthonormalised (``None`` and width 0 once the basis spans the space).

        ``T``'s new columns and CGS's first coefficients are taken against the columns
        the block couples to in exact arithmetic (the rest is rounding; CGS's second
        projection is full)."""
        tall, t, lo, hi = self.tall, self.t, self.lo, self.hi
        tall.apply(lo, hi)
        self.passes += 1
        near = self.near = max(self.near, self.m)
        coef = tall.gram(tall.q(near, hi), tall.w(lo, hi))
        t[self.m : near, lo:hi] = 0.0
        t[lo:hi, self.m : near] = 0.0
        t[near:hi, lo:hi] = coef
        t[lo:hi, near:lo] = coef[: lo - near].T
        width = min(self.b, self.n - hi)
        if not width:
            return None, None, 0
        q_next, coupling, good = _orthonormalize(
            tall, tall.w(lo, hi), tall.q(0, hi), width, self.rng, coef, start=near
        )
        self.near = lo if good == width else self.m
        return q_next, coupling, width

    def rayleigh_ritz(self, coupling: np.ndarray | None, width: int, full: bool) -> _Ritz:
        """Ritz pairs of the active ``T`` and their residual estimates ``||R s_last||``."""
        m, hi, wanted = self.m, self.hi, self.wanted
        keep = min(hi - m, max(wanted + self.b, (self.cap - m) // 2), self.cap - m - width)
        theta, s, low = _ritz(self.t[m:hi, m:hi], keep if full else wanted)
        self.info["rayleigh_ritz"] += 1
        if low is not None:
            self.min_seen = min(self.min_seen, low)
        scale = max(float(np.max(np.abs(theta))), float(np.max(self.locked_theta, initial=0.0)))
        scale = max(scale, -self.min_seen if low is not None else 0.0, np.finfo(np.float64).tiny)
        if width and coupling is not None:
            est = np.linalg.norm(coupling @ s[self.lo - m : hi - m, :wanted], axis=0) / scale
        else:
            est = np.zeros(wanted)
        self.values = np.concatenate([self.locked_theta, theta[:wanted]])
        self.estimates = np.concatenate([self.locked_res, est])
        return _Ritz(theta, s, low, scale, est, keep)

    def finish(self, ritz: _Ritz, final: bool) -> EigenResult | None:
        """The result, if the exact residuals ``||W s - theta Q s||`` meet ``tol`` (or
        this is the last check); else None, with the exact residuals recorded."""
        tall, m, hi, wanted = self.tall, self.m, self.hi, self.wanted
        sw = ritz.s[:, :wanted]
        u = tall.keep(tall.times(tall.q(m, hi), sw))
        res = tall.residual_norms(tall.times(tall.w(m, hi), sw), u, ritz.theta[:wanted])
        res = res / ritz.scale
        self.estimates = np.concatenate([self.locked_res, res])
        if not (final or bool(np.all(res <= self.tol))):
            return None
        if ritz.low is None:
            self.min_seen = min(self.min_seen, _smallest(self.t[m:hi, m:hi]))
            if -self.min_seen > ritz.scale:  # an indefinite operator: rescale
                self.estimates = self.estimates * ritz.scale / -self.min_seen
        order = np.argsort(-self.values, kind="stable")
        vectors = tall.hstack([tall.q(0, m), u]) if m else u
        if np.any(order != np.arange(order.size)):
            vectors = tall.take(vectors, order)
        return EigenResult(
            self.values[order],
            tall.to_numpy(vectors),
            self.estimates[order],
            self.passes,
            bool(np.all(self.estimates <= self.tol)),
            "krylov",
            self.min_seen,
            block_size=self.b,
            info=self.info,
        )

    def restart(self, ritz: _Ritz, q_next: Any, width: int) -> tuple[Any, int]:
        """Thick restart on the best ``keep`` Ritz vectors, locking the wanted ones whose
        exact residual meets ``tol``; returns the next block (widened near ``n``)."""
        tall, m, hi, keep, wanted = self.tall, self.m, self.hi, ritz.keep, self.wanted
        sk = ritz.s[:, :keep]
        ka = tall.keep(tall.times(tall.q(m, hi), sk))
        kw = tall.keep(tall.times(tall.w(m, hi), sk))
        head = slice(0, wanted)
        res = tall.residual_norms(tall.take(kw, head), tall.take(ka, head), ritz.theta[:wanted])
        res = res / ritz.scale
        lock = np.flatnonzero(res <= self.tol)
        order = np.concatenate([lock, np.setdiff1d(np.arange(keep), lock)])
        tall.set_q(m, tall.take(ka, order))
        tall.set_w(m, tall.take(kw, order))
        del ka, kw
        self.locked_theta = np.concatenate([self.locked_theta, ritz.theta[lock]])
        self.locked_res = np.concatenate([self.locked_res, res[lock]])
        self.info["restarts"] += 1
        self.info["locked"] += lock.size
        self.m = m = m + lock.size
        self.hi = hi = m + keep - lock.size
        self.t[m:hi, m:hi] = np.diag(ritz.theta[order[lock.size :]])
        self.near = m  # the next block couples to every kept Ritz vector
        more = min(self.b, self.n - hi) - width  # cap was near n: the next block may widen
        if more > 0:
            basis = tall.hstack([tall.q(0, hi), q_next])
            extra = _orthonormalize(tall, tall.random(self.rng, more), basis, more, self.rng)[0]
            q_next, width = tall.keep(tall.hstack([q_next, extra])), width + more
        return q_next, width


def _eigh_through_operator(
    matmat: Matmat,
    n: int,
    r: int,
    b: int,
    tol: float,
    callback: Callable | None,
    explicit: Callable[[], np.ndarray] | None = None,
) -> EigenResult:
    """All of ``K`` (from ``explicit()`` in one pass, else through ``ceil(n / b)`` passes on
    identity blocks), then its top ``r`` pairs by :func:`dense_eigh`."""
    if explicit is not None:
        k, passes = explicit(), 1  # symmetric already
    else:
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
    dense = dense_eigh(k, r)
    if callback is not None:
        callback(passes, dense.eigenvalues.copy(), dense.residuals.copy())
    info: dict[str, Any] = {
        "rayleigh_ritz": 1,
        "restarts": 0,
        "locked": 0,
        "checks": [],
        "dense": True,
    }
    return EigenResult(
        dense.eigenvalues,
        dense.eigenvectors,
        dense.residuals,
        passes,
        bool(np.all(dense.residuals <= tol)),
        "krylov",
        dense.min_eigenvalue,
        block_size=b,
        info=info,
    )


def select_eigenpairs(
    result: EigenResult,
    n_components: int | None,
    *,
    rtol: float = DEFAULT_RTOL["float64"],
    on_negative: OnNegative = "warn",
    kernel_scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keep eigenpairs with ``lambda > rtol * lambda_1``, fix signs, report negatives.

    Returns eigenvalues, eigenvectors (signs fixed so the largest-magnitude
    entry of each is positive) and residuals of the kept pairs.

    ``kernel_scale`` (the largest magnitude of the uncentred kernel's row means and grand
    mean, when the caller has them) tells a matrix that is zero up to rounding (constant
    data: :class:`~npt_dask.errors.DegenerateKernelError`) from a negative semi-definite
    one whose top eigenvalue rounding put at or below zero (``-K + c``:
    :class:`~npt_dask.errors.NegativeDefiniteKernelError`): its smallest eigenvalue is below
    ``-sqrt(eps) n kernel_scale``, far past the rounding of a zero matrix.
    """
    values = result.eigenvalues
    lam1 = float(values[0]) if values.size else 0.0
    low = float(result.min_eigenvalue)
    scale = max(abs(lam1), abs(low))
    if kernel_scale is not None and lam1 <= 0.0:
        rounding = np.sqrt(np.finfo(np.float64).eps) * len(result.eigenvectors) * kernel_scale
        negative = low < -rounding
    else:
        negative = 0.0 < lam1 <= rtol * scale
    if not np.isfinite(scale):
        raise NegativeEigenvalueError(
            f"The eigensolver returned non-finite eigenvalues (largest {lam1:.3g}, smallest "
            f"{result.min_eigenvalue:.3g}); the kernel matrix holds NaN or inf. Check the "
            "kernel and its parameters against the data's scale."
        )
    if negative:
        raise NegativeDefiniteKernelError(
            f"The kernel matrix has no positive eigenvalue above rounding: the largest is "
            f"{lam1:.3g}, below rtol * |{result.min_eigenvalue:.3g}|, so it is negative "
            "semi-definite (a kernel passed with the wrong sign, e.g. -K?). A model on "
            "those eigenvalues would be rounding noise; pass a positive semi-definite "
            "kernel matrix."
        )
    if lam1 <= 0.0:
        raise DegenerateKernelError(
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
    keep = keep[:wanted]  # a prefix: sliced, not copied, before the signs are fixed
    vectors = flip_signs(result.eigenvectors[:, : keep.size])
    return values[keep].copy(), vectors, result.residuals[keep].copy()
