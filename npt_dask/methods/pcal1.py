"""PCA-L1 (Kwak 2008) on NPT coordinates: kernel PCA-L1, out of core.

PCA-L1 finds unit directions ``w`` maximising the L1 dispersion
``sum_i |w^T y_i|`` -- an objective the kernel trick cannot express, since it
is not a function of inner products. On NPT coordinates it *is* kernel PCA-L1
(000, Section IV-D, eq. 35): ``w = Pi beta`` with ``||w|| = ||beta||``.

Layer rule: estimator code over :func:`npt_dask.methods._passes.chunk_sums`;
each iteration is one read pass over the coordinate chunks, so the data may be
a lazy dask array or a zarr-backed DataArray of any length.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from npt_dask.arrays.namespace import is_numpy, namespace_of
from npt_dask.engine.rows import Rows
from npt_dask.errors import ConvergenceWarning, InputError, warn
from npt_dask.methods._passes import (
    COORDINATE_ROWS,
    PERSIST,
    affine,
    coordinate_rows,
    maybe_persist,
    pass_sums,
)
from npt_dask.params.constraints import (
    FLAG,
    INT,
    NONE,
    REAL,
    InstanceOf,
    Interval,
    Param,
    check_estimator,
    table_defaults,
)
from npt_dask.runtime.inputs import wrap_rows

__all__ = [
    "PCAL1",
    "PCAL1_PARAMS",
    "l1_dispersion",
]

PCAL1_PARAMS: tuple[Param, ...] = (
    Param("n_components", (Interval(INT, 1, None),), 1, "directions, at most r"),
    Param("n_init", (Interval(INT, 1, None),), 4, "starts per direction"),
    Param("max_iter", (Interval(INT, 1, None),), 100, "iterations per start"),
    Param("center", (FLAG,), True, "subtract the mean of Y first"),
    Param(
        "perturbation",
        (Interval(REAL, 0, None, "neither"),),
        1e-6,
        "size of the random nudge off zero projections",
    ),
    COORDINATE_ROWS,
    PERSIST,
    Param(
        "random_state",
        (Interval(INT, 0, None), InstanceOf((np.random.Generator,), "a numpy Generator"), NONE),
        None,
        "seed of the random starts and nudges",
    ),
)
"""``npt_dask.methods.PCAL1`` (the upper bound of ``n_components``, r, comes from the
data: checked by the same entry once r is known)."""

_D = table_defaults(PCAL1_PARAMS)  # the signature's defaults: the parameter table's
_N_COMPONENTS = next(p for p in PCAL1_PARAMS if p.name == "n_components")
_ZERO = 1e-12  # |w^T y| <= _ZERO * ||y|| counts as a zero projection (step 4b)


# Task bodies: a chunk in its namespace (numpy, or a device's) and the pass's small
# arrays (mean, basis, direction) already there.


def _float64(block: Any) -> Any:
    xp = namespace_of(block)
    return np.asarray(block, dtype=np.float64) if is_numpy(xp) else xp.astype(block, xp.float64)


def _deflated(block: Any, mean: Any, basis: Any) -> Any:
    """Rows centred and projected off the directions found so far (greedy deflation)."""
    x = _float64(block) - mean
    if basis.shape[1]:
        x -= (x @ basis) @ basis.T
    return x


def _moments(block: Any) -> tuple[Any, ...]:
    x = _float64(block)
    return (x.sum(axis=0), np.array(float(x.shape[0])))


def _scatter(block: Any, mean: Any, basis: Any) -> tuple[Any]:
    x = _deflated(block, mean, basis)
    return (x.T @ x,)


def _polarity_step(block: Any, w: Any, mean: Any, basis: Any) -> tuple[Any, ...]:
    """Steps 2-3 of PCA-L1 for one chunk: ``sum p_i y_i``, the dispersion at w, zeros."""
    x = _deflated(block, mean, basis)
    xp = namespace_of(x)
    s = x @ w
    # a row that is itself zero (at the mean, or removed by deflation) projects to
    # zero on every direction: no nudge can move it, so it is not a zero projection
    if is_numpy(xp):
        p = np.where(s < 0, -1.0, 1.0)
        norm = np.linalg.norm(x, axis=1)
        zeros = (np.abs(s) <= _ZERO * norm) & (norm > 0)
        return (x.T @ p, np.array(np.abs(s).sum()), np.array(float(zeros.sum())))
    p = xp.where(s < 0, -1.0, 1.0)
    norm = xp.linalg.vector_norm(x, axis=1)
    zeros = (xp.abs(s) <= _ZERO * norm) & (norm > 0)
    return (x.T @ p, xp.sum(xp.abs(s)), xp.sum(xp.astype(zeros, xp.float64)))


def _dispersion(block: Any, w: Any, mean: Any) -> tuple[Any]:
    return (abs((_float64(block) - mean) @ w).sum(axis=0),)


def l1_dispersion(Y: Any, directions: np.ndarray, mean: np.ndarray | None = None) -> np.ndarray:
    """``sum_i |w_k^T (y_i - mean)|`` for each row ``w_k`` of ``directions`` (one pass)."""
    rows, _ = coordinate_rows(Y)
    w = np.atleast_2d(np.asarray(directions, dtype=np.float64))
    mean = np.zeros(rows.data.shape[1]) if mean is None else np.asarray(mean, dtype=np.float64)
    return pass_sums(_dispersion, rows, (), rows.put(w.T), rows.put(mean))[0]


class PCAL1(TransformerMixin, BaseEstimator):
    """PCA-L1: directions of maximal L1 dispersion, found greedily with restarts.

    Applied to NPT coordinates this is kernel PCA-L1 (000, Section IV-D).

    Parameters
    ----------
    n_components : int, default 1
        Number of directions, found one after another on deflated data.
    n_init : int, default 4
        Starts per direction: the L2 principal direction of the deflated data,
        then ``n_init - 1`` random directions. The start reaching the largest
        dispersion is kept (PCA-L1 finds a local maximum).
    max_iter : int, default 100
        Polarity-flipping iterations per start (each is one pass over Y).
    center : bool, default True
        Subtract the mean of Y first (NPT training coordinates already have
        mean zero, Lemma 4).
    perturbation : float, default 1e-6
        Size of the random nudge of step 4b, applied when a sample projects
        to exactly zero at convergence.
    chunk_size : int, default 8192
        Rows per chunk for numpy input (dask and xarray input keep theirs).
    persist : bool, optional
        Keep Y in (cluster) memory across iterations (``True``) or re-read it
        from its source on every iteration (``False``, e.g. coordinates in
        zarr larger than memory). Default: persist up to 512 MiB.
    random_state : int, Generator or None
        Seeds the random starts and nudges.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, r)
        Unit directions, orthonormal, one per row.
    dispersion_ : ndarray of shape (n_components,)
        L1 dispersion of each direction on its deflated data.
    dispersion_history_ : list of ndarray
        Dispersion at every iteration of the kept start, per direction; it
        never decreases (Kwak 2008, Theorem 1) except across a step-4b nudge.
    n_iter_ : ndarray of shape (n_components,)
        Iterations of the kept start.
    mean_ : ndarray of shape (r,)

    Notes
    -----
    Memory per task is one chunk of Y plus ``chunk * r`` floats; the driver
    holds O(r * n_components) numbers. Work per iteration is
    ``O(n * r * (n_components + 1))``.

    Examples
    --------
    >>> import numpy as np
    >>> from npt_dask.methods import PCAL1
    >>> rng = np.random.default_rng(0)
    >>> Y = rng.normal(size=(500, 3)) * [5.0, 1.0, 0.2]
    >>> pca = PCAL1(n_components=2, random_state=0).fit(Y)
    >>> np.round(np.abs(pca.components_[0]), 1)
    array([1., 0., 0.])
    """

    def __init__(
        self,
        n_components: int = _D["n_components"],
        *,
        n_init: int = _D["n_init"],
        max_iter: int = _D["max_iter"],
        center: bool = _D["center"],
        perturbation: float = _D["perturbation"],
        chunk_size: int = _D["chunk_size"],
        persist: bool | None = _D["persist"],
        random_state: int | np.random.Generator | None = _D["random_state"],
    ) -> None:
        self.n_components = n_components
        self.n_init = n_init
        self.max_iter = max_iter
        self.center = center
        self.perturbation = perturbation
        self.chunk_size = chunk_size
        self.persist = persist
        self.random_state = random_state

    def fit(self, Y: Any, y: Any = None) -> PCAL1:
        """Find the directions; ``Y`` is numpy, dask or a DataArray of shape (n, r)."""
        check_estimator(PCAL1_PARAMS, self)  # before any data are read
        rows, _ = coordinate_rows(Y, chunk_size=self.chunk_size, min_samples=2)
        r = int(rows.data.shape[1])  # the most directions there are
        _N_COMPONENTS.within(r, f"Y has r = {r} columns.").check(self.n_components, "PCAL1")
        data = rows.like(maybe_persist(rows.data, self.persist))
        rng = np.random.default_rng(self.random_state)
        self.mean_ = np.zeros(r)
        if self.center:
            total, n = pass_sums(_moments, data)
            self.mean_ = total / n
        basis = np.zeros((r, 0))
        found = []
        for _ in range(self.n_components):
            found.append(self._best_direction(data, basis, rng))
            basis = _orthonormal_append(basis, found[-1][0])
        self.components_ = basis.T.copy()
        self.dispersion_ = np.array([f[1][-1] for f in found])
        self.dispersion_history_ = [f[1] for f in found]
        self.n_iter_ = np.array([f[2] for f in found])
        self.n_features_in_ = r
        return self

    def _starts(self, data: Rows, basis: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
        (scatter,) = pass_sums(_scatter, data, (), data.put(self.mean_), data.put(basis))
        starts = [np.linalg.eigh(scatter)[1][:, -1]]
        for _ in range(self.n_init - 1):
            w = rng.standard_normal(data.data.shape[1])
            starts.append(w - basis @ (basis.T @ w))
        return starts

    def _best_direction(
        self, data: Rows, basis: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, int]:
        runs = [self._ascend(data, w, basis, rng) for w in self._starts(data, basis, rng)]
        return max(runs, key=lambda run: run[1][-1])

    def _ascend(
        self, data: Rows, w: np.ndarray, basis: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Steps 1-4 of PCA-L1 from start ``w``: polarity check, flip, maximise. The mean
        and the basis go to the rows' device once per start, ``w`` once per iteration;
        each iteration's sums (r + 2 numbers) come back in one crossing."""
        w = _unit(w, rng, basis)
        mean, moved_basis = data.put(self.mean_), data.put(basis)
        history = []
        for it in range(1, self.max_iter + 1):
            flipped, dispersion, zeros = pass_sums(
                _polarity_step, data, (), data.put(w), mean, moved_basis
            )
            history.append(float(dispersion))
            new = _unit(flipped - basis @ (basis.T @ flipped), rng, basis)
            same = np.allclose(new, w, rtol=0.0, atol=1e-14)
            if same and not zeros:
                break  # step 4c: the polarities no longer change
            if it == self.max_iter:
                warn(
                    f"PCAL1 did not converge in max_iter={self.max_iter} iterations; "
                    "increase max_iter.",
                    ConvergenceWarning,
                )
                break
            if same:  # step 4b: nudge off zero projections
                new = _unit(w + self.perturbation * rng.standard_normal(w.shape), rng, basis)
            w = new
        return w, np.array(history), it

    def transform(self, Y: Any) -> Any:
        """Projections ``(Y - mean_) @ components_.T``; same container type as ``Y``."""
        check_is_fitted(self, "components_")
        rows, info = coordinate_rows(Y, chunk_size=self.chunk_size)
        if rows.data.shape[1] != self.n_features_in_:
            raise InputError(
                f"Y has {rows.data.shape[1]} features, but PCAL1 was fitted on "
                f"{self.n_features_in_}."
            )
        z = affine(rows, self.components_.T, shift=self.mean_, label="pcal1")
        return wrap_rows(z, info, name="pcal1")


def _unit(w: np.ndarray, rng: np.random.Generator, basis: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(w))
    while not norm > 0:  # a zero sum of flipped rows: restart from a random direction
        w = np.asarray(rng.standard_normal(basis.shape[0]))
        w -= basis @ (basis.T @ w)
        norm = float(np.linalg.norm(w))
    return w / norm


def _orthonormal_append(basis: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Append ``w`` re-orthogonalised against ``basis`` (twice, for rounding)."""
    for _ in range(2):
        w = w - basis @ (basis.T @ w)
    return np.column_stack([basis, w / np.linalg.norm(w)])
