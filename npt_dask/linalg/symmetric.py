"""Symmetric matrices: their products, their triangles and their diagonal.

OpenBLAS's threaded ``syrk`` -- numpy's ``A.T @ A`` and scipy's ``dsyrk``, and
the LAPACK routines built on it, ``dpotrf`` among them -- crashes once the
symmetric result has about 16,000 rows (seen on these machines with numpy's and
scipy's OpenBLAS). Kernel ridge needs exactly those operations at m = 20,000
and more, so they are done here in tiles no larger than :data:`SYRK_TILE`:

* :func:`syrk_update` -- ``G += alpha B^T B`` on the upper triangle (``syrk`` on
  diagonal tiles, ``gemm`` above them: half a general product's flops);
* :func:`symmetric_from_upper`, :func:`upper_from_lower` -- the other triangle,
  column panel by column panel (no ``m x m`` temporary);
* :func:`plus_diagonal`, :func:`set_diagonal` -- ``a + value I`` and a given diagonal,
  in place, in any namespace;
* :func:`normal_matrix_dtype` -- the precision of kernel ridge's normal matrix and its
  factor on every device (float64; see there why).

The blocked Cholesky factorisation built on :func:`syrk_update` is
:func:`npt_dask.linalg.cholesky.cholesky_upper`.

Layer rule: numpy arrays in, numpy arrays out (scipy's BLAS and LAPACK wrappers);
:func:`plus_diagonal`, :func:`set_diagonal` and :func:`normal_matrix_dtype` take any array
namespace.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from npt_dask.arrays.namespace import namespace_of

__all__ = [
    "SYRK_TILE",
    "normal_matrix_dtype",
    "plus_diagonal",
    "routine",
    "same_buffer",
    "set_diagonal",
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


def _flat(a: Any) -> tuple[Any, Any, bool]:
    """``a``'s namespace and a flat view of its square buffer (the diagonal is every
    ``n + 1``-th entry in C and Fortran order alike); whether it is a view of ``a``'s
    transpose (a Fortran-order array)."""
    xp = namespace_of(a)
    n = int(a.shape[0])
    flags = getattr(a, "flags", None)
    fortran = flags is not None and bool(flags["F_CONTIGUOUS"]) and not flags["C_CONTIGUOUS"]
    return xp, xp.reshape(a.T if fortran else a, (n * n,)), fortran


def set_diagonal(a: Any, values: Any) -> Any:
    """``a`` with its diagonal set to ``values`` (a vector of ``a``'s namespace, or a
    number), written in place where the flat view is a view (numpy, CuPy, torch; C or
    Fortran order): no ``n x n`` temporary. Returns the result (``a`` itself, or a new
    array where the namespace's reshape copied).

    >>> import numpy as np
    >>> set_diagonal(np.zeros((2, 2)), np.array([1.0, 2.0])).tolist()
    [[1.0, 0.0], [0.0, 2.0]]
    """
    xp, flat, fortran = _flat(a)
    n = int(a.shape[0])
    flat[:: n + 1] = values
    out = xp.reshape(flat, (n, n))
    return out.T if fortran else out
