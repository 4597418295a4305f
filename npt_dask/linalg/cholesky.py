"""Cholesky factorisation and the solves that use a factor, in the namespace of their
arrays (numpy, CuPy, torch, any array API library).

* :func:`cholesky_upper` -- numpy's blocked right-looking Cholesky in place (LAPACK on
  diagonal blocks of :data:`CHOLESKY_TILE`, ``trsm`` for the panels,
  :func:`~npt_dask.linalg.symmetric.syrk_update` for the trailing matrix: ``m^3 / 3``
  flops at the product rate): OpenBLAS's threaded ``potrf`` crashes from about 16,000
  rows.
* :func:`cholesky` -- ``xp.linalg.cholesky``; on numpy :func:`cholesky_upper`. A matrix
  that is not positive definite gives None on every namespace: numpy raises, cuSOLVER
  says nothing (CuPy reads its ``devInfo`` only under ``cupyx.errstate``) and leaves the
  failing pivot's non-positive (or NaN) value on the diagonal and the input's values
  behind it, so a factor whose diagonal is not finite and positive throughout is a failed
  one (one crossing of one flag).
* :func:`solve_triangular` -- scipy's on numpy, ``cupyx.scipy.linalg``'s on CuPy,
  ``torch.linalg.solve_triangular`` on torch; any other namespace (``array_api_strict``
  in the tests) falls back to the standard's general ``xp.linalg.solve`` (right, but
  ``m^3`` flops a call: a namespace with a triangular solver should get its own branch).
  cuBLAS's ``trsm`` reads a Fortran-order factor: a C-order one (CuPy's ``cholesky``
  gives one) is handed over as its transpose, a Fortran-order view of the other triangle,
  with ``lower`` and ``trans`` swapped -- no copy of the factor a call.
* :func:`cho_solve` -- two triangular solves with a factor of :func:`cholesky`.

Layer rule: arrays of one namespace in, the same namespace out.
"""

from __future__ import annotations

import importlib
from typing import Any

import array_api_compat
import numpy as np

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import is_numpy, namespace_of
from npt_dask.linalg.symmetric import routine, same_buffer, syrk_update

__all__ = [
    "CHOLESKY_TILE",
    "cho_solve",
    "cholesky",
    "cholesky_upper",
    "factored",
    "solve_triangular",
]


# --- Cholesky ------------------------------------------------------------------------------


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


def cholesky(a: Any, *, upper: bool = False) -> Any | None:
    """The Cholesky factor of the symmetric positive definite ``a`` (lower ``L`` with
    ``a = L L^T``, or with ``upper`` ``U = L^T``), in ``a``'s namespace; None when ``a``
    is not positive definite (to rounding). ``a`` itself is not changed.

    On numpy the factorisation is blocked (:func:`~npt_dask.linalg.cholesky.cholesky_upper`:
    LAPACK on diagonal tiles only, clear of OpenBLAS's crash from about 16,000 rows);
    elsewhere ``xp.linalg.cholesky``.

    >>> import numpy as np
    >>> cholesky(np.array([[4.0, 2.0], [2.0, 5.0]])).tolist()
    [[2.0, 0.0], [1.0, 2.0]]
    >>> cholesky(np.array([[1.0, 2.0], [2.0, 1.0]])) is None
    True
    """
    xp = namespace_of(a)
    if is_numpy(xp):
        f = np.array(a, order="F", copy=True)
        if not cholesky_upper(f):
            return None
        factor = np.triu(f)
        return factor if upper else np.ascontiguousarray(factor.T)
    try:
        factor = xp.linalg.cholesky(a, upper=upper)
    except Exception as error:  # numpy-backed namespaces raise; cuSOLVER is silent
        if "LinAlgError" in type(error).__name__:
            return None
        raise
    return factor if factored(factor) else None


def factored(factor: Any) -> bool:
    """Whether a Cholesky factor is one: every diagonal entry finite and positive. A
    failed cuSOLVER ``potrf`` leaves the failing pivot's value (not positive, or NaN) on
    the diagonal and the input's own values after it, which may look like a factor's; one
    flag crosses."""
    xp = namespace_of(factor)
    diagonal = xp.linalg.diagonal(factor)
    return bool(to_host(xp.all(xp.isfinite(diagonal) & (diagonal > 0))))


# --- triangular solves ---------------------------------------------------------------------


def solve_triangular(a: Any, b: Any, *, lower: bool, trans: bool = False) -> Any:
    """``x`` with ``a x = b`` (``a^T x = b`` with ``trans``), ``a`` triangular (its other
    triangle ignored), in the namespace of ``a`` and ``b``; ``b`` a vector or a matrix.

    >>> import numpy as np
    >>> solve_triangular(np.array([[2.0, 0.0], [1.0, 1.0]]), np.array([2.0, 3.0]), lower=True)
    array([1., 2.])
    """
    xp = namespace_of(a, b)
    if is_numpy(xp):
        import scipy.linalg

        return scipy.linalg.solve_triangular(a, b, lower=lower, trans=int(trans),
                                             check_finite=False)  # fmt: skip
    if array_api_compat.is_cupy_namespace(xp):
        solve = importlib.import_module("cupyx.scipy.linalg").solve_triangular
        if a.flags.c_contiguous and not a.flags.f_contiguous:  # its transpose is Fortran's
            a, lower, trans = a.T, not lower, not trans
        return solve(a, b, lower=lower, trans=int(trans))
    if array_api_compat.is_torch_namespace(xp):
        torch = importlib.import_module("torch")
        column = b.ndim == 1
        rhs = b[:, None] if column else b
        t = a.mT if trans else a
        out = torch.linalg.solve_triangular(t, rhs, upper=lower == trans)
        return out[:, 0] if column else out
    return _solve_triangular_generic(xp, a, b, lower=lower, trans=trans)


def _solve_triangular_generic(xp: Any, a: Any, b: Any, *, lower: bool, trans: bool) -> Any:
    """The standard's general solve on the triangle of ``a`` (``m^3`` flops a call)."""
    t = xp.tril(a) if lower else xp.triu(a)
    if trans:
        t = xp.linalg.matrix_transpose(t)
    if b.ndim == 1:
        return xp.linalg.solve(t, b[:, None])[:, 0]
    return xp.linalg.solve(t, b)


def cho_solve(factor: Any, b: Any, *, upper: bool = False) -> Any:
    """``x`` with ``a x = b`` given ``factor = cholesky(a, upper=upper)``: two triangular
    solves (``L y = b``, ``L^T x = y``).

    >>> import numpy as np
    >>> a = np.array([[4.0, 2.0], [2.0, 5.0]])
    >>> np.allclose(a @ cho_solve(cholesky(a), np.array([1.0, 2.0])), [1.0, 2.0])
    True
    """
    if upper:  # U^T y = b, U x = y
        y = solve_triangular(factor, b, lower=False, trans=True)
        return solve_triangular(factor, y, lower=False)
    y = solve_triangular(factor, b, lower=True)
    return solve_triangular(factor, y, lower=True, trans=True)
