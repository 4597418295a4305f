"""Dense symmetric linear algebra on numpy arrays, blocked to stay clear of a crash.

OpenBLAS's threaded ``syrk`` -- numpy's ``A.T @ A`` and scipy's ``dsyrk``, and
the LAPACK routines built on it, ``dpotrf`` among them -- crashes once the
symmetric result has about 16,000 rows (seen on these machines with numpy's and
scipy's OpenBLAS). Kernel ridge needs exactly those operations at m = 20,000
and more, so they are done here in tiles no larger than :data:`SYRK_TILE`:

* :func:`syrk_update` -- ``G += alpha B^T B`` on the upper triangle (``syrk`` on
  diagonal tiles, ``gemm`` above them: half a general product's flops);
* :func:`cholesky_upper` -- a blocked right-looking Cholesky factorisation
  (LAPACK on the diagonal blocks, ``trsm`` for the panels, :func:`syrk_update`
  for the trailing matrix: ``m^3 / 3`` flops at the product rate);
* :func:`symmetric_from_upper`, :func:`upper_from_lower` -- the other triangle,
  column panel by column panel (no ``m x m`` temporary).

Layer rule: numpy arrays in, numpy arrays out (scipy's BLAS and LAPACK wrappers).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "CHOLESKY_TILE",
    "SYRK_TILE",
    "cholesky_upper",
    "routine",
    "same_buffer",
    "symmetric_from_upper",
    "syrk_update",
    "upper_from_lower",
]


SYRK_TILE = 8192
"""Widest square tile of a symmetric update ``G += B^T B`` (:func:`syrk_update`): OpenBLAS's
threaded ``syrk`` crashes once G has about 16,000 rows (seen with numpy's and scipy's)."""


def same_buffer(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether a routine wrote in place: the same first element (``np.shares_memory``
    solves an exact overlap problem and can take seconds)."""
    return bool(a.ctypes.data == b.ctypes.data and a.shape == b.shape)


def routine(dtype: Any, name: str) -> Any:
    """scipy's BLAS or LAPACK routine ``name`` for ``dtype`` (``"syrk"`` -> ``dsyrk``
    for float64, ``ssyrk`` for float32)."""
    from scipy.linalg import blas, lapack

    prefix = "d" if np.dtype(dtype) == np.float64 else "s"
    return getattr(blas, prefix + name, None) or getattr(lapack, prefix + name)


def syrk_update(
    acc: np.ndarray, b: np.ndarray, alpha: float = 1.0, tile: int = SYRK_TILE
) -> np.ndarray:
    """``acc += alpha b^T b`` on the upper triangle of ``acc`` (Fortran order), in place.

    ``b`` is ``(c, m)`` in Fortran order (its column panels contiguous), of ``acc``'s
    dtype. Tiles of at most ``tile`` columns: ``syrk`` on the diagonal tiles, ``gemm``
    above them, ``c m^2`` flops in all (half a general product's). The lower triangle
    of ``acc`` is left as it was. ``acc`` may be a view into a larger Fortran array.
    """
    syrk, gemm = routine(acc.dtype, "syrk"), routine(acc.dtype, "gemm")
    m = b.shape[1]
    for j0 in range(0, m, tile):
        j1 = min(m, j0 + tile)
        right = b[:, j0:j1]
        for i0 in range(0, j1, tile):
            i1 = min(j1, i0 + tile)
            part = acc[i0:i1, j0:j1]
            if i0 == j0:
                new = syrk(alpha, right, trans=1, beta=1.0, c=part, lower=0, overwrite_c=1)
            else:
                new = gemm(alpha, b[:, i0:i1], right, trans_a=1, beta=1.0, c=part, overwrite_c=1)
            if not same_buffer(new, part):
                part[...] = new  # a tile that is not contiguous comes back as a copy
    return acc


def upper_from_lower(acc: np.ndarray) -> np.ndarray:
    """The upper triangle of ``acc`` from its strictly lower part (a symmetric matrix whose
    upper part was overwritten, e.g. by a factorisation), in place, column panel by column
    panel; the diagonal is left as it is."""
    m = acc.shape[0]
    step = 2048
    for j0 in range(0, m, step):
        j1 = min(m, j0 + step)
        acc[j0:j1, j1:] = acc[j1:, j0:j1].T
        tile = acc[j0:j1, j0:j1]
        for c in range(1, j1 - j0):  # column by column: no index arrays of the tile's size
            tile[:c, c] = tile[c, :c]
    return acc


CHOLESKY_TILE = 4096
"""Block width of :func:`cholesky_upper` (LAPACK factors the diagonal blocks, BLAS-3
updates the rest in tiles of this size)."""


def cholesky_upper(a: np.ndarray) -> bool:
    """Factor ``a = U^T U`` in place (upper triangle of a Fortran-order array), blocked.

    OpenBLAS's threaded ``potrf`` crashes from about 16,000 rows (float64, seen on these
    machines), so LAPACK factors only diagonal blocks of :data:`CHOLESKY_TILE` rows; the
    row panels right of them are solved in place (``trsm``) and the trailing matrix is
    updated by :func:`syrk_update` (``m^3 / 3`` flops in all, at the product rate).
    Returns False (``a`` partly overwritten) when ``a`` is not positive definite.
    """
    potrf, trsm = routine(a.dtype, "potrf"), routine(a.dtype, "trsm")
    m = a.shape[0]
    for k0 in range(0, m, CHOLESKY_TILE):
        k1 = min(m, k0 + CHOLESKY_TILE)
        diag = a[k0:k1, k0:k1]
        factor, info = potrf(diag, lower=0, clean=0, overwrite_a=1)
        if info != 0:
            return False
        if not same_buffer(factor, diag):
            diag[...] = factor
        for j0 in range(k1, m, CHOLESKY_TILE):  # U12 = U11^-T A12, panel by panel
            j1 = min(m, j0 + CHOLESKY_TILE)
            panel = a[k0:k1, j0:j1]
            panel[...] = trsm(1.0, factor, panel, lower=0, trans_a=1)
        if k1 < m:  # A22 -= U12^T U12
            syrk_update(a[k1:, k1:], a[k0:k1, k1:], -1.0, CHOLESKY_TILE)
    return True


def symmetric_from_upper(acc: np.ndarray) -> np.ndarray:
    """The full symmetric matrix whose upper triangle ``acc`` holds, in place
    (column panels at a time: no second n x n temporary)."""
    m = acc.shape[0]
    step = 2048
    for j0 in range(0, m, step):
        j1 = min(m, j0 + step)
        # rows below the diagonal tile take the transposed upper part
        acc[j1:, j0:j1] = acc[j0:j1, j1:].T
        tile = acc[j0:j1, j0:j1]
        for c in range(j1 - j0 - 1):  # column by column: no index arrays of the tile's size
            tile[c + 1 :, c] = tile[c, c + 1 :]
    return acc
