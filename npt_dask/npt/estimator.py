"""``NonlinearProjection``: the NPT model as a scikit-learn transformer.

A thin adapter: parameters are stored in ``__init__`` untouched, validated in
``fit`` (scikit-learn's wording), and the numerical work is
:func:`npt_dask.fit`; fitted values live in ``*_`` attributes. numpy in ->
numpy out, so it drops into ``Pipeline`` and ``GridSearchCV``; a dask array
or DataArray goes to the out-of-core fit unchanged and comes back lazy.

scikit-learn's ``KernelPCA`` semantics it follows: ``kernel="precomputed"``
(X is the kernel matrix) and callable kernels with ``kernel_params``;
scipy.sparse input; ``fit_inverse_transform`` / ``inverse_transform`` (kernel
ridge ``alpha``); ``remove_zero_eig`` (with ``n_components`` above the rank,
zero columns are kept unless it is True); a kernel matrix that is zero after
centring (constant data, a saturated kernel) gives zero coordinates with a
warning, not an error.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted, validate_data

from npt_dask.arrays.device import to_device
from npt_dask.arrays.host import to_host
from npt_dask.errors import (
    DegenerateKernelError,
    InputError,
    NegativeDefiniteKernelError,
    NegativeEigenvalueWarning,
    RankWarning,
    RefitWarning,
    warn,
)
from npt_dask.kernels import PRECOMPUTED
from npt_dask.npt.fitting import fit_params
from npt_dask.npt.growth import GROW_PARAMS, GrowingModel, is_full_rank
from npt_dask.npt.model import NPTModel
from npt_dask.npt.params import ESTIMATOR_PARAMS, FitParams, check_param, estimator_defaults, names
from npt_dask.npt.planning import max_rank
from npt_dask.npt.preimage import PreimageMap, fit_inverse_map
from npt_dask.params.constraints import check_table
from npt_dask.runtime.inputs import (
    align_rows,
    is_data_array,
    is_lazy,
    match_features,
    pad_columns,
    rows_like,
    sample_dim_of,
    zeros_like_rows,
)
from npt_dask.runtime.scheduler import compute

__all__ = ["NonlinearProjection"]

_D = estimator_defaults()  # the one parameter table's defaults, as plain values


def _lazy_features(X: Any) -> int:
    """The feature count of lazy input: a DataArray's along its non-sample dim."""
    if is_data_array(X) and X.ndim == 2:
        return int(X.sizes[next(d for d in X.dims if d != sample_dim_of(X))])
    return int(X.shape[1])


def _training_rows(landmarks: Any, n: int) -> int:
    """Rows the model is fitted on: n, or the landmarks' count."""
    if landmarks is None:
        return n
    if isinstance(landmarks, int | np.integer) and not isinstance(landmarks, bool):
        return min(int(landmarks), n)
    return len(np.asarray(landmarks))


def _refit_landmarks(landmarks: Any, start: Any) -> int | None:
    """The landmarks of a truncated model's refit on its rows and new ones: as many as the
    model has when the estimator fits on landmarks (indices given refer to the first X, so
    their count is kept), None for an exact model (every row seen is a training row)."""
    return None if landmarks is None else int(start.n_samples)


def _check_y_rows(X: Any, y: Any) -> None:
    """``y`` must be in X's row order when both label their rows: a pipeline hands ``y``
    on unchanged to its next step, which must not match rows by position wrongly."""
    if y is not None and align_rows(y, X, name="y") is not y:
        raise InputError(
            "X and y label their rows in different orders (the same labels); the next "
            "step of a pipeline would receive y unchanged and match it to these rows by "
            "position. Reorder y to X's rows first: y.loc[X.index] or "
            "y.sel(sample=X.sample)."
        )


_SPECTRUM = (
    "n_components_",
    "eigenvalues_",
    "eigenvectors_",
    "explained_variance_",
    "explained_variance_ratio_",
)  # the eigen-ordered attributes: a grown model's are set on first use
_EXTRA = {p.name: p for p in ESTIMATOR_PARAMS}
_FIT_NAMES = tuple(names())
_E = {p.name: p.default for p in ESTIMATOR_PARAMS}


class NonlinearProjection(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Explicit kernel-space coordinates by the Nonlinear Projection Trick.

    ``transform`` gives ``y = Lambda^{-1/2} U^T k(x)``: kernel PCA
    projections, and coordinates on which any linear method equals its kernel
    version. Kernel parameters are named as in ``sklearn.decomposition.KernelPCA``.

    Parameters
    ----------
    kernel : {"rbf", "laplacian", "polynomial", "poly", "sigmoid", "linear", "cosine", \
"precomputed"} or callable
        ``"precomputed"``: X is the kernel matrix (n x n to fit, m x n to
        transform; numpy, dask or zarr-backed, read block by block). A callable
        ``f(A, B, **kernel_params)`` returns the kernel block of two row
        blocks (a function of two single rows returning a number, scikit-learn's
        convention, works too, evaluated pair by pair); such a model cannot be
        saved.
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
        Krylov eigen-residual tolerance (None: 1e-8). KernelPCA's ``tol=0``
        ("automatic") is ``tol=None`` here.
    rtol : float, optional
        Drop eigenvalues below ``rtol * lambda_1``.
    chunk_size : int, default 4096
        Rows per kernel block.
    cache : {"auto", "recompute", "memory"}, default "auto"
        Keep kernel blocks between Krylov passes or recompute them.
    memory_budget : int or str, optional
        Bytes the fit may hold beyond the input rows: an int, or a size with units
        (``"40GB"``, ``"1.5GiB"``); above the machine's memory it warns.
    device_memory_budget : int or str, optional
        Bytes of device (GPU) memory the fit may hold when the rows live on a device
        (kernel blocks in flight and kept); units as ``memory_budget``; default a share
        of the device's free memory. Rows in host memory count against
        ``memory_budget`` alone (a value given for them warns).
    precision : {"float32", "float64"}, optional
        Kernel block precision; default the input's (float32 stays float32).
    random_state : int, RandomState instance, Generator or None
        Seeds the Krylov start block (and the landmark draw).
    kernel_params : dict, optional
        Parameters of a callable kernel; for a named kernel, its ``gamma``,
        ``degree`` or ``coef0``.
    alpha : float, default 1.0
        Ridge of the learned pre-image map (``fit_inverse_transform``).
    fit_inverse_transform : bool, default False
        Learn ``inverse_transform``: kernel ridge regression from the
        coordinates back to the rows, as ``KernelPCA`` (exact ``KernelRidge``
        within ``memory_budget``; see :mod:`npt_dask.ridge.inverse_map`). Not with
        a precomputed kernel or sparse X.
    remove_zero_eig : bool, default False
        With ``n_components`` above the rank of the centred kernel matrix, the
        missing components are zero columns (``KernelPCA``'s output) unless
        this is True, which drops them (with a ``RankWarning``).
    eigen_solver : {"auto", "dense", "arpack", "randomized", "krylov"}, optional
        KernelPCA's name of ``solver`` (``"arpack"`` and ``"randomized"`` mean
        the Krylov solver); it wins over ``solver`` unless both are set and differ
        (an error). None: ``solver`` decides.
    max_iter : int, optional
        KernelPCA's name: the most Krylov passes (``npt.fit``'s ``max_passes``;
        None: its default, 50).
    iterated_power : int or "auto", default "auto"
        Accepted for KernelPCA compatibility; no effect (the Krylov solver has
        no power iterations: it stops on ``tol``).
    landmarks : int or array of row indices, optional
        Fit on m rows of X (``npt.fit``'s landmark route: an int chooses them by
        ``landmark_method``, seeded by ``random_state``); every row is projected
        onto their span, so ``fit_transform`` is ``transform`` of X, and
        ``eigenvectors_`` has one row per landmark. ``n_components`` is clipped
        to what m landmarks give. GridSearchCV can tune it.
    landmark_method : {"uniform", "rpcholesky"}, default "uniform"
        How ``landmarks=m`` chooses its rows (see :func:`npt_dask.fit`).
    device : {"cpu", "gpu"}, optional
        Where the arithmetic runs (:func:`npt_dask.fit`'s ``device``): ``"gpu"`` moves the
        rows to the CUDA device through CuPy, once, for ``fit`` and for ``transform``
        (refused at ``fit`` with a :class:`~npt_dask.errors.DeviceError` naming the
        install where CuPy or a device is missing). numpy in gives numpy out either way;
        lazy input gives a lazy result whose chunks live on the device. None or
        ``"cpu"``: the rows stay where they are.
    copy_X : bool, default True
        Keep a copy of numpy training rows (``transform`` reads them); False
        keeps a reference, so changing X afterwards changes the model, as KernelPCA.
    n_jobs : int, optional
        Accepted for KernelPCA compatibility; no effect (threads are dask's
        scheduler's: use a ``distributed.Client`` or ``dask.config``).

    Attributes
    ----------
    model_ : NPTModel or None
        The fitted model (save it with ``model_.save(path)``); None when the
        centred kernel matrix is zero (constant data, a saturated kernel):
        every coordinate is then 0, with a ``RankWarning``.
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
        Output columns: the effective rank for ``n_components=None``, else
        ``min(n_components, n_samples)`` (zero columns past the rank) unless
        ``remove_zero_eig``.
    dual_coef_ : ndarray of shape (n_samples, n_features) or None
        The pre-image map's dual coefficients (``fit_inverse_transform``;
        None for the linear kernel, whose map is solved in primal form).
    inverse_map_ : npt_dask.ridge.inverse_map.InverseMap
        The fitted pre-image map (``fit_inverse_transform``).
    n_iter_ : int
        Passes over the kernel matrix the solver made (1 for the dense solver).
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
        memory_budget: int | str | None = _D["memory_budget"],
        device_memory_budget: int | str | None = _D["device_memory_budget"],
        precision: str | None = _D["precision"],
        random_state: int | np.random.RandomState | np.random.Generator | None = _D["random_state"],
        kernel_params: dict | None = _D["kernel_params"],
        alpha: float = _E["alpha"],
        fit_inverse_transform: bool = _E["fit_inverse_transform"],
        remove_zero_eig: bool = _E["remove_zero_eig"],
        eigen_solver: str | None = _E["eigen_solver"],
        max_iter: int | None = _E["max_iter"],
        iterated_power: int | str = _E["iterated_power"],
        copy_X: bool = _E["copy_X"],
        n_jobs: int | None = _E["n_jobs"],
        landmarks: int | Any | None = _D["landmarks"],
        landmark_method: str = _D["landmark_method"],
        device: str | None = _D["device"],
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
        self.device_memory_budget = device_memory_budget
        self.precision = precision
        self.random_state = random_state
        self.kernel_params = kernel_params
        self.alpha = alpha
        self.fit_inverse_transform = fit_inverse_transform
        self.remove_zero_eig = remove_zero_eig
        self.eigen_solver = eigen_solver
        self.max_iter = max_iter
        self.iterated_power = iterated_power
        self.copy_X = copy_X
        self.n_jobs = n_jobs
        self.landmarks = landmarks
        self.landmark_method = landmark_method
        self.device = device

    def _fit_params(self) -> FitParams:
        """The parameters, validated by the fit's table (as npt.fit):
        :mod:`npt_dask.npt.params`.

        The solver's finer options (``block_size``, ``max_basis``, ``basis``,
        ``max_passes``, ``on_negative``), ``start`` and ``progress`` keep the table's
        defaults here; :func:`npt_dask.fit` takes them.
        ``alpha``, ``fit_inverse_transform`` and ``remove_zero_eig`` are checked
        by the same table (:data:`npt_dask.npt.params.ESTIMATOR_PARAMS`).
        """
        given = self.get_params(deep=False)
        for name in _EXTRA.keys() & given.keys():
            check_param(name, given[name])
        # only the table's names: a subclass may add parameters of its own
        values = {name: given[name] for name in _FIT_NAMES if name in given}
        solver = given.get("eigen_solver")
        if solver is not None:
            if values.get("solver", "auto") not in ("auto", solver):
                raise InputError(
                    f"solver={values['solver']!r} and eigen_solver={solver!r} disagree; "
                    "eigen_solver is KernelPCA's name of solver: set only one of them."
                )
            values["solver"] = solver
        if given.get("max_iter") is not None:
            values["max_passes"] = given["max_iter"]
        return FitParams(**values)

    def _validate(self, X: Any, *, reset: bool) -> Any:
        precomputed = self.kernel == PRECOMPUTED
        if is_lazy(X):
            if reset:
                self.n_features_in_ = _lazy_features(X)
                self.__dict__.pop("feature_names_in_", None)
                return X
            X = match_features(X, None, n_features=self.n_features_in_, name="X")
            if _lazy_features(X) != self.n_features_in_:
                raise InputError(
                    f"X has {_lazy_features(X)} features, but NonlinearProjection is "
                    f"expecting {self.n_features_in_} features as input."
                )
            return X
        return validate_data(
            self,
            X,
            dtype=[np.float64, np.float32],
            accept_sparse=False if precomputed else ("csr", "csc"),
            ensure_min_samples=2 if reset else 1,
            reset=reset,
        )

    def fit(self, X: Any, y: Any = None) -> NonlinearProjection:
        """Fit the model on ``X`` (n_samples, n_features); ``y`` is not used.

        With ``kernel="precomputed"``, X is the (n, n) kernel matrix of the
        training rows (numpy, dask or zarr-backed: read block by block). A ``y``
        that labels its rows (a pandas index, a DataArray's sample coordinate)
        must list X's rows in X's order, since a pipeline passes it on unchanged.
        """
        _check_y_rows(X, y)
        return self._fit(X, start=None)

    def _fit(self, X: Any, *, start: NPTModel | None) -> NonlinearProjection:
        params = self._fit_params()
        if start is not None:  # partial_fit of a truncated model: a warm-started refit
            params = params.replace(  # on the model's rows and X, with the model's own kernel
                start=start, kernel=start.kernel, gamma=None, degree=None, coef0=None,
                kernel_params=None, landmarks=_refit_landmarks(self.landmarks, start),
            )  # fmt: skip
        if self.fit_inverse_transform and self.kernel == PRECOMPUTED:
            raise InputError(
                "Cannot fit_inverse_transform with a precomputed kernel: the pre-image map "
                "needs the kernel on the coordinates. Use a named or callable kernel."
            )
        given = X
        X = self._validate(X, reset=True)
        if self.copy_X and X is given and hasattr(X, "copy") and not is_lazy(X):
            X = X.copy()  # the model reads its training rows at transform
        for name in ("inverse_map_", "dual_coef_"):
            self.__dict__.pop(name, None)
        n = _training_rows(params.landmarks, int(X.shape[0]))
        if params.n_components is not None:  # KernelPCA: min(n, n_components) columns
            most = max_rank(n, params.center)  # the plan refuses more; KernelPCA clips
            params = params.replace(n_components=max(1, min(params.n_components, most)))
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model = fit_params(X, params)
        except NegativeDefiniteKernelError:
            raise  # -K: refused, as npt.fit and KernelPCA refuse it
        except DegenerateKernelError as exc:
            return self._fit_degenerate(X, exc)
        self._replay(caught, model)
        self.model_: NPTModel | GrowingModel | None = model
        self.gamma_ = getattr(model.kernel, "gamma", None)  # a named kernel's, resolved
        self.n_iter_ = max(1, int(model.diagnostics.passes))
        self._set_spectrum(model)
        if self.fit_inverse_transform:
            self.inverse_map_ = fit_inverse_map(
                model.eigenvectors * np.sqrt(model.eigenvalues),
                model.x_train,
                model.kernel,
                float(self.alpha),
                memory_budget=params.memory_budget,
            )
            self.dual_coef_ = self.inverse_map_.dual_coef
        return self

    def _set_spectrum(self, model: NPTModel | GrowingModel) -> None:
        """The eigen-ordered attributes (a grown model rotates here, once)."""
        width = self._width(model.n_components, model.n_samples)
        self.n_components_ = width
        self.eigenvalues_ = pad_columns(model.eigenvalues[None, :], width)[0]
        self.eigenvectors_ = pad_columns(model.eigenvectors, width)
        self.explained_variance_ = pad_columns(model.explained_variance()[None, :], width)[0]
        total = model.total_variance()
        self.explained_variance_ratio_ = self.eigenvalues_ / total

    def partial_fit(
        self,
        X: Any,
        y: Any = None,
        *,
        residual_tol: float | None = None,
        max_landmarks: int | None = None,
    ) -> NonlinearProjection:
        """Grow the fitted model by the rows of ``X`` (the first call fits); ``y`` is ignored.

        A full-rank model (``n_components=None``) grows exactly: rows with more
        than ``residual_tol`` of ``kappa(x, x)`` outside the model's span join
        its training rows (see :mod:`npt_dask.npt.growth`), up to ``max_landmarks``;
        ``model_`` becomes the grown model, equal to a fresh fit on its training
        rows. A batch costs no ``n^3`` step: the eigen-ordered attributes
        (``eigenvalues_``, ``n_components_``, ...) and ``transform`` rotate
        once, on first use.

        A truncated model (``n_components`` set) cannot grow exactly (its
        discarded spectrum is not kept): each call refits on every row seen so
        far -- the model's training rows and ``X`` -- warm-started from the
        current model and with its kernel (``gamma`` is not resolved again), and
        says so with a :class:`~npt_dask.errors.RefitWarning`, since its cost
        grows with the rows seen. With ``landmarks`` set, the model's training
        rows are its m landmarks only (the other rows it saw are not kept): the
        refit is a landmark fit on those m rows and ``X``, choosing m landmarks
        among them, so its cost stays bounded. ``residual_tol`` and
        ``max_landmarks`` do not apply to it. Not with ``fit_inverse_transform``.
        """
        check_table(GROW_PARAMS, {"residual_tol": residual_tol, "max_landmarks": max_landmarks})
        if "model_" not in self.__dict__:
            return self.fit(X, y)
        if self.model_ is None or self.fit_inverse_transform:
            raise InputError(
                "partial_fit grows a full-rank model with training rows and no pre-image "
                "map; this estimator has "
                + ("no model (its kernel matrix was zero)" if self.model_ is None else
                   "fit_inverse_transform=True, which growth would leave stale")
                + ". Refit with fit() on all the rows instead."
            )  # fmt: skip
        X = self._validate(X, reset=False)
        model = self.model_
        if isinstance(model, NPTModel) and not model.kernel.precomputed and not is_full_rank(model):
            return self._refit_union(X, model)
        self.model_ = model.partial_fit(X, residual_tol=residual_tol, max_landmarks=max_landmarks)
        for name in _SPECTRUM:
            self.__dict__.pop(name, None)  # recomputed from the grown model on first use
        return self

    def _refit_union(self, X: Any, model: NPTModel) -> NonlinearProjection:
        """A truncated model's growth: a fit on its training rows and X, warm-started
        from it (``start=``, its kernel), recorded in ``diagnostics.landmarks["refit"]``."""
        old = model.x_train
        new = da.from_array(X) if not isinstance(X, da.Array) else X
        if getattr(self, "device", None) == "gpu":  # beside the model's rows, on the device
            new = to_device(new, "gpu", budget=0)
        union = da.concatenate([old, new.astype(old.dtype).rechunk({1: -1})])
        b, total = int(new.shape[0]), int(union.shape[0])
        rows = (
            f"every row seen so far ({model.n_samples} training rows and {b} new, {total} in all)"
            if self.landmarks is None
            else f"the model's {model.n_samples} landmark rows and the {b} new rows ({total} "
            "in all; a landmark model keeps only its landmark rows, not every row it has "
            f"seen), choosing {model.n_samples} landmarks among them"
        )
        warn(
            f"partial_fit of a truncated model (n_components={self.n_components}) cannot "
            f"grow it exactly: it refits on {rows}, warm-started from the current model, "
            f"with its kernel ({model.kernel.describe()}). Only a full-rank model "
            "(n_components=None) grows without a refit.",
            RefitWarning,
        )
        self._fit(union, start=model)
        fitted = self.model_
        assert isinstance(fitted, NPTModel)
        record = {"refit": {"start": model.identity, "rows": int(union.shape[0])}}
        landmarks = {**dict(fitted.diagnostics.landmarks), **record}
        diagnostics = dataclasses.replace(fitted.diagnostics, landmarks=landmarks)
        self.model_ = dataclasses.replace(fitted, diagnostics=diagnostics)
        return self

    def __getattr__(self, name: str) -> Any:
        grown = self.__dict__.get("model_")
        if name in _SPECTRUM and isinstance(grown, GrowingModel):
            self._set_spectrum(grown)
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _replay(self, caught: list[warnings.WarningMessage], model: NPTModel) -> None:
        """Re-issue the fit's warnings, as KernelPCA would see them.

        With ``n_components`` above the rank the missing columns are kept as
        zeros (no RankWarning, unless ``remove_zero_eig`` drops them); a request
        that reaches past the positive eigenvalues of a kernel matrix with
        significant negative ones is an error, as in KernelPCA.
        """
        negative = [w for w in caught if issubclass(w.category, NegativeEigenvalueWarning)]
        wanted = self._width(model.n_components, model.n_samples)
        low = model.diagnostics.min_eigenvalue
        # KernelPCA's randomized solver takes the largest eigenvalues in modulus: it
        # refuses when a negative one is among them, and so does its alias here
        by_modulus = (
            getattr(self, "eigen_solver", None) == "randomized"
            and low is not None
            and abs(low) > float(model.eigenvalues[-1])
        )
        if (
            negative
            and self.n_components is not None
            and (wanted > model.n_components or by_modulus)
        ):
            lam1 = float(model.eigenvalues[0])
            why = (
                f"eigen_solver='randomized' takes the {self.n_components} largest in modulus, "
                "a negative one among them. Use eigen_solver='arpack' (the same Krylov solver "
                "here, largest positive first) or a PSD kernel."
                if wanted <= model.n_components
                else f"n_components={self.n_components} reaches past its {model.n_components} "
                f"positive eigenvalues. Ask for at most {model.n_components} components or "
                "use a PSD kernel."
            )
            raise InputError(
                f"There are significant negative eigenvalues ({low:.4g}, {low / lam1:.3g} of "
                f"the largest): the kernel matrix is not positive semi-definite, and {why}"
            )
        for w in caught:
            if issubclass(w.category, RankWarning) and not self.remove_zero_eig:
                continue
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    def _width(self, kept: int, n: int) -> int:
        """Output columns: the kept pairs, or ``n_components`` with zero columns (KernelPCA)."""
        if self.remove_zero_eig or self.n_components is None:
            return kept
        return max(kept, min(int(self.n_components), n))

    def _fit_degenerate(self, X: Any, exc: Exception) -> NonlinearProjection:
        """A kernel matrix that is zero after centring: zero coordinates, with a warning."""
        n = int(X.shape[0])
        width = self._width(0, n)
        warn(
            f"{exc} Every coordinate is 0 ({width} zero column(s), as scikit-learn's "
            "KernelPCA gives).",
            RankWarning,
        )
        self.model_ = None
        self.gamma_ = self.gamma
        self.n_iter_ = 1
        self.n_components_ = width
        self.eigenvalues_ = np.zeros(width)
        self.eigenvectors_ = np.zeros((n, width))
        self.explained_variance_ = np.zeros(width)
        self.explained_variance_ratio_ = np.zeros(width)
        precision = getattr(self, "precision", None)  # a subclass may not take it
        dtype = np.dtype(precision) if precision else np.dtype(X.dtype)
        self._degenerate_dtype = dtype if dtype == np.float32 else np.dtype(np.float64)
        return self

    def fit_transform(self, X: Any, y: Any = None, **params: Any) -> Any:
        """Fit and return the training coordinates (Theorem 2: equal to ``transform(X)``).

        No second pass over the kernel: the coordinates are ``sqrt(lambda) U``.
        Lazy input (dask, chunked DataArray) gets a lazy result, as ``transform``.
        """
        self.fit(X, y)
        model = self.model_
        eager = not is_lazy(X)  # numpy, pandas, sparse: numpy out (scikit-learn's rule)
        if model is None:
            if eager:
                return np.zeros((int(X.shape[0]), self.n_components_), self._degenerate_dtype)
            return zeros_like_rows(X, self.n_components_, self._degenerate_dtype)
        if self.landmarks is not None:  # the model's rows are the landmarks: project all
            return self.transform(X)
        coords = pad_columns(np.asarray(model.train_coordinates()), self.n_components_)
        coords = coords.astype(model.precision, copy=False)
        return coords if eager else rows_like(X, coords, name="coordinates")

    def transform(self, X: Any) -> Any:
        """NPT coordinates of the rows of X; numpy in -> numpy out, lazy in -> lazy out.

        With ``kernel="precomputed"``, X is the (m, n) kernel matrix of the new
        rows against the training rows, read chunk by chunk.
        """
        check_is_fitted(self, "model_")
        X = self._validate(X, reset=False)
        if self.model_ is None:
            if not is_lazy(X):
                return np.zeros((int(X.shape[0]), self.n_components_), self._degenerate_dtype)
            return zeros_like_rows(X, self.n_components_, self._degenerate_dtype)
        if getattr(self, "device", None) != "gpu":
            return self.model_.transform(X, columns=self.n_components_)
        y = self.model_.transform(to_device(X, "gpu"), columns=self.n_components_)
        return y if is_lazy(X) else np.asarray(to_host(compute(y)[0]))  # numpy in: numpy out

    def inverse_transform(self, X: Any) -> Any:
        """Rows in input space from coordinates: scikit-learn's learned pre-image.

        Kernel ridge regression of the training rows on their coordinates
        (``alpha``, the model's kernel on the coordinates), as
        ``KernelPCA.inverse_transform``; fitted only with
        ``fit_inverse_transform=True``. Streams over the training rows (see
        :mod:`npt_dask.ridge.inverse_map`; for the RBF kernel,
        :func:`npt_dask.npt.preimage.rbf_preimage` is Mika's fixed-point pre-image).
        """
        if not self.fit_inverse_transform:
            raise NotFittedError(
                "The fit_inverse_transform parameter was not set to True when instantiating "
                "and hence the inverse transform is not available."
            )
        check_is_fitted(self, "model_")
        if self.model_ is None:
            raise InputError(
                "The kernel matrix is zero after centring (constant data or a saturated "
                "kernel): the coordinates carry no information and there is no pre-image map."
            )
        inverse: PreimageMap = self.inverse_map_
        r = self.model_.n_components
        if not is_lazy(X):
            X = np.asarray(X, dtype=np.float64)
            if X.ndim != 2 or X.shape[1] not in (r, self.n_components_):
                raise InputError(
                    f"inverse_transform takes coordinates with {self.n_components_} columns; "
                    f"got shape {X.shape}."
                )
        return inverse.predict(X[:, :r])

    @property
    def _n_features_out(self) -> int:
        return self.n_components_

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        precision = getattr(self, "precision", None)  # a subclass may not take it
        # precision fixes the output dtype; None keeps the input's (float32 stays float32)
        tags.transformer_tags.preserves_dtype = (
            [str(precision)] if precision in ("float32", "float64")
            else ["float64", "float32"]
        )  # fmt: skip
        tags.input_tags.sparse = self.kernel != PRECOMPUTED
        tags.input_tags.pairwise = self.kernel == PRECOMPUTED
        return tags
