"""One jittered Cholesky factorisation, one policy, for every symmetric solve of kernel ridge.

A kernel matrix is positive semi-definite, but rounding can leave its Cholesky
factorisation (or that of a system built on it) failing. Every factorisation that
may be retried with a jitter on its diagonal goes through :func:`jittered_cholesky`,
whose rule is stated once, in units of the matrix's mean absolute diagonal ``s``:

* **start**: the ``floor`` the caller asks for (0: the matrix as it is, exact; Falkon's
  ``K_mm`` takes ``FALKON_JITTER x m`` always);
* **growth**: on a failure the next jitter is ``max(10 x jitter, m x eps)``, ``eps`` the
  machine epsilon of the factor's precision (the rounding of ``m``-term inner products);
* **stop**: once the next jitter would exceed ``most`` (of ``s``), the ladder ends and
  :func:`jittered_cholesky` returns None -- the caller then solves by least squares
  (scikit-learn's fallback) or refuses, naming the fix.

The factorisation itself is the caller's ``attempt(jitter) -> bool`` (dense in place,
:func:`dense_attempt`; or tiled): the ladder is the same whatever holds the matrix.

Layer rule: numpy in, numpy out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from npt_dask.linalg.cholesky import cholesky_upper
from npt_dask.linalg.symmetric import upper_from_lower

__all__ = ["JITTER_MOST", "dense_attempt", "jitter_ladder", "jittered_cholesky"]

JITTER_MOST = 1.0
"""The default ``most``: a jitter as large as the mean diagonal leaves nothing of the
matrix's own spectrum to precondition or solve by; beyond it the matrix is not PSD."""


def jitter_ladder(m: int, dtype: Any, *, floor: float = 0.0, most: float = JITTER_MOST
                  ) -> Iterator[float]:  # fmt: skip
    """The jitters to try, relative to the mean diagonal: ``floor``, then
    ``max(10 x previous, m x eps(dtype))``, while at most ``most``."""
    eps = float(np.finfo(np.dtype(dtype)).eps) if np.dtype(dtype).kind == "f" else 2.2e-16
    jitter = float(floor)
    while jitter <= most:
        yield jitter
        jitter = max(10.0 * jitter, m * eps)


def jittered_cholesky(
    attempt: Callable[[float], bool],
    *,
    m: int,
    scale: float,
    dtype: Any = np.float64,
    floor: float = 0.0,
    most: float = JITTER_MOST,
) -> float | None:
    """Run ``attempt(jitter)`` (absolute: relative jitter times ``scale``, the mean absolute
    diagonal) up :func:`jitter_ladder` until one succeeds; the absolute jitter it took, or
    None when the ladder ends first."""
    scale = max(float(scale), float(np.finfo(np.float64).tiny))
    for relative in jitter_ladder(m, dtype, floor=floor, most=most):
        if attempt(relative * scale):
            return relative * scale
    return None


def dense_attempt(f: np.ndarray) -> Callable[[float], bool]:
    """The attempt for a symmetric Fortran-order array ``f`` (both triangles): its upper
    Cholesky factor of ``f + jitter I`` in place; after a failure the upper triangle is
    restored from the strictly lower one (which still holds the matrix) and the diagonal
    from a copy kept here."""
    m = f.shape[0]
    diag = f[np.diag_indices(m)].copy()

    def attempt(jitter: float) -> bool:
        f[np.diag_indices(m)] = diag + jitter
        if cholesky_upper(f):
            return True
        upper_from_lower(f)
        f[np.diag_indices(m)] = diag
        return False

    return attempt
