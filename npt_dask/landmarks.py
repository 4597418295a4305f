"""Landmark models: NPT on m chosen rows, every row projected, and a certificate.

A landmark model is an ordinary NPT model whose training set is m rows of X
(Theorem 2: every other row is projected exactly onto the span of the
landmarks' feature vectors). What no Nyström tool reports comes free with
the one projection pass over X: the Lemma 5 residual of every row, the
distance of ``phi(x)`` from the landmark subspace -- a certificate of how
much of each row the model misses.

The pieces, each small:

* :func:`uniform_landmarks` -- m distinct rows uniformly at random (seeded);
* :func:`rpcholesky_landmarks` -- randomly pivoted partial Cholesky (Chen,
  Epperly, Tropp & Webber 2022, block version): rows sampled with probability
  proportional to the diagonal of the residual kernel, so redundant rows are
  rarely picked twice;
* :func:`select_landmarks` -- resolve ``landmarks=`` (an int or row indices);
* :func:`certificate` -- the residual summary recorded in the diagnostics.

Layer rule: graph code over numpy blocks (kernel columns are streamed over the
row chunks of X; the driver holds the n-vector of residual diagonals and, for
RPCholesky, the n x m factor).
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg

from npt_dask._scheduler import compute
from npt_dask.errors import InputError
from npt_dask.gram import kernel_diagonal, kernel_matrix
from npt_dask.kernels import KernelSpec

__all__ = [
    "HISTOGRAM_BINS",
    "certificate",
    "rpcholesky_landmarks",
    "select_landmarks",
    "uniform_landmarks",
]

HISTOGRAM_BINS = 20
"""Bins of the certificate's residual histogram (from 0 to the largest residual)."""

RPCHOLESKY_BLOCK = 100
"""Pivots drawn per round of block RPCholesky (one streamed pass over X per round)."""


def uniform_landmarks(n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` distinct row indices of ``n``, uniformly at random, sorted."""
    return np.sort(rng.choice(n, size=m, replace=False))


def _kernel_columns(x: da.Array, rows: np.ndarray, kernel: KernelSpec) -> np.ndarray:
    """``kappa(X, X[rows])``, n x len(rows), streamed over the row chunks of X."""
    pivots = da.from_array(np.asarray(x[np.sort(rows)].compute()), chunks=(-1, -1))
    order = np.argsort(np.argsort(rows))  # back to the order of ``rows``
    cols = compute(kernel_matrix(x, pivots, kernel))[0]
    return np.asarray(cols, dtype=np.float64)[:, order]


def rpcholesky_landmarks(
    x: da.Array,
    kernel: KernelSpec,
    m: int,
    rng: np.random.Generator,
    *,
    block: int = RPCHOLESKY_BLOCK,
) -> np.ndarray:
    """Block randomly pivoted partial Cholesky: ``m`` pivot rows, sorted.

    Each round samples ``block`` rows with probability proportional to the
    residual diagonal ``d = diag(calK - F F^T)``, evaluates their kernel
    columns in one pass over X, and extends the factor ``F`` by a Cholesky
    step (rows whose residual has vanished are skipped). The uncentred kernel
    is used: centring changes the model, not which rows span the data.

    Notes
    -----
    Memory: the driver holds ``F`` (n x m float64) and ``d``; each task one
    row chunk and its ``chunk x block`` kernel columns.
    """
    n = int(x.shape[0])
    d = np.asarray(compute(kernel_diagonal(x, kernel))[0], dtype=np.float64).copy()
    scale = float(d.sum())
    factor = np.zeros((n, m))
    chosen: list[int] = []
    while len(chosen) < m:
        total = float(d.sum())
        if total <= 1e-12 * scale:
            break  # the chosen rows already span every row: no more landmarks are useful
        want = min(block, m - len(chosen))
        draws = np.unique(rng.choice(n, size=want, p=d / total))
        draws = draws[d[draws] > 1e-12 * scale]
        k = len(chosen)
        cols = _kernel_columns(x, draws, kernel) - factor[:, :k] @ factor[draws, :k].T
        g = (cols[draws] + cols[draws].T) / 2
        lower, keep = _pivoted_cholesky(g)
        draws, cols = draws[keep], cols[:, keep]
        step = scipy.linalg.solve_triangular(lower, cols.T, lower=True).T
        factor[:, k : k + len(draws)] = step
        chosen += [int(i) for i in draws]
        d = np.maximum(d - np.einsum("ij,ij->i", step, step), 0.0)
        d[draws] = 0.0
    return np.sort(np.asarray(chosen, dtype=np.int64))


def _pivoted_cholesky(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cholesky factor of the well-conditioned part of ``g`` and the rows kept.

    Rows are accepted greedily while their pivot stays above ``1e-10`` of
    the largest diagonal entry (a sampled row nearly in the span of the
    others adds nothing and would make the factor unstable).
    """
    b = g.shape[0]
    top = max(float(np.max(np.diag(g), initial=0.0)), np.finfo(float).tiny)
    keep: list[int] = []
    lower = np.zeros((b, b))
    for i in range(b):
        row = g[i, keep]
        partial = scipy.linalg.solve_triangular(lower[: len(keep), : len(keep)], row, lower=True)
        pivot = g[i, i] - partial @ partial
        if pivot <= 1e-10 * top:
            continue
        k = len(keep)
        lower[k, :k] = partial
        lower[k, k] = np.sqrt(pivot)
        keep.append(i)
    k = len(keep)
    return lower[:k, :k], np.asarray(keep, dtype=np.int64)


def select_landmarks(
    landmarks: Any,
    x: da.Array,
    kernel: KernelSpec,
    *,
    method: str,
    rng: np.random.Generator,
) -> np.ndarray:
    """Sorted landmark row indices from ``landmarks=`` (an int m or row indices)."""
    n = int(x.shape[0])
    if isinstance(landmarks, int | np.integer):
        m = int(landmarks)
        if m > n:
            raise InputError(
                f"landmarks={m} is more than the {n} rows of X; use at most {n} "
                "(landmarks=None fits on every row)."
            )
        if method == "uniform" or m == n:
            return uniform_landmarks(n, m, rng)
        return rpcholesky_landmarks(x, kernel, m, rng)
    idx = np.asarray(landmarks)
    if idx.ndim != 1 or idx.size < 2 or idx.dtype.kind not in "iu":
        raise InputError(
            "landmarks must be an int (how many rows to choose) or a 1-D array of at least "
            f"2 integer row indices; got an array of shape {idx.shape} and dtype {idx.dtype}."
        )
    if idx.min() < 0 or idx.max() >= n or np.unique(idx).size != idx.size:
        raise InputError(
            f"landmarks must be distinct row indices in [0, {n}); got values from "
            f"{idx.min()} to {idx.max()} ({idx.size - np.unique(idx).size} repeated)."
        )
    return np.sort(idx.astype(np.int64))


def certificate(residuals: np.ndarray, self_similarity: np.ndarray) -> dict[str, Any]:
    """Summary of the Lemma 5 residuals of every row against the landmark subspace.

    ``relative`` is ``residual^2 / k(x, x)``: the share of each row's
    (centred) feature-space energy the model misses.
    """
    res = np.asarray(residuals, dtype=np.float64)
    energy = np.asarray(self_similarity, dtype=np.float64)
    rel = np.divide(res**2, energy, out=np.zeros_like(res), where=energy > 0)
    top = float(res.max()) if res.size else 0.0
    counts, edges = np.histogram(res, bins=HISTOGRAM_BINS, range=(0.0, top or 1.0))
    return {
        "n_rows": int(res.size),
        "mean": float(res.mean()),
        "max": top,
        "quantiles": {q: float(np.quantile(res, float(q))) for q in ("0.5", "0.9", "0.99")},
        "relative_mean": float(rel.mean()),
        "relative_max": float(rel.max()),
        "histogram": {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]},
    }
