"""A projection's numbers: the weights ``[A, 1/n]`` of the training rows
(:func:`projection_weights`, ``A = U Lambda^{-1/2}``), its constants
(:func:`projection_terms`) and the finish of a row chunk's projection
(:func:`finish_parts`: centring and the Lemma 5 residual). The task that streams a
projection over the training blocks is :class:`npt_dask.engine.consumers.Projection`;
a block's share is :func:`npt_dask.engine.blocks.kernel_times`.

Layer rule: arrays in, arrays out (:func:`finish_parts` in its input's namespace).
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np

from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of

__all__ = [
    "ProjectionTerms",
    "finish_parts",
    "projection_terms",
    "projection_weights",
]


def projection_weights(u_rows: np.ndarray, eigenvalues: np.ndarray, n: int) -> np.ndarray:
    """``[A, 1/n]`` for some training rows: ``A = U Lambda^{-1/2}``, then a column of ``1/n``.

    Row-wise, so a block of rows gives the same bits as the block of the whole.
    """
    a = u_rows / np.sqrt(eigenvalues)
    return np.hstack([a, np.full((a.shape[0], 1), 1.0 / n)])


class ProjectionTerms(TypedDict):
    """The constants of :func:`finish_parts` (a plain dict at run time: dask looks inside
    it, so a cluster's futures of them resolve in the task)."""

    offset: Any
    ones: Any
    grand_mean: float
    center: bool


def projection_terms(
    a: np.ndarray, row_means: np.ndarray, grand_mean: float, center: bool
) -> ProjectionTerms:
    """``A^T m``, ``A^T 1``, ``g`` and the centring flag, from ``A = U Lambda^{-1/2}``."""
    return ProjectionTerms(
        offset=row_means @ a, ones=a.sum(axis=0), grand_mean=float(grand_mean), center=center
    )


def finish_parts(
    p: Any, diag: Any, offset: Any, ones: Any, grand_mean: float, center: bool
) -> tuple[Any, Any, Any]:
    """``(y, residual, ||y||^2)`` from ``p = kappa(z) [A, 1/n]`` and ``kappa(z, z)``.

    ``y = A^T (kappa - m) - (mean(kappa) - g) A^T 1``: the last term is zero in
    exact arithmetic (``U^T 1 = 0``) and is kept so rounding in U is not
    amplified by a large constant part of the kernel. The residual is Lemma 5's
    ``sqrt(max(0, k(z, z) - ||y||^2))``. ``y`` is C-contiguous (its own memory). The
    constants (host arrays) are taken to ``p``'s namespace and device.
    """
    xp = namespace_of(p, diag)
    if not is_numpy(xp):
        offset, ones = (xp.asarray(a, device=device_of(p)) for a in (offset, ones))
    r = offset.shape[0]
    y = p[:, :r] - offset
    if center:
        y -= (p[:, r] - grand_mean)[:, None] * ones
    kzz = diag - 2.0 * p[:, r] + grand_mean if center else diag
    if is_numpy(xp):
        norms = np.einsum("ij,ij->i", y, y)
        return y, np.sqrt(np.maximum(kzz - norms, 0.0)), norms
    norms = xp.sum(y * y, axis=1)
    return y, xp.sqrt(xp.maximum(kzz - norms, 0.0)), norms  # (clip: a bound array, a mask)
