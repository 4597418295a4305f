"""``NonlinearProjection``: the NPT model as a scikit-learn transformer.

A thin adapter: parameters are stored in ``__init__`` untouched, validated in
``fit`` (scikit-learn's wording), and the numerical work is
:func:`npt_dask.fit`; fitted values live in ``*_`` attributes. numpy in ->
numpy out, so it drops into ``Pipeline`` and ``GridSearchCV``; a dask array
or DataArray goes to the out-of-core fit unchanged and comes back lazy.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from npt_dask.errors import InputError
from npt_dask.fitting import fit_params
from npt_dask.params import FitParams, fit_defaults

__all__ = ["NonlinearProjection"]

_D = fit_defaults()  # defaults from the one parameter table, as npt.fit's


def _is_lazy(X: Any) -> bool:
    return isinstance(X, da.Array) or (type(X).__name__ == "DataArray" and hasattr(X, "dims"))


class NonlinearProjection(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Explicit kernel-space coordinates by the Nonlinear Projection Trick.

    ``transform`` gives ``y = Lambda^{-1/2} U^T k(x)``: kernel PCA
    projections, and coordinates on which any linear method equals its kernel
    version. Kernel parameters are named as in ``sklearn.decomposition.KernelPCA``.

    Parameters
    ----------
    kernel : {"rbf", "laplacian", "polynomial", "poly", "sigmoid", "linear", "cosine"}
    gamma : float, "scale" or None
        Kernel coefficient (rbf, laplacian, polynomial, sigmoid); ``"scale"`` is
        ``1 / (n_features * X.var())`` (scikit-learn's SVC), ``None`` ``1 / n_features``.
    degree : float, optional
        Polynomial degree (None: 3).
    coef0 : float, optional
        Independent term of the polynomial and sigmoid kernels (None: 1).
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
    gamma_ : float or None
        The kernel coefficient used (``"scale"`` and ``None`` resolved from the data).
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
        kernel: str = _D["kernel"],
        *,
        gamma: float | str | None = _D["gamma"],
        degree: float | None = _D["degree"],
        coef0: float | None = _D["coef0"],
        n_components: int | None = _D["n_components"],
        center: bool = _D["center"],
        solver: str = _D["solver"],
        tol: float | None = _D["tol"],
        rtol: float | None = _D["rtol"],
        chunk_size: int | None = _D["chunk_size"],
        cache: str = _D["cache"],
        memory_budget: int | None = _D["memory_budget"],
        precision: str | None = _D["precision"],
        random_state: int | np.random.Generator | None = _D["random_state"],
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

    def _fit_params(self) -> FitParams:
        """The parameters, validated by the one table :mod:`npt_dask.params` (as npt.fit).

        The solver's finer options (``block_size``, ``max_basis``, ``max_passes``,
        ``on_negative``) keep the table's defaults here; :func:`npt_dask.fit` takes them.
        """
        return FitParams(**self.get_params(deep=False))

    def fit(self, X: Any, y: Any = None) -> NonlinearProjection:
        """Fit the model on ``X`` (n_samples, n_features); ``y`` is ignored."""
        params = self._fit_params()
        if _is_lazy(X):
            self.n_features_in_ = int(X.shape[1])
            self.__dict__.pop("feature_names_in_", None)
        else:
            X = validate_data(self, X, dtype=[np.float64, np.float32], ensure_min_samples=2)
        model = fit_params(X, params)
        self.model_ = model
        self.gamma_ = model.kernel.gamma
        self.eigenvalues_ = model.eigenvalues
        self.eigenvectors_ = model.eigenvectors
        self.n_components_ = model.n_components
        self.explained_variance_ = model.explained_variance()
        self.explained_variance_ratio_ = model.explained_variance_ratio()
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
