"""Kernel ridge regression and classification as ridge on NPT coordinates, in one pass.

On NPT coordinates Y, with ``<y_i, y(z)> = k(x_i, z)`` at full rank, ridge
regression ``min ||T - Y w - b||^2 + alpha ||w||^2`` *is* kernel ridge
regression: ``w = Y^T c`` with ``c = (K + alpha I)^{-1} T`` gives the
predictions ``y(z)^T w = k(z)^T (K + alpha I)^{-1} T``. With an (unpenalised)
intercept, ridge is blind to a shift of the features, so centred and
uncentred NPT models give the same machine: kernel ridge with the centred
kernel plus the target mean.

The fit needs only ``Y^T Y``, ``Y^T T``, the column sums of Y and T, the
row count and ``||T||^2`` (all r x r or smaller), accumulated in float64 in
one streaming pass over the row chunks; the driver then solves r x r
systems (a Cholesky factorisation per alpha, or one eigendecomposition shared
by many alphas: ``CHOLESKY_MAX_ALPHAS``). Candidate alphas are scored by
generalised cross-validation (GCV) from the same pass, or by exact
leave-one-out with a second pass.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of
from npt_dask.engine.moments import LinearMoments, chunk_moments, gram_of
from npt_dask.engine.rows import Aligned, Rows
from npt_dask.errors import InputError, InputTypeError
from npt_dask.methods._passes import (
    COORDINATE_CHUNK,
    COORDINATE_ROWS,
    add_parts,
    affine,
    aligned,
    as_labels,
    class_positions,
    coordinate_rows,
    pass_sums,
    take_labels,
)
from npt_dask.params.constraints import (
    ARRAY_TYPES,
    FLAG,
    REAL,
    InstanceOf,
    Interval,
    Options,
    Param,
    check_estimator,
    table_defaults,
)
from npt_dask.runtime.inputs import (
    align_rows,
    check_finite_block,
    check_known_chunks,
    is_data_array,
    is_lazy,
    wrap_rows,
)
from npt_dask.runtime.labels import class_index, on_a_device

__all__ = [
    "LINEAR_RIDGE_PARAMS",
    "Ridge",
    "RidgeClassifier",
    "ridge_moments",
]

LINEAR_RIDGE_PARAMS: tuple[Param, ...] = (
    Param(
        "alpha",
        (
            Interval(REAL, 0, None, "neither"),
            InstanceOf(ARRAY_TYPES, "a 1-D array of candidate alphas > 0"),
        ),
        1.0,
        "the ridge (> 0), or candidates scored by the criterion",
    ),
    Param("fit_intercept", (FLAG,), True, "fit an unpenalised intercept"),
    Param("criterion", (Options(("gcv", "loo")),), "gcv", "how candidate alphas are scored"),
    COORDINATE_ROWS,
)
"""``npt_dask.methods.Ridge`` and ``RidgeClassifier`` (ridge on coordinates)."""

_D = table_defaults(LINEAR_RIDGE_PARAMS)  # the signature's defaults: the parameter table's


# ------------------------------------------------------------------ chunk maths
# Task bodies: a chunk of coordinates and its row-aligned extras in their namespace (numpy,
# or a device's); numpy keeps its own products (symmetric Gram panels, einsum).


def _target_moments(block: Any, targets: Any) -> tuple:
    return chunk_moments(block, targets)


def _as_f64(xp: Any, a: Any) -> Any:
    return np.asarray(a, dtype=np.float64) if is_numpy(xp) else xp.astype(a, xp.float64)


def _centred_moments(block: Any, targets: Any) -> tuple:
    """A chunk's ``(n, mean y, mean t, Yc^T Yc, Yc^T Tc, ||Tc||^2)`` about its own means
    (merged by :func:`_merge_centred`: no sum of squares about 0 is ever centred, which
    cancels ``n mean^2`` against a small spread)."""
    xp = namespace_of(block, targets)
    y = _as_f64(xp, block)
    t = _as_f64(xp, targets)
    t = t[:, None] if t.ndim == 1 else t
    if y.shape[0] == 0:
        r, k = y.shape[1], t.shape[1]
        zeros = np.zeros if is_numpy(xp) else functools.partial(xp.zeros, device=device_of(y))
        return (0.0, zeros(r), zeros(k), zeros((r, r)), zeros((r, k)), zeros(k))
    if is_numpy(xp):
        my, mt = y.mean(axis=0), t.mean(axis=0)
        yc, tc = y - my, t - mt
        return (float(len(y)), my, mt, gram_of(yc), yc.T @ tc, np.einsum("ij,ij->j", tc, tc))
    my, mt = xp.mean(y, axis=0), xp.mean(t, axis=0)
    yc, tc = y - my, t - mt
    return (float(y.shape[0]), my, mt, yc.T @ yc, yc.T @ tc, xp.sum(tc * tc, axis=0))


def _outer(a: Any, b: Any) -> Any:
    """``np.outer`` of two vectors in their namespace (the same products)."""
    return a[:, None] * b[None, :]


def _merge_centred(parts: list[tuple]) -> tuple:
    """Centred moments of the union of row groups (Chan, Golub & LeVeque 1979): each
    group's scatter plus ``n_a n_b / n`` times the outer product of the means' difference.
    In the parts' namespace (a device's moments merge there)."""
    n, my, mt, yy, yt, tt = add_parts(parts[:1])
    for nb, myb, mtb, yyb, ytb, ttb in parts[1:]:
        total = n + nb
        if nb == 0:
            continue
        dy, dt = myb - my, mtb - mt
        w = n * nb / total
        yy += yyb + w * _outer(dy, dy)
        yt += ytb + w * _outer(dy, dt)
        tt += ttb + w * dt * dt
        my += dy * (nb / total)
        mt += dt * (nb / total)
        n = total
    return (n, my, mt, yy, yt, tt)


def _label_centred_moments(block: Any, index: Any, n_classes: int) -> tuple:
    return _centred_moments(block, _pm_one(index, n_classes))


def _pm_one(index: Any, n_classes: int) -> Any:
    """One-vs-all targets of rows' class positions ``index``: +1 for the row's class, -1
    elsewhere; one column for 2 classes."""
    xp = namespace_of(index)
    if is_numpy(xp):
        t = -np.ones((len(index), n_classes))
        t[np.arange(len(index)), index] = 1.0
    else:
        hits = index[:, None] == xp.arange(n_classes, device=device_of(index))[None, :]
        t = xp.astype(hits, xp.float64) * 2.0 - 1.0
    return t[:, 1:] if n_classes == 2 else t


def _loo_terms(s: _Solution) -> tuple[Any, ...]:
    """What every chunk of the leave-one-out pass reads, on the host: the means, the
    eigenvectors, each alpha's shrinkage ``1 / (values + alpha)`` (A, r) and weights
    ``shrink * projected`` (A, r, k), and the intercept's leverage."""
    shrinks = [1.0 / (s.values + alpha) for alpha in s.alphas]
    weights = [shrink[:, None] * s.projected for shrink in shrinks]
    return (s.x_mean, s.vectors, s.t_mean, np.stack(shrinks), np.stack(weights), s.h0)


def _loo_errors(
    block: Any, targets: Any, x_mean: Any, vectors: Any, t_mean: Any, shrinks: Any,
    weights: Any, h0: float,
) -> tuple:  # fmt: skip
    """Sum over the chunk's rows of squared leave-one-out residuals, per alpha and output
    (:func:`_loo_terms`, on the rows' device)."""
    xp = namespace_of(block, targets)
    x, t = _as_f64(xp, block), _as_f64(xp, targets)
    z = (x - x_mean) @ vectors  # rows in the eigenbasis of the (centred) Gram
    out = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for shrink, weight in zip(shrinks, weights, strict=True):
            fitted = t_mean + z @ weight
            leverage = h0 + (z * z) @ shrink
            out.append(xp.sum(((t - fitted) / (1.0 - leverage)[:, None]) ** 2, axis=0))
    return (xp.stack(out),)


def _loo_label_errors(block: Any, index: Any, n_classes: int, *terms: Any) -> tuple:
    return _loo_errors(block, _pm_one(index, n_classes), *terms)


# ------------------------------------------------------------------ the r x r solve


@dataclass(frozen=True)
class _Solution:
    """The eigen-solution of the (centred) normal equations, valid for every alpha."""

    n: float
    x_mean: np.ndarray  # (r,), zeros without intercept
    t_mean: np.ndarray  # (k,), zeros without intercept
    values: np.ndarray  # (r,) eigenvalues of the centred Gram, clipped at 0
    vectors: np.ndarray  # (r, r)
    projected: np.ndarray  # (r, k) = V^T (centred Y^T T)
    t_norm2: np.ndarray  # (k,) centred ||T||^2
    h0: float  # leverage of the intercept: 1/n, or 0
    alphas: np.ndarray

    def coef(self, alpha: float) -> np.ndarray:
        return self.vectors @ (self.projected / (self.values + alpha)[:, None])

    def gcv(self) -> np.ndarray:
        """Mean GCV error per alpha: ``(RSS / n) / (1 - tr(H) / n)^2``, averaged over outputs."""
        d = self.values[:, None]
        p2 = self.projected**2
        scores = np.empty(len(self.alphas))
        for a, alpha in enumerate(self.alphas):
            # RSS = ||T||^2 - 2 tr(W^T B) + tr(W^T G W), in the eigenbasis
            rss = self.t_norm2 - (p2 * (d + 2 * alpha) / (d + alpha) ** 2).sum(axis=0)
            trace = self.n * self.h0 + np.sum(self.values / (self.values + alpha))
            scores[a] = np.mean(np.maximum(rss, 0.0)) / self.n / (1.0 - trace / self.n) ** 2
        return scores


CHOLESKY_MAX_ALPHAS = 4
"""Up to this many candidate alphas are solved by one Cholesky factorisation each
(``r^3/3``, and ``r^3/3`` more for GCV's ``tr (G + alpha I)^-1``); more share one
eigendecomposition of the Gram (then ``O(r^2 k)`` per alpha), which costs about as
much as five factorisations."""


@dataclass(frozen=True)
class _Centred:
    """The normal equations' statistics, centred when there is an intercept."""

    n: float
    x_mean: np.ndarray  # (r,), zeros without intercept
    t_mean: np.ndarray  # (k,), zeros without intercept
    gram: np.ndarray  # (r, r), symmetric
    cross: np.ndarray  # (r, k)
    t_norm2: np.ndarray  # (k,)
    h0: float  # leverage of the intercept: 1/n, or 0


def _from_centred(moments: tuple, fit_intercept: bool) -> _Centred:
    """The normal equations' statistics from centred moments (:func:`_merge_centred`):
    as they are with an intercept, the sums about 0 without."""
    n, my, mt, yy, yt, tt = moments
    n = float(n)
    if not fit_intercept:
        yy, yt, tt = yy + n * np.outer(my, my), yt + n * np.outer(my, mt), tt + n * mt * mt
        my, mt = np.zeros_like(my), np.zeros_like(mt)
    h0 = 1.0 / n if fit_intercept else 0.0
    return _Centred(n, my, mt, (yy + yy.T) / 2, yt, np.maximum(tt, 0.0), h0)


def _centre(moments: tuple, fit_intercept: bool) -> _Centred:
    n, x_sum, t_sum, gram, cross, t2 = moments
    n = float(n)
    if fit_intercept:
        x_mean, t_mean = x_sum / n, t_sum / n
        gram = gram - np.outer(x_sum, x_mean)
        cross = cross - np.outer(x_sum, t_mean)
        t2 = t2 - t_sum * t_mean
    else:
        x_mean, t_mean = np.zeros_like(x_sum), np.zeros_like(t_sum)
    gram = (gram + gram.T) / 2
    h0 = 1.0 / n if fit_intercept else 0.0
    return _Centred(n, x_mean, t_mean, gram, cross, np.maximum(t2, 0.0), h0)


def _solve(c: _Centred, alphas: np.ndarray) -> _Solution:
    values, vectors = scipy.linalg.eigh(c.gram, driver="evd")
    return _Solution(
        n=c.n,
        x_mean=c.x_mean,
        t_mean=c.t_mean,
        values=np.maximum(values, 0.0),
        vectors=vectors,
        projected=vectors.T @ c.cross,
        t_norm2=c.t_norm2,
        h0=c.h0,
        alphas=alphas,
    )


def _cholesky_solve(c: _Centred, alpha: float, scored: bool) -> tuple[np.ndarray, float] | None:
    """``W = (G + alpha I)^-1 B`` and, when ``scored``, GCV's ``tr H`` (else NaN); None if
    the factorisation fails."""
    shifted = c.gram.copy()
    shifted.flat[:: shifted.shape[0] + 1] += alpha
    try:
        low = scipy.linalg.cholesky(shifted, lower=True, overwrite_a=True, check_finite=False)
    except np.linalg.LinAlgError:
        return None
    coef = scipy.linalg.cho_solve((low, True), c.cross, check_finite=False)
    if not scored:  # a single alpha is not scored: no triangular inverse
        return coef, float("nan")
    inverse, info = scipy.linalg.lapack.dtrtri(low, lower=1, overwrite_c=1)
    if info != 0:
        return None
    # tr (G + aI)^-1 G = r - a tr (G + aI)^-1 = r - a ||L^-1||_F^2 (scipy's factor has a
    # zeroed upper triangle, which dtrtri leaves alone)
    return coef, c.n * c.h0 + len(coef) - alpha * float(np.vdot(inverse, inverse))


def _gcv_by_cholesky(c: _Centred, alphas: np.ndarray) -> tuple[list, np.ndarray] | None:
    """Each alpha's coefficients and GCV score from its own Cholesky factorisation.

    ``RSS = ||T||^2 - <W, B> - alpha ||W||^2`` (as ``G W = B - alpha W``), the
    same score as :meth:`_Solution.gcv`. None when a factorisation fails
    (a Gram too indefinite for the smallest alpha): the eigen path handles it.
    """
    scored = len(alphas) > 1
    coefs, scores = [], np.full(len(alphas), np.nan)
    for a, alpha in enumerate(alphas):
        solved = _cholesky_solve(c, float(alpha), scored=scored)
        if solved is None:
            return None
        coef, trace = solved
        coefs.append(coef)
        if scored:
            rss = c.t_norm2 - np.sum(coef * c.cross, axis=0) - alpha * np.sum(coef**2, axis=0)
            scores[a] = np.mean(np.maximum(rss, 0.0)) / c.n / (1.0 - trace / c.n) ** 2
    return coefs, scores


def ridge_moments(Y: Any, T: Any, *, chunk_size: int = COORDINATE_CHUNK) -> dict[str, np.ndarray]:
    """The sufficient statistics of ridge regression, in one pass over the chunks of Y.

    Returns a dict with ``n``, ``y_sum`` (r,), ``t_sum`` (k,), ``gram``
    ``Y^T Y`` (r, r), ``cross`` ``Y^T T`` (r, k) and ``t_norm2`` (k,) (the
    squared norm of each target column), all float64. ``T`` is 1-D or 2-D.

    Examples
    --------
    >>> import numpy as np
    >>> from npt_dask.methods import ridge_moments
    >>> m = ridge_moments(np.ones((10, 2)), np.arange(10.0), chunk_size=4)
    >>> float(m["n"]), m["gram"].tolist(), m["cross"].ravel().tolist()
    (10.0, [[10.0, 10.0], [10.0, 10.0]], [45.0, 45.0])
    """
    rows, _ = coordinate_rows(Y, chunk_size=chunk_size)
    targets = aligned(rows, _as_targets(T, rows.data, "Ridge"))
    keys = ("n", "y_sum", "t_sum", "gram", "cross", "t_norm2")
    return dict(zip(keys, pass_sums(_target_moments, rows, [targets]), strict=True))


# ------------------------------------------------------------------ validation


_ALPHA = next(p for p in LINEAR_RIDGE_PARAMS if p.name == "alpha")


def _check_params(est: Any) -> np.ndarray:
    """The estimator's parameters by the table (before any work), and its candidate
    alphas as a float64 array: each finite and > 0, in the table's words."""
    check_estimator(LINEAR_RIDGE_PARAMS, est)
    owner = type(est).__name__
    if isinstance(est.alpha, numbers.Real):
        return np.array([float(est.alpha)])
    values = np.asarray(est.alpha)
    if values.dtype.kind not in "iuf" or values.ndim != 1 or values.size == 0:
        _ALPHA.refuse(est.alpha, owner, error=InputTypeError)
    values = values.astype(np.float64)
    if not (np.all(np.isfinite(values)) and np.all(values > 0)):
        _ALPHA.refuse(est.alpha, owner)
    return values


def _check_moments(moments: Any) -> LinearMoments:
    if not isinstance(moments, LinearMoments):
        raise InputTypeError(
            "fit_moments takes the LinearMoments of a training pass (model.moments of "
            f"npt.fit(..., labels=y) or targets=t); got {type(moments).__name__}."
        )
    return moments


def _check_numeric_ndarray(X: Any, name: str) -> None:
    """Our message for string numpy data (sklearn's is about a failed float conversion)."""
    if isinstance(X, np.ndarray) and X.dtype.kind in "USV":
        raise InputTypeError(
            f"{name} must be numeric; got dtype {X.dtype}. Convert it with "
            f"{name}.astype(float), or encode categories first."
        )


_NON_NUMERIC_Y = (
    "y must be numeric for {owner}; got dtype {dtype}. For class labels use "
    "RidgeClassifier; otherwise convert y with y.astype(float)."
)


def _as_targets(y: Any, rows: da.Array, owner: str) -> Any:
    """Numeric targets (1-D or 2-D) as a 2-D array (numpy, a device's, or dask chunked
    like ``rows``), checked for NaN and infinity (lazy ones as they are read)."""
    if y is None:
        raise InputError(f"{owner} requires y to be passed, but the target y is None.")
    if is_data_array(y):
        if y.ndim == 2 and "sample" in y.dims:
            y = y.transpose("sample", ...)
        y = y.data
    if not isinstance(y, da.Array) and not on_a_device(y):
        y = np.asarray(y)
    check_known_chunks(y, "y")
    if y.ndim not in (1, 2):
        raise InputError(f"y must be 1-D or 2-D (n_samples, n_targets); got shape {y.shape}.")
    if y.dtype.kind not in "biuf":
        raise InputTypeError(_NON_NUMERIC_Y.format(owner=owner, dtype=y.dtype))
    if y.shape[0] != rows.shape[0]:
        raise InputError(
            f"y has {y.shape[0]} rows but the data have {rows.shape[0]} samples; "
            "pass one target (row) per sample."
        )
    if y.ndim == 1:
        y = y[:, None]
    if isinstance(y, da.Array):
        y = y.rechunk((rows.chunks[0], -1))
        return y.map_blocks(check_finite_block, dtype=y.dtype) if y.dtype.kind == "f" else y
    if y.dtype.kind == "f":
        check_finite_block(y)
    return y


# ------------------------------------------------------------------ estimators


class _RidgeBase(BaseEstimator):
    def __init__(
        self,
        alpha: Any = _D["alpha"],
        *,
        fit_intercept: bool = _D["fit_intercept"],
        criterion: str = _D["criterion"],
        chunk_size: int = _D["chunk_size"],
    ) -> None:
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.criterion = criterion
        self.chunk_size = chunk_size

    # --- fitting

    def _rows_for_fit(self, X: Any, y: Any, **validate: Any) -> tuple[Rows, Any]:
        """X as row-chunked coordinates and y in X's row order (matched by label when
        both label their rows: :func:`npt_dask.runtime.inputs.align_rows`). y may live on
        the coordinates' device; with coordinates in host memory it comes there (once)."""
        if y is not None:
            y = align_rows(y, X, name="y")
        if is_lazy(X):
            rows, _ = coordinate_rows(X, name="X", chunk_size=self.chunk_size)
            self.n_features_in_ = int(rows.data.shape[1])
            self.__dict__.pop("feature_names_in_", None)
            return rows, y
        _check_numeric_ndarray(X, "X")
        if on_a_device(y):
            y = np.asarray(to_host(y))
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32], **validate)
        rows, _ = coordinate_rows(X, name="X", chunk_size=self.chunk_size)
        return rows, y

    def _fit_pass(
        self, moments_of: Any, loo_of: Any, rows: Rows, extras: list[Aligned], *args: Any,
        alphas: np.ndarray,
    ) -> np.ndarray:  # fmt: skip
        """The one pass (centred moments, merged), the solve, and the choice of alpha;
        returns coef (r, k). ``extras`` (targets, class positions) were moved to the rows'
        device once; every pass reads them."""
        moments = pass_sums(moments_of, rows, extras, *args, combine=_merge_centred)
        c = _from_centred(moments, bool(self.fit_intercept))
        return self._fit_solution(c, loo_of, rows, extras, *args, alphas=alphas)

    def _fit_from(self, moments: LinearMoments, alphas: np.ndarray) -> np.ndarray:
        """The solve from moments gathered elsewhere (no pass: GCV only)."""
        if self.criterion == "loo" and len(alphas) > 1:
            raise InputError(
                "criterion='loo' needs a second pass over the coordinates, which moments alone "
                "cannot give; use criterion='gcv' with fit_moments, or fit on the coordinates."
            )
        self.n_features_in_ = int(moments.gram.shape[0])
        self.__dict__.pop("feature_names_in_", None)
        c = _centre(moments.as_tuple(), bool(self.fit_intercept))
        return self._fit_solution(c, None, None, [], alphas=alphas)

    def _fit_solution(
        self, c: _Centred, loo_of: Any, rows: Rows | None, extras: list[Aligned], *args: Any,
        alphas: np.ndarray,
    ) -> np.ndarray:  # fmt: skip
        no_pass = len(alphas) == 1 or self.criterion == "gcv"
        by_cholesky = None
        if no_pass and len(alphas) <= CHOLESKY_MAX_ALPHAS:
            by_cholesky = _gcv_by_cholesky(c, alphas)
        if by_cholesky is not None:
            coefs, scores = by_cholesky
        else:
            sol = _solve(c, alphas)
            if len(alphas) == 1:
                scores = np.full(1, np.nan)
            elif self.criterion == "gcv":
                scores = sol.gcv()
            else:  # second pass: each row's leverage and residual, for every alpha
                assert rows is not None, "leave-one-out reads the coordinates"
                # what every chunk reads, moved to the rows' device once per pass
                terms = [rows.put(a) if isinstance(a, np.ndarray) else a for a in _loo_terms(sol)]
                errors = pass_sums(loo_of, rows, extras, *args, *terms)[0]
                scores = errors.mean(axis=1) / sol.n
        best = 0 if len(alphas) == 1 else int(np.argmin(np.nan_to_num(scores, nan=np.inf)))
        self.alpha_ = float(alphas[best])
        self.alpha_scores_ = scores
        coef = coefs[best] if by_cholesky is not None else sol.coef(self.alpha_)
        self.intercept_ = c.t_mean - c.x_mean @ coef
        return coef

    # --- prediction

    def _scores(self, X: Any) -> tuple[Any, Any]:
        check_is_fitted(self, "coef_")
        coef = np.atleast_2d(self.coef_)
        if not is_lazy(X):
            _check_numeric_ndarray(X, "X")
            X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
            return np.asarray(X, dtype=np.float64) @ coef.T + self.intercept_, None
        rows, info = coordinate_rows(X, name="X", chunk_size=self.chunk_size)
        if rows.data.shape[1] != self.n_features_in_:
            raise InputError(
                f"X has {rows.data.shape[1]} features, but {type(self).__name__} is "
                f"expecting {self.n_features_in_} features as input."
            )
        return affine(rows, coef.T, offset=self.intercept_, label="decision"), info

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        return tags


def _wrap(scores: Any, info: Any, name: str, column_dim: str) -> Any:
    if info is None:
        return scores
    return wrap_rows(scores, info, column_dim=column_dim, name=name)


class Ridge(RegressorMixin, _RidgeBase):
    """Ridge regression on NPT coordinates = kernel ridge regression, out of core.

    Parameters
    ----------
    alpha : float or array-like of floats, default 1.0
        The ridge ``alpha ||w||^2`` (> 0), the same as kernel ridge's alpha.
        Several candidates (like scikit-learn's ``RidgeCV``): the one with
        the smallest ``criterion`` error is used (first one on ties).
    fit_intercept : bool, default True
        Fit an unpenalised intercept (the statistics are then centred). With
        ``False`` the model goes through the origin, like ``KernelRidge``.
    criterion : {"gcv", "loo"}, default "gcv"
        How candidate alphas are scored. ``"gcv"``: generalised
        cross-validation ``(RSS/n) / (1 - tr(H)/n)^2``, from the r x r Gram
        and ``||T||^2``, so it needs no pass beyond the fit's
        one. ``"loo"``: exact leave-one-out, which needs every row's leverage
        ``h_ii`` and hence a second pass; it is what scikit-learn's ``RidgeCV``
        (``cv=None``, whatever its ``gcv_mode``) computes, and reproduces its
        choice. GCV replaces each ``h_ii`` by their mean ``tr(H)/n``: close to
        leave-one-out when n >> r, but near full rank (r ~ n) the two may
        pick different alphas. Unused for a single alpha.
    chunk_size : int, default 8192
        Rows per chunk for numpy input; dask and xarray input keep their chunks.

    Attributes
    ----------
    coef_ : ndarray of shape (r,) or (n_targets, r)
        Weights ``w`` on the coordinates (float64).
    intercept_ : float or ndarray of shape (n_targets,)
        0.0 without ``fit_intercept``.
    alpha_ : float
        The alpha used (the chosen candidate).
    alpha_scores_ : ndarray of shape (n_alphas,)
        Mean ``criterion`` error per candidate (NaN for a single alpha).
    n_features_in_ : int
        r, the number of coordinates.

    Notes
    -----
    One pass over the row chunks accumulates, in float64, the counts, column
    sums, ``Y^T Y`` (r x r), ``Y^T T`` (r x k) and ``||T||^2`` (k), summed in
    a tree; the driver factors the centred Gram: up to ``CHOLESKY_MAX_ALPHAS``
    alphas by a Cholesky factorisation each (``2 r^3 / 3`` flops with the
    trace GCV needs), more by one eigendecomposition (``~4 r^3``) after which
    each alpha costs O(r^2 k). Memory: each task holds one
    row chunk and its r x r + r x k sums; the driver holds r x r + r x k,
    whatever n. Y is never gathered. ``criterion="loo"`` reads the chunks a
    second time, each task holding its chunk rotated into the eigenbasis
    (chunk x r) and returning n_alphas x k error sums. Centring uses the sums
    (``Y^T Y - n m m^T``), accurate when the column means are not much
    larger than their spread (NPT coordinates are centred at training).
    ``predict`` and ``decision_function`` are lazy for dask and chunked
    xarray input and return the caller's container type.

    With ``npt.fit(X, kernel, n_components=None, center=False)`` (the exact
    uncentred feature map), ``Ridge(alpha, fit_intercept=False)`` predicts
    what ``sklearn.kernel_ridge.KernelRidge(alpha, kernel=...)`` predicts.

    Examples
    --------
    >>> import numpy as np
    >>> import npt_dask as npt
    >>> from npt_dask.methods import Ridge
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, (200, 1))
    >>> t = np.sin(X[:, 0]) + rng.normal(0, 0.1, 200)
    >>> model = npt.fit(X, "rbf", gamma=0.5, n_components=None)
    >>> reg = Ridge(alpha=[1e-3, 1e-2, 0.1, 1.0, 10.0]).fit(model.train_coordinates(), t)
    >>> reg.alpha_
    0.1
    >>> Z = np.array([[0.5], [1.5]])  # sin: 0.48, 1.0
    >>> np.round(reg.predict(model.transform(Z)), 1)
    array([0.5, 1. ])
    """

    def fit(self, X: Any, y: Any) -> Ridge:
        """Fit on coordinates X (numpy, dask, DataArray) and targets y (1-D or 2-D), one pass."""
        alphas = _check_params(self)
        if isinstance(y, np.ndarray) and y.dtype.kind in "USV":
            raise InputTypeError(_NON_NUMERIC_Y.format(owner="Ridge", dtype=y.dtype))
        rows, y = self._rows_for_fit(X, y, multi_output=True, y_numeric=True)
        targets = aligned(rows, _as_targets(y, rows.data, "Ridge"))  # moved once
        ndim = 1 if getattr(y, "ndim", 1) == 1 else 2
        coef = self._fit_pass(_centred_moments, _loo_errors, rows, [targets], alphas=alphas)
        if ndim == 1:
            self.coef_, self.intercept_ = coef[:, 0], float(self.intercept_[0])
        else:
            self.coef_ = coef.T
        return self

    def fit_moments(self, moments: LinearMoments) -> Ridge:
        """Fit from the moments of a training pass (``npt.fit(..., targets=t).moments``).

        No pass over the coordinates: the r x r solve only (GCV scores the alphas).
        """
        alphas = _check_params(self)
        _check_moments(moments)
        if moments.classes is not None:
            raise InputError(
                "these moments are of class labels; use RidgeClassifier.fit_moments, or fit "
                "with targets= for regression."
            )
        coef = self._fit_from(moments, alphas)
        if coef.shape[1] == 1:
            self.coef_, self.intercept_ = coef[:, 0], float(self.intercept_[0])
        else:
            self.coef_ = coef.T
        return self

    def predict(self, X: Any) -> Any:
        """``X @ coef_.T + intercept_``; numpy in -> numpy out, lazy in -> lazy out."""
        scores, info = self._scores(X)
        if np.ndim(self.coef_) == 1:
            scores = scores[:, 0]
        return _wrap(scores, info, "prediction", "target")

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags


class RidgeClassifier(ClassifierMixin, _RidgeBase):
    """One-vs-all ridge on ±1 targets on NPT coordinates = kernel ridge classification.

    Like scikit-learn's ``RidgeClassifier``: the targets are +1 for a row's
    class and -1 for the others (a single column, for ``classes_[1]``, with
    two classes); ``predict`` takes the largest decision value.

    Parameters
    ----------
    alpha : float or array-like of floats, default 1.0
        The ridge ``alpha ||w||^2`` (> 0), the same as kernel ridge's alpha.
        Several candidates (like scikit-learn's ``RidgeCV``): the one with
        the smallest ``criterion`` error is used (first one on ties).
    fit_intercept : bool, default True
        Fit an unpenalised intercept (the statistics are then centred). With
        ``False`` the model goes through the origin, like ``KernelRidge``.
    criterion : {"gcv", "loo"}, default "gcv"
        How candidate alphas are scored. ``"gcv"``: generalised
        cross-validation ``(RSS/n) / (1 - tr(H)/n)^2``, from the r x r Gram
        and ``||T||^2``, so it needs no pass beyond the fit's
        one. ``"loo"``: exact leave-one-out, which needs every row's leverage
        ``h_ii`` and hence a second pass; it is what scikit-learn's ``RidgeCV``
        (``cv=None``, whatever its ``gcv_mode``) computes, and reproduces its
        choice. GCV replaces each ``h_ii`` by their mean ``tr(H)/n``: close to
        leave-one-out when n >> r, but near full rank (r ~ n) the two may
        pick different alphas. Unused for a single alpha.
    chunk_size : int, default 8192
        Rows per chunk for numpy input; dask and xarray input keep their chunks.

    Attributes
    ----------
    coef_ : ndarray of shape (1, r) for two classes, else (n_classes, r)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    classes_ : ndarray
        The sorted class labels.
    alpha_, alpha_scores_, n_features_in_
        As in :class:`Ridge` (scores are on the ±1 targets).

    Notes
    -----
    One pass over the row chunks accumulates, in float64, the counts, column
    sums, ``Y^T Y`` (r x r), ``Y^T T`` (r x k) and ``||T||^2`` (k), summed in
    a tree; the driver factors the centred Gram: up to ``CHOLESKY_MAX_ALPHAS``
    alphas by a Cholesky factorisation each (``2 r^3 / 3`` flops with the
    trace GCV needs), more by one eigendecomposition (``~4 r^3``) after which
    each alpha costs O(r^2 k). Memory: each task holds one
    row chunk and its r x r + r x k sums; the driver holds r x r + r x k,
    whatever n. Y is never gathered. ``criterion="loo"`` reads the chunks a
    second time, each task holding its chunk rotated into the eigenbasis
    (chunk x r) and returning n_alphas x k error sums. Centring uses the sums
    (``Y^T Y - n m m^T``), accurate when the column means are not much
    larger than their spread (NPT coordinates are centred at training).
    ``predict`` and ``decision_function`` are lazy for dask and chunked
    xarray input and return the caller's container type.

    Lazy labels are read once beforehand to find the classes (labels only,
    not the coordinates).

    Examples
    --------
    >>> import numpy as np
    >>> import npt_dask as npt
    >>> from sklearn.datasets import make_moons
    >>> from npt_dask.methods import RidgeClassifier
    >>> X, y = make_moons(200, noise=0.1, random_state=0)
    >>> model = npt.fit(X, "rbf", gamma=2.0, n_components=None)
    >>> clf = RidgeClassifier(alpha=0.1).fit(model.train_coordinates(), y)
    >>> round(clf.score(model.train_coordinates(), y), 3)
    0.995
    >>> clf.predict(model.transform(np.array([[0.0, 1.0], [1.0, -0.5]])))
    array([0, 1])
    """

    def fit(self, X: Any, y: Any) -> RidgeClassifier:
        """Fit on coordinates X and class labels y (numpy, dask, DataArray), one pass."""
        alphas = _check_params(self)
        rows, y = self._rows_for_fit(X, y)
        if y is None:
            raise InputError("RidgeClassifier requires y to be passed, but the target y is None.")
        # labels read once (the labels only), in any namespace; each row's class position
        # moved to the rows' device once
        classes, index = class_index(as_labels(y, rows.data), name="y", owner="RidgeClassifier")
        self.classes_ = classes
        coef = self._fit_pass(
            _label_centred_moments, _loo_label_errors, rows, [aligned(rows, index)],
            len(classes), alphas=alphas,
        )  # fmt: skip
        self.coef_ = coef.T
        return self

    def fit_moments(self, moments: LinearMoments) -> RidgeClassifier:
        """Fit from the class moments of a training pass (``npt.fit(..., labels=y).moments``).

        No pass over the coordinates: the r x r solve only (GCV scores the alphas).
        Equal to :meth:`fit` on the coordinates of the same rows with the same labels.
        """
        alphas = _check_params(self)
        classes = _check_moments(moments).classes
        if classes is None:
            raise InputError(
                "these moments are of numeric targets; use Ridge.fit_moments, or fit with "
                "labels= for classification."
            )
        self.classes_ = classes
        self.coef_ = self._fit_from(moments.plus_minus_one(), alphas).T
        return self

    def decision_function(self, X: Any) -> Any:
        """Decision values: shape (m,) for two classes (> 0 means ``classes_[1]``), else (m, C)."""
        scores, info = self._scores(X)
        if scores.shape[1] == 1:
            return _wrap(scores[:, 0], info, "decision", "class")
        return _wrap(scores, info, "decision", "class")

    def predict(self, X: Any) -> Any:
        """Class labels (lazy for lazy input; on the coordinates' device for numeric
        classes)."""
        scores, info = self._scores(X)
        index = class_positions(scores)
        if info is None:
            return self.classes_.take(index)
        labels = take_labels(Rows.of(scores), index, self.classes_)
        return wrap_rows(labels, info, name="label")
