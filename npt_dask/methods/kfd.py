"""Kernel Fisher discriminant as LDA on NPT coordinates, out of core.

On NPT coordinates Y, the kernel Fisher discriminant (000, Section IV-C) is
ordinary LDA: maximise ``beta^T S_B beta / beta^T S_W beta`` with the
between-class scatter ``S_B = sum_c n_c (m_c - m)(m_c - m)^T`` and the
within-class scatter ``S_W = sum_i (y_i - m_{c_i})(y_i - m_{c_i})^T``, both
r x r. (000 eqs. 22, 28, 29 call the total scatter "between"; maximising
total/within gives the same directions -- see the formula sheet.)

Both scatters come from one pass over the coordinate chunks that
accumulates class counts, class sums and ``Y^T Y``; the data never sit in one
process. A ridge ``mu I`` on ``S_W`` is the NPT image of ``mu K`` on the dual
within scatter (since ``beta = Y alpha`` and ``beta^T beta = alpha^T K alpha``).
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of
from npt_dask.engine.rows import Rows
from npt_dask.errors import InputError
from npt_dask.methods._passes import (
    COORDINATE_CHUNK,
    COORDINATE_ROWS,
    affine,
    aligned,
    as_labels,
    coordinate_rows,
    lazy_name,
    pass_sums,
    take_labels,
)
from npt_dask.params.constraints import (
    INT,
    NONE,
    REAL,
    Interval,
    Param,
    check_estimator,
    table_defaults,
)
from npt_dask.runtime.inputs import align_rows, wrap_rows
from npt_dask.runtime.labels import class_index

__all__ = [
    "FISHER_PARAMS",
    "FisherDiscriminant",
    "class_scatter",
]

FISHER_PARAMS: tuple[Param, ...] = (
    Param(
        "n_components",
        (Interval(INT, 1, None), NONE),
        None,
        "discriminant directions kept, at most n_classes - 1 (None: that many)",
    ),
    Param(
        "reg",
        (Interval(REAL, 0, None, "left"),),
        1e-8,
        "ridge on the within scatter, relative to its mean eigenvalue",
    ),
    COORDINATE_ROWS,
)
"""``npt_dask.methods.FisherDiscriminant`` (the upper bound of ``n_components`` comes
from the data: checked by the same entry once the classes are known)."""

_D = table_defaults(FISHER_PARAMS)  # the signature's defaults: the parameter table's
_BY_NAME = {p.name: p for p in FISHER_PARAMS}


def _class_moments(block: Any, index: Any, n_classes: int) -> tuple:
    """A chunk's class counts, class sums and ``Y^T Y``, from its rows' class positions;
    in the chunk's namespace."""
    xp = namespace_of(block, index)
    if is_numpy(xp):
        x = np.asarray(block, dtype=np.float64)
        onehot = np.zeros((len(x), n_classes))
        onehot[np.arange(len(x)), index] = 1.0
        return (onehot.sum(axis=0), onehot.T @ x, x.T @ x)
    x = xp.astype(block, xp.float64)
    hits = index[:, None] == xp.arange(n_classes, device=device_of(index))[None, :]
    onehot = xp.astype(hits, xp.float64)
    return (xp.sum(onehot, axis=0), onehot.T @ x, x.T @ x)


def class_scatter(Y: Any, y: Any, *, chunk_size: int = COORDINATE_CHUNK) -> dict[str, np.ndarray]:
    """Class counts, means, and the total, within and between scatters (one pass).

    Returns a dict with ``classes`` (C,), ``counts`` (C,), ``means`` (C, r),
    ``mean`` (r,), and r x r matrices ``total``, ``within``, ``between``
    (``total = within + between``).
    """
    y = align_rows(y, Y, name="y", rows_name="Y")
    rows, _ = coordinate_rows(Y, chunk_size=chunk_size, min_samples=2)
    classes, index = class_index(as_labels(y, rows.data), name="y", owner="FisherDiscriminant")
    counts, sums, gram = pass_sums(_class_moments, rows, [aligned(rows, index)], len(classes))
    n = counts.sum()
    means = sums / counts[:, None]
    mean = sums.sum(axis=0) / n
    total = gram - n * np.outer(mean, mean)
    within = gram - (sums.T / counts) @ sums
    centred = means - mean
    between = (centred.T * counts) @ centred
    return dict(classes=classes, counts=counts, means=means, mean=mean, total=total,
                within=(within + within.T) / 2, between=(between + between.T) / 2)  # fmt: skip


class FisherDiscriminant(ClassifierMixin, TransformerMixin, BaseEstimator):
    """LDA on NPT coordinates = the kernel Fisher discriminant (KFD).

    Parameters
    ----------
    n_components : int, optional
        Discriminant directions kept; at most ``n_classes - 1`` (the default).
    reg : float, default 1e-8
        Ridge on the within scatter, relative to its mean eigenvalue:
        ``S_W + mu I`` with ``mu = reg * trace(S_W) / r`` (stored as
        ``ridge_``). Needed at full rank, where ``S_W`` is singular.
    chunk_size : int, default 8192
        Rows per chunk for numpy input.

    Attributes
    ----------
    scalings_ : ndarray of shape (r, n_components)
        Directions ``beta``, normalised so ``beta^T (S_W + mu I) beta = 1``;
        signs fixed so that each direction's largest entry is positive.
    explained_variance_ratio_ : ndarray
        Share of the discriminant eigenvalues ``S_B beta = l (S_W + mu I) beta``.
    classes_, means_, mean_, ridge_, n_features_in_

    Notes
    -----
    ``predict`` assigns the nearest class mean in the discriminant space
    (equal priors). One pass over Y to fit; memory is ``O(C r + r^2)`` in the
    driver and one chunk per task.

    Examples
    --------
    >>> import numpy as np
    >>> from npt_dask.methods import FisherDiscriminant
    >>> rng = np.random.default_rng(0)
    >>> Y = np.vstack([rng.normal(0, 1, (50, 3)), rng.normal(3, 1, (50, 3))])
    >>> y = np.repeat([0, 1], 50)
    >>> kfd = FisherDiscriminant().fit(Y, y)
    >>> kfd.transform(Y).shape, round(kfd.score(Y, y), 2)
    ((100, 1), 0.99)
    """

    def __init__(
        self,
        n_components: int | None = _D["n_components"],
        *,
        reg: float = _D["reg"],
        chunk_size: int = _D["chunk_size"],
    ) -> None:
        self.n_components = n_components
        self.reg = reg
        self.chunk_size = chunk_size

    def fit(self, Y: Any, y: Any) -> FisherDiscriminant:
        """Accumulate the scatters in one pass and solve the r x r eigenproblem."""
        check_estimator(FISHER_PARAMS, self)  # before any data are read
        s = class_scatter(Y, y, chunk_size=self.chunk_size)
        k = self._n_directions(len(s["classes"]), s["within"].shape[0])
        r = s["within"].shape[0]
        self.ridge_ = float(self.reg) * max(np.trace(s["within"]), np.finfo(float).tiny) / r
        values, vectors = scipy.linalg.eigh(s["between"], s["within"] + self.ridge_ * np.eye(r))
        order = np.argsort(values)[::-1][:k]
        vectors = vectors[:, order]
        vectors *= np.sign(vectors[np.argmax(np.abs(vectors), axis=0), np.arange(k)])
        self.scalings_ = vectors
        self.eigenvalues_ = values[order]
        self.explained_variance_ratio_ = self.eigenvalues_ / max(values.clip(0).sum(), 1e-300)
        self.classes_, self.means_, self.mean_ = s["classes"], s["means"], s["mean"]
        self.n_features_in_ = r
        self._centroids = (self.means_ - self.mean_) @ self.scalings_
        return self

    def _n_directions(self, n_classes: int, r: int) -> int:
        if n_classes < 2:
            raise InputError(f"FisherDiscriminant needs at least 2 classes; got {n_classes}.")
        limit = min(n_classes - 1, r)
        why = f"At most n_classes - 1 = {n_classes - 1} directions exist (and r = {r})."
        _BY_NAME["n_components"].within(limit, why).check(self.n_components, "FisherDiscriminant")
        return limit if self.n_components is None else int(self.n_components)

    def _features(self, Y: Any) -> tuple[Rows, Any, Any]:
        """The rows of ``Y``, their lazy discriminant features (in their namespace) and
        how ``Y`` came."""
        check_is_fitted(self, "scalings_")
        rows, info = coordinate_rows(Y, chunk_size=self.chunk_size)
        if rows.data.shape[1] != self.n_features_in_:
            raise InputError(
                f"Y has {rows.data.shape[1]} features, but FisherDiscriminant was fitted on "
                f"{self.n_features_in_}."
            )
        return rows, affine(rows, self.scalings_, shift=self.mean_, label="kfd"), info

    def transform(self, Y: Any) -> Any:
        """Discriminant features ``(Y - mean_) @ scalings_``; same container type as Y."""
        _, z, info = self._features(Y)
        return wrap_rows(z, info, name="kfd")

    def predict(self, Y: Any) -> Any:
        """Nearest class mean in the discriminant space (labels on the coordinates'
        device for numeric classes)."""
        rows, z, info = self._features(Y)
        nearest = da.map_blocks(
            _nearest, z, rows.put(self._centroids), drop_axis=1, dtype=np.intp,
            meta=rows.empty((0,), np.intp), name=lazy_name(rows, "nearest"),
        )  # fmt: skip
        return wrap_rows(take_labels(rows, nearest, self.classes_), info, name="label")


def _nearest(z: Any, centroids: Any) -> Any:
    d = ((z[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=-1)
    return d.argmin(axis=1)
