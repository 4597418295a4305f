"""``cupy.linalg`` of the stand-in: numpy.linalg on the device, with cuSOLVER's manners.

* A numpy operand is ``LinAlgError('cupy.linalg only supports cupy.ndarray')``
  (``cupy/linalg/_util.py`` ``_assert_cupy_array``).
* A failed factorisation or solve raises nothing by default (cuSOLVER reports through
  ``devInfo``, which CuPy reads only under ``cupyx.errstate(linalg='raise')``): ``cholesky``
  of a matrix that is not positive definite returns the factor up to the failing pivot,
  that pivot's non-positive value on the diagonal (as LAPACK's ``potrf`` leaves it) and the
  input's own values in the trailing block that cuSOLVER leaves unfactored (finite, often
  positive on the diagonal: only the failing pivot tells); a singular ``solve``/``inv``
  returns NaN. Under ``cupyx.errstate(linalg='raise')`` each raises ``LinAlgError``.
* Results that numpy gives as named tuples are plain tuples (as CuPy's).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from cupy import _standin
from cupy._core import call, ndarray, wrap
from cupy._functions import submodule

LinAlgError = np.linalg.LinAlgError


def _check(args: Any) -> None:
    for a in args:
        if isinstance(a, np.ndarray):
            raise LinAlgError("cupy.linalg only supports cupy.ndarray")


def _raise() -> bool:
    return _standin.LINALG_ERRORS == "raise"


def _linalg(name: str) -> Any:
    fn = getattr(np.linalg, name)

    def f(*args: Any, **kwargs: Any) -> Any:
        _check(args)
        out = call(fn, args, kwargs)
        return tuple(out) if isinstance(out, tuple) else out

    f.__name__ = f.__qualname__ = name
    return f


globals().update({name: _linalg(name) for name in submodule(np.linalg)})


def _partial_factor(a: np.ndarray) -> np.ndarray:
    """potrf's output on failure: columns before the failing pivot factored, the pivot's
    non-positive value on the diagonal, the input's values in the trailing block (what
    cuSOLVER leaves there: a diagonal that may look like a factor's)."""
    n = a.shape[-1]
    low = np.zeros_like(a)
    for j in range(n):
        d = a[j, j] - low[j, :j] @ low[j, :j]
        if not d > 0:
            low[j:, j:] = a[j:, j:]
            low[j, j] = d
            return np.tril(low)
        low[j, j] = np.sqrt(d)
        low[j + 1 :, j] = (a[j + 1 :, j] - low[j + 1 :, :j] @ low[j, :j]) / low[j, j]
    return low


def cholesky(a: Any) -> ndarray:
    """The lower Cholesky factor; not positive definite: see the module doc."""
    _check((a,))
    if not isinstance(a, ndarray):
        raise LinAlgError("cupy.linalg only supports cupy.ndarray")
    try:
        return wrap(np.linalg.cholesky(a._a))
    except np.linalg.LinAlgError:
        if _raise():
            raise LinAlgError("Error reported by potrf in cuSOLVER. devInfo = 1. Please "
                              "refer to the cuSOLVER documentation.") from None  # fmt: skip
        if a.ndim != 2:
            return wrap(np.full(a.shape, np.nan, dtype=a.dtype))
        return wrap(_partial_factor(a._a))


def _silent(name: str) -> Any:
    fn = globals()[name]

    def f(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except np.linalg.LinAlgError as error:
            if _raise() or "only supports cupy.ndarray" in str(error):
                raise
            shape = np.broadcast_shapes(*(x.shape for x in args if isinstance(x, ndarray)))
            if name == "inv":
                shape = args[0].shape
            elif name == "solve":
                shape = args[1].shape
            return wrap(np.full(shape, np.nan, dtype=np.result_type(*(x.dtype for x in args))))

    f.__name__ = f.__qualname__ = name
    return f


solve = _silent("solve")
inv = _silent("inv")
