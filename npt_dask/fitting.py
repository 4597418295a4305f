"""``npt_dask.fit``: validate, choose a solver, solve, assemble the model.

Each step is its own small function; :func:`fit` only strings them together.
No I/O and no logging happen here.
"""

from __future__ import annotations

import numbers
import time
import warnings
from dataclasses import dataclass
from typing import Any, Literal

import dask.array as da
import numpy as np

from npt_dask._inputs import InputInfo, as_row_chunked, check_finite_eagerly
from npt_dask._scheduler import current_client
from npt_dask.eigen import (
    EigenResult,
    block_krylov_eigh,
    dense_eigh,
    select_eigenpairs,
)
from npt_dask.errors import ConvergenceWarning, InputError, InputTypeError
from npt_dask.gram import (
    CacheMode,
    KernelOperator,
    center_columns,
    drop_zero_features,
    kernel_matrix,
)
from npt_dask.kernels import KernelSpec, make_kernel
from npt_dask.model import NPTModel, SolverDiagnostics
from npt_dask.planning import basis_columns, cache_budget, choose_block_size, default_block_size
from npt_dask.progress import FitProgress

__all__ = ["DENSE_MAX_SAMPLES", "FitOptions", "default_memory_budget", "fit"]

DENSE_MAX_SAMPLES = 2000
"""``solver="auto"`` uses the dense solver up to this many training rows."""

Solver = Literal["auto", "dense", "krylov"]


def default_memory_budget() -> int:
    """A sixth of this machine's physical memory, in bytes."""
    import psutil

    return int(psutil.virtual_memory().total // 6)


@dataclass(frozen=True)
class FitOptions:
    """Validated, resolved solver options."""

    n_components: int | None
    center: bool
    solver: str
    tol: float
    rtol: float | None
    chunk_size: int | None
    cache: CacheMode
    memory_budget: int
    precision: np.dtype | None
    block_size: int | None
    max_basis: int | None
    max_passes: int
    on_negative: str
    random_state: Any
    progress: bool = False


def _check_int(name: str, value: Any, minimum: int, *, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputTypeError(f"The '{name}' parameter must be an int; got {value!r}.")
    if value < minimum:
        raise InputError(f"The '{name}' parameter must be >= {minimum}; got {value!r}.")
    return int(value)


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InputError(f"The '{name}' parameter must be one of {choices}; got {value!r}.")
    return value


def _check_fraction(name: str, value: Any, *, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputTypeError(f"The '{name}' parameter must be a real number; got {value!r}.")
    if not low <= float(value) < high:
        raise InputError(f"The '{name}' parameter must be in [{low}, {high}); got {value!r}.")
    return float(value)


def _precision(value: Any) -> np.dtype | None:
    if value is None:
        return None
    dtype = np.dtype(value)
    if dtype not in (np.float32, np.float64):
        raise InputError(f"precision must be 'float32', 'float64' or None; got {value!r}.")
    return dtype


def validate_options(**kw: Any) -> FitOptions:
    """Check every fit parameter before any data is touched."""
    tol = 1e-8 if kw["tol"] is None else kw["tol"]
    return FitOptions(
        n_components=_check_int("n_components", kw["n_components"], 1, allow_none=True),
        center=bool(kw["center"]),
        solver=_check_choice("solver", kw["solver"], ("auto", "dense", "krylov")),
        tol=_check_fraction("tol", tol, low=1e-15, high=1.0),
        rtol=None if kw["rtol"] is None else _check_fraction("rtol", kw["rtol"], low=0.0, high=1.0),
        chunk_size=_check_int("chunk_size", kw["chunk_size"], 1, allow_none=True),
        cache=_check_choice("cache", kw["cache"], ("auto", "recompute", "memory")),
        memory_budget=_check_int("memory_budget", kw["memory_budget"], 1, allow_none=True)
        or default_memory_budget(),
        precision=_precision(kw["precision"]),
        block_size=_check_int("block_size", kw["block_size"], 1, allow_none=True),
        max_basis=_check_int("max_basis", kw["max_basis"], 2, allow_none=True),
        max_passes=_check_int("max_passes", kw["max_passes"], 1),
        on_negative=_check_choice("on_negative", kw["on_negative"], ("warn", "raise")),
        random_state=kw["random_state"],
        progress=bool(kw.get("progress", False)),
    )


def choose_solver(n: int, opts: FitOptions) -> str:
    """``"dense"`` or ``"krylov"``, checking what each can do for this n."""
    r = opts.n_components
    max_r = n - 1 if opts.center else n
    if r is not None and r > max_r:
        raise InputError(
            f"n_components={r} is larger than possible: a {'centred ' if opts.center else ''}"
            f"kernel matrix of {n} samples has rank at most {max_r}."
        )
    solver = opts.solver
    if solver == "auto":
        solver = "dense" if r is None or n <= DENSE_MAX_SAMPLES else "krylov"
    if solver == "krylov" and r is None:
        raise InputError(
            "n_components=None (the full effective rank) needs solver='dense'; "
            "give n_components for the Krylov solver."
        )
    if solver == "krylov":
        _check_krylov_memory(n, opts)
    need = 4 * n * n * 8
    if solver == "dense" and need > opts.memory_budget:
        raise InputError(
            f"solver='dense' needs about {need / 2**30:.1f} GiB for n={n} (the n x n kernel "
            f"matrix and its eigendecomposition), above memory_budget="
            f"{opts.memory_budget / 2**30:.1f} GiB. Use solver='krylov' with n_components."
        )
    return solver


def _planned_width(n: int, opts: FitOptions) -> int:
    """Block width for the up-front memory check: the user's, else the default."""
    return min(n, opts.block_size or default_block_size(opts.n_components))


def _planned_columns(n: int, opts: FitOptions) -> int:
    if opts.max_basis is not None:
        return min(n, opts.max_basis)
    return basis_columns(n, opts.n_components, _planned_width(n, opts), opts.memory_budget)


def _check_krylov_memory(n: int, opts: FitOptions) -> None:
    b = _planned_width(n, opts)
    least = opts.n_components + 2 * b
    columns = _planned_columns(n, opts)
    need = 2 * 8 * n * columns
    if columns < min(n, least) or need > opts.memory_budget:
        raise InputError(
            f"The Krylov basis for n={n} needs {columns} columns ({need / 2**30:.2f} GiB for Q "
            f"and K Q), which memory_budget={opts.memory_budget / 2**30:.2f} GiB or "
            f"max_basis={opts.max_basis} does not allow (at least n_components + 2 * "
            f"block_size = {least} "
            "columns). Raise memory_budget or lower n_components / block_size."
        )


def _solve_dense(x: da.Array, kernel: KernelSpec, opts: FitOptions):
    gram = kernel_matrix(x, x, kernel).compute().astype(np.float64, copy=False)
    m = gram.mean(axis=1) if opts.center else np.zeros(gram.shape[0])
    g = float(m.mean())
    if opts.center:
        gram -= m[:, None]
        gram -= m[None, :]
        gram += g
    gram += gram.T  # symmetrise in place: (G + G^T) / 2
    gram *= 0.5
    return dense_eigh(gram, opts.n_components), m, g, None


def _plan_operator(x: da.Array, xs: da.Array, kernel: KernelSpec, opts: FitOptions):
    """Block width, basis width and operator, planned together within the budget.

    The cache share depends on the block width (the driver's arrays scale
    with it) and the best width on the cache share, so every candidate width
    is costed with its own plan.
    """
    n, r = int(x.shape[0]), opts.n_components
    chunk = int(max(x.chunks[0]))

    def plan(b: int):
        columns = min(
            n, max(opts.max_basis or basis_columns(n, r, b, opts.memory_budget), r + 2 * b)
        )
        budget = cache_budget(n, chunk, b, columns, opts.memory_budget)
        op = KernelOperator(xs, kernel, center=opts.center, cache=opts.cache, cache_budget=budget)
        return op, b, columns

    if opts.block_size is not None:
        return plan(min(n, opts.block_size))
    best = choose_block_size(
        n=n,
        d=int(xs.shape[1]),
        n_components=r,
        chunk=chunk,
        cached=lambda b: plan(b)[0].cached_fraction,
        itemsize=x.dtype.itemsize,
    )
    return plan(best)


def _solve_krylov(x: da.Array, kernel: KernelSpec, opts: FitOptions):
    n, r = int(x.shape[0]), opts.n_components
    op, b, columns = _plan_operator(x, drop_zero_features(x), kernel, opts)
    rng = np.random.default_rng(opts.random_state)
    start = rng.standard_normal((n, b))
    if opts.center:
        start = center_columns(start)
    report = FitProgress(r, opts.tol, enabled=opts.progress)
    try:
        result = block_krylov_eigh(
            op.matmat,
            n,
            r,
            block_size=b,
            tol=opts.tol,
            max_passes=opts.max_passes,
            max_basis=min(n, columns),
            start=start,
            random_state=rng,
            callback=report,
        )
        m = op.row_means if opts.center else np.zeros(n)
    finally:
        report.close()
        op.release()
    return result, m, (float(m.mean()) if opts.center else 0.0), op


def _warn_unconverged(result: EigenResult, opts: FitOptions) -> None:
    if not result.converged:
        warnings.warn(
            f"The Krylov solver stopped after {result.passes} passes with a relative residual "
            f"of {float(result.residuals.max()):.3g} > tol={opts.tol:g}. Raise max_passes or "
            "block_size, or loosen tol.",
            ConvergenceWarning,
            stacklevel=3,
        )


def fit(
    X: Any,
    kernel: str | KernelSpec | dict = "rbf",
    *,
    gamma: float | None = None,
    degree: float | None = None,
    coef0: float | None = None,
    n_components: int | None = None,
    center: bool = True,
    solver: Solver = "auto",
    tol: float | None = None,
    rtol: float | None = None,
    chunk_size: int | None = 4096,
    cache: CacheMode = "auto",
    memory_budget: int | None = None,
    precision: str | None = None,
    block_size: int | None = None,
    max_basis: int | None = None,
    max_passes: int = 50,
    on_negative: Literal["warn", "raise"] = "warn",
    random_state: int | np.random.Generator | None = None,
    progress: bool = False,
) -> NPTModel:
    """Fit the Nonlinear Projection Trick: top eigenpairs of the kernel matrix.

    Parameters
    ----------
    X : array-like, dask array or DataArray of shape (n, d)
        Training rows. A DataArray's sample dim is ``"sample"`` if present,
        else its first dim.
    kernel : str, KernelSpec or dict
        ``"rbf"``, ``"laplacian"``, ``"polynomial"``, ``"sigmoid"``,
        ``"linear"`` or ``"cosine"`` (scikit-learn's definitions).
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
        streams kernel blocks. ``"auto"``: dense for ``n <= 2000`` or
        ``n_components=None``, else Krylov.
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
        rest (see :func:`cache_budget`).
    memory_budget : int, optional
        Bytes the fit may hold beyond the input rows: the Krylov basis, work
        arrays, blocks in flight and kept blocks (or, for the dense solver, the
        n x n matrix); default a sixth of physical memory.
    precision : {"float32", "float64"}, optional
        dtype of the kernel blocks; products and sums are always float64.
        Default: float32 for float32 input, float64 otherwise.
    block_size : int, optional
        Krylov block width. Default: chosen by a cost model from the kernel
        work and the share of kept blocks (narrow when blocks are kept, wide
        when they are recomputed; see :func:`npt_dask.planning.choose_block_size`).
    max_basis : int, optional
        Most Krylov basis columns kept on the driver before a thick restart;
        default ``max(12 b, 6 n_components)``, fewer if ``2 * 8 * n * max_basis``
        bytes would exceed half of ``memory_budget``.
    max_passes : int, default 50
        Most Krylov passes over the kernel.
    on_negative : {"warn", "raise"}
        What a significantly negative eigenvalue (non-PSD kernel) does; the
        negative part is always excluded, never silently.
    random_state : int or Generator, optional
        Seed of the Krylov start block.
    progress : bool, default False
        Report each Krylov pass on stderr (pass, converged pairs, largest
        residual), in a terminal or a notebook, under any scheduler.

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
    spec = make_kernel(kernel, gamma=gamma, degree=degree, coef0=coef0)
    opts = validate_options(
        n_components=n_components,
        center=center,
        solver=solver,
        tol=tol,
        rtol=rtol,
        chunk_size=chunk_size,
        cache=cache,
        memory_budget=memory_budget,
        precision=precision,
        block_size=block_size,
        max_basis=max_basis,
        max_passes=max_passes,
        on_negative=on_negative,
        random_state=random_state,
        progress=progress,
    )
    x, info = as_row_chunked(
        X, name="X", chunk_size=opts.chunk_size, min_samples=2, dtype=opts.precision
    )
    spec = spec.resolve(int(x.shape[1]))
    solver_name = choose_solver(int(x.shape[0]), opts)
    if info.lazy:
        check_finite_eagerly(x, "X")
    if current_client() is not None:
        x = x.persist()
    return _solve(x, spec, opts, solver_name, info)


def _solve(x: da.Array, spec: KernelSpec, opts: FitOptions, solver: str, info: InputInfo):
    start = time.perf_counter()
    solve = _solve_dense if solver == "dense" else _solve_krylov
    result, m, g, op = solve(x, spec, opts)
    _warn_unconverged(result, opts)
    rtol = opts.rtol if opts.rtol is not None else (1e-6 if x.dtype == np.float32 else 1e-10)
    values, vectors, residuals = select_eigenpairs(
        result, opts.n_components, rtol=rtol, on_negative=opts.on_negative
    )
    if opts.center:  # eigenvectors of lambda > 0 are orthogonal to 1; remove rounding
        vectors = vectors - vectors.mean(axis=0)
    # canonical C order: a saved and loaded model then computes bit for bit the same
    vectors, m = np.ascontiguousarray(vectors), np.ascontiguousarray(m)
    diagnostics = SolverDiagnostics(
        solver=result.solver,
        passes=result.passes,
        tol=opts.tol,
        residuals=residuals,
        converged=result.converged,
        min_eigenvalue=result.min_eigenvalue,
        cache="none" if op is None else op.cache,
        block_size=result.block_size,
        seconds=time.perf_counter() - start,
        cached_fraction=0.0 if op is None else op.cached_fraction,
    )
    return NPTModel(spec, x, values, vectors, m, g, opts.center, diagnostics, info)
