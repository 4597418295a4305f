"""Pre-images: from NPT coordinates back to input space, out of core.

Two maps, both streamed over the training rows:

* :func:`fit_inverse_map` -- scikit-learn's ``KernelPCA(fit_inverse_transform=True)``
  (Bakir, Weston and Schoelkopf 2004): kernel ridge regression of the
  training rows ``X`` on their coordinates ``Y``, with the model's kernel on
  the coordinates and ridge ``alpha``. The dual coefficients solve
  ``(kappa(Y, Y) + alpha I) C = X``; :meth:`InverseMap.predict` is
  ``kappa(Y_new, Y) C``, one training block at a time. For the linear kernel
  the normal equations are ``r x r``: ``W = (Y^T Y + alpha I)^{-1} Y^T X``
  from one pass over the training rows, and the prediction is ``Y_new W``
  (the same numbers as the dual form). Otherwise, up to
  :data:`DENSE_KRR_ROWS` training rows, when the matrix fits the fit's
  ``memory_budget``, the ``n x n`` system is solved dense (scikit-learn's
  numbers to rounding); else by block conjugate gradients whose every
  iteration is one streaming pass over the kernel blocks of ``Y``
  (:class:`npt_dask.engine.pair_pass.KernelOperator`), never the matrix, keeping between
  passes only the blocks the budget leaves (:func:`plan_inverse_map`).
* :func:`rbf_preimage` -- the fixed-point pre-image of Mika et al. (1999) for
  the RBF kernel: the point ``z`` whose ``phi(z)`` is nearest to the
  feature-space point with the given coordinates, by
  ``z <- sum_i g_i kappa(z, x_i) x_i / sum_i g_i kappa(z, x_i)``, each
  iteration one pass over the training blocks, started from the training row
  with the nearest coordinates (or the rows you give, e.g. the noisy inputs
  being denoised).

Layer rule: graph code over numpy blocks (:mod:`npt_dask.engine.blocks`), like
:mod:`npt_dask.npt.model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np
import scipy.linalg

from npt_dask.arrays.host import to_host
from npt_dask.engine.blocks import FAN_IN, fixed_point_terms, kernel_times
from npt_dask.engine.budget import in_flight_bytes, kept_bytes, kept_pairs, resolve_memory_budget
from npt_dask.engine.pair_pass import KernelOperator
from npt_dask.errors import ConvergenceWarning, InputError, warn
from npt_dask.kernels import KernelSpec
from npt_dask.runtime.inputs import as_row_chunked, wrap_rows
from npt_dask.runtime.params import format_bytes
from npt_dask.runtime.scheduler import compute, task_threads

if TYPE_CHECKING:
    from npt_dask.npt.model import NPTModel

__all__ = [
    "CG_PANELS",
    "DENSE_KRR_ROWS",
    "InverseMap",
    "InversePlan",
    "fit_inverse_map",
    "plan_inverse_map",
    "rbf_preimage",
]

DENSE_KRR_ROWS = 4096
"""Most training rows for which the kernel ridge system is solved dense (128 MiB)."""

CG_PANELS = 10
"""``n x d`` float64 arrays the conjugate-gradient solve holds at once: the right-hand
side X, the solution, the residual, the direction, its image, and their scaled
temporaries."""


@dataclass(frozen=True)
class InversePlan:
    """How :func:`fit_inverse_map` solves and what it holds, within ``memory_budget``.

    ``driver_bytes``: the training rows in float64 and the solver's arrays (the
    ``n x n`` matrix and its copy for ``"dense"``; :data:`CG_PANELS` ``n x d``
    arrays for ``"cg"``; ``Y^T Y`` and ``Y^T X`` for ``"primal"``); ``worker_bytes``: the
    kernel blocks in flight and those kept between passes (``kept``, a prefix of
    the pass's block pairs, as the fit plan keeps them). Their sum is within the
    budget, or :func:`plan_inverse_map` refuses.
    """

    solver: str  # "primal", "dense" or "cg"
    kept: tuple[tuple[int, int], ...]
    driver_bytes: int
    worker_bytes: int
    memory_budget: int


def plan_inverse_map(
    *, n: int, d: int, r: int, row_chunks: tuple[int, ...], linear: bool,
    memory_budget: int | str | None, threads: int,
) -> InversePlan:  # fmt: skip
    """The inverse map's plan: primal for the linear kernel; dense up to
    :data:`DENSE_KRR_ROWS` rows when the matrix fits the budget; else conjugate gradients
    keeping the kernel blocks the budget leaves (none, if need be: each pass recomputes
    them). Pure arithmetic on sizes."""
    budget = resolve_memory_budget(memory_budget)
    rows = 8 * n * d  # the training rows in float64
    if linear:
        return InversePlan("primal", (), rows + 8 * r * (r + d), 0, budget)
    dense = rows + 8 * (2 * n * n + n * d)  # the matrix (and its refactored copy), C
    if n <= DENSE_KRR_ROWS and dense <= budget:
        return InversePlan("dense", (), dense, 0, budget)
    driver = 8 * CG_PANELS * n * d
    in_flight = in_flight_bytes(max(row_chunks), threads)
    if driver + in_flight > budget:
        raise InputError(
            f"The inverse map's kernel ridge solve needs {format_bytes(driver)} for its "
            f"{n:,} x {d:,} arrays and {format_bytes(in_flight)} of kernel blocks in "
            f"flight, above memory_budget={format_bytes(budget)}. Raise memory_budget, or "
            "lower chunk_size, or fit without fit_inverse_transform."
        )
    kept = kept_pairs(row_chunks, 8, budget - driver - in_flight)
    return InversePlan("cg", kept, driver, in_flight + kept_bytes(row_chunks, kept, 8), budget)


def _kernel_times3(z: np.ndarray, y: np.ndarray, c: np.ndarray, kernel: KernelSpec) -> np.ndarray:
    return kernel_times(z, y, c, kernel)[:, None, :]


@dataclass(frozen=True, eq=False)
class InverseMap:
    """Kernel ridge regression from coordinates to input rows.

    ``dual_coef`` (n, d) with ``y_train`` (n, r) in the dual form, or
    ``weights`` (r, d) in the primal form of the linear kernel.
    """

    kernel: KernelSpec
    alpha: float
    y_train: np.ndarray
    dual_coef: np.ndarray | None
    weights: np.ndarray | None
    row_chunks: tuple[int, ...]
    solver: str  # "primal", "dense" or "cg"
    passes: int = 0
    plan: InversePlan | None = None  # what the fit held (plan_inverse_map)

    def predict(self, y: Any) -> Any:
        """Input-space rows ``kappa(y, Y_train) C`` for coordinates ``y`` (m, r).

        numpy in -> numpy out; dask or DataArray in -> lazy out, row chunks kept.
        """
        z, info = as_row_chunked(
            y, name="Y", chunk_size=max(self.row_chunks), keep_lazy_chunks=True
        )
        z = z.astype(np.float64)
        r = self.y_train.shape[1]
        if z.shape[1] != r:
            raise InputError(
                f"inverse_transform takes coordinates with {r} columns (n_components); got "
                f"{z.shape[1]}."
            )
        if self.weights is not None:
            out = z @ da.from_array(self.weights)
        else:
            assert self.dual_coef is not None
            yt = da.from_array(self.y_train, chunks=(self.row_chunks, -1))
            c = da.from_array(self.dual_coef, chunks=(self.row_chunks, -1))
            partial = da.blockwise(
                _kernel_times3, "ijc", z, "ir", yt, "jr", c, "jc",
                adjust_chunks={"j": 1}, dtype=np.float64, concatenate=True, kernel=self.kernel,
            )  # fmt: skip
            out = (
                partial.sum(axis=1, split_every=FAN_IN)
                if len(self.row_chunks) > 1
                else partial[:, 0, :]
            )
        return wrap_rows(out, info, column_dim="feature", name="preimage")


def _xty_pass(y: np.ndarray, x: da.Array) -> tuple[np.ndarray, np.ndarray]:
    """``Y^T Y`` and ``Y^T X`` in one pass over the row chunks of ``x``."""
    yd = da.from_array(y, chunks=(x.chunks[0], -1))
    return compute(yd.T @ yd, yd.T @ x.astype(np.float64))


def fit_inverse_map(
    y_train: np.ndarray,
    x_train: da.Array,
    kernel: KernelSpec,
    alpha: float,
    *,
    tol: float = 1e-10,
    max_passes: int = 500,
    memory_budget: int | str | None = None,
) -> InverseMap:
    """Fit scikit-learn's pre-image map: kernel ridge from ``y_train`` to ``x_train``.

    Parameters
    ----------
    y_train : ndarray (n, r)
        Training coordinates (``model.train_coordinates()``).
    x_train : dask array (n, d)
        Training rows, row-chunked (``model.x_train``).
    kernel : KernelSpec
        The kernel on the coordinates: the model's (scikit-learn uses the
        same kernel and ``gamma_`` on ``X_transformed``).
    alpha : float
        Ridge (scikit-learn's ``alpha``).
    tol, max_passes :
        Stopping rule of the conjugate-gradient solve: relative residual per
        column, most passes over the kernel blocks.
    memory_budget : int, optional
        Bytes the solve may hold (the fit's ``memory_budget``; default
        :func:`~npt_dask.engine.budget.default_memory_budget`): the route and the kernel
        blocks kept between passes follow :func:`plan_inverse_map`, recorded in
        :attr:`InverseMap.plan`.
    """
    if kernel.precomputed:
        raise InputError(
            "Cannot fit_inverse_transform with a precomputed kernel: the pre-image map needs "
            "the kernel on the coordinates, which a given matrix does not define."
        )
    if hasattr(getattr(x_train, "_meta", None), "toarray"):
        raise InputError(
            "Inverse transform is not implemented for sparse input (as scikit-learn's "
            "KernelPCA); fit on dense rows (X.toarray()) to use it."
        )
    y = np.ascontiguousarray(y_train, dtype=np.float64)
    n = y.shape[0]
    chunks = tuple(int(c) for c in x_train.chunks[0])
    plan = plan_inverse_map(
        n=n, d=int(x_train.shape[1]), r=y.shape[1], row_chunks=chunks,
        linear=kernel.name == "linear", memory_budget=memory_budget, threads=task_threads(),
    )  # fmt: skip
    if plan.solver == "primal":
        gram, xty = _xty_pass(y, x_train)
        gram[np.diag_indices_from(gram)] += alpha
        w = scipy.linalg.solve(gram, xty, assume_a="pos")
        return InverseMap(kernel, alpha, y, None, w, chunks, "primal", 1, plan)
    x = np.asarray(to_host(compute(x_train.astype(np.float64))[0]))
    if plan.solver == "dense":
        k = kernel(y, y).astype(np.float64, copy=False)
        k[np.diag_indices_from(k)] += alpha
        try:
            c = scipy.linalg.solve(k, x, assume_a="pos", overwrite_a=True)
        except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):  # not PD (sigmoid)
            k = kernel(y, y).astype(np.float64, copy=False)
            k[np.diag_indices_from(k)] += alpha
            c = scipy.linalg.solve(k, x)
        return InverseMap(kernel, alpha, y, c, None, chunks, "dense", 1, plan)
    op = KernelOperator(da.from_array(y, chunks=(chunks, -1)), kernel, center=False, kept=plan.kept)
    try:
        c, passes = _block_cg(lambda v: op.uncentered_matmat(v) + alpha * v, x, tol, max_passes)
    finally:
        op.release()
    return InverseMap(kernel, alpha, y, c, None, chunks, "cg", passes, plan)


def _block_cg(matmat: Any, b: np.ndarray, tol: float, max_passes: int) -> tuple[np.ndarray, int]:
    """Conjugate gradients on every column of ``b`` at once (one ``matmat`` per iteration)."""
    x = np.zeros_like(b)
    r = b.copy()
    p = r.copy()
    rr = np.einsum("ij,ij->j", r, r)
    norm_b = np.sqrt(np.einsum("ij,ij->j", b, b))
    norm_b[norm_b == 0] = 1.0
    passes = 0
    while passes < max_passes:
        if np.all(np.sqrt(rr) <= tol * norm_b):
            return x, passes
        q = matmat(p)
        passes += 1
        pq = np.einsum("ij,ij->j", p, q)
        step = np.divide(rr, pq, out=np.zeros_like(rr), where=pq != 0)
        x += p * step
        r -= q * step
        rr_new = np.einsum("ij,ij->j", r, r)
        beta = np.divide(rr_new, rr, out=np.zeros_like(rr), where=rr != 0)
        p = r + p * beta
        rr = rr_new
    warn(
        f"The kernel ridge solve of the inverse transform stopped after {passes} passes with "
        f"a relative residual of {float(np.max(np.sqrt(rr) / norm_b)):.3g} > {tol:g}; raise "
        "alpha (a better conditioned system) or max_passes.",
        ConvergenceWarning,
    )
    return x, passes


# --- the fixed-point pre-image (Mika et al. 1999) -----------------------------------------


def _nearest_training_rows(model: NPTModel, y: np.ndarray) -> np.ndarray:
    """The training rows whose coordinates are nearest to each row of ``y``."""
    train = model.eigenvectors * np.sqrt(model.eigenvalues)
    best = np.full(y.shape[0], np.inf)
    index = np.zeros(y.shape[0], dtype=np.int64)
    yy = np.einsum("ij,ij->i", y, y)
    for start in range(0, train.shape[0], 4096):
        t = train[start : start + 4096]
        d = yy[:, None] - 2.0 * (y @ t.T) + np.einsum("ij,ij->i", t, t)[None, :]
        arg = np.argmin(d, axis=1)
        val = d[np.arange(len(y)), arg]
        better = val < best
        best[better], index[better] = val[better], arg[better] + start
    order = np.argsort(index)
    rows = np.asarray(to_host(compute(model.x_train[index[order]])[0]), dtype=np.float64)
    out = np.empty_like(rows)
    out[order] = rows
    return out


def _fp_terms(
    z: np.ndarray, x: np.ndarray, a: np.ndarray, beta: np.ndarray, c: np.ndarray,
    kernel: KernelSpec,
) -> np.ndarray:  # fmt: skip
    return fixed_point_terms(z, x, a, beta, c, kernel)[:, None, :]


def rbf_preimage(
    model: NPTModel,
    y: Any,
    *,
    init: Any = None,
    max_iter: int = 100,
    tol: float = 1e-6,
) -> np.ndarray:
    """Mika et al.'s fixed-point pre-image of coordinates ``y`` under an RBF model.

    Parameters
    ----------
    model : NPTModel
        Fitted with ``kernel="rbf"``.
    y : array-like (m, r)
        NPT coordinates (e.g. ``model.transform(Z)``, possibly with the
        trailing components zeroed: that is denoising).
    init : array-like (m, d), optional
        Starting rows (e.g. the noisy rows themselves); default the training
        row whose coordinates are nearest to each row of ``y``.
    max_iter, tol :
        Iterations (each one pass over the training blocks) and the stopping
        rule ``max |z_new - z| <= tol * max |z|``.

    Returns
    -------
    ndarray (m, d), float64.
    """
    if model.kernel.name != "rbf":
        raise InputError(
            f"The fixed-point pre-image is for the rbf kernel; this model's kernel is "
            f"{model.kernel.name!r}. Use NonlinearProjection(fit_inverse_transform=True)"
            ".inverse_transform (kernel ridge) for other kernels."
        )
    beta = np.asarray(y, dtype=np.float64)
    if beta.ndim != 2 or beta.shape[1] != model.n_components:
        raise InputError(
            f"y must have shape (m, {model.n_components}) (the model's coordinates); got "
            f"{beta.shape}."
        )
    if init is None:
        z = _nearest_training_rows(model, beta)
    else:
        z = np.array(init, dtype=np.float64)
        if z.shape != (beta.shape[0], model.n_features):
            raise InputError(
                f"init must have shape ({beta.shape[0]}, {model.n_features}); got {z.shape}."
            )
    a = model.projection_matrix
    n = model.n_samples
    # coefficients of the projected point on phi(x_i): g = A beta + (1 - 1^T A beta) / n
    c = (1.0 - beta @ a.sum(axis=0)) / n if model.center else np.zeros(len(beta))
    chunks = model.x_train.chunks[0]
    a_d = da.from_array(a, chunks=(chunks, -1))
    nb = len(chunks)
    rows = max(1, min(len(beta), model.chunk_size))
    beta_d = da.from_array(beta, chunks=(rows, -1))
    c_d = da.from_array(c, chunks=(rows,))
    x_train = model.x_train.astype(np.float64)
    scale = max(float(np.abs(z).max(initial=0.0)), 1e-300)
    for _ in range(max_iter):
        z_d = da.from_array(z, chunks=(rows, -1))
        partial = da.blockwise(
            _fp_terms, "ijc", z_d, "id", x_train, "jd", a_d, "jr", beta_d, "ir", c_d, "i",
            adjust_chunks={"j": 1}, new_axes={"c": model.n_features + 1},
            dtype=np.float64, concatenate=True, kernel=model.kernel,
        )  # fmt: skip
        p = partial.sum(axis=1, split_every=FAN_IN) if nb > 1 else partial[:, 0, :]
        terms = np.asarray(to_host(compute(p)[0]))
        num, den = terms[:, :-1], terms[:, -1]
        ok = np.abs(den) > 1e-300
        z_new = z.copy()
        z_new[ok] = num[ok] / den[ok, None]
        step = float(np.abs(z_new - z).max(initial=0.0))
        z = z_new
        if step <= tol * scale:
            break
    return z
