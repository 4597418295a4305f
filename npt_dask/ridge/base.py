"""What the kernel ridge estimators share (:class:`KernelRidgeBase`): their parameters,
the checks of their input, the fit through the plan, decision values, the certificate
and the store. The estimators are :mod:`~npt_dask.ridge.regressor` (``KernelRidge``),
:mod:`~npt_dask.ridge.classifier` (``KernelRidgeClassifier``) and
:mod:`~npt_dask.ridge.cv` (the two that search ``alpha`` and ``gamma``).

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
and memory, and says why; the routes are :mod:`npt_dask.ridge.routes`.

Input is numpy, scipy.sparse, dask or xarray (a DataArray's ``sample`` dim,
else its first); ``kernel="precomputed"`` takes the kernel matrix (n x n to
fit, m x n to predict, read block by block). numpy in, numpy out; lazy in,
lazy out.
"""

from __future__ import annotations

import itertools
import numbers
from pathlib import Path
from typing import Any

import array_api_compat
import dask.array as da
import numpy as np
import scipy.linalg
import scipy.sparse
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, validate_data

from npt_dask.arrays.device import check_device, to_device
from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import namespace_of
from npt_dask.engine.budget import resolve_device_budget, resolve_memory_budget
from npt_dask.engine.centres import certificate, check_landmarks, select_landmarks
from npt_dask.engine.consumers import Apply
from npt_dask.engine.passes import Centres, map_rows
from npt_dask.engine.rows import Rows
from npt_dask.errors import (
    CheckpointError,
    InputError,
    InputTypeError,
    RidgeWarning,
    StoreIntegrityError,
    warn,
)
from npt_dask.kernels import PRECOMPUTED, KernelSpec, make_kernel
from npt_dask.linalg.preconditioners import FALKON_JITTER, factor_with_jitter
from npt_dask.params.constraints import (
    Param,
    table_defaults,
)
from npt_dask.ridge.centre_rows import centre_kernel, centre_rows
from npt_dask.ridge.checkpoint import Checkpoint
from npt_dask.ridge.magnitudes import check_magnitudes
from npt_dask.ridge.params import RIDGE_PARAMS
from npt_dask.ridge.planning import RidgePlan, plan_ridge, solve_ridge
from npt_dask.ridge.problem import RidgeProblem
from npt_dask.ridge.routes import current_name, route_named
from npt_dask.ridge.scale_warnings import warn_ridge_scale
from npt_dask.runtime.inputs import (
    DEFAULT_CHUNK_SIZE,
    InputInfo,
    align_rows,
    as_kernel_matrix,
    as_row_chunked,
    check_known_chunks,
    data_variance,
    feature_names,
    is_data_array,
    is_lazy,
    is_sparse_rows,
    match_features,
)
from npt_dask.runtime.places import check_output_place
from npt_dask.runtime.progress import progress_label
from npt_dask.runtime.scheduler import compute, persist_blocks, task_threads, worker_processes
from npt_dask.storage import ridge_store

__all__ = [
    "CERTIFICATE_ROWS",
    "KernelRidgeBase",
]


_D = table_defaults(RIDGE_PARAMS)  # the signatures' defaults: the parameter tables'
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


def on_a_device(a: Any) -> bool:
    """Whether ``a`` is an array of a library other than numpy (a device's: CuPy's), not
    a dask array or a DataArray."""
    return (array_api_compat.is_array_api_obj(a) and not isinstance(a, np.ndarray | np.generic)
            and not isinstance(a, da.Array) and not is_data_array(a))  # fmt: skip


def _as_array(values: Any) -> Any:
    """``values`` as numpy, unless dask or a device's array (kept where they are)."""
    values = values.data if is_data_array(values) else values
    return values if isinstance(values, da.Array) or on_a_device(values) else np.asarray(values)


def _weight_array(sample_weight: Any, n: int) -> Any:
    """Sample weights as ``(n,)`` numpy, dask or a device's array (a number: every row's),
    shape and dtype checked, values not read; None stays None."""
    if sample_weight is None:
        return None
    if isinstance(sample_weight, numbers.Real):
        sample_weight = np.full(n, float(sample_weight))
    w = _as_array(sample_weight)
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
    if isinstance(targets, da.Array):  # numpy and a device's targets: checked by _targets
        checks["targets"] = da.isfinite(targets).all()
    if w is not None:
        xp: Any = da if isinstance(w, da.Array) else namespace_of(w)
        checks |= {"finite": xp.all(xp.isfinite(w)), "positive": xp.all(w >= 0),
                   "some": xp.any(w != 0)}  # fmt: skip
    values = compute(*checks.values())
    if any(on_a_device(v) for v in values):  # a device's flags: one crossing
        values = to_host(tuple(values))
    flags = dict(zip(checks, (bool(v) for v in values), strict=True))
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
    return w.astype(np.float64) if not on_a_device(w) else namespace_of(w).astype(
        w, namespace_of(w).float64)  # fmt: skip


def _say_iterative_exact(plan: RidgePlan, solver: str) -> None:
    """One :class:`~npt_dask.errors.RidgeWarning` when ``solver="auto"`` solves exact kernel
    ridge iteratively (its kernel matrix does not fit the budget): the plan's reason,
    which names the tolerance and what scikit-learn's exact solve would need."""
    route = route_named(plan.route, plan.exact)
    if plan.exact and route.iterative and solver == "auto":
        reason = plan.reason.removeprefix(f"{route.solver}: ")
        warn(f"Exact kernel ridge (landmarks=None) is not solved exactly: {reason}.",
             RidgeWarning)  # fmt: skip


_NOT_FINITE_Y = "y contains NaN or infinity; pass finite targets."


def _host_block(block: Any) -> np.ndarray:
    """Task body: a result block in host memory (one crossing a chunk)."""
    return np.asarray(to_host(block))


class KernelRidgeBase(BaseEstimator):
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
        device: str | None = _D["device"],
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
        self.device = device
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
        values = _as_array(y)
        check_known_chunks(values, "y")
        if values.ndim not in (1, 2) or values.shape[0] != n:
            raise InputError(
                f"y must have one target (or row of targets) per training row, shape ({n},) "
                f"or ({n}, k); got {values.shape}."
            )
        if np.dtype(values.dtype).kind not in "biuf":
            raise InputTypeError(f"y must be numeric; got dtype {values.dtype}.")
        ndim = values.ndim
        if on_a_device(values):  # stays there: one flag crosses, the route moves nothing
            xp = namespace_of(values)
            if not bool(to_host(xp.all(xp.isfinite(values)))):
                raise InputError(_NOT_FINITE_Y)
            return xp.astype(xp.reshape(values, (n, -1)), xp.float64), ndim
        if not isinstance(values, da.Array) and not np.isfinite(values).all():
            raise InputError(_NOT_FINITE_Y)  # lazy targets: read with the weights
        values = values.reshape(n, -1).astype(np.float64)
        return values, ndim

    def _rows(self, X: Any, *, fitting: bool) -> tuple[Rows, bool]:
        """The rows of a call, decided once (:class:`~npt_dask.engine.rows.Rows`): the checked
        X as row chunks (:meth:`_chunked`), on the device ``device="gpu"`` names (moved
        there at this entrance: :func:`~npt_dask.arrays.device.to_device`), and whether they
        were moved (their results then come back in host memory, as they came)."""
        rows, info = self._chunked(X, fitting=fitting)
        on = Rows.of(rows, info)
        if check_device(self.device) == "cpu" or not on.numpy:
            return on, False
        if is_sparse_rows(rows):
            raise InputTypeError(
                "device='gpu' takes dense rows: the device holds no sparse chunks. Pass X "
                "dense (X.toarray()), or use device='cpu'."
            )
        return Rows.of(to_device(rows, "gpu"), info), True

    def _spec(self, rows: da.Array, gamma: Any) -> KernelSpec:
        spec = make_kernel(
            self.kernel, gamma=gamma, degree=self.degree, coef0=self.coef0,
            kernel_params=self.kernel_params,
        )  # fmt: skip
        variance = data_variance(rows) if spec.needs_variance else None
        return spec.resolve(int(rows.shape[1]), variance)

    def _centres(
        self, rows: da.Array, spec: KernelSpec, held: Checkpoint | None
    ) -> np.ndarray | None:  # the rows' dask array: the landmark choice reads them
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
        if checkpoint is not None:  # where no file can go: refused before any pass
            check_output_place(checkpoint, f"The checkpoint {checkpoint}", error=CheckpointError)
        on, _ = self._rows(X, fitting=True)
        rows = on.data
        n, k = int(rows.shape[0]), int(t.shape[1])
        weights = _checked_values(t, sample_weight, n)
        check_magnitudes(t, weights, str(rows.dtype))  # before any pass, the search's too
        alpha, gamma = self._hyper(rows, t, weights)
        alphas = _alphas(alpha, k, type(self).__name__)
        spec = self._spec(rows, gamma)
        warn_ridge_scale(rows, rows, spec, fitting=True)
        if checkpoint is None:
            return self._solve(on, X, t, weights, alphas, spec, None)
        with Checkpoint(checkpoint) as held:  # locked for the whole fit
            return self._solve(on, X, t, weights, alphas, spec, held)

    def _solve(
        self, on: Rows, X: Any, t: Any, weights: Any, alphas: np.ndarray,
        spec: KernelSpec, held: Checkpoint | None,
    ) -> np.ndarray:  # fmt: skip
        """Centres, plan and solve; the fitted attributes; the dual coefficients."""
        rows = on.data
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
        centre_x = (  # gathered once, where the rows live; their host copy is X_fit_
            centre_rows(on, centres) if centres is not None and not spec.precomputed else None
        )
        centre_host = centre_x if centre_x is None or on.numpy else np.asarray(on.host(centre_x))
        problem = RidgeProblem(on, spec, t, weights, alphas, centres, plan, self.random_state,
                               self.landmark_method, centre_x, centre_host)  # fmt: skip
        with progress_label(type(self).__name__):  # the command line's own name wins
            solution = solve_ridge(problem, checkpoint=held, progress=self.progress)
        plan = solution.plan or plan  # as the route refined it once built
        self.kernel_ = spec
        self.gamma_ = getattr(spec, "gamma", None)
        self.landmarks_ = centres
        self.plan_ = plan.to_dict()
        self.solver_ = route_named(plan.route, plan.exact).solver
        self.n_iter_ = solution.iterations
        self.residuals_ = np.asarray(solution.residuals)
        self.fit_seconds_ = dict(solution.seconds)
        self.solve_details_ = dict(solution.details)
        self.dtype_ = rows.dtype
        self._n_train = n
        if centres is None:  # every row a centre: the rows themselves (lazy stays lazy)
            self.X_fit_ = rows if is_lazy(X) else X
        elif not spec.precomputed:
            self.X_fit_ = centre_host
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

    def _decision(self, X: Any) -> tuple[Any, InputInfo, bool]:
        """Lazy ``(n, k)`` decision values ``kappa(X, centres) c`` where the rows live (the
        ``meta`` of their array type), X's input info, and whether ``device=`` moved the
        rows there (then :meth:`_returned` brings the results back)."""
        check_is_fitted(self, "dual_coef_")
        on, moved = self._rows(self._checked(X, reset=False), fitting=False)
        info = on.info
        assert info is not None
        if self.X_fit_ is not None and not info.lazy:  # lazy rows are not read here
            warn_ridge_scale(on.data, self.X_fit_, self.kernel_, fitting=False)
        if self.kernel_.precomputed and self.landmarks_ is not None:
            on = on.like(on.data[:, self.landmarks_].rechunk({1: tuple(self._panel_sizes())}))
        out = map_rows(on, self._prediction_centres(), self.kernel_, Apply(),
                       width=self._coef.shape[1])  # fmt: skip
        return out, info, moved

    @staticmethod
    def _returned(out: da.Array, moved: bool) -> da.Array:
        """A lazy result in the user's memory: rows that ``device=`` moved to the device
        come back to the host chunk by chunk (their results are what the user reads);
        rows that came there stay there."""
        if not moved:
            return out
        meta = np.empty((0,) * out.ndim, dtype=out.dtype)
        return da.map_blocks(_host_block, out, dtype=out.dtype, meta=meta)

    def certificate(
        self, X: Any, *, rows: int = CERTIFICATE_ROWS, random_state: Any = None
    ) -> dict[str, Any]:
        """Lemma 5 for the landmarks: how much of each row's feature vector is outside the
        span of the centres' (uncentred), on a uniform sample of ``rows`` rows of ``X``.

        The residual of a row is ``sqrt(kappa(x, x) - k^T K_mm^-1 k)`` (``k = kappa(L, x)``):
        0 for a row the centres span, ``sqrt(kappa(x, x))`` for one orthogonal to them. The
        summary is :func:`npt_dask.engine.centres.certificate`'s (mean, max, quantiles,
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
        on, _ = self._rows(self._checked(X, reset=False), fitting=False)
        n = on.n
        rng = np.random.default_rng(random_state)
        idx = np.sort(rng.choice(n, min(n, int(rows)), replace=False))
        sample = np.asarray(centre_rows(on, idx, host=True), dtype=np.float64)
        centres = np.asarray(self.X_fit_, dtype=np.float64)
        kmm = centre_kernel(self.kernel_, centres)
        jitter = factor_with_jitter(kmm, floor=FALKON_JITTER["float64"] * len(centres))
        inside = scipy.linalg.blas.dtrsm(1.0, kmm, self.kernel_(centres, sample), lower=0,
                                         trans_a=1)  # fmt: skip
        energy = self.kernel_.diag(sample)
        res = np.sqrt(np.maximum(energy - np.einsum("ij,ij->j", inside, inside), 0.0))
        return certificate(res, energy) | {"rows_sampled": len(idx), "jitter": jitter}

    # --- persistence -----------------------------------------------------------------------

    def save(self, path: Any, *, overwrite: bool = False, input_transform: Any = None) -> Path:
        """Write the fitted estimator to a zarr v3 store at ``path``, atomically and
        checksummed, without pickle (:mod:`npt_dask.storage.ridge_store`); :func:`load_ridge`
        reads it back, predicting bit for bit as this one.

        Stored: the hyperparameters (a ``random_state`` that is a Generator is stored as
        None: the fit's draw is in the stored landmarks), the resolved kernel, the dual
        coefficients and the centres (every training row for exact ridge, the landmark
        rows otherwise), the classes, the feature names, the plan and solve details, the
        CV results, and the npt-dask and scikit-learn versions. A model already at
        ``path`` is replaced only with ``overwrite=True``; a callable kernel, and a path
        inside a zarr store or array, are refused (a function is code). Returns the path.

        ``input_transform`` (``{"scale": S, "image_shape": shape}``, optional) records how
        the rows given to ``fit`` were made from their files: images of ``image_shape``
        flattened, then divided by ``S`` (``npt ridge --out`` records its own, and
        ``npt ridge --model`` does the same to the rows it predicts; :func:`load_ridge`
        warns that the rows to predict need it too).
        """
        check_is_fitted(self, "dual_coef_")
        return ridge_store.save(
            self._state(), path, overwrite=overwrite, input_transform=input_transform
        )

    _FITTED = ("solver_", "n_iter_", "plan_", "fit_seconds_", "solve_details_", "gamma_",
               "alpha_", "best_score_")  # fmt: skip

    def _state(self) -> ridge_store.RidgeState:
        """The fitted estimator as :class:`~npt_dask.storage.ridge_store.RidgeState` data."""
        params = self.get_params(deep=False)
        if not isinstance(params.get("random_state"), numbers.Integral | None):
            params["random_state"] = None  # a Generator: its draw is in the landmarks
        params["device"] = None  # where the rows ran is each call's, not the model's
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
        if isinstance(getattr(self, "plan_", None), dict) and "route" in self.plan_:
            plan = dict(self.plan_)  # a route named before routes had unique names
            plan["route"] = current_name(str(plan["route"]), bool(plan.get("exact")))
            self.plan_ = plan
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


# --- hyperparameters chosen for the user ----------------------------------------------------


# --- loading a saved estimator --------------------------------------------------------------
