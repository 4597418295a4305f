"""``NonlinearProjection``: the NPT model as a scikit-learn transformer.

A thin adapter: parameters are stored in ``__init__`` untouched, validated in
``fit`` (scikit-learn's wording), and the numerical work is
:func:`npt_dask.fit`; fitted values live in ``*_`` attributes. numpy in ->
numpy out, so it drops into ``Pipeline`` and ``GridSearchCV``; a dask array
or DataArray goes to the out-of-core fit unchanged and comes back lazy.
"""

from __future__ import annotations

import numbers
from typing import Any

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from npt_dask.errors import InputError, InputTypeError
from npt_dask.fitting import fit
from npt_dask.kernels import KERNELS
from npt_dask.methods.kpca import explained_variance, explained_variance_ratio
from npt_dask.model import NPTModel

__all__ = ["NonlinearProjection"]

_KERNELS = (*sorted(KERNELS), "poly")


def _is_lazy(X: Any) -> bool:
    return isinstance(X, da.Array) or (type(X).__name__ == "DataArray" and hasattr(X, "dims"))


def _fail(name: str, expected: str, value: Any, error: type = InputError) -> None:
    raise error(
        f"The '{name}' parameter of NonlinearProjection must be {expected}. Got {value!r} instead."
    )


def _real(name: str, value: Any, *, low: float, inclusive: bool, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    interval = f"{'[' if inclusive else '('}{low}, inf)"
    expected = f"a float in the range {interval}" + (" or None" if allow_none else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        _fail(name, expected, value, InputTypeError)
    if not np.isfinite(value) or value < low or (value == low and not inclusive):
        _fail(name, expected, value)


def _integer(name: str, value: Any, *, low: int, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    expected = f"an int in the range [{low}, inf)" + (" or None" if allow_none else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        _fail(name, expected, value, InputTypeError)
    if value < low:
        _fail(name, expected, value)


def _choice(name: str, value: Any, options: tuple[Any, ...]) -> None:
    if value not in options:
        _fail(name, f"a str among {set(options)}", value)


class NonlinearProjection(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Explicit kernel-space coordinates by the Nonlinear Projection Trick.

    ``transform`` gives ``y = Lambda^{-1/2} U^T k(x)``: kernel PCA
    projections, and coordinates on which any linear method equals its kernel
    version. Kernel parameters are named as in ``sklearn.decomposition.KernelPCA``.

    Parameters
    ----------
    kernel : {"rbf", "laplacian", "polynomial", "poly", "sigmoid", "linear", "cosine"}
    gamma : float, optional
        Kernel coefficient (rbf, laplacian, polynomial, sigmoid); default ``1 / n_features``.
    degree : float, default 3
        Polynomial degree.
    coef0 : float, default 1
        Independent term of the polynomial and sigmoid kernels.
    n_components : int, optional
        Dimension r. ``None`` keeps the full effective rank (dense solver).
    center : bool, default True
        Centre in feature space (kernel PCA); ``False``: uncentred exact feature map.
    solver : {"auto", "dense", "krylov"}, default "auto"
    tol : float, optional
        Krylov eigen-residual tolerance (default 1e-8).
    rtol : float, optional
        Drop eigenvalues below ``rtol * lambda_1``.
    chunk_size : int, default 4096
        Rows per kernel block.
    cache : {"auto", "recompute", "memory"}, default "auto"
        Keep kernel blocks between Krylov passes or recompute them.
    memory_budget : int, optional
        Bytes the fit may hold beyond the input rows.
    precision : {"float32", "float64"}, optional
        Kernel block precision; default the input's (float32 stays float32).
    random_state : int, Generator or None
        Seeds the Krylov start block.

    Attributes
    ----------
    model_ : NPTModel
        The fitted model (save it with ``model_.save(path)``).
    eigenvalues_ : ndarray of shape (n_components_,)
        Eigenvalues of the centred kernel matrix, largest first (as
        ``KernelPCA.eigenvalues_``).
    eigenvectors_ : ndarray of shape (n_samples, n_components_)
    explained_variance_ : ndarray of shape (n_components_,)
        ``eigenvalues_ / (n - 1)``: the variance of each coordinate.
    explained_variance_ratio_ : ndarray of shape (n_components_,)
        ``eigenvalues_ / trace(K)``: share of the total feature-space variance.
    n_components_ : int
        Dimension actually kept (``None`` resolves to the effective rank).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when fitted on data with string column names.

    See Also
    --------
    npt_dask.fit : the functional interface, with all solver options.

    Examples
    --------
    >>> import numpy as np
    >>> from npt_dask import NonlinearProjection
    >>> X = np.random.default_rng(0).normal(size=(100, 4))
    >>> npt_ = NonlinearProjection(kernel="rbf", gamma=0.25, n_components=5)
    >>> npt_.fit_transform(X).shape
    (100, 5)
    >>> np.allclose(npt_.transform(X[:3]), npt_.fit_transform(X)[:3])
    True
    """

    def __init__(
        self,
        kernel: str = "rbf",
        *,
        gamma: float | None = None,
        degree: float = 3,
        coef0: float = 1,
        n_components: int | None = None,
        center: bool = True,
        solver: str = "auto",
        tol: float | None = None,
        rtol: float | None = None,
        chunk_size: int = 4096,
        cache: str = "auto",
        memory_budget: int | None = None,
        precision: str | None = None,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.n_components = n_components
        self.center = center
        self.solver = solver
        self.tol = tol
        self.rtol = rtol
        self.chunk_size = chunk_size
        self.cache = cache
        self.memory_budget = memory_budget
        self.precision = precision
        self.random_state = random_state

    def _validate_params(self) -> None:
        _choice("kernel", self.kernel, _KERNELS)
        _real("gamma", self.gamma, low=0.0, inclusive=False, allow_none=True)
        _real("degree", self.degree, low=1.0, inclusive=True, allow_none=False)
        _real("coef0", self.coef0, low=-np.inf, inclusive=True, allow_none=False)
        _integer("n_components", self.n_components, low=1, allow_none=True)
        _choice("center", self.center, (True, False))
        _choice("solver", self.solver, ("auto", "dense", "krylov"))
        _real("tol", self.tol, low=0.0, inclusive=False, allow_none=True)
        _real("rtol", self.rtol, low=0.0, inclusive=True, allow_none=True)
        _integer("chunk_size", self.chunk_size, low=1, allow_none=False)
        _choice("cache", self.cache, ("auto", "recompute", "memory"))
        _integer("memory_budget", self.memory_budget, low=1, allow_none=True)
        _choice("precision", self.precision, (None, "float32", "float64"))

    def _fit_model(self, X: Any) -> NPTModel:
        return fit(
            X,
            self.kernel,
            gamma=self.gamma,
            degree=self.degree,
            coef0=self.coef0,
            n_components=self.n_components,
            center=self.center,
            solver=self.solver,
            tol=self.tol,
            rtol=self.rtol,
            chunk_size=self.chunk_size,
            cache=self.cache,
            memory_budget=self.memory_budget,
            precision=self.precision,
            random_state=self.random_state,
        )

    def fit(self, X: Any, y: Any = None) -> NonlinearProjection:
        """Fit the model on ``X`` (n_samples, n_features); ``y`` is ignored."""
        self._validate_params()
        if _is_lazy(X):
            self.n_features_in_ = int(X.shape[1])
            self.__dict__.pop("feature_names_in_", None)
        else:
            X = validate_data(self, X, dtype=[np.float64, np.float32], ensure_min_samples=2)
        model = self._fit_model(X)
        self.model_ = model
        self.eigenvalues_ = model.eigenvalues
        self.eigenvectors_ = model.eigenvectors
        self.n_components_ = model.n_components
        self.explained_variance_ = explained_variance(model)
        self.explained_variance_ratio_ = explained_variance_ratio(model)
        return self

    def fit_transform(self, X: Any, y: Any = None, **params: Any) -> Any:
        """Fit and return the training coordinates (Theorem 2: equal to ``transform(X)``).

        No second pass over the kernel: the coordinates are ``sqrt(lambda) U``.
        Lazy input (dask, chunked DataArray) gets a lazy result, as ``transform``.
        """
        self.fit(X, y)
        model = self.model_
        coords = model.train_coordinates()
        if not _is_lazy(X):
            return coords.astype(model.precision, copy=False)
        lazy = da.from_array(
            np.asarray(coords, dtype=model.precision), chunks=(model.x_train.chunks[0], -1)
        )
        if isinstance(X, da.Array):
            return lazy
        return coords.copy(data=lazy) if X.chunks is not None else coords.astype(model.precision)

    def transform(self, X: Any) -> Any:
        """NPT coordinates of the rows of X; numpy in -> numpy out, lazy in -> lazy out."""
        check_is_fitted(self, "model_")
        if not _is_lazy(X):
            X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        elif X.shape[1] != self.n_features_in_:
            raise InputError(
                f"X has {X.shape[1]} features, but NonlinearProjection is expecting "
                f"{self.n_features_in_} features as input."
            )
        return self.model_.transform(X)

    @property
    def _n_features_out(self) -> int:
        return self.n_components_

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
