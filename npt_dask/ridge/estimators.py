"""Kernel ridge regression and classification at any n and m: ``KernelRidge``,
``KernelRidgeClassifier``.

scikit-learn's ``KernelRidge`` (same parameters, defaults and meaning of
``alpha``; no intercept) that scales: with ``landmarks=None`` every row is a
centre and the estimator equals ``sklearn.kernel_ridge.KernelRidge``; with m
landmarks it solves Nyström kernel ridge

    (K_nm^T W K_nm + alpha K_mm) c = K_nm^T W Y,      f(z) = kappa(z, L) c,

which is ridge with the same alpha on the full-rank landmark NPT coordinates
(``Y_L = K_nm U Lambda^-1/2``, ``c = U Lambda^-1/2 w``) without forming them.
The fit plan (:func:`npt_dask.ridge.planning.plan_ridge`, in ``plan_``) takes
the direct route (one pass for the moments, a Cholesky factorisation) or
preconditioned conjugate gradient (one pass per iteration), from counted flops
and memory, and says why; the routes are :mod:`npt_dask.ridge.solvers`.

Input is numpy, scipy.sparse, dask or xarray (a DataArray's ``sample`` dim,
else its first); ``kernel="precomputed"`` takes the kernel matrix (n x n to
fit, m x n to predict, read block by block). numpy in, numpy out; lazy in,
lazy out.
"""

from __future__ import annotations

import dataclasses
import itertools
import numbers
import os
from pathlib import Path
from typing import Any, Literal, get_args

import dask.array as da
import numpy as np
import scipy.linalg
import scipy.sparse
from sklearn.base import BaseEstimator, ClassifierMixin, MultiOutputMixin, RegressorMixin
from sklearn.preprocessing import LabelBinarizer
from sklearn.utils.validation import check_is_fitted, validate_data

from npt_dask.engine.budget import resolve_device_budget, resolve_memory_budget
from npt_dask.engine.consumers import Apply
from npt_dask.engine.row_pass import Centres, map_rows
from npt_dask.engine.scale import warn_kernel_scale
from npt_dask.errors import (
    InputError,
    InputTypeError,
    RidgeWarning,
    StoreIntegrityError,
    StoreWarning,
    warn,
)
from npt_dask.kernels import PRECOMPUTED, KernelSpec, make_kernel
from npt_dask.linalg.preconditioners import FALKON_JITTER, factor_with_jitter
from npt_dask.npt.landmarks import certificate, check_landmarks, select_landmarks
from npt_dask.npt.training import class_labels
from npt_dask.ridge.checkpoint import Checkpoint
from npt_dask.ridge.magnitudes import check_magnitudes
from npt_dask.ridge.planning import RidgePlan, plan_ridge, solve_ridge
from npt_dask.ridge.search import (
    GAMMA_FACTORS,
    SEARCH_PARAMS,
    r2_score,
    search,
    target_score,
)
from npt_dask.ridge.solvers import RidgeProblem, centre_kernel, centre_rows
from npt_dask.runtime.fit_params import DEFAULT_CHUNK_SIZE, fit_param
from npt_dask.runtime.inputs import (
    InputInfo,
    align_rows,
    as_kernel_matrix,
    as_row_chunked,
    check_known_chunks,
    data_variance,
    feature_names,
    is_data_array,
    is_lazy,
    match_features,
    wrap_rows,
)
from npt_dask.runtime.params import (
    INT,
    NONE,
    REAL,
    ArrayOf,
    InstanceOf,
    Interval,
    Options,
    Param,
    check_estimator,
    number_or,
    table_defaults,
)
from npt_dask.runtime.progress import progress_label
from npt_dask.runtime.scheduler import compute, persist_blocks, task_threads, worker_processes
from npt_dask.storage import ridge_store

__all__ = [
    "CERTIFICATE_ROWS",
    "CHECKPOINT_PARAM",
    "RIDGE_CV_PARAMS",
    "RIDGE_PARAMS",
    "KernelRidge",
    "KernelRidgeCV",
    "KernelRidgeClassifier",
    "KernelRidgeClassifierCV",
    "RidgeSolver",
    "load_ridge",
]

RidgeSolver = Literal["auto", "direct", "cg"]
"""Kernel ridge routes: moments and a Cholesky factorisation, preconditioned conjugate
gradient, or (auto) the plan's choice (:func:`npt_dask.ridge.planning.plan_ridge`)."""

RIDGE_PARAMS: tuple[Param, ...] = (
    Param(
        "alpha",
        (Interval(REAL, 0, None, "left"), ArrayOf(Interval(REAL, 0, None, "left"))),
        1.0,
        "ridge alpha >= 0 (scikit-learn's KernelRidge meaning), or one per target",
        parse=number_or(float),
    ),
    dataclasses.replace(fit_param("kernel"), default="linear"),
    fit_param("gamma"),
    dataclasses.replace(fit_param("degree"), default=3),
    dataclasses.replace(fit_param("coef0"), default=1),
    fit_param("kernel_params"),
    dataclasses.replace(
        fit_param("landmarks"),
        help="centres: None (every row, exact kernel ridge), m chosen rows (an int) or "
        "these row indices (Nystrom kernel ridge)",
    ),
    fit_param("landmark_method"),
    Param(
        "solver",
        (Options(get_args(RidgeSolver)),),
        "auto",
        "direct (moments and a Cholesky factorisation), cg (preconditioned conjugate "
        "gradient) or auto (the plan's choice: exact ridge direct whenever the n x n matrix "
        "fits memory_budget; Nystrom from counted flops and memory)",
        parse=str,
    ),
    Param(
        "tol",
        (Interval(REAL, 0, 1, "neither"),),
        1e-3,
        "conjugate gradient stops when ||b - H c|| / ||b|| <= tol for every target (the "
        "true residual, checked by one more pass; float32 kernel blocks resolve 1e-6 to 1e-5)",
        parse=number_or(float),
    ),
    Param(
        "max_iter",
        (Interval(INT, 1, None),),
        100,
        "most conjugate-gradient iterations (one pass over the rows each)",
        parse=number_or(int),
    ),
    fit_param("precision"),
    dataclasses.replace(fit_param("random_state"), help="seed of the landmark draw"),
    fit_param("memory_budget"),
    fit_param("device_memory_budget"),
    dataclasses.replace(
        fit_param("chunk_size"), help="rows per kernel block of the exact route's passes"
    ),
    dataclasses.replace(fit_param("progress"), help="report each pass and iteration on stderr"),
)
"""``npt_dask.KernelRidge``'s parameters, in signature order (scikit-learn's ``KernelRidge``
first, with its defaults)."""


CHECKPOINT_PARAM = Param(
    "checkpoint",
    (InstanceOf((str, os.PathLike), "a file path (str or os.PathLike)"), NONE),
    None,
    "CG's state file: written after every iteration, a killed fit resumes from it",
    hint="Pass a file path such as 'cg.npz' (a killed fit called again with it resumes), "
    "or None for no checkpoint.",
)
"""The ``checkpoint`` argument of the kernel ridge estimators' ``fit``."""


RIDGE_CV_PARAMS: tuple[Param, ...] = (
    *SEARCH_PARAMS,
    *(
        dataclasses.replace(p, default="rbf") if p.name == "kernel" else p
        for p in RIDGE_PARAMS
        if p.name not in ("alpha", "gamma")
    ),
)
"""``KernelRidgeCV``'s and ``KernelRidgeClassifierCV``'s parameters, in signature order:
the search's, then :data:`RIDGE_PARAMS` but the ``alpha`` and ``gamma`` the search
chooses, ``kernel`` defaulting to ``"rbf"`` (a search over gammas needs a kernel that
takes one)."""


_D = table_defaults(RIDGE_PARAMS)  # the signatures' defaults: the parameter tables'
_S = table_defaults(RIDGE_CV_PARAMS)
_PANEL = DEFAULT_CHUNK_SIZE  # centres per panel of a prediction (its blocks chunk x panel)

CERTIFICATE_ROWS = 4096
"""Rows :meth:`KernelRidge.certificate` samples (all rows when there are fewer)."""


def _alphas(alpha: Any, k: int, owner: str) -> np.ndarray:
    """``alpha`` (checked by its table entry: each value finite and >= 0) as one value per
    target column (scikit-learn: a scalar, or one per target); ``owner`` names the
    estimator when their count is not the targets'."""
    values = np.atleast_1d(np.asarray(alpha, dtype=np.float64))
    if values.size not in (1, k):
        columns = "1 target column" if k == 1 else f"{k} target columns"
        raise InputError(
            f"The 'alpha' parameter of {owner} has {values.size} values, but y has "
            f"{columns}: pass one alpha, or one per target ({k})."
        )
    return np.broadcast_to(values, (k,)).copy()


def _weight_array(sample_weight: Any, n: int) -> Any:
    """Sample weights as ``(n,)`` numpy or dask (a number: every row's), shape and dtype
    checked, values not read; None stays None."""
    if sample_weight is None:
        return None
    if isinstance(sample_weight, numbers.Real):
        sample_weight = np.full(n, float(sample_weight))
    w = sample_weight.data if is_data_array(sample_weight) else sample_weight
    w = w if isinstance(w, da.Array) else np.asarray(w)
    if w.ndim != 1 or w.shape[0] != n:
        raise InputError(
            f"sample_weight must have one weight per training row, shape ({n},); got {w.shape}."
        )
    if w.dtype.kind not in "biuf":
        raise InputTypeError(f"sample_weight must be numeric; got dtype {w.dtype}.")
    return w


def _checked_values(targets: Any, sample_weight: Any, n: int) -> Any:
    """The sample weights (float64, or None) once the values are checked: targets finite,
    weights finite, >= 0 and not all zero. Lazy targets and weights are read in one
    compute (n numbers each), before any kernel pass, and refused as numpy ones are."""
    w = _weight_array(sample_weight, n)
    checks: dict[str, Any] = {}
    if isinstance(targets, da.Array):  # numpy targets: checked by _targets
        checks["targets"] = da.isfinite(targets).all()
    if w is not None:
        xp: Any = da if isinstance(w, da.Array) else np
        checks |= {"finite": xp.isfinite(w).all(), "positive": (w >= 0).all(),
                   "some": (w != 0).any()}  # fmt: skip
    flags = dict(zip(checks, (bool(v) for v in compute(*checks.values())), strict=True))
    if not flags.get("targets", True):
        raise InputError(_NOT_FINITE_Y)
    if w is None:
        return None
    if not (flags["finite"] and flags["positive"]):
        raise InputError("sample_weight must be finite and >= 0 (a row of weight 0 is left out).")
    if not flags["some"]:
        raise InputError(
            "Sample weights must contain at least one non-zero number; every row has weight 0."
        )
    return w.astype(np.float64)


def _say_iterative_exact(plan: RidgePlan, solver: str) -> None:
    """One :class:`~npt_dask.errors.RidgeWarning` when ``solver="auto"`` solves exact kernel
    ridge iteratively (its kernel matrix does not fit the budget): the plan's reason,
    which names the tolerance and what scikit-learn's exact solve would need."""
    if plan.exact and plan.route == "cg" and solver == "auto":
        reason = plan.reason.removeprefix("cg: ")
        warn(f"Exact kernel ridge (landmarks=None) is not solved exactly: {reason}.",
             RidgeWarning)  # fmt: skip


_NOT_FINITE_Y = "y contains NaN or infinity; pass finite targets."


class _KernelRidgeBase(BaseEstimator):
    """Parameters, fit and decision values shared by the two estimators."""

    _param_table: tuple[Param, ...] = RIDGE_PARAMS  # what fit checks the parameters by

    def __init__(
        self,
        alpha: Any = _D["alpha"],
        *,
        kernel: Any = _D["kernel"],
        gamma: Any = _D["gamma"],
        degree: float = _D["degree"],
        coef0: float = _D["coef0"],
        kernel_params: dict | None = _D["kernel_params"],
        landmarks: Any = _D["landmarks"],
        landmark_method: str = _D["landmark_method"],
        solver: str = _D["solver"],
        tol: float = _D["tol"],
        max_iter: int = _D["max_iter"],
        precision: str | None = _D["precision"],
        random_state: Any = _D["random_state"],
        memory_budget: int | str | None = _D["memory_budget"],
        device_memory_budget: int | str | None = _D["device_memory_budget"],
        chunk_size: int | None = _D["chunk_size"],
        progress: bool = _D["progress"],
    ) -> None:
        self.alpha = alpha
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.landmarks = landmarks
        self.landmark_method = landmark_method
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.precision = precision
        self.random_state = random_state
        self.memory_budget = memory_budget
        self.device_memory_budget = device_memory_budget
        self.chunk_size = chunk_size
        self.progress = progress

    # --- input ---------------------------------------------------------------------------

    @property
    def _precomputed(self) -> bool:
        return isinstance(self.kernel, str) and self.kernel == PRECOMPUTED

    def _checked(self, X: Any, *, reset: bool) -> Any:
        """scikit-learn's checks of X and its feature names (eager input), or its width and
        its feature coordinate's names (lazy input, which is not read here: a DataArray's
        features in another order are matched by name, other names refused)."""
        if not is_lazy(X):
            return validate_data(
                self, X, reset=reset, dtype=[np.float64, np.float32],
                accept_sparse=False if self._precomputed else ("csr", "csc"),
            )  # fmt: skip
        names = None if self._precomputed else feature_names(X)  # a DataArray's coordinate
        if reset:
            self.n_features_in_ = int(X.shape[1])
            self.__dict__.pop("feature_names_in_", None)
            if names is not None:
                self.feature_names_in_ = np.asarray(names, dtype=object)
            return X
        fitted = getattr(self, "feature_names_in_", None)
        if not self._precomputed and fitted is not None:  # matched by name, as NPT models do
            X = match_features(X, tuple(fitted), n_features=self.n_features_in_, name="X")
        if int(X.shape[1]) != self.n_features_in_:
            raise InputError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )
        return X

    def _chunked(self, X: Any, *, fitting: bool) -> tuple[da.Array, InputInfo]:
        """Checked X as row chunks in the kernel precision (a precomputed kernel matrix:
        to predict, its columns in the centres' panels)."""
        if fitting:
            dtype = None if self.precision is None else np.dtype(self.precision)
        else:
            dtype = self.dtype_
        if not self._precomputed:
            return as_row_chunked(X, name="X", chunk_size=self.chunk_size, dtype=dtype)
        if fitting:
            return as_kernel_matrix(X, name="X", chunk_size=self.chunk_size, dtype=dtype)
        columns = (self._n_train,) if self.landmarks_ is not None else self._panel_sizes()
        return as_kernel_matrix(
            X, name="X", chunk_size=self.chunk_size, column_chunks=tuple(columns), dtype=dtype
        )

    @staticmethod
    def _aligned(X: Any, y: Any, sample_weight: Any) -> tuple[Any, Any]:
        """``y`` and ``sample_weight`` in X's row order when both label their rows (a
        DataArray's sample coordinate, a pandas index), refused when the labels differ;
        by position otherwise."""
        if y is not None:
            y = align_rows(y, X, name="y")
        if sample_weight is not None and not isinstance(sample_weight, numbers.Real):
            sample_weight = align_rows(sample_weight, X, name="sample_weight")
        return y, sample_weight

    def _targets(self, y: Any, n: int) -> tuple[Any, int]:
        """Numeric targets as ``(n, k)`` float64 (numpy or dask) and their ndim."""
        if y is None:
            raise InputError(
                f"{type(self).__name__} requires y to be passed, but the target y is None."
            )
        values = y.data if is_data_array(y) else y
        values = values if isinstance(values, da.Array) else np.asarray(values)
        check_known_chunks(values, "y")
        if values.ndim not in (1, 2) or values.shape[0] != n:
            raise InputError(
                f"y must have one target (or row of targets) per training row, shape ({n},) "
                f"or ({n}, k); got {values.shape}."
            )
        if values.dtype.kind not in "biuf":
            raise InputTypeError(f"y must be numeric; got dtype {values.dtype}.")
        if not isinstance(values, da.Array) and not np.isfinite(values).all():
            raise InputError(_NOT_FINITE_Y)  # lazy targets: read with the weights
        ndim = values.ndim
        values = values.reshape(n, -1).astype(np.float64)
        return values, ndim

    def _spec(self, rows: da.Array, gamma: Any) -> KernelSpec:
        spec = make_kernel(
            self.kernel, gamma=gamma, degree=self.degree, coef0=self.coef0,
            kernel_params=self.kernel_params,
        )  # fmt: skip
        variance = data_variance(rows) if spec.needs_variance else None
        return spec.resolve(int(rows.shape[1]), variance)

    def _centres(
        self, rows: da.Array, spec: KernelSpec, held: Checkpoint | None
    ) -> np.ndarray | None:
        """The sorted landmark rows (None: every row is a centre). Drawn without a seed,
        they are the ones a held checkpoint saved, if it saved as many (a re-run of a
        killed fit resumes on them; another problem's are refused by the solver)."""
        if self.landmarks is None:
            return None
        n = int(rows.shape[0])
        checked = check_landmarks(self.landmarks, n)
        saved = None if held is None else held.centres
        if (isinstance(checked, int) and self.random_state is None and saved is not None
                and len(saved) == checked and (saved < n).all()):  # fmt: skip
            return saved
        if spec.precomputed and isinstance(checked, int) and self.landmark_method != "uniform":
            raise InputError(
                "landmark_method='rpcholesky' needs the kernel function; with "
                "kernel='precomputed' use landmark_method='uniform' or give row indices."
            )
        rng = np.random.default_rng(self.random_state)
        if spec.precomputed:
            if isinstance(checked, np.ndarray):
                return checked
            return np.sort(rng.choice(n, checked, replace=False))
        return select_landmarks(checked, rows, spec, method=self.landmark_method, rng=rng)

    # --- fit -------------------------------------------------------------------------------

    def _hyper(self, rows: da.Array, t: Any, weights: Any) -> tuple[Any, Any]:
        """The ``(alpha, gamma)`` of the fit: the parameters (the CV estimators search)."""
        return self.alpha, self.gamma

    def _fit(self, X: Any, t: Any, sample_weight: Any, checkpoint: Any) -> np.ndarray:
        """Plan and solve on the checked X and ``(n, k)`` float64 targets ``t`` (numpy or
        dask); the fitted attributes; the dual coefficients ``(m, k)``."""
        rows, _ = self._chunked(X, fitting=True)
        n, k = int(rows.shape[0]), int(t.shape[1])
        weights = _checked_values(t, sample_weight, n)
        check_magnitudes(t, weights, str(rows.dtype))  # before any pass, the search's too
        alpha, gamma = self._hyper(rows, t, weights)
        alphas = _alphas(alpha, k, type(self).__name__)
        spec = self._spec(rows, gamma)
        warn_kernel_scale(rows, rows, spec, fitting=True, ridge=True)
        if checkpoint is None:
            return self._solve(rows, X, t, weights, alphas, spec, None)
        with Checkpoint(checkpoint) as held:  # locked for the whole fit
            return self._solve(rows, X, t, weights, alphas, spec, held)

    def _solve(
        self, rows: da.Array, X: Any, t: Any, weights: Any, alphas: np.ndarray,
        spec: KernelSpec, held: Checkpoint | None,
    ) -> np.ndarray:  # fmt: skip
        """Centres, plan and solve; the fitted attributes; the dual coefficients."""
        n, k = int(rows.shape[0]), int(t.shape[1])
        centres = self._centres(rows, spec, held)
        budget = resolve_memory_budget(self.memory_budget)
        device_budget = resolve_device_budget(self.device_memory_budget, rows)
        plan = plan_ridge(
            n=n, m=None if centres is None else len(centres), d=int(rows.shape[1]), k=k,
            itemsize=rows.dtype.itemsize, alphas=len(np.unique(alphas)), solver=self.solver,
            memory_budget=budget, threads=task_threads(), max_iter=self.max_iter,
            tol=self.tol, chunk_size=self.chunk_size or DEFAULT_CHUNK_SIZE,
            positive_alpha=bool((alphas > 0).all()), workers=worker_processes(),
            alpha=float(alphas.min()), device_budget=device_budget,
        )  # fmt: skip
        _say_iterative_exact(plan, self.solver)
        centre_x = (
            centre_rows(rows, centres) if centres is not None and not spec.precomputed else None
        )
        problem = RidgeProblem(rows, spec, t, weights, alphas, centres, plan,
                               self.random_state, self.landmark_method, centre_x)  # fmt: skip
        with progress_label(type(self).__name__):  # the command line's own name wins
            solution = solve_ridge(problem, checkpoint=held, progress=self.progress)
        plan = solution.plan or plan  # as the route refined it once built
        self.kernel_ = spec
        self.gamma_ = getattr(spec, "gamma", None)
        self.landmarks_ = centres
        self.plan_ = plan.to_dict()
        self.solver_ = plan.route
        self.n_iter_ = solution.iterations if plan.route == "cg" else 1  # direct: one solve
        self.residuals_ = np.asarray(solution.residuals)
        self.fit_seconds_ = dict(solution.seconds)
        self.solve_details_ = dict(solution.details)
        self.dtype_ = rows.dtype
        self._n_train = n
        if centres is None:  # every row a centre: the rows themselves (lazy stays lazy)
            self.X_fit_ = rows if is_lazy(X) else X
        elif not spec.precomputed:
            self.X_fit_ = centre_x
        else:
            self.X_fit_ = None  # the given matrix's landmark columns stand for the rows
        self._n_centres = n if centres is None else len(centres)
        return solution.coef

    # --- prediction ----------------------------------------------------------------------

    def _panel_sizes(self) -> list[int]:
        m = self._n_centres
        return [min(_PANEL, m - s) for s in range(0, m, _PANEL)]

    def _prediction_centres(self) -> Centres:
        coef = np.asarray(self._coef, dtype=self.dtype_)
        if self.kernel_.precomputed:
            return Centres.of(None, coef, sizes=self._panel_sizes())
        if isinstance(self.X_fit_, da.Array):  # exact, lazy training rows
            rows = self.X_fit_.rechunk({0: _PANEL})
            offsets = np.concatenate([[0], np.cumsum(rows.chunks[0])])
            parts = [coef[a:b] for a, b in itertools.pairwise(offsets)]
            x_blocks = persist_blocks(rows.to_delayed(optimize_graph=False).ravel())
            return Centres(tuple(int(c) for c in rows.chunks[0]), x_blocks, parts)
        x = np.asarray(self.X_fit_.toarray() if hasattr(self.X_fit_, "toarray") else self.X_fit_)
        return Centres.of(x.astype(self.dtype_, copy=False), coef, panel=_PANEL)

    def _decision(self, X: Any) -> tuple[Any, InputInfo]:
        """Lazy ``(n, k)`` decision values ``kappa(X, centres) c`` and X's input info."""
        check_is_fitted(self, "dual_coef_")
        rows, info = self._chunked(self._checked(X, reset=False), fitting=False)
        if self.X_fit_ is not None and not info.lazy:  # lazy rows are not read here
            warn_kernel_scale(rows, self.X_fit_, self.kernel_, fitting=False, ridge=True)
        if self.kernel_.precomputed and self.landmarks_ is not None:
            rows = rows[:, self.landmarks_].rechunk({1: tuple(self._panel_sizes())})
        out = map_rows(rows, self._prediction_centres(), self.kernel_, Apply(),
                       width=self._coef.shape[1])  # fmt: skip
        return out, info

    def certificate(
        self, X: Any, *, rows: int = CERTIFICATE_ROWS, random_state: Any = None
    ) -> dict[str, Any]:
        """Lemma 5 for the landmarks: how much of each row's feature vector is outside the
        span of the centres' (uncentred), on a uniform sample of ``rows`` rows of ``X``.

        The residual of a row is ``sqrt(kappa(x, x) - k^T K_mm^-1 k)`` (``k = kappa(L, x)``):
        0 for a row the centres span, ``sqrt(kappa(x, x))`` for one orthogonal to them. The
        summary is :func:`npt_dask.npt.landmarks.certificate`'s (mean, max, quantiles,
        ``relative`` = residual^2 / kappa(x, x), a histogram) plus the rows sampled and the
        jitter ``K_mm``'s factorisation took. Computed only when asked: ``K_mm`` and its
        Cholesky factorisation (``m^3 / 3`` flops, ``8 m^2`` bytes), the sample's kernel
        (``rows x m``) and one triangular solve (``rows m^2``).
        """
        check_is_fitted(self, "dual_coef_")
        if self.landmarks_ is None or self.kernel_.precomputed:
            raise InputError(
                "certificate() measures rows against the landmarks' span; this model "
                + ("has none: every training row is a centre, so the training rows' "
                   "residuals are 0." if self.landmarks_ is None else
                   "has a precomputed kernel, whose k(x, x) the rows do not carry.")
            )  # fmt: skip
        x, _ = self._chunked(self._checked(X, reset=False), fitting=False)
        n = int(x.shape[0])
        rng = np.random.default_rng(random_state)
        idx = np.sort(rng.choice(n, min(n, int(rows)), replace=False))
        sample = np.asarray(centre_rows(x, idx), dtype=np.float64)
        centres = np.asarray(self.X_fit_, dtype=np.float64)
        kmm = centre_kernel(self.kernel_, centres)
        jitter = factor_with_jitter(kmm, floor=FALKON_JITTER["float64"] * len(centres))
        inside = scipy.linalg.blas.dtrsm(1.0, kmm, self.kernel_(centres, sample), lower=0,
                                         trans_a=1)  # fmt: skip
        energy = self.kernel_.diag(sample)
        res = np.sqrt(np.maximum(energy - np.einsum("ij,ij->j", inside, inside), 0.0))
        return certificate(res, energy) | {"rows_sampled": len(idx), "jitter": jitter}

    # --- persistence -----------------------------------------------------------------------

    def save(self, path: Any, *, overwrite: bool = False) -> Path:
        """Write the fitted estimator to a zarr v3 store at ``path``, atomically and
        checksummed, without pickle (:mod:`npt_dask.storage.ridge_store`); :func:`load_ridge`
        reads it back, predicting bit for bit as this one.

        Stored: the hyperparameters (a ``random_state`` that is a Generator is stored as
        None: the fit's draw is in the stored landmarks), the resolved kernel, the dual
        coefficients and the centres (every training row for exact ridge, the landmark
        rows otherwise), the classes, the feature names, the plan and solve details, the
        CV results, and the npt-dask and scikit-learn versions. A model already at
        ``path`` is replaced only with ``overwrite=True``; a callable kernel is refused
        (a function is code). Returns the path.
        """
        check_is_fitted(self, "dual_coef_")
        return ridge_store.save(self._state(), path, overwrite=overwrite)

    _FITTED = ("solver_", "n_iter_", "plan_", "fit_seconds_", "solve_details_", "gamma_",
               "alpha_", "best_score_")  # fmt: skip

    def _state(self) -> ridge_store.RidgeState:
        """The fitted estimator as :class:`~npt_dask.storage.ridge_store.RidgeState` data."""
        params = self.get_params(deep=False)
        if not isinstance(params.get("random_state"), numbers.Integral | None):
            params["random_state"] = None  # a Generator: its draw is in the landmarks
        fitted = {name: getattr(self, name) for name in self._FITTED if hasattr(self, name)}
        cv = dict(getattr(self, "cv_results_", {}))
        arrays = {name: np.asarray(cv.pop(name)) for name in ("scores", "fit_rows",
                  "held_out_rows") if name in cv}  # fmt: skip
        if hasattr(self, "cv_results_"):
            fitted["cv_results_"] = cv
        names = getattr(self, "feature_names_in_", None)
        return ridge_store.RidgeState(
            estimator=type(self).__name__, params=params, kernel=self.kernel_,
            precision=str(self.dtype_), n_train=self._n_train, n_features=self.n_features_in_,
            feature_names=None if names is None else tuple(str(v) for v in names),
            dual_coef=self._coef, target_ndim=int(np.ndim(self.dual_coef_)),
            centres=None if self.kernel_.precomputed else self.X_fit_, landmarks=self.landmarks_,
            residuals=self.residuals_, fitted=fitted, classes=getattr(self, "classes_", None),
            cv_arrays=arrays, chunk_size=self.chunk_size or DEFAULT_CHUNK_SIZE,
        )  # fmt: skip

    def _restore(self, stored: ridge_store.StoredRidge) -> None:
        """The fitted attributes of ``stored`` (:func:`load_ridge`)."""
        manifest, arrays = stored.manifest, stored.arrays
        try:
            self.kernel_ = KernelSpec.from_dict(manifest.kernel)
        except (TypeError, ValueError) as exc:
            raise StoreIntegrityError(
                f"{stored.path}: the stored kernel is malformed ({exc}); the store is damaged. "
                "Save the model again."
            ) from exc
        fitted = dict(manifest.fitted)
        for name in self._FITTED:
            if name in fitted:
                setattr(self, name, fitted[name])
        if "cv_results_" in fitted:
            cv = dict(fitted["cv_results_"])
            for name in ("scores", "fit_rows", "held_out_rows"):
                if ridge_store.CV_PREFIX + name in arrays:
                    cv[name] = arrays[ridge_store.CV_PREFIX + name].tolist()
            self.cv_results_ = cv
        self.landmarks_ = arrays.get("landmarks")
        self.residuals_ = arrays["residuals"]
        self.dtype_ = np.dtype(manifest.precision)
        self._n_train, self._n_centres = manifest.n_train, manifest.n_centres
        self.X_fit_ = arrays.get("centres")
        self.n_features_in_ = manifest.n_features
        if manifest.feature_names is not None:
            self.feature_names_in_ = np.asarray(manifest.feature_names, dtype=object)
        if stored.classes is not None:
            self.classes_ = stored.classes
        self._coef = arrays["dual_coef"]
        self.dual_coef_ = self._coef[:, 0] if manifest.target_ndim == 1 else self._coef

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = not self._precomputed
        tags.input_tags.pairwise = self._precomputed
        return tags


class KernelRidge(MultiOutputMixin, RegressorMixin, _KernelRidgeBase):
    """Kernel ridge regression, exact or Nyström, direct or iterative, out of core.

    Parameters
    ----------
    alpha : float or array-like of shape (n_targets,), default 1.0
        Regularisation strength, scikit-learn's ``KernelRidge`` meaning: the
        solution minimises ``||W^1/2 (Y - K c)||^2 + alpha c^T K c`` (with
        landmarks, ``K`` is ``K_nm`` and the penalty ``c^T K_mm c``). One value per
        target is allowed. ``alpha=0`` is solved directly (least squares when the
        system is singular, with a warning, as scikit-learn does); the iterative
        route needs ``alpha > 0``.
    kernel : str or callable, default "linear"
        ``"rbf"``, ``"laplacian"``, ``"polynomial"`` (``"poly"``), ``"sigmoid"``,
        ``"linear"``, ``"cosine"`` (scikit-learn's definitions), ``"precomputed"``
        (X is the kernel matrix), or ``f(A, B, **kernel_params)`` returning a block.
    gamma : float, "scale" or None, default None
        ``None``: ``1 / n_features``; ``"scale"``: ``1 / (n_features X.var())``.
    degree : float, default 3
    coef0 : float, default 1
    kernel_params : dict, optional
        Parameters of a callable kernel (or gamma/degree/coef0 of a named one).
    landmarks : None, int or array of row indices, default None
        ``None``: every row is a centre (exact kernel ridge, scikit-learn's). An int m:
        Nyström kernel ridge on m rows chosen by ``landmark_method`` (seeded by
        ``random_state``); an array: those rows.
    landmark_method : {"uniform", "rpcholesky"}, default "uniform"
    solver : {"auto", "direct", "cg"}, default "auto"
        ``"direct"``: the normal equations' moments in one pass (n m^2 flops) and a
        Cholesky factorisation (exact: scikit-learn's solve on the n x n matrix);
        ``"cg"``: preconditioned conjugate gradient, one pass per iteration (Falkon's
        preconditioner with landmarks; a landmark NPT model's top eigenpairs without);
        ``"auto"``: the plan's choice (``plan_["reason"]`` says why). Exact ridge
        (``landmarks=None``) takes the direct route, scikit-learn's solve, whenever the
        n x n matrix fits ``memory_budget``, whatever n; only when it does not is it solved
        by CG to ``tol``, and a ``RidgeWarning`` says so (raise ``memory_budget``, or use
        landmarks). Nyström ridge: the route of least counted work that fits.
    tol : float, default 1e-3
        CG stops when ``||b - H c|| / ||b|| <= tol`` for every target (``H`` the normal
        equations' matrix, ``b`` their right-hand side): a target the steps call converged
        is checked against its true residual with one more pass, and iterates on when it
        is above ``tol``. float32 kernel blocks resolve residuals down to about 1e-6 to
        1e-5, by the problem (a ``ConvergenceWarning`` says when tol was not reached; use
        ``precision="float64"`` for a tighter one). A fit that stops without converging
        (``max_iter``, a breakdown or divergence) reports the true residual of the iterate
        it returns, in its warning and ``solve_details_["relative_residuals"]``: it costs
        one pass more (shared with the last iteration's when a breakdown comes first),
        not the residual the steps updated, which drifts from it. The residual
        bounds the normal equations, not the predictions: at 1e-3 they differ from the
        direct solve's by about 1e-2 relative (float64) on ill-conditioned systems.
    max_iter : int, default 100
        Most CG iterations (a ``ConvergenceWarning`` if tol is not met).
    precision : {"float32", "float64"}, optional
        Kernel blocks' dtype (default: float32 input stays float32). With
        ``"float32"`` the blocks and CG's products run at BLAS's single-precision
        rate; the direct route's moments, every sum and every solve are float64, but
        for CG's preconditioner (its factors and triangular solves in the blocks'
        precision).
    random_state : int, Generator or None
        Seeds the landmark draw (and the preconditioner's landmarks).
    memory_budget : int or str, optional
        Bytes the fit may hold (the plan's; default a sixth of physical memory): an int,
        or a size with units as the command line takes it (``"40GB"``, ``"1.5GiB"``).
        A budget above the machine's memory warns (``MemoryBudgetWarning``).
    device_memory_budget : int or str, optional
        Bytes of device (GPU) memory the fit may hold when the rows live on a device (the
        kernel blocks; exact direct ridge's n x n matrix and factor, built there); units as
        ``memory_budget``; default a share of the device's free memory. The plan refuses,
        before any pass, a route over either budget. Rows in host memory count against
        ``memory_budget`` alone (a value given for them warns).
    chunk_size : int or None, default 4096
        Rows per kernel block of the exact route (None: a dask input's own chunks).
    progress : bool, default False
        Report the passes and every CG iteration on stderr.

    Attributes
    ----------
    dual_coef_ : ndarray of shape (n_centres,) or (n_centres, n_targets)
        ``c``: predictions are ``kappa(X, X_fit_) @ dual_coef_``.
    X_fit_ : array
        The centres: the training X (``landmarks=None``), or the landmark rows.
    landmarks_ : ndarray or None
        The landmark row indices.
    plan_ : dict
        The fit plan: route, flops per stage, memory per part, and why.
    solver_ : str
        The route taken, ``"direct"`` or ``"cg"``.
    n_iter_ : int
        CG iterations (1 for the direct route's one solve); ``residuals_`` the relative
        residual after each (empty for the direct route).
    kernel_ : KernelSpec
        The resolved kernel; ``gamma_`` its gamma.
    n_features_in_, feature_names_in_

    Notes
    -----
    Cost (n rows, m centres, d features, k targets): the direct Nyström route
    evaluates ``2nmd`` flops of kernel blocks and ``nm^2`` of symmetric rank-k
    updates in one pass, then ``m^3/3`` per distinct alpha; CG evaluates
    ``2nmd + 4nmk`` per iteration after an ``m^3`` preconditioner. Memory: the
    direct route holds ``m x m`` float64 sums (one per thread that the budget
    allows) and ``K_mm``; CG one ``m x m`` preconditioner; exact CG an ``n x l``
    factor and the kernel blocks kept within the budget. Everything is in
    ``plan_`` before any pass. ``fit(..., checkpoint=path)`` writes CG's state
    after each iteration; a killed fit called again with the same path and the
    same problem resumes at the last iteration. The checkpoint keeps the
    centres, so landmarks drawn without ``random_state`` are the saved ones on
    a re-run. Another problem is refused (``CheckpointError``): other data,
    targets, weights, alpha or precision, or another kernel -- a kernel function
    is compared by its values on a few rows of the data, so a changed parameter
    it closes over is seen, and a resume applies the operator to the saved state
    once (one pass more), so a change away from those rows is seen. So are a file
    altered since it was written (every array's SHA-256 is recorded and checked),
    a file that is not a checkpoint (left as it is), and a second fit on the same
    path while one runs (a lock beside the file). A symbolic link is written through to its target.

    Examples
    --------
    >>> import numpy as np
    >>> from npt_dask import KernelRidge
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, (400, 1))
    >>> y = np.sin(X[:, 0]) + rng.normal(0, 0.1, 400)
    >>> exact = KernelRidge(alpha=0.1, kernel="rbf", gamma=0.5).fit(X, y)
    >>> nystrom = KernelRidge(alpha=0.1, kernel="rbf", gamma=0.5, landmarks=50,
    ...                       random_state=0).fit(X, y)
    >>> Z = np.array([[0.5], [1.5]])  # sin: 0.48, 1.0
    >>> np.round(exact.predict(Z), 1), np.round(nystrom.predict(Z), 1)
    (array([0.5, 1. ]), array([0.5, 1. ]))
    """

    def fit(self, X: Any, y: Any, sample_weight: Any = None, *, checkpoint: Any = None) -> Any:
        """Fit on X (numpy, sparse, dask, DataArray) and targets y (1-D or 2-D).

        ``checkpoint``: a file path; the iterative route writes its state there after
        every iteration and resumes from it, on the centres it saved (see Notes).
        """
        check_estimator(self._param_table, self)  # before any work, in the table's words
        CHECKPOINT_PARAM.check(checkpoint, type(self).__name__)
        y, sample_weight = self._aligned(X, y, sample_weight)
        if not is_lazy(X) and y is not None and not is_lazy(y):
            X, y = validate_data(
                self, X, y, multi_output=True, y_numeric=True,
                dtype=[np.float64, np.float32],
                accept_sparse=False if self._precomputed else ("csr", "csc"),
            )  # fmt: skip
        else:
            X = self._checked(X, reset=True)
        targets, ndim = self._targets(y, int(X.shape[0]))
        coef = self._fit(X, targets, sample_weight, checkpoint)
        self._coef = coef
        self.dual_coef_ = coef[:, 0] if ndim == 1 else coef
        return self

    def predict(self, X: Any) -> Any:
        """``kappa(X, X_fit_) @ dual_coef_``: numpy in -> numpy out, lazy in -> lazy out."""
        out, info = self._decision(X)
        if np.ndim(self.dual_coef_) == 1:
            out = out[:, 0]
        return wrap_rows(out, info, column_dim="target", name="prediction")


class KernelRidgeClassifier(ClassifierMixin, _KernelRidgeBase):
    """Kernel ridge classification: one-vs-all ridge on ±1 targets (scikit-learn's
    ``RidgeClassifier`` rule), exact or Nyström, direct or iterative, out of core.

    The targets are +1 for a row's class and -1 for the others, one column per class
    (a single column, for ``classes_[1]``, with two classes); ``predict`` takes the
    largest decision value.

    Parameters
    ----------
    alpha : float or array-like of shape (n_targets,), default 1.0
        Regularisation strength, scikit-learn's ``KernelRidge`` meaning: the
        solution minimises ``||W^1/2 (Y - K c)||^2 + alpha c^T K c`` (with
        landmarks, ``K`` is ``K_nm`` and the penalty ``c^T K_mm c``). One value per
        target is allowed. ``alpha=0`` is solved directly (least squares when the
        system is singular, with a warning, as scikit-learn does); the iterative
        route needs ``alpha > 0``.
    kernel : str or callable, default "linear"
        ``"rbf"``, ``"laplacian"``, ``"polynomial"`` (``"poly"``), ``"sigmoid"``,
        ``"linear"``, ``"cosine"`` (scikit-learn's definitions), ``"precomputed"``
        (X is the kernel matrix), or ``f(A, B, **kernel_params)`` returning a block.
    gamma : float, "scale" or None, default None
        ``None``: ``1 / n_features``; ``"scale"``: ``1 / (n_features X.var())``.
    degree : float, default 3
    coef0 : float, default 1
    kernel_params : dict, optional
        Parameters of a callable kernel (or gamma/degree/coef0 of a named one).
    landmarks : None, int or array of row indices, default None
        ``None``: every row is a centre (exact kernel ridge, scikit-learn's). An int m:
        Nyström kernel ridge on m rows chosen by ``landmark_method`` (seeded by
        ``random_state``); an array: those rows.
    landmark_method : {"uniform", "rpcholesky"}, default "uniform"
    solver : {"auto", "direct", "cg"}, default "auto"
        ``"direct"``: the normal equations' moments in one pass (n m^2 flops) and a
        Cholesky factorisation (exact: scikit-learn's solve on the n x n matrix);
        ``"cg"``: preconditioned conjugate gradient, one pass per iteration (Falkon's
        preconditioner with landmarks; a landmark NPT model's top eigenpairs without);
        ``"auto"``: the plan's choice (``plan_["reason"]`` says why). Exact ridge
        (``landmarks=None``) takes the direct route, scikit-learn's solve, whenever the
        n x n matrix fits ``memory_budget``, whatever n; only when it does not is it solved
        by CG to ``tol``, and a ``RidgeWarning`` says so (raise ``memory_budget``, or use
        landmarks). Nyström ridge: the route of least counted work that fits.
    tol : float, default 1e-3
        CG stops when ``||b - H c|| / ||b|| <= tol`` for every target (``H`` the normal
        equations' matrix, ``b`` their right-hand side): a target the steps call converged
        is checked against its true residual with one more pass, and iterates on when it
        is above ``tol``. float32 kernel blocks resolve residuals down to about 1e-6 to
        1e-5, by the problem (a ``ConvergenceWarning`` says when tol was not reached; use
        ``precision="float64"`` for a tighter one). A fit that stops without converging
        (``max_iter``, a breakdown or divergence) reports the true residual of the iterate
        it returns, in its warning and ``solve_details_["relative_residuals"]``: it costs
        one pass more (shared with the last iteration's when a breakdown comes first),
        not the residual the steps updated, which drifts from it. The residual
        bounds the normal equations, not the predictions: at 1e-3 they differ from the
        direct solve's by about 1e-2 relative (float64) on ill-conditioned systems.
    max_iter : int, default 100
        Most CG iterations (a ``ConvergenceWarning`` if tol is not met).
    precision : {"float32", "float64"}, optional
        Kernel blocks' dtype (default: float32 input stays float32). With
        ``"float32"`` the blocks and CG's products run at BLAS's single-precision
        rate; the direct route's moments, every sum and every solve are float64, but
        for CG's preconditioner (its factors and triangular solves in the blocks'
        precision).
    random_state : int, Generator or None
        Seeds the landmark draw (and the preconditioner's landmarks).
    memory_budget : int, optional
        Bytes the fit may hold (the plan's; default a sixth of physical memory).
    device_memory_budget : int or str, optional
        Bytes of device (GPU) memory the fit may hold when the rows live on a device (the
        kernel blocks; exact direct ridge's n x n matrix and factor, built there); units as
        ``memory_budget``; default a share of the device's free memory. The plan refuses,
        before any pass, a route over either budget. Rows in host memory count against
        ``memory_budget`` alone (a value given for them warns).
    chunk_size : int or None, default 4096
        Rows per kernel block of the exact route (None: a dask input's own chunks).
    progress : bool, default False
        Report the passes and every CG iteration on stderr.

    Attributes
    ----------
    classes_ : ndarray
        The sorted class labels.
    dual_coef_ : ndarray of shape (n_centres, 1) or (n_centres, n_classes)
    X_fit_, landmarks_, plan_, solver_, n_iter_, residuals_, kernel_
        As in :class:`KernelRidge`.

    Notes
    -----
    Cost (n rows, m centres, d features, k targets): the direct Nyström route
    evaluates ``2nmd`` flops of kernel blocks and ``nm^2`` of symmetric rank-k
    updates in one pass, then ``m^3/3`` per distinct alpha; CG evaluates
    ``2nmd + 4nmk`` per iteration after an ``m^3`` preconditioner. Memory: the
    direct route holds ``m x m`` float64 sums (one per thread that the budget
    allows) and ``K_mm``; CG one ``m x m`` preconditioner; exact CG an ``n x l``
    factor and the kernel blocks kept within the budget. Everything is in
    ``plan_`` before any pass. ``fit(..., checkpoint=path)`` writes CG's state
    after each iteration; a killed fit called again with the same path and the
    same problem resumes at the last iteration. The checkpoint keeps the
    centres, so landmarks drawn without ``random_state`` are the saved ones on
    a re-run. Another problem is refused (``CheckpointError``): other data,
    targets, weights, alpha or precision, or another kernel -- a kernel function
    is compared by its values on a few rows of the data, so a changed parameter
    it closes over is seen, and a resume applies the operator to the saved state
    once (one pass more), so a change away from those rows is seen. So are a file
    altered since it was written (every array's SHA-256 is recorded and checked),
    a file that is not a checkpoint (left as it is), and a second fit on the same
    path while one runs (a lock beside the file). A symbolic link is written through to its target.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import make_moons
    >>> from npt_dask import KernelRidgeClassifier
    >>> X, y = make_moons(300, noise=0.1, random_state=0)
    >>> clf = KernelRidgeClassifier(alpha=0.01, kernel="rbf", gamma=2.0).fit(X, y)
    >>> round(clf.score(X, y), 3)
    0.997
    >>> clf.predict(np.array([[0.0, 1.0], [1.0, -0.5]]))
    array([0, 1])
    """

    def fit(self, X: Any, y: Any, sample_weight: Any = None, *, checkpoint: Any = None) -> Any:
        """Fit on X and class labels y (numpy, dask, DataArray)."""
        check_estimator(self._param_table, self)  # before any work, in the table's words
        CHECKPOINT_PARAM.check(checkpoint, type(self).__name__)
        y, sample_weight = self._aligned(X, y, sample_weight)
        if not is_lazy(X) and y is not None and not is_lazy(y):
            X, y = validate_data(
                self, X, y, dtype=[np.float64, np.float32],
                accept_sparse=False if self._precomputed else ("csr", "csc"),
            )  # fmt: skip
        else:
            X = self._checked(X, reset=True)
        labels = self._labels(y, int(X.shape[0]))
        binarizer = LabelBinarizer(pos_label=1, neg_label=-1).fit(labels)
        self.classes_ = binarizer.classes_  # at least two (the label check)
        targets = binarizer.transform(labels).astype(np.float64)
        self._coef = self._fit(X, targets, sample_weight, checkpoint)
        self.dual_coef_ = self._coef
        return self

    def _labels(self, y: Any, n: int) -> np.ndarray:
        """Class labels as numpy (lazy labels are read once: they are small)."""
        if y is None:
            raise InputError(
                f"{type(self).__name__} requires y to be passed, but the target y is None."
            )
        values = y.data if is_data_array(y) else y
        if isinstance(values, da.Array):
            values = compute(values)[0]
        values = np.asarray(values)
        if values.ndim != 1 or values.shape[0] != n:
            raise InputError(
                f"y must hold one class label per training row, shape ({n},); got {values.shape}."
            )
        class_labels(values, name="y", owner=type(self).__name__)  # the one label check
        return values

    def decision_function(self, X: Any) -> Any:
        """Decision values: (n,) for two classes (> 0 means ``classes_[1]``), else (n, C)."""
        out, info = self._decision(X)
        if out.shape[1] == 1:
            out = out[:, 0]
        return wrap_rows(out, info, column_dim="class", name="decision")

    def predict(self, X: Any) -> Any:
        """Class labels (lazy for lazy input)."""
        out, info = self._decision(X)
        index = (out[:, 0] > 0).astype(np.intp) if out.shape[1] == 1 else out.argmax(axis=1)
        labels = index.map_blocks(self.classes_.take, dtype=self.classes_.dtype)
        return wrap_rows(labels, info, name="label")


# --- hyperparameters chosen for the user ----------------------------------------------------


def _entry_variance(sample: Any) -> float:
    """The variance of all entries of the sampled rows (``gamma="scale"``), sparse too."""
    if not scipy.sparse.issparse(sample):
        return float(np.var(sample))
    size = float(sample.shape[0]) * float(sample.shape[1])
    values = sample.data.astype(np.float64)
    mean = float(values.sum()) / size
    return max(float(np.dot(values, values)) / size - mean * mean, 0.0)


class _Search:
    """The CV estimators' hyperparameter step (see :mod:`npt_dask.ridge.search`)."""

    alphas: Any
    gammas: Any
    search_rows: int
    held_out: float
    kernel: Any
    degree: float
    coef0: float
    kernel_params: Any
    landmarks: Any
    random_state: Any
    _precomputed: bool
    _score: Any = None
    _param_table: tuple[Param, ...] = RIDGE_CV_PARAMS

    def _spec_of(self, gamma: Any, sample: Any) -> KernelSpec:
        """The kernel of ``gamma``, resolved on the sampled rows (dense or sparse)."""
        spec = make_kernel(self.kernel, gamma=gamma, degree=self.degree, coef0=self.coef0,
                           kernel_params=self.kernel_params)  # fmt: skip
        variance = _entry_variance(sample) if spec.needs_variance else None
        return spec.resolve(sample.shape[1], variance)

    def _grid(self, sample: np.ndarray) -> list[Any]:
        """The candidate gammas: given, or multiples of ``gamma="scale"`` on the sample
        (``[None]`` for a kernel without gamma, or a precomputed one)."""
        if self._precomputed:
            return [None]
        if self.gammas is not None:  # each finite and > 0: checked by the table
            return [float(g) for g in np.asarray(self.gammas, dtype=np.float64).ravel()]
        if "gamma" not in self._spec_of(1.0, sample[:1]).to_dict():
            return [None]
        scale = self._spec_of("scale", sample).to_dict()["gamma"]
        return [factor * scale for factor in GAMMA_FACTORS]

    def _hyper(self, rows: da.Array, t: Any, weights: Any) -> tuple[Any, Any]:
        alphas = np.asarray(self.alphas, dtype=np.float64).ravel()  # checked by the table
        result = search(
            rows, t, weights, spec_for=None if self._precomputed else self._spec_of,
            gammas=self._grid, alphas=alphas.tolist(), landmarks=self.landmarks,
            score=self._score, rng=np.random.default_rng(self.random_state),
            search_rows=self.search_rows, held_out=self.held_out,
        )  # fmt: skip
        self.best_score_ = result.best_score  # the chosen pair's (ties: the grid's middle)
        self.cv_results_ = result.as_dict()
        self.alpha_ = result.alpha
        return result.alpha, result.gamma


class KernelRidgeCV(_Search, KernelRidge):
    """Kernel ridge regression with gamma and alpha chosen by held-out R^2 on a subproblem.

    The search (:mod:`npt_dask.ridge.search`): before the full fit, ``search_rows``
    rows drawn uniformly (seeded by ``random_state``) make a subproblem, a share
    ``held_out`` of them held out; for each gamma its kernel is evaluated once, for
    each alpha one Cholesky factorisation is solved (the penalty per row kept:
    ``alpha * rows / n``) and scored on the held-out rows; the full fit takes the
    best pair, scores within one part in a thousand of the best being ties broken toward
    the middle of the grids (the ends are where a grid is too short). Cost:
    ``len(gammas)`` kernel evaluations and ``len(gammas) * len(alphas)`` factorisations
    of the subproblem's size (at most ``search_rows``, or its landmarks) -- seconds to a
    minute with the defaults -- recorded in ``cv_results_["seconds"]``.

    Parameters
    ----------
    alphas : sequence of float, default ``logspace(-6, 1, 8)``
        Candidate alphas, in the full problem's units (:class:`KernelRidge`'s alpha).
    gammas : sequence of float, optional
        Candidate gammas; None: ``(0.25, 0.5, 1, 2, 4)`` times ``gamma="scale"``
        (``1 / (d var X)`` on the subproblem's rows) for kernels that take a gamma.
    search_rows : int, default 10000
    held_out : float, default 0.2
    kernel : str or callable, default "rbf"
        As :class:`KernelRidge`'s, but for its default: a search over gammas needs a
        kernel that takes one.
    degree, coef0, kernel_params, landmarks, landmark_method, solver, tol, max_iter
        As :class:`KernelRidge`.
    precision, random_state, memory_budget, device_memory_budget, chunk_size, progress
        As :class:`KernelRidge`.

    Attributes
    ----------
    alpha_, gamma_ : the chosen pair (``gamma_`` resolved)
    best_score_ : float
        Its held-out score (accuracy for the classifier, R^2 for the regressor).
    cv_results_ : dict
        Every candidate's score (``scores[g][a]``), the subproblem's sizes, seconds.
    and the attributes of the estimator it extends.

    Examples
    --------
    >>> import numpy as np
    >>> from npt_dask import KernelRidgeCV
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, (400, 1))
    >>> y = np.sin(X[:, 0]) + rng.normal(0, 0.1, 400)
    >>> est = KernelRidgeCV(random_state=0).fit(X, y)
    >>> round(float(est.best_score_), 2) > 0.9
    True
    """

    _score = staticmethod(r2_score)

    def __init__(
        self,
        alphas: Any = _S["alphas"],
        *,
        gammas: Any = _S["gammas"],
        search_rows: int = _S["search_rows"],
        held_out: float = _S["held_out"],
        kernel: Any = _S["kernel"],
        degree: float = _S["degree"],
        coef0: float = _S["coef0"],
        kernel_params: dict | None = _S["kernel_params"],
        landmarks: Any = _S["landmarks"],
        landmark_method: str = _S["landmark_method"],
        solver: str = _S["solver"],
        tol: float = _S["tol"],
        max_iter: int = _S["max_iter"],
        precision: str | None = _S["precision"],
        random_state: Any = _S["random_state"],
        memory_budget: int | str | None = _S["memory_budget"],
        device_memory_budget: int | str | None = _S["device_memory_budget"],
        chunk_size: int | None = _S["chunk_size"],
        progress: bool = _S["progress"],
    ) -> None:
        self.alphas = alphas
        self.gammas = gammas
        self.search_rows = search_rows
        self.held_out = held_out
        self.kernel = kernel
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.landmarks = landmarks
        self.landmark_method = landmark_method
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.precision = precision
        self.random_state = random_state
        self.memory_budget = memory_budget
        self.device_memory_budget = device_memory_budget
        self.chunk_size = chunk_size
        self.progress = progress


class KernelRidgeClassifierCV(_Search, KernelRidgeClassifier):
    """Kernel ridge classification with gamma and alpha chosen by held-out squared error
    of the ±1 targets on a subproblem.

    The search (:mod:`npt_dask.ridge.search`): before the full fit, ``search_rows``
    rows drawn uniformly (seeded by ``random_state``) make a subproblem, a share
    ``held_out`` of them held out; for each gamma its kernel is evaluated once, for
    each alpha one Cholesky factorisation is solved (the penalty per row kept:
    ``alpha * rows / n``) and scored on the held-out rows; the full fit takes the
    best pair, scores within one part in a thousand of the best being ties broken toward
    the middle of the grids (the ends are where a grid is too short). Cost:
    ``len(gammas)`` kernel evaluations and ``len(gammas) * len(alphas)`` factorisations
    of the subproblem's size (at most ``search_rows``, or its landmarks) -- seconds to a
    minute with the defaults -- recorded in ``cv_results_["seconds"]``.

    Parameters
    ----------
    alphas : sequence of float, default ``logspace(-6, 1, 8)``
        Candidate alphas, in the full problem's units (:class:`KernelRidge`'s alpha).
    gammas : sequence of float, optional
        Candidate gammas; None: ``(0.25, 0.5, 1, 2, 4)`` times ``gamma="scale"``
        (``1 / (d var X)`` on the subproblem's rows) for kernels that take a gamma.
    search_rows : int, default 10000
    held_out : float, default 0.2
    kernel : str or callable, default "rbf"
        As :class:`KernelRidge`'s, but for its default: a search over gammas needs a
        kernel that takes one.
    degree, coef0, kernel_params, landmarks, landmark_method, solver, tol, max_iter
        As :class:`KernelRidge`.
    precision, random_state, memory_budget, device_memory_budget, chunk_size, progress
        As :class:`KernelRidge`.

    Attributes
    ----------
    alpha_, gamma_ : the chosen pair (``gamma_`` resolved)
    best_score_ : float
        Its held-out score: ``1 - mean squared error`` of its ±1 targets (continuous,
        unlike accuracy, which ties most alphas on a few thousand held-out rows).
    cv_results_ : dict
        Every candidate's score (``scores[g][a]``), the subproblem's sizes, seconds.
    and the attributes of the estimator it extends.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import make_moons
    >>> from npt_dask import KernelRidgeClassifierCV
    >>> X, y = make_moons(400, noise=0.2, random_state=0)
    >>> clf = KernelRidgeClassifierCV(random_state=0).fit(X, y)
    >>> clf.best_score_ > 0.8, clf.score(X, y) > 0.9  # 1 - squared error; accuracy
    (True, True)
    """

    _score = staticmethod(target_score)

    __init__ = KernelRidgeCV.__init__


# --- loading a saved estimator --------------------------------------------------------------

_SAVED = {cls.__name__: cls for cls in (KernelRidge, KernelRidgeClassifier, KernelRidgeCV,
                                        KernelRidgeClassifierCV)}  # fmt: skip


def load_ridge(
    path: str | os.PathLike, *, verify: bool = True
) -> KernelRidge | KernelRidgeClassifier:
    """Load a kernel ridge estimator saved by :meth:`KernelRidge.save` (any of the four
    estimators, as it was saved): it predicts bit for bit as the saved one did, without
    refitting.

    ``verify`` re-computes the SHA-256 of every array against the manifest (CRC32C
    checks of each chunk happen regardless). Refused: anything altered or damaged
    (:class:`~npt_dask.errors.StoreIntegrityError`), a newer store layout
    (:class:`~npt_dask.errors.StoreVersionError`), an NPT model (load it with
    :func:`npt_dask.load`); another scikit-learn major.minor than the saving one's is a
    :class:`~npt_dask.errors.StoreVersionWarning`.
    """
    stored = ridge_store.read(path, verify=verify)
    cls = _SAVED.get(stored.manifest.estimator)
    if cls is None:
        raise StoreIntegrityError(
            f"{stored.path} holds an estimator named {stored.manifest.estimator!r}, which is "
            f"none of {sorted(_SAVED)}; the store is damaged (or from a newer npt-dask)."
        )
    estimator = cls()
    known = estimator.get_params(deep=False)
    params = stored.manifest.parameters()
    unknown = sorted(set(params) - set(known))
    if unknown:
        warn(
            f"{stored.path} records parameters {unknown} that this npt-dask's {cls.__name__} "
            "does not have (saved by a newer version?); they are left out.",
            StoreWarning,
        )
    estimator.set_params(**{k: v for k, v in params.items() if k in known})
    estimator._restore(stored)
    return estimator
