"""``cupyx.scipy.linalg`` of the stand-in: ``solve_triangular`` with cuBLAS's copies.

From ``cupyx/scipy/linalg/_solve_triangular.py``: both operands must be device arrays
(``LinAlgError`` otherwise); for one matrix, ``a`` is taken in Fortran order
(``cupy.array(a, order='F', copy=None)``: a C-ordered ``a`` is copied, counted as a Fortran
copy) and ``b`` is copied to Fortran order unless ``overwrite_b`` and already Fortran; the
result is that Fortran-ordered copy of ``b``. cuBLAS's ``trsm`` does not check the diagonal:
a singular ``a`` gives inf/NaN, never an error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg
from cupy import _standin
from cupy._core import ndarray, wrap


def solve_triangular(a: Any, b: Any, trans: Any = 0, lower: bool = False,
                     unit_diagonal: bool = False, overwrite_b: bool = False,
                     check_finite: bool = False) -> ndarray:  # fmt: skip
    for x in (a, b):
        if not isinstance(x, ndarray):
            raise np.linalg.LinAlgError("cupy.linalg only supports cupy.ndarray")
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError("expected square matrix")
    if len(a) != len(b):
        raise ValueError("incompatible dimensions")
    dtype = a.dtype if a.dtype.char in "fd" else np.promote_types(a.dtype.char, "f")
    fa, result = a._a, b
    if not fa.flags.f_contiguous or fa.dtype != dtype:
        _standin.record(fortran_copies=1, fortran_bytes=fa.size * dtype.itemsize)
        copy_of_a = wrap(np.asfortranarray(fa, dtype=dtype))  # on the device during the solve
        fa = copy_of_a._a
    if not (overwrite_b and b._a.flags.f_contiguous and b.dtype == dtype):
        result = wrap(np.array(b._a, dtype=dtype, order="F"))
    fb = result._a
    with np.errstate(all="ignore"):
        try:
            fb[...] = scipy.linalg.solve_triangular(fa, fb, trans=trans, lower=lower,
                                                    unit_diagonal=unit_diagonal,
                                                    check_finite=False)  # fmt: skip
        except np.linalg.LinAlgError:
            fb[...] = np.nan
    return result


__all__ = ["solve_triangular"]
