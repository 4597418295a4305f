"""``npt_dask.fit``: validate, choose a solver, solve, assemble the model.

Each step is its own small function; :func:`fit` only strings them together.
No I/O and no logging happen here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import dask.array as da
import numpy as np
from dask.array.core import normalize_chunks

from npt_dask.arrays.device import check_device, persist_on_device, to_device
from npt_dask.arrays.host import to_host
from npt_dask.engine.budget import resolve_device_budget, resolve_memory_budget
from npt_dask.engine.centres import LandmarkMethod, certificate, check_landmarks, select_landmarks
from npt_dask.engine.operator import Cache, KernelOperator, drop_zero_features
from npt_dask.engine.passes import as_rows
from npt_dask.engine.rows import Rows
from npt_dask.errors import (
    ConvergenceWarning,
    InputError,
    KernelScaleWarning,
    ScratchError,
    warn,
)
from npt_dask.kernels import KernelSpec, NamedKernel, make_kernel, resolve_kernel
from npt_dask.kernels.params import DEFAULT_RTOL, DEFAULT_TOL, Precision, kernel_named
from npt_dask.npt.eigen import (
    DriverPanels,
    EigenResult,
    block_krylov_eigh,
    dense_eigh,
    select_eigenpairs,
)
from npt_dask.npt.fitted import SolverDiagnostics
from npt_dask.npt.model import NPTModel
from npt_dask.npt.panels import ChunkedPanels, scratch_root
from npt_dask.npt.params import Basis, FitParams, OnNegative, Solver, SolverAlias, fit_defaults
from npt_dask.npt.planning import (
    FitPlan,
    certificate_bytes,
    default_block_size,
    max_rank,
    plan_fit,
)
from npt_dask.npt.projector import balanced_rows
from npt_dask.npt.scale_warnings import warn_kernel_scale
from npt_dask.npt.training import device_targets, host_values, linear_moments, training_pass
from npt_dask.runtime.inputs import (
    InputInfo,
    align_rows,
    as_kernel_matrix,
    as_row_chunked,
    check_finite_eagerly,
    data_variance,
    feature_names,
)
from npt_dask.runtime.labels import check_labels_or_targets
from npt_dask.runtime.progress import FitProgress, count
from npt_dask.runtime.scheduler import compute, current_client, numpy_rows, task_threads

__all__ = ["fit", "fit_params", "plan_for"]

_D = fit_defaults()  # the signature's defaults come from the one parameter table


def plan_for(x: Rows | da.Array, params: FitParams) -> FitPlan:
    """The :class:`~npt_dask.npt.planning.FitPlan` of fitting the row-chunked ``x`` with ``params``.

    With ``landmarks``, the plan is for the m landmark rows (chunked like X), and its
    device part counts the certificate pass over X too
    (:func:`~npt_dask.npt.planning.certificate_bytes`); with a warm ``start`` the block
    is as wide as the wanted components.
    """
    x = as_rows(x).data
    rows = _training_chunks(x, params.landmarks)
    _check_landmark_rank(params, sum(rows))
    r = params.n_components
    width = params.block_size
    if params.start is not None and width is None and r is not None:
        width = default_block_size(r)
    plan = plan_fit(
        n=sum(rows),
        d=int(x.shape[1]),
        n_components=r,
        row_chunks=rows,
        itemsize=x.dtype.itemsize,
        center=params.center,
        solver=params.solver,
        cache=params.cache,
        memory_budget=resolve_memory_budget(params.memory_budget),
        block_size=width,
        max_basis=params.max_basis,
        threads=task_threads(),
        basis=params.basis,
        cluster=current_client() is not None,
        device_memory_budget=resolve_device_budget(params.device_memory_budget, x),
    )
    if params.landmarks is None:
        return plan
    return plan.with_certificate(
        certificate_bytes(
            chunk=max(int(c) for c in x.chunks[0]), m=plan.n, d=int(x.shape[1]),
            n_components=plan.n_components or plan.n, itemsize=x.dtype.itemsize,
            threads=plan.threads, device=plan.device_memory_budget is not None,
        )
    )  # fmt: skip


def _training_chunks(x: da.Array, landmarks: Any) -> tuple[int, ...]:
    if landmarks is None:
        return tuple(int(c) for c in x.chunks[0])
    checked = check_landmarks(landmarks, int(x.shape[0]))
    m = checked if isinstance(checked, int) else len(checked)
    return tuple(normalize_chunks((max(x.chunks[0]),), (m,))[0])


def _check_spanned_rank(params: FitParams, found: int) -> None:
    """Refuse more components than the rows RPCholesky found can give (it stops early when
    they already span every candidate row: duplicated or low-rank data)."""
    r, most = params.n_components, max_rank(found, params.center)
    if r is not None and r > most:
        raise InputError(
            f"landmark_method='rpcholesky' stopped at {found} of {params.landmarks} landmarks: "
            f"those rows already span the others to rounding (X has about rank {found} in "
            f"this kernel's feature space), so a model has at most {most} components. "
            f"Lower n_components to {most} or less."
        )


def _check_landmark_rank(params: FitParams, m: int) -> None:
    r, most = params.n_components, max_rank(m, params.center)
    if params.landmarks is not None and r is not None and r > most:
        raise InputError(
            f"n_components={r} is more than a model on {m} landmarks can have (at most {most}"
            f"{', centred' if params.center else ''}); lower n_components or raise landmarks."
        )


def _solve_dense(x: Rows, kernel: KernelSpec, params: FitParams, plan: FitPlan):
    n = x.n
    report = FitProgress(params.n_components or n, 0.0, enabled=params.progress)
    try:
        report.stage(f"dense solver: kernel matrix {n:,} x {n:,}")
        op = KernelOperator(x, kernel, center=params.center, kept=())
        gram = op.explicit()
        m = op.row_means if params.center else np.zeros(n)
        g = float(m.mean())
        report.stage(f"dense solver: eigendecomposition of the {n:,} x {n:,} matrix")
        return dense_eigh(gram, params.n_components), m, g
    finally:
        report.close()


def _solve_krylov(x: Rows, kernel: KernelSpec, params: FitParams, plan: FitPlan):
    n, r = x.n, int(params.n_components or 0)
    op = KernelOperator(x.like(drop_zero_features(x.data, kernel)), kernel, center=params.center,
                        kept=plan.kept)  # fmt: skip
    assert op.row_chunks == plan.row_chunks, "the operator's blocks are the plan's"
    rng = np.random.default_rng(params.random_state)
    panels: DriverPanels | ChunkedPanels
    if plan.basis == "chunked":
        panels = ChunkedPanels(op.chunked_matmat, op.row_chunks, plan.block_size)
    else:
        panels = DriverPanels(op.matmat, n, op.row_chunks)
    tol = _tolerance(params, x.data.dtype)
    report = FitProgress(r, tol, enabled=params.progress)
    report.stage(  # a line at once: the first pass over a large kernel takes a while
        f"Krylov solver, n = {n:,}, r = {r}, block {plan.block_size}, basis {plan.basis}: "
        "first pass"
    )
    try:
        start = _start_block(x, params, plan.block_size, rng, panels)
        result = block_krylov_eigh(
            op.matmat,
            n,
            r,
            block_size=plan.block_size,
            tol=tol,
            max_passes=params.max_passes,
            max_basis=plan.max_basis,
            start=start,
            random_state=rng,
            callback=report,
            panels=panels,
            explicit=op.explicit,
            explicit_path=plan.explicit,
        )
        m = op.row_means if params.center else np.zeros(n)
    finally:
        report.close()
        op.release()
        if isinstance(panels, ChunkedPanels):
            panels.close()
    return result, m, (float(m.mean()) if params.center else 0.0)


@contextlib.contextmanager
def _scratch_errors(on_disk: bool) -> Iterator[None]:
    """Turn an OSError of the on-disk Krylov basis into a ScratchError naming the fix."""
    try:
        yield
    except OSError as exc:
        if not on_disk:
            raise
        raise ScratchError(
            f"basis='chunked' keeps the Krylov basis in .npy files under dask's "
            f"temporary-directory ({scratch_root()}), and writing there failed: {exc}. "
            "Point it at a writable directory with room (dask.config.set("
            "{'temporary-directory': '/path'}) or DASK_TEMPORARY_DIRECTORY=/path), or keep "
            "the basis in this process with basis='driver'."
        ) from exc


def _start_block(
    x: Rows,
    params: FitParams,
    width: int,
    rng: np.random.Generator,
    panels: DriverPanels | ChunkedPanels,
) -> Any:
    """The Krylov start, centred: Gaussian (one seeded draw per row chunk, the same for
    either panels), or a warm start's coordinates of X (random columns past r)."""
    if params.start is None:
        block = panels.random(rng, width)
    else:
        # sliced before computing: no more than n x width of the start's coordinates
        warm = warm_coordinates(params.start, x.data)[:, :width]
        if isinstance(panels, ChunkedPanels):  # the panels live in host memory (or disk)
            warm = panels.keep(_host_chunks(warm.astype(np.float64).rechunk({1: -1}), x))
            size = float(np.sqrt(np.sum(panels.norms(warm) ** 2)))
        else:
            warm = np.asarray(to_host(compute(warm)[0]), dtype=np.float64)
            size = float(np.linalg.norm(warm))
        extra = panels.random(rng, width - int(warm.shape[1]))
        scale = size / np.sqrt(max(int(warm.shape[0]) * int(warm.shape[1]), 1))
        block = panels.hstack([warm, extra * scale])
    if params.center:
        block = block - block.mean(axis=0, keepdims=True)
    return block


def warm_coordinates(start: Any, x: da.Array) -> da.Array:
    """``start.transform(x)`` checked for a warm start: X's features, (n, r), finite.

    The finiteness check runs inside the tasks (no extra pass); each refusal
    names ``start=`` and the fix.
    """
    n, d = int(x.shape[0]), int(x.shape[1])
    features = getattr(start, "n_features", None)
    if isinstance(features, int | np.integer) and int(features) != d:
        raise InputError(
            f"start= is a model of {int(features)} features, but X has {d}. A warm start "
            "must be fitted on rows like X (e.g. a landmark model of X); pass such a "
            "model, or start=None."
        )
    coords = start.transform(x)
    coords = coords if isinstance(coords, da.Array) else da.asarray(np.asarray(coords))
    if coords.ndim != 2 or coords.shape[0] != n or coords.dtype.kind not in "biuf":
        raise InputError(
            f"start=.transform(X) returned {coords.dtype} of shape {coords.shape}; a warm "
            f"start needs the ({n}, r) coordinates of the {n} rows of X. Pass a fitted "
            "model of rows like X, or start=None."
        )
    return da.map_blocks(_finite_start, coords, dtype=coords.dtype)


def _host_chunks(a: da.Array, rows: Rows) -> da.Array:
    """A row-chunked array of the rows' namespace with its chunks in host memory: each
    chunk crosses once, in its task (on numpy ``a`` itself)."""
    if rows.numpy:
        return a
    return da.map_blocks(to_host, a, dtype=a.dtype, meta=np.empty((0,) * a.ndim, a.dtype))


def _finite_start(block: np.ndarray) -> np.ndarray:
    if not np.isfinite(block).all():
        raise InputError(
            "start=.transform(X) returned NaN or infinity, so it cannot start the solver. "
            "Pass a start model whose coordinates of X are finite, or start=None."
        )
    return block


def _tolerance(params: FitParams, dtype: np.dtype) -> float:
    return params.tol if params.tol is not None else DEFAULT_TOL[np.dtype(dtype).name]


def _warn_unconverged(result: EigenResult, tol: float) -> None:
    if not result.converged:
        warn(
            f"The Krylov solver stopped after {count(result.passes, 'pass', 'passes')} with a "
            "relative residual "
            f"of {float(result.residuals.max()):.3g} > tol={tol:g}. Raise max_passes or "
            "block_size, or loosen tol.",
            ConvergenceWarning,
        )


def fit(
    X: Any,
    kernel: str | KernelSpec | dict = _D["kernel"],
    *,
    gamma: float | str | None = _D["gamma"],
    degree: float | None = _D["degree"],
    coef0: float | None = _D["coef0"],
    kernel_params: dict[str, Any] | None = _D["kernel_params"],
    n_components: int | None = _D["n_components"],
    center: bool = _D["center"],
    solver: Solver | SolverAlias = _D["solver"],
    tol: float | None = _D["tol"],
    rtol: float | None = _D["rtol"],
    chunk_size: int | None = _D["chunk_size"],
    cache: Cache = _D["cache"],
    memory_budget: int | str | None = _D["memory_budget"],
    device_memory_budget: int | str | None = _D["device_memory_budget"],
    precision: Precision | None = _D["precision"],
    block_size: int | None = _D["block_size"],
    max_basis: int | None = _D["max_basis"],
    basis: Basis = _D["basis"],
    max_passes: int = _D["max_passes"],
    on_negative: OnNegative = _D["on_negative"],
    random_state: int | np.random.Generator | None = _D["random_state"],
    landmarks: int | Any | None = _D["landmarks"],
    landmark_method: LandmarkMethod = _D["landmark_method"],
    start: NPTModel | None = _D["start"],
    progress: bool = _D["progress"],
    device: str | None = _D["device"],
    labels: Any = None,
    targets: Any = None,
) -> NPTModel:
    """Fit the Nonlinear Projection Trick: top eigenpairs of the kernel matrix.

    Parameters
    ----------
    X : array-like, dask array or DataArray of shape (n, d)
        Training rows. A DataArray's sample dim is ``"sample"`` if present,
        else its first dim.
    kernel : str, callable, KernelSpec or dict
        ``"rbf"``, ``"laplacian"``, ``"polynomial"`` (``"poly"``), ``"sigmoid"``,
        ``"linear"`` or ``"cosine"`` (scikit-learn's definitions);
        ``"precomputed"``: X is the (n, n) kernel matrix of the training rows
        (numpy, dask or zarr-backed, read block by block); or a callable
        ``f(A, B, **kernel_params)`` returning the kernel block of two row
        blocks (a function of two single rows returning a number,
        scikit-learn's convention, works too, pair by pair; such a model
        cannot be saved). Default: ``start``'s kernel when ``start`` is given
        and no kernel argument is, else ``"rbf"``.
    kernel_params : dict, optional
        Parameters of a callable kernel ``f(A, B, **kernel_params)``, or the
        gamma/degree/coef0 of a named one (scikit-learn's KernelPCA argument).
    gamma, degree, coef0 : float, optional
        Kernel parameters, scikit-learn's defaults (``gamma = 1/d``); those the
        kernel does not use are ignored.
    n_components : int, optional
        Dimension r. ``None`` keeps the full effective rank (dense solver only).
    center : bool, default True
        Centre in feature space (kernel PCA). ``False`` gives the uncentred
        exact explicit feature map.
    solver : {"auto", "dense", "krylov"}
        ``"dense"`` materialises the n x n matrix (small n only); ``"krylov"``
        streams kernel blocks. ``"auto"``: dense for ``n_components=None``, for
        ``n <= 2000`` (:data:`~npt_dask.npt.planning.DENSE_MAX_SAMPLES`), or from
        ``n_components >= 0.15 n`` (:data:`~npt_dask.npt.planning.AUTO_DENSE_FRACTION`)
        when the explicit n x n matrix fits ``memory_budget``; else Krylov.
    tol : float, default 1e-8
        Krylov stopping rule on ``||K u - lambda u|| / lambda_1`` for all r pairs.
    rtol : float, optional
        Keep only eigenvalues above ``rtol * lambda_1`` (Lemma 1: r <= rank).
        Default 1e-10 for float64 kernel blocks, 1e-6 for float32 (below that
        an eigenvalue is rounding noise that ``Lambda^{-1/2}`` would amplify).
    chunk_size : int or None, default 4096
        Rows per kernel block. ``None`` keeps a dask input's row chunks.
    cache : {"auto", "recompute", "memory"}
        Keep kernel blocks between Krylov passes or recompute them; ``"auto"``
        keeps as many as ``memory_budget`` leaves room for and recomputes the
        rest (see :func:`npt_dask.engine.budget.kept_for`).
    memory_budget : int or str, optional
        Bytes the fit may hold beyond the input rows: the Krylov basis, work
        arrays, blocks in flight and kept blocks (or, for the dense solver, the
        n x n matrix); default a sixth of physical memory. An int, or a size with
        units as the command line takes it (``"40GB"``, ``"1.5GiB"``); a budget above
        the machine's memory warns (``MemoryBudgetWarning``).
    device_memory_budget : int or str, optional
        Bytes of device (GPU) memory the fit may hold when ``x`` lives on a device:
        the kernel blocks in flight and kept; units as ``memory_budget``; default a
        share of the device's free memory. Rows in host memory count against
        ``memory_budget`` alone (a value given for them warns).
    precision : {"float32", "float64"}, optional
        dtype of the kernel blocks. The Krylov passes multiply them in float64;
        projections (transform, npt.project, the training pass) multiply
        float32 blocks by float32 weights at BLAS's single-precision rate; every
        sum over blocks is float64.
        Default: float32 for float32 input, float64 otherwise.
    block_size : int, optional
        Krylov block width. Default: chosen by a cost model from the kernel
        work and the share of kept blocks (narrow when blocks are kept, wide
        when they are recomputed; see :func:`npt_dask.npt.planning.plan_fit`).
    max_basis : int, optional
        Most Krylov basis columns before a thick restart; default the fit
        plan's (:func:`npt_dask.npt.eigen.krylov_shape` for ``n_components >= 200``),
        fewer on the driver if ``2 * 8 * n * max_basis`` bytes would not fit in
        ``memory_budget`` and ``basis="driver"``.
    basis : {"auto", "driver", "chunked"}, default "auto"
        Where the Krylov basis ``Q``, its image ``K Q`` and the other n-row
        panels live. ``"driver"``: numpy arrays in this process
        (``16 n max_basis`` bytes). ``"chunked"``: row-chunked arrays on the
        workers of a ``distributed`` cluster, or ``.npy`` files under dask's
        ``temporary-directory`` with a local scheduler; this process then
        holds only ``max_basis x max_basis`` matrices and the result (see
        :mod:`npt_dask.npt.panels`). ``"auto"``: chunked only when the fit plan
        cannot give the solver its full basis within ``memory_budget`` here.
        Results agree to rounding.
    max_passes : int, default 50
        Most Krylov passes over the kernel.
    on_negative : {"warn", "raise"}
        What a significantly negative eigenvalue (non-PSD kernel) does; the
        negative part is always excluded, never silently.
    random_state : int or Generator, optional
        Seed of the Krylov start block.
    landmarks : int or array of row indices, optional
        Fit on m rows of X only (an int: chosen by ``landmark_method``, seeded
        by ``random_state``; or the row indices). The model's training set is
        the landmarks; every row of X is projected exactly onto their span
        (Theorem 2), and ``model.diagnostics.landmarks["certificate"]`` holds
        the Lemma 5 residual of every row of X (mean, max, quantiles, a
        histogram), from one projection pass.
    landmark_method : {"uniform", "rpcholesky"}, default "uniform"
        Uniform sampling, or randomly pivoted partial Cholesky (Chen, Epperly,
        Tropp & Webber 2022): rows drawn with probability proportional to what
        the landmarks so far miss of them, in about ten rounds over a uniform
        pool of ``10 m`` candidate rows; no n x m factor is held (see
        :func:`npt_dask.engine.centres.rpcholesky_landmarks`).
    start : NPTModel, optional
        Warm start: the Krylov solver starts from this model's coordinates of
        X (e.g. a landmark model), so it needs far fewer passes. Its kernel
        wins unless another kernel is named: with no kernel argument it is
        used as it is; with only parameters given (``gamma="scale"``) they
        apply to the start's kernel (a laplacian start stays laplacian); a
        ``kernel`` other than the default names another. A kernel other than
        the start's gives a warning saying which is used and why (the start
        is then only a guess).
    progress : bool, default False
        Report each Krylov pass on stderr (pass, converged pairs, largest
        residual), in a terminal or a notebook, under any scheduler.
    device : {"cpu", "gpu"}, optional
        Where the arithmetic runs. ``"gpu"`` moves the rows' chunks to the current CUDA
        device through CuPy at the entrance, once (held there for every pass when they
        fit the device budget: :func:`npt_dask.arrays.device.to_device`); refused at once
        with a :class:`~npt_dask.errors.DeviceError` naming the install where CuPy or a
        CUDA device is missing. The model is the same either way (its small arrays are
        numpy; numpy rows in give numpy coordinates out). None or ``"cpu"``: the rows
        stay where they are (rows already on a device are fitted there).
    labels, targets : array-like of shape (n,) (or (n, k) targets), optional
        Class labels, or numeric targets, of the rows of X, matched to them by
        label when both label their rows (a DataArray's sample coordinate, a
        pandas index: reordered when the labels are the same, refused when
        they differ, as ``xarray.align(join="exact")``), else by position.
        The fit then also
        returns ``model.moments`` (:class:`~npt_dask.engine.moments.LinearMoments`),
        the sufficient statistics of ridge on the coordinates of every row of
        X, for ``RidgeClassifier().fit_moments(model.moments)`` (or
        ``Ridge``). With ``landmarks`` they come from the same pass as the
        certificate: each row's landmark kernel is evaluated once for both.

    Returns
    -------
    NPTModel

    Examples
    --------
    >>> import numpy as np
    >>> import npt_dask as npt
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> model = npt.fit(X, kernel="rbf", gamma=0.5, n_components=5, random_state=0)
    >>> model.train_coordinates().shape
    (200, 5)
    >>> bool(np.allclose(model.transform(X[:4]), model.train_coordinates()[:4]))
    True
    """
    params = FitParams(
        kernel=kernel,
        gamma=gamma,
        degree=degree,
        coef0=coef0,
        kernel_params=kernel_params,
        n_components=n_components,
        center=center,
        solver=solver,
        tol=tol,
        rtol=rtol,
        chunk_size=chunk_size,
        cache=cache,
        memory_budget=memory_budget,
        device_memory_budget=device_memory_budget,
        precision=precision,
        block_size=block_size,
        max_basis=max_basis,
        basis=basis,
        max_passes=max_passes,
        on_negative=on_negative,
        random_state=random_state,
        landmarks=landmarks,
        landmark_method=landmark_method,
        start=start,
        progress=progress,
        device=device,
    )
    return fit_params(X, params, labels=labels, targets=targets)


def fit_params(X: Any, params: FitParams, *, labels: Any = None, targets: Any = None) -> NPTModel:
    """:func:`fit` with its parameters as one validated
    :class:`~npt_dask.npt.params.FitParams` (``labels``/``targets`` as in :func:`fit`)."""
    device = check_device(params.device)  # a GPU asked for and missing: refused at once
    params = with_start_kernel(params)
    spec = _start_kernel(params) or make_kernel(
        params.kernel, gamma=params.gamma, degree=params.degree, coef0=params.coef0,
        kernel_params=params.kernel_params,
    )  # fmt: skip
    precision = None if params.precision is None else np.dtype(params.precision)
    labels = None if labels is None else host_values(align_rows(labels, X, name="labels"))
    targets = None if targets is None else device_targets(align_rows(targets, X, name="targets"))
    names = None if spec.precomputed else feature_names(X)
    if spec.precomputed:  # X is the kernel matrix: chunked by rows and columns
        x, info = as_kernel_matrix(X, name="X", chunk_size=params.chunk_size, dtype=precision)
    else:
        x, info = as_row_chunked(
            X, name="X", chunk_size=params.chunk_size, min_samples=2, dtype=precision
        )
    rows = Rows.of(to_device(x, device, budget=0), info)  # held there below, by the plan
    plan = plan_for(rows, params)  # checks sizes and memory before any data is read
    check_labels_or_targets(labels, targets, rows.n)
    rows = _held(rows, plan, landmarks=params.landmarks is not None)
    if info.lazy:
        check_finite_eagerly(rows.data, "X")
    given = _start_kernel(params)  # a start's kernel, already resolved
    spec = given or resolve_kernel(params, int(x.shape[1]), lambda: data_variance(rows.data))
    _warn_start_kernel(params, spec)
    warn_kernel_scale(rows.data, rows.data, spec, fitting=True)
    if params.landmarks is None:
        model = _solve(rows, spec, params, plan, info, names)
        return _with_moments(model, labels, targets)
    if spec.precomputed:
        raise InputError(
            "landmarks need the training rows; with kernel='precomputed' pass the landmark "
            "rows' kernel matrix itself (K[idx][:, idx]) and project K[:, idx]."
        )
    rng = np.random.default_rng(params.random_state)
    report = FitProgress(0, 0.0, enabled=params.progress)
    report.stage(
        f"landmarks: choosing them among {rows.n:,} rows ({params.landmark_method})"
        if isinstance(params.landmarks, int | np.integer)
        else f"landmarks: {len(params.landmarks):,} rows given"
    )
    idx = select_landmarks(
        params.landmarks, rows, spec, method=params.landmark_method, rng=rng, report=report.stage
    )
    report.close()
    if len(idx) != plan.n:  # RPCholesky stopped early: the rows chosen span every candidate
        _check_spanned_rank(params, len(idx))
        plan = plan_for(rows, params.replace(landmarks=idx))
    coords = {k: np.asarray(v)[idx] for k, v in info.sample_coords.items()}
    index = None if info.index is None else info.index[idx]
    sub = dataclasses.replace(info, sample_coords=coords, index=index)
    model = _solve(_landmark_rows(rows, idx, plan.row_chunks), spec, params, plan, sub, names)
    method = params.landmark_method if isinstance(params.landmarks, int | np.integer) else "given"
    return _certified(model, rows, method, idx, labels, targets, params.progress)


_KERNEL_ARGS = ("kernel", "gamma", "degree", "coef0", "kernel_params")


def _start_kernel(params: FitParams) -> KernelSpec | None:
    """The warm start's kernel, when the caller left every kernel argument at its default.

    A start carries its kernel over (``npt.fit(X, n_components=100, start=lm)``
    fits with ``lm``'s kernel, not ``gamma = 1/d``).
    """
    kernel = getattr(params.start, "kernel", None)
    return kernel if isinstance(kernel, KernelSpec) and _kernel_left_default(params) else None


def _kernel_left_default(params: FitParams) -> bool:
    """No kernel named and every kernel argument at its default."""
    rest = _KERNEL_ARGS[1:]
    return not kernel_named(params.kernel) and all(getattr(params, a) == _D[a] for a in rest)


def with_start_kernel(params: FitParams) -> FitParams:
    """``params`` with the start's kernel where the caller named none.

    A start's kernel wins unless another kernel is named: with ``start=`` a
    laplacian model and only ``gamma="scale"`` given (the kernel left at its
    default), the fit is laplacian with that gamma, not an rbf one. The start's
    other parameters (a polynomial's degree and coef0) are kept unless given.
    """
    kernel = getattr(params.start, "kernel", None)
    if not isinstance(kernel, NamedKernel) or kernel_named(params.kernel):
        return params
    if _kernel_left_default(params):
        return params  # the start's kernel as it is (_start_kernel)
    given = dict(params.kernel_params or {})
    kept = {
        a: getattr(kernel, a)
        for a in ("gamma", "degree", "coef0")
        if getattr(params, a) == _D[a] and a not in given
    }
    return params.replace(kernel=kernel.name, **kept)


def _warn_start_kernel(params: FitParams, spec: KernelSpec) -> None:
    """Warn when ``start`` was fitted with another kernel than the one used, saying which
    kernel this fit uses and why."""
    kernel = getattr(params.start, "kernel", None)
    if not isinstance(kernel, KernelSpec) or kernel == spec:
        return
    named = {a: getattr(params, a) for a in _KERNEL_ARGS[1:] if getattr(params, a) != _D[a]}
    if isinstance(kernel, NamedKernel) and spec.name == kernel.name:
        why = (
            f"This fit uses the start's kernel ({kernel.name}: no other kernel was named) "
            f"with the parameters given ({', '.join(f'{k}={v!r}' for k, v in named.items())})"
        )
    else:
        why = f"This fit uses the kernel named (kernel={params.kernel!r})"
    warn(
        f"start= was fitted with another kernel ({kernel.to_dict()}) than this fit's "
        f"({spec.to_dict()}). {why}: the start's coordinates are only a guess and the solver "
        "may need as many passes as a cold start. Leave the kernel arguments out to use "
        "the start's kernel as it is.",
        KernelScaleWarning,
    )


def _held(rows: Rows, plan: FitPlan, *, landmarks: bool) -> Rows:
    """X held where the fit's passes read it, so that it is read (and moved) once.

    * numpy rows: on a cluster's workers for an exact fit's passes, persisted unfused (its
      keys keep the run specs every other graph on X gives them: a fused persist made the
      scheduler warn "different run_spec" when the next graph read X); as they are under
      local threads, and for a landmark fit (which reads X twice: its landmarks, its
      certificate);
    * rows on a device: persisted there (or on the workers' devices), when X and the
      plan's device part fit the device budget
      (:func:`~npt_dask.arrays.device.persist_on_device`): rows moved lazily from the
      host (``x.map_blocks(cupy.asarray)``, ``device="gpu"``) then cross once per fit,
      not once per pass. Past the budget they stay lazy: every pass moves X again.
    """
    if rows.numpy:
        if current_client() is None or landmarks:
            return rows
        return rows.like(rows.data.persist(optimize_graph=False))
    budget = plan.device_memory_budget
    room = None if budget is None else budget - plan.device_bytes
    return rows.like(persist_on_device(rows.data, room))


def _landmark_rows(rows: Rows, idx: np.ndarray, chunks: tuple[int, ...]) -> Rows:
    """The m landmark rows of X, chunked as planned (:func:`_training_chunks`): the model's
    training rows.

    Locally: numpy rows as a lazy slice of X; rows on a device gathered once
    (:meth:`~npt_dask.engine.rows.Rows.take`) and held there, so every later pass (the
    certificate, each projection) reads ``m x d`` device values instead of gathering
    them from X again. On a cluster they are gathered once and kept as their own blocks
    (numpy: :func:`~npt_dask.runtime.scheduler.numpy_rows`, the scheduler's copy their
    lineage, ``m x d`` values through the driver once; on a device: persisted on the
    workers), not as a persisted slice of X -- a model kept alive would otherwise pin
    X's tasks in the scheduler, and the next graph on the same X (another fit, a kernel
    ridge) would meet them with other run specs."""
    picked = rows.data[idx].rechunk({0: chunks})
    if current_client() is not None:
        if not rows.numpy:
            return rows.like(picked.persist(optimize_graph=False))
        gathered = np.asarray(to_host(picked.compute(optimize_graph=False)))
        return rows.like(numpy_rows(gathered, picked.chunks[0]))
    if rows.numpy:
        return rows.like(picked)
    return rows.like(da.from_array(rows.take(idx), chunks=(chunks, -1), asarray=False, name=False))


def _certified(
    model: NPTModel,
    x: Rows,
    method: str,
    idx: np.ndarray,
    labels: Any,
    targets: Any,
    progress: bool = False,
) -> NPTModel:
    """The landmark model with its certificate (every row's Lemma 5 residual) and, with
    labels or targets, the ridge moments of every row: one training pass (each finished
    row chunk reported with ``progress``)."""
    rows = x.like(balanced_rows(model.rows_of(x.data)[0], task_threads()))
    result = training_pass(model, rows, labels=labels, targets=targets, progress=progress)
    summary = {
        "method": method,
        "m": model.n_samples,
        "indices": [int(i) for i in idx],
        "certificate": certificate(result.residuals, result.self_similarity),
    }
    diagnostics = dataclasses.replace(model.diagnostics, landmarks=summary)
    return dataclasses.replace(model, diagnostics=diagnostics, moments=result.moments)


def _with_moments(model: NPTModel, labels: Any, targets: Any) -> NPTModel:
    """An exact model's ridge moments, from its training coordinates (no kernel pass: the
    coordinates are host numpy, so targets on a device come to host once)."""
    if labels is None and targets is None:
        return model
    y = da.from_array(
        model.eigenvectors * np.sqrt(model.eigenvalues), chunks=(model.chunk_size, -1)
    )
    targets = None if targets is None else host_values(targets)
    moments = linear_moments(y, labels=labels, targets=targets)
    return dataclasses.replace(model, moments=moments)


def _solve(
    x: Rows,
    spec: KernelSpec,
    params: FitParams,
    plan: FitPlan,
    info: InputInfo,
    names: tuple[str, ...] | None = None,
) -> NPTModel:
    start = time.perf_counter()
    solve = _solve_dense if plan.solver == "dense" else _solve_krylov
    with _scratch_errors(plan.basis == "chunked" and current_client() is None):
        result, m, g = solve(x, spec, params, plan)
    dtype = x.data.dtype
    _warn_unconverged(result, _tolerance(params, dtype))
    rtol = params.rtol if params.rtol is not None else DEFAULT_RTOL[np.dtype(dtype).name]
    values, vectors, residuals = select_eigenpairs(
        result,
        params.n_components,
        rtol=rtol,
        on_negative=params.on_negative,
        kernel_scale=max(abs(float(g)), float(np.max(np.abs(m), initial=0.0))),
    )
    if params.center:  # eigenvectors of lambda > 0 are orthogonal to 1; remove rounding
        vectors -= vectors.mean(axis=0)  # in place: an n x r copy fewer (flip_signs made it)
    # canonical C order: a saved and loaded model then computes bit for bit the same
    vectors, m = np.ascontiguousarray(vectors), np.ascontiguousarray(m)
    diagnostics = SolverDiagnostics(
        solver=result.solver,
        passes=result.passes,
        tol=_tolerance(params, dtype),
        residuals=residuals,
        converged=result.converged,
        min_eigenvalue=result.min_eigenvalue,
        cache=plan.cache,
        block_size=result.block_size,
        seconds=time.perf_counter() - start,
        cached_fraction=plan.cached_fraction,
        plan=plan.to_dict(),
    )
    return NPTModel(
        spec, x.data, values, vectors, m, g, params.center, diagnostics, info, feature_names=names
    )
