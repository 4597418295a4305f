"""Kernel PCA from an NPT model: the coordinates are the kernel principal components.

The scatter of the training coordinates is ``Y^T Y = Lambda`` (000, Section
IV-A), so the coordinates sorted by ``lambda`` are the kernel principal
components and need no further solve. This module adds the variance
bookkeeping: the variance along each component and its share of the *total*
variance in feature space, ``trace(K)`` -- which is known without the full
spectrum from one pass over the kernel diagonal.
"""

from __future__ import annotations

import numpy as np

from npt_dask.npt.model import NPTModel

__all__ = ["explained_variance", "explained_variance_ratio", "total_variance"]


def total_variance(model: NPTModel) -> float:
    """``trace(K)``: the total scatter of the training data in feature space.

    See :meth:`npt_dask.NPTModel.total_variance` (one pass over the kernel diagonal).
    """
    return model.total_variance()


def explained_variance(model: NPTModel) -> np.ndarray:
    """Variance along each component, ``lambda / (n - 1)``.

    This is what ``sklearn.decomposition.PCA`` reports for the training
    coordinates (``ddof = 1``).
    """
    return model.explained_variance()


def explained_variance_ratio(model: NPTModel) -> np.ndarray:
    """Share of the total feature-space variance along each component, ``lambda / trace(K)``.

    Unlike a ratio among the kept components only, this counts the variance
    the truncation to r components leaves out: the ratios sum to less than 1
    unless r reaches the rank of K.

    Examples
    --------
    >>> import numpy as np
    >>> import npt_dask as npt
    >>> from npt_dask.methods import explained_variance_ratio
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> model = npt.fit(X, kernel="linear", n_components=3)
    >>> round(float(explained_variance_ratio(model).sum()), 6)
    1.0
    """
    return model.explained_variance_ratio()
