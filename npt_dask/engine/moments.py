"""The moments of a linear method on coordinates: :class:`LinearMoments` (``n``, sums,
``Y^T Y``, ``Y^T T``, ``sum t^2``), a chunk's share of them (:func:`chunk_moments`,
one-hot class targets by :func:`one_hot`) and the symmetric product they take
(:func:`gram_of`). Summed over chunks by :mod:`npt_dask.engine.sums`; read by ridge on
coordinates (:mod:`npt_dask.methods.linear_ridge`) and stored with a model.

Layer rule: arrays in, arrays out (a chunk's sums in its namespace).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of

__all__ = [
    "GRAM_PANEL_ROWS",
    "LinearMoments",
    "chunk_moments",
    "gram_of",
    "one_hot",
]


def one_hot(labels: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """``(len(labels), len(classes))`` float64 indicator of each row's class."""
    index = np.searchsorted(classes, labels)
    index = np.minimum(index, len(classes) - 1)
    if not np.array_equal(classes[index], labels):
        raise ValueError("a label is not among the classes found before the pass")
    t = np.zeros((len(labels), len(classes)))
    t[np.arange(len(labels)), index] = 1.0
    return t


GRAM_PANEL_ROWS = 8192
"""Most rows per ``y^T y`` product: numpy's symmetric (``syrk``) path is known to crash a
threaded OpenBLAS at about 16,000 rows."""


def gram_of(y: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
    """``y^T y`` (float64) by numpy's symmetric product (half a general product's work),
    at most :data:`GRAM_PANEL_ROWS` rows at a time, each panel's product in ``dtype``.

    ``dtype=float32`` runs at BLAS's single-precision rate; each entry then has
    a relative error of about ``1e-7 sqrt(rows)`` of ``||y_k|| ||y_l||`` (the
    columns keep their own scale), and the panels are summed in float64.
    """
    x = np.asarray(y, dtype=dtype)
    out = np.zeros((x.shape[1], x.shape[1]))
    for start in range(0, len(x), GRAM_PANEL_ROWS):
        panel = x[start : start + GRAM_PANEL_ROWS]
        out += panel.T @ panel
    return out


def chunk_moments(
    y: np.ndarray, t: np.ndarray, gram_dtype: Any = np.float64
) -> tuple[np.ndarray, ...]:
    """A chunk's share of ridge's sufficient statistics, float64.

    ``(n, sum y, sum t, y^T y, y^T t, sum t^2)``: summed over chunks they are
    the moments of :class:`LinearMoments`. ``y^T y`` is formed in ``gram_dtype``
    (see :func:`gram_of`).
    """
    xp = namespace_of(y, t)
    if not is_numpy(xp):  # the same sums in the rows' namespace, on their device
        x, tt = xp.astype(y, xp.float64), xp.astype(t, xp.float64)
        g = xp.astype(x, getattr(xp, np.dtype(gram_dtype).name))
        return (
            # the count made where it is summed (xp.asarray of a number would copy it)
            xp.full((), float(x.shape[0]), dtype=xp.float64, device=device_of(x)),
            xp.sum(x, axis=0),
            xp.sum(tt, axis=0),
            xp.astype(g.T @ g, xp.float64),
            x.T @ tt,
            xp.sum(tt * tt, axis=0),
        )
    x = np.asarray(y, dtype=np.float64)
    tt = np.asarray(t, dtype=np.float64)
    return (
        np.array(float(len(x))),
        x.sum(axis=0),
        tt.sum(axis=0),
        gram_of(x, gram_dtype),
        x.T @ tt,
        np.einsum("ij,ij->j", tt, tt),
    )


@dataclass(frozen=True)
class LinearMoments:
    """Sufficient statistics of a linear method on coordinates Y with targets T.

    ``classes`` is set when T is the one-hot indicator of class labels (then
    ``t_sum`` holds the class counts); see :func:`chunk_moments`.
    """

    n: float
    y_sum: np.ndarray  # (r,)
    t_sum: np.ndarray  # (k,)
    gram: np.ndarray  # (r, r) Y^T Y
    cross: np.ndarray  # (r, k) Y^T T
    t_norm2: np.ndarray  # (k,)
    classes: np.ndarray | None = None

    @classmethod
    def from_tuple(cls, parts: Sequence[Any], classes: np.ndarray | None = None) -> LinearMoments:
        n, y_sum, t_sum, gram, cross, t_norm2 = parts
        return cls(float(n), y_sum, t_sum, gram, cross, t_norm2, classes)

    def as_tuple(self) -> tuple[Any, ...]:
        return (self.n, self.y_sum, self.t_sum, self.gram, self.cross, self.t_norm2)

    def plus_minus_one(self) -> LinearMoments:
        """The moments of the one-vs-all targets ``2 T - 1`` (scikit-learn's
        ``RidgeClassifier``), one column for two classes (that of ``classes[1]``)."""
        if self.classes is None:
            raise ValueError("plus_minus_one needs class moments")
        cols = slice(1, None) if len(self.classes) == 2 else slice(None)
        cross = 2.0 * self.cross[:, cols] - self.y_sum[:, None]
        t_sum = 2.0 * self.t_sum[cols] - self.n
        return LinearMoments(
            self.n, self.y_sum, t_sum, self.gram, cross, np.full(len(t_sum), self.n), self.classes
        )
