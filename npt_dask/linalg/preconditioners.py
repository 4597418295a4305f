"""Preconditioners of kernel ridge's conjugate gradient (numpy blocks only).

* :class:`FalkonCholesky` -- for Nyström kernel ridge ``H = K_nm^T W K_nm + alpha K_mm``
  (Rudi, Carratino & Rosasco 2017; Meanti et al. 2020). With uniformly drawn centres
  ``K_nm^T W K_nm ~ (w / m) K_mm^2`` (``w`` the total weight), so with
  ``K_mm = T^T T`` (jittered) and ``T T^T / m + (alpha / w) I = A^T A``,
  ``H ~ w T^T A^T A T``: ``P^-1 r = T^-1 A^-1 A^-T T^-T r`` (four triangular solves,
  ``4 m^2 k`` flops). Both triangles share one ``m x m`` array (``T^T`` below the
  diagonal, ``A`` above, the diagonals kept apart), built in place from ``K_mm``:
  ``m^3`` flops (two Cholesky factorisations and a triangular product).
* :class:`LowRank` -- for exact kernel ridge ``S K S + alpha I`` (S the square roots of
  the weights): the randomized Nyström preconditioner of Frangella, Tropp & Udell
  (SIAM J. Matrix Anal. Appl. 2023) from an approximation ``S K S ~ U diag(lam) U^T``
  of rank l: ``P^-1 r = (lam_l + alpha) U (lam + alpha)^-1 U^T r + (I - U U^T) r``.
  A landmark NPT model on l rows *is* such an approximation (its coordinates ``Y``
  give ``K ~ Y Y^T``); :func:`low_rank_from_coordinates` turns them into ``U``, ``lam``.

Layer rule: numpy in, numpy out; :func:`low_rank_from_coordinates` keeps the factor in
its coordinates' namespace (a device's), its ``r x r`` eigenproblem on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of
from npt_dask.arrays.threads import blas_limit
from npt_dask.errors import InputError
from npt_dask.linalg.cholesky import cholesky_upper
from npt_dask.linalg.jitter import dense_attempt, jittered_cholesky
from npt_dask.linalg.symmetric import (
    routine,
    same_buffer,
    symmetric_from_upper,
    syrk_update,
    upper_from_lower,
)

__all__ = [
    "FALKON_JITTER",
    "FalkonCholesky",
    "LowRank",
    "factor_with_jitter",
    "low_rank_from_coordinates",
]

FALKON_JITTER = {"float32": 1e-7, "float64": 1e-13}
"""The floor of the jitter on ``K_mm``'s diagonal before its Cholesky factorisation, times
``m`` (relative to the mean diagonal: Falkon's ``pc_epsilon`` times ``M``, made scale-free);
raised by the one policy of :func:`npt_dask.linalg.jitter.jittered_cholesky` while the
factorisation fails. Falkon takes 1e-5 in float32 and also adds the jitter to the system
it solves; here the system keeps the exact ``alpha K_mm``, so a preconditioner built on a
larger jitter than needed only mismatches it (at m = 20,000, 1e-5 m is a fifth of the
diagonal: CG then needs several times the iterations)."""


def _scale_upper(f: np.ndarray, scale: float, shift: float) -> None:
    """Upper triangle (with diagonal) of ``f`` times ``scale``, then ``shift`` on the
    diagonal, in place, column panel by panel (the strictly lower part untouched)."""
    m = f.shape[0]
    step = 2048
    for j0 in range(0, m, step):
        j1 = min(m, j0 + step)
        f[:j0, j0:j1] *= scale
        tile = f[j0:j1, j0:j1]
        for c in range(j1 - j0):  # column by column: no index arrays of the tile's size
            tile[: c + 1, c] *= scale
    f[np.diag_indices(m)] += shift


def factor_with_jitter(f: np.ndarray, *, floor: float = 0.0) -> float:
    """Cholesky (upper, in place) of the symmetric Fortran-order ``f`` plus a jitter on its
    diagonal, by the one policy (:func:`npt_dask.linalg.jitter.jittered_cholesky`, from
    ``floor`` of the mean diagonal); returns the absolute jitter used. Raises
    :class:`~npt_dask.errors.InputError` when the ladder ends (not PSD)."""
    m = f.shape[0]
    scale = float(np.mean(np.abs(f[np.diag_indices(m)]))) if m else 1.0
    jitter = jittered_cholesky(dense_attempt(f), m=m, scale=scale, dtype=f.dtype, floor=floor)
    if jitter is None:
        raise InputError(
            "The centres' kernel matrix could not be factored even with a jitter as large "
            "as its mean diagonal: the kernel is not positive semi-definite on them (or "
            "overflows). Use a PSD kernel, or solver='direct'."
        )
    return jitter


@dataclass
class FalkonCholesky:
    """Falkon's preconditioner: ``T^T`` strictly below the diagonal of ``factors``, ``A``
    above it, their diagonals ``diag_t`` and ``diag_a`` (see the module doc)."""

    factors: np.ndarray
    diag_t: np.ndarray
    diag_a: np.ndarray
    jitter: float

    @classmethod
    def build(cls, kmm: np.ndarray, alpha_over_weight: float) -> FalkonCholesky:
        """From ``K_mm`` (a symmetric Fortran-order ``m x m`` array, overwritten) and
        ``alpha / w`` (``w`` the total sample weight)."""
        f = kmm
        m = f.shape[0]
        floor = FALKON_JITTER[np.dtype(f.dtype).name] * m
        trace = float(np.sum(np.abs(f[np.diag_indices(m)]), dtype=np.float64))
        jitter = factor_with_jitter(f, floor=floor)  # upper: T (K_mm + jitter = T^T T)
        diag_t = f[np.diag_indices(m)].copy()
        symmetric_from_upper(f)  # strictly lower: T^T, kept from here on
        shift = float(alpha_over_weight)

        def attempt(extra: float) -> bool:
            upper_from_lower(f)  # upper: T again (from T^T below)
            f[np.diag_indices(m)] = diag_t
            _upper_product(f)  # upper: T T^T
            _scale_upper(f, 1.0 / m, shift + extra)
            return cholesky_upper(f)  # upper: A

        scale = (trace + m * jitter) / m / m + shift  # mean diagonal: trace(T^T T) / m^2
        if jittered_cholesky(attempt, m=m, scale=scale, dtype=f.dtype) is None:
            raise InputError(
                "Falkon's preconditioner could not be factored (T T^T / m + alpha / w is not "
                "positive definite to rounding). Raise alpha, or use solver='direct'."
            )
        return cls(f, diag_t, f[np.diag_indices(m)].copy(), jitter)

    def _solve(self, r: np.ndarray, which: str, transpose: bool) -> np.ndarray:
        trsm = routine(self.factors.dtype, "trsm")
        f = self.factors
        f[np.diag_indices(f.shape[0])] = self.diag_t if which == "T" else self.diag_a
        # T^T is stored lower, A upper: T x = b is (T^T)^T x = b
        lower = which == "T"
        trans = (not transpose) if which == "T" else transpose
        return trsm(1.0, f, r, lower=int(lower), trans_a=int(trans))

    def __call__(self, r: np.ndarray) -> np.ndarray:
        """``P^-1 r = T^-1 A^-1 A^-T T^-T r`` (float64 out; the solves in the factors'
        precision, each a ``"latency"`` step: :func:`~npt_dask.arrays.threads.blas_limit`)."""
        x = np.asarray(r, dtype=self.factors.dtype)
        with blas_limit("latency"):
            x = self._solve(x, "T", transpose=True)
            x = self._solve(x, "A", transpose=True)
            x = self._solve(x, "A", transpose=False)
            x = self._solve(x, "T", transpose=False)
        return np.asarray(x, dtype=np.float64)

    def half(self, r: np.ndarray) -> np.ndarray:
        """``A^-T T^-T r``, the first half of :meth:`__call__` (float64 out): for kernel
        columns ``k_m(x)``, their squared norms are the rows' weights in the
        preconditioned system (:func:`npt_dask.ridge.estimate.nystrom_iterations`)."""
        with blas_limit("latency"):
            x = self._solve(np.asarray(r, dtype=self.factors.dtype), "T", transpose=True)
            x = self._solve(x, "A", transpose=True)
        return np.asarray(x, dtype=np.float64)

    @property
    def nbytes(self) -> int:
        return int(self.factors.nbytes + self.diag_t.nbytes + self.diag_a.nbytes)


def _upper_product(f: np.ndarray) -> None:
    """Upper triangle of ``f``: ``U -> U U^T`` (LAPACK ``lauum``), in place."""
    out, info = routine(f.dtype, "lauum")(f, lower=0, overwrite_c=1)
    if info != 0:  # pragma: no cover - lauum fails only on bad arguments
        raise AssertionError(f"lauum failed ({info})")
    if not same_buffer(out, f):
        f[...] = out


@dataclass
class LowRank:
    """The randomized Nyström preconditioner: ``u`` (n x r, orthonormal columns),
    ``values`` (r, descending), ``alpha``."""

    u: np.ndarray
    values: np.ndarray
    alpha: float

    def __call__(self, r: np.ndarray) -> np.ndarray:
        """``P^-1 r = r + U ((lam_r + alpha) / (lam + alpha) - 1) U^T r`` (float64)."""
        r = np.asarray(r, dtype=np.float64)
        if self.u.shape[1] == 0:
            return r.copy()
        scale = (self.values[-1] + self.alpha) / (self.values + self.alpha) - 1.0
        y = np.asarray(self.u.T @ r.astype(self.u.dtype, copy=False), dtype=np.float64)
        correction = self.u @ (scale[:, None] * y).astype(self.u.dtype, copy=False)
        return r + correction

    @property
    def nbytes(self) -> int:
        return int(self.u.nbytes + self.values.nbytes)


PANEL_ROWS = 8192
"""Rows of ``Y`` a step of :func:`low_rank_from_coordinates` takes (its float64 copy)."""


def low_rank_from_coordinates(y: Any, alpha: float, rtol: float) -> LowRank:
    """:class:`LowRank` of ``K ~ Y Y^T`` from coordinates ``Y`` (n x r, overwritten), in
    ``Y``'s namespace (numpy, or a device's: the factor stays there).

    ``Y^T Y = V diag(lam) V^T`` (one symmetric rank-n update, row panel by row panel in
    float64, and an ``r x r`` eigendecomposition on the host, a ``"latency"`` step:
    :func:`~npt_dask.arrays.threads.blas_limit`; from a device ``r^2`` numbers cross, and
    the rotation goes back), then ``U = Y V lam^-1/2`` in place (in
    ``Y``'s precision: no second ``n x r`` array), row panel by row panel; eigenvalues
    below ``rtol`` of the largest are dropped.
    """
    xp = namespace_of(y)
    numpy = is_numpy(xp)
    gram = _coordinate_gram(y, xp, numpy)
    with blas_limit("latency"):
        values, vectors = scipy.linalg.eigh(gram, driver="evd")
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    keep = values > rtol * max(float(values[0]), 0.0) if len(values) else values > 0
    values, vectors = values[keep], vectors[:, keep]
    rotate = (vectors / np.sqrt(values)).astype(y.dtype)
    if not numpy:
        rotate = xp.asarray(rotate, device=device_of(y))  # r x r, moved once
    out = y[:, : len(values)]  # in place: no second n x r array
    for start in range(0, int(y.shape[0]), PANEL_ROWS):
        out[start : start + PANEL_ROWS] = y[start : start + PANEL_ROWS] @ rotate
    return LowRank(out, values, float(alpha))


def _coordinate_gram(y: Any, xp: Any, numpy: bool) -> np.ndarray:
    """``Y^T Y`` (float64, both triangles) in host memory: on numpy by symmetric rank-k
    updates of Fortran panels; elsewhere summed where ``Y`` lives and crossing once."""
    r = int(y.shape[1])
    if numpy:
        gram = np.zeros((r, r), order="F")
        for start in range(0, len(y), PANEL_ROWS):
            syrk_update(gram, np.asfortranarray(y[start : start + PANEL_ROWS], dtype=np.float64))
        return symmetric_from_upper(gram)
    total = None
    for start in range(0, int(y.shape[0]), PANEL_ROWS):
        panel = xp.astype(y[start : start + PANEL_ROWS], xp.float64)
        part = xp.linalg.matrix_transpose(panel) @ panel
        if total is None:
            total = part
        else:
            total += part
    gram = np.zeros((r, r)) if total is None else np.array(to_host(total), dtype=np.float64)
    return symmetric_from_upper(np.asfortranarray(gram))
