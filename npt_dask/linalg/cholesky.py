"""Dense linear algebra in the namespace of its arrays: Cholesky, triangular solves and
the ridge preconditioners' solves, on a GPU when the arrays are CuPy's.

* :func:`cholesky` -- ``xp.linalg.cholesky``; on numpy the blocked
  :func:`~npt_dask.linalg.symmetric.cholesky_upper` (OpenBLAS's threaded ``potrf`` crashes
  from about 16,000 rows). A matrix that is not positive definite gives None on every
  namespace (CuPy writes NaNs where numpy raises: the diagonal is checked, one crossing
  of one flag).
* :func:`solve_triangular` -- scipy's on numpy, ``cupyx.scipy.linalg``'s on CuPy,
  ``torch.linalg.solve_triangular`` on torch; any other namespace (``array_api_strict``
  in the tests) falls back to the standard's general ``xp.linalg.solve`` (right, but
  ``m^3`` flops a call: a namespace with a triangular solver should get its own branch).
* :func:`cho_solve` -- two triangular solves with a factor of :func:`cholesky`.
* :func:`normal_matrix_dtype` -- the precision policy of kernel ridge's normal matrix
  and its factor on a device (float64; see there why).
* :func:`preconditioner_like` -- a ridge preconditioner
  (:class:`~npt_dask.linalg.preconditioners.FalkonCholesky`,
  :class:`~npt_dask.linalg.preconditioners.LowRank`, built on the host) whose solves run
  in the namespace and on the device of given vectors (its factors copied there once);
  on numpy the preconditioner itself.

Layer rule: arrays of one namespace in, the same namespace out.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import array_api_compat
import numpy as np

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of, on_device
from npt_dask.linalg.preconditioners import FalkonCholesky, LowRank
from npt_dask.linalg.symmetric import cholesky_upper

__all__ = [
    "cho_solve",
    "cholesky",
    "normal_matrix_dtype",
    "plus_diagonal",
    "preconditioner_like",
    "solve_triangular",
]


def normal_matrix_dtype(xp: Any) -> Any:
    """The dtype kernel ridge's normal matrix (``K_nm^T W K_nm + alpha K_mm``, or the
    exact ``K + alpha I``) is accumulated and Cholesky-factored in: float64, on the host
    and on every device, whatever the kernel blocks' precision.

    Why not float32 on a GPU: on H100/H200-class GPUs float64 runs at the float32 rate
    (float64 tensor cores: GEMM about 51 TFLOP/s in float32 and 57 in float64 on one
    H200), so float32 would save memory but no time. And it would cost the answer: the
    normal equations square the conditioning of ``K_nm``. On MNIST at its best settings
    (RBF, gamma = 0.02, alpha = 0.01) the normal matrix of only 10,000 rows and 2,000
    centres already has a condition number near 8e8, far beyond float32's
    1 / eps ~ 1.7e7: the solve through its float32 Cholesky factor is 6 % off in norm,
    and more rows or centres make it worse. The kernel blocks themselves may be float32 (each
    entry needs only its own 7 digits); their products are summed in float64.

    >>> import numpy as np
    >>> normal_matrix_dtype(np) == np.float64
    True
    """
    return xp.float64


# --- Cholesky ------------------------------------------------------------------------------


def plus_diagonal(a: Any, value: float) -> Any:
    """``a + value I`` for a square C-contiguous ``a``, written into ``a`` where its flat
    view is a view (numpy, CuPy, torch): no ``n x n`` identity or temporary. Returns the
    result (a view of ``a``, or a new array where the namespace's reshape copied).

    >>> import numpy as np
    >>> a = np.zeros((2, 2)); plus_diagonal(a, 3.0).tolist(), a.tolist()
    ([[3.0, 0.0], [0.0, 3.0]], [[3.0, 0.0], [0.0, 3.0]])
    """
    if not value:
        return a
    xp = namespace_of(a)
    n = int(a.shape[0])
    flat = xp.reshape(a, (n * n,))
    flat[:: n + 1] += value
    return xp.reshape(flat, (n, n))


def cholesky(a: Any, *, upper: bool = False) -> Any | None:
    """The Cholesky factor of the symmetric positive definite ``a`` (lower ``L`` with
    ``a = L L^T``, or with ``upper`` ``U = L^T``), in ``a``'s namespace; None when ``a``
    is not positive definite (to rounding). ``a`` itself is not changed.

    On numpy the factorisation is blocked (:func:`~npt_dask.linalg.symmetric.cholesky_upper`:
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
    except Exception as error:  # numpy-backed namespaces raise; CuPy writes NaNs
        if "LinAlgError" in type(error).__name__:
            return None
        raise
    finite = to_host(xp.all(xp.isfinite(xp.linalg.diagonal(factor))))
    return factor if bool(finite) else None


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


# --- the ridge preconditioners on a device ---------------------------------------------------


def preconditioner_like(pc: Callable[[Any], Any], like: Any) -> Callable[[Any], Any]:
    """``pc`` with its solves in the namespace and on the device of ``like`` (the CG
    vectors, or the operator's products): a :class:`FalkonCholesky` or :class:`LowRank`
    gets its factors copied there once (float64 vectors in, float64 out, the solves in
    the factors' precision, as on the host); on numpy, or for any other callable, ``pc``
    itself."""
    xp, device = namespace_of(like), device_of(like)
    if is_numpy(xp):
        return pc
    if isinstance(pc, FalkonCholesky):
        return _falkon_on(pc, xp, device)
    if isinstance(pc, LowRank):
        return _low_rank_on(pc, xp, device)
    return pc


def _falkon_on(pc: FalkonCholesky, xp: Any, device: Any) -> Callable[[Any], Any]:
    """``P^-1 r = T^-1 A^-1 A^-T T^-T r`` with ``T^T`` (lower) and ``A`` (upper) on the
    device, two m x m arrays (the host keeps them in one)."""
    f = pc.factors
    t_lower = np.tril(f, -1)
    t_lower[np.diag_indices_from(t_lower)] = pc.diag_t
    a_upper = np.triu(f, 1)
    a_upper[np.diag_indices_from(a_upper)] = pc.diag_a
    t_dev, a_dev = on_device(t_lower, xp, device), on_device(a_upper, xp, device)
    dtype = t_dev.dtype

    def apply(r: Any) -> Any:
        x = xp.astype(r, dtype)
        x = solve_triangular(t_dev, x, lower=True)  # T^-T: T^T is the lower factor
        x = solve_triangular(a_dev, x, lower=False, trans=True)
        x = solve_triangular(a_dev, x, lower=False)
        x = solve_triangular(t_dev, x, lower=True, trans=True)
        return xp.astype(x, xp.float64)

    return apply


def _low_rank_on(pc: LowRank, xp: Any, device: Any) -> Callable[[Any], Any]:
    """``P^-1 r = r + U ((lam_r + alpha) / (lam + alpha) - 1) U^T r`` with ``U`` on the
    device."""
    u = on_device(pc.u, xp, device)
    if pc.u.shape[1] == 0:
        return lambda r: xp.asarray(xp.astype(r, xp.float64), copy=True)
    scale = (pc.values[-1] + pc.alpha) / (pc.values + pc.alpha) - 1.0
    scale_dev = on_device(np.asarray(scale, dtype=np.float64), xp, device)

    def apply(r: Any) -> Any:
        r = xp.astype(r, xp.float64)
        y = xp.astype(xp.linalg.matrix_transpose(u) @ xp.astype(r, u.dtype), xp.float64)
        correction = u @ xp.astype(scale_dev[:, None] * y, u.dtype)
        return r + xp.astype(correction, xp.float64)

    return apply
