"""Centres (landmarks): which m rows of X a landmark model or Nyström kernel ridge is
built on, and the certificate of what those rows miss.

A landmark NPT model is an ordinary NPT model whose training set is m rows of X
(Theorem 2: every other row is projected exactly onto the span of the landmarks'
feature vectors); Nyström kernel ridge takes the same rows as its centres. What no
Nyström tool reports comes free with the one projection pass over X: the Lemma 5
residual of every row, the distance of ``phi(x)`` from the landmark subspace -- a
certificate of how much of each row the model misses. One choice of centres serves
both (as Falkon keeps its centre selection in one module), with its parameter entries
(:data:`LANDMARKS_PARAM`, :data:`LANDMARK_METHOD_PARAM`, :data:`RANDOM_STATE_PARAM`).

The pieces, each small:

* :func:`uniform_landmarks` -- m distinct rows uniformly at random (seeded);
* :func:`rpcholesky_landmarks` -- randomly pivoted partial Cholesky (Chen,
  Epperly, Tropp & Webber 2022, block version in about ten rounds, on a
  uniform pool of candidates): rows sampled with probability proportional to
  the diagonal of the residual kernel, so redundant rows are rarely picked
  twice;
* :func:`select_landmarks` -- resolve ``landmarks=`` (an int or row indices);
* :func:`certificate` -- the residual summary recorded in the diagnostics.

Layer rule: graph code over the blocks of the rows' namespace (kernel columns are
streamed over the row chunks of X; for RPCholesky the driver holds the pivots, their
Cholesky factor and the candidates' residual diagonal, never an n x m factor). On a
device the pivot rows and each round's task bodies stay there; the small matrices of a
round (``k x b`` couplings, ``b x b`` Schur complements, the factor) cross to the host
once and are factored there (LAPACK's pivoted Cholesky), and the candidates' residual
diagonal comes back once per round (``pool`` numbers: the driver samples from it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, get_args

import dask.array as da
import numpy as np
import scipy.linalg
from dask import delayed
from scipy.linalg import lapack

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import is_numpy, namespace_of
from npt_dask.engine.kernel_matrix import kernel_diagonal
from npt_dask.engine.passes import as_rows
from npt_dask.engine.rows import Rows, dense
from npt_dask.errors import InputError
from npt_dask.kernels import KernelSpec
from npt_dask.linalg.cholesky import solve_triangular
from npt_dask.params.constraints import INT, NONE, SEED, InstanceOf, Interval, Options, Param
from npt_dask.params.parsing import number_or
from npt_dask.runtime.scheduler import compute

__all__ = [
    "HISTOGRAM_BINS",
    "RPCHOLESKY_POOL",
    "RPCHOLESKY_ROUNDS",
    "LandmarkMethod",
    "certificate",
    "check_landmarks",
    "extended_factor",
    "pivoted_cholesky",
    "rpcholesky_landmarks",
    "select_landmarks",
    "uniform_landmarks",
]

LandmarkMethod = Literal["uniform", "rpcholesky"]
"""How ``landmarks=m`` chooses its rows."""

HISTOGRAM_BINS = 20
"""Bins of the certificate's residual histogram (from 0 to the largest residual)."""

RPCHOLESKY_ROUNDS = 10
"""Rounds of block RPCholesky (one pass over the candidates each): m/10 pivots a round."""

RPCHOLESKY_POOL = 10
"""Candidates per landmark: RPCholesky picks m pivots among ``10 m`` rows of X drawn
uniformly (all rows when X has no more), so its cost does not grow with n."""


def uniform_landmarks(n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` distinct row indices of ``n``, uniformly at random, sorted."""
    return np.sort(rng.choice(n, size=m, replace=False))


def _round_update(
    z: Any,
    pivots: Any,
    k: int,
    g: Any,
    lower: Any,
    kernel: KernelSpec,
) -> Any:
    """Task body: what a round's new pivots take off a candidate chunk's residual diagonal.

    ``kappa(z, P)`` against all pivots (the first ``k`` old, the rest new) is
    evaluated once; the new pivots' residual columns are
    ``C_new - C_old G`` with ``G = K_old^{-1} kappa(P_old, P_new)``, whitened
    by the new pivots' Schur-complement Cholesky factor ``lower``; the result is their
    squared norms, one per row of the chunk, in the namespace of ``z`` (``pivots``,
    ``g`` and ``lower`` already there).
    """
    z = dense(z)
    xp = namespace_of(z, pivots)
    if is_numpy(xp):
        cols = np.asarray(kernel(z, pivots), dtype=np.float64)
        new = cols[:, k:] - cols[:, :k] @ g if k else cols
        step = scipy.linalg.solve_triangular(lower, new.T, lower=True)
        return np.einsum("ij,ij->j", step, step)
    cols = xp.astype(kernel(z, pivots), xp.float64)
    new = cols[:, k:] - cols[:, :k] @ g if k else cols
    step = solve_triangular(lower, new.T, lower=True)
    return xp.sum(step * step, axis=0)


def rpcholesky_landmarks(
    x: Rows | da.Array,
    kernel: KernelSpec,
    m: int,
    rng: np.random.Generator,
    *,
    rounds: int = RPCHOLESKY_ROUNDS,
    pool: int | None = None,
    report: Callable[[str], None] | None = None,
) -> np.ndarray:
    """Block randomly pivoted partial Cholesky: ``m`` pivot rows, sorted.

    Candidates are ``pool`` rows of X drawn uniformly (default
    ``RPCHOLESKY_POOL * m``, all rows when X has no more). Each of about
    ``rounds`` rounds samples ``ceil((m - k) / rounds_left)`` candidates with
    probability proportional to the residual diagonal ``d = diag(calK - F F^T)``,
    keeps those whose Schur-complement pivot does not vanish (a greedy pivoted
    Cholesky within the round), and updates ``d`` in one pass over the
    candidates. The factor F is never stored: a round recomputes each
    candidate's kernel against the pivots so far, so memory does not grow with
    ``pool x m``. The uncentred kernel is used: centring changes the model, not
    which rows span the data.

    Notes
    -----
    Passes over X: one to gather the pool, then one over the pool per round.
    Driver memory: the pivots' rows (``m d`` in X's precision), the pivots'
    Cholesky factor and the round's coupling ``G`` (``8 (m^2 + m b)``), the
    pool's rows when it is not all of X (``pool d``) and its residual diagonal
    (``8 pool``) -- independent of ``n x m``. Each task holds one candidate
    chunk and its ``chunk x m`` kernel columns.
    """
    x = as_rows(x)
    n = x.n
    size = min(n, pool if pool is not None else RPCHOLESKY_POOL * m)
    candidates = np.sort(rng.choice(n, size=size, replace=False)) if size < n else None
    rows = x if candidates is None else _gathered(x, candidates)
    d = np.asarray(to_host(compute(kernel_diagonal(rows.data, kernel))[0]), dtype=np.float64)
    d = d.copy()
    scale = float(d.sum())
    chosen: list[int] = []
    pivots: Any = None  # rows of the pivots so far (in the rows' namespace)
    factor = np.zeros((0, 0))  # lower Cholesky factor of kappa(P, P)
    done_rounds = 0
    while len(chosen) < m:
        total = float(d.sum())
        if total <= 1e-12 * scale:
            break  # the chosen rows already span every candidate
        want = -(-(m - len(chosen)) // max(rounds - done_rounds, 1))
        draws = np.unique(rng.choice(len(d), size=want, p=d / total))
        draws = draws[d[draws] > 1e-12 * scale]
        new_rows = rows.take(draws)
        k = len(chosen)
        cross = _host64(rows, kernel(pivots, new_rows)) if pivots is not None else (
            np.zeros((0, len(draws))))  # fmt: skip
        g = scipy.linalg.cho_solve((factor, True), cross) if k else cross
        schur = _host64(rows, kernel(new_rows, new_rows)) - cross.T @ g
        schur = (schur + schur.T) / 2
        top = max(float(np.max(np.diag(schur), initial=0.0)), np.finfo(float).tiny)
        keep, lower = pivoted_cholesky(schur, PIVOT_FLOOR * top)
        draws, new_rows, cross, g = draws[keep], new_rows[keep], cross[:, keep], g[:, keep]
        pivots = new_rows if pivots is None else _stacked(rows, pivots, new_rows)
        d = _updated_diagonal(rows, d, pivots, k, g, lower, kernel)
        d[draws] = 0.0
        coords = scipy.linalg.solve_triangular(factor, cross, lower=True).T if k else cross.T
        factor = extended_factor(factor, coords, lower)
        chosen += [int(i) for i in draws]
        done_rounds += 1
        if report is not None:
            report(f"landmarks: rpcholesky round {done_rounds}, {len(chosen):,} of {m:,} chosen")
    picked = np.asarray(chosen, dtype=np.int64)
    return np.sort(picked if candidates is None else candidates[picked])


def _gathered(x: Rows, idx: np.ndarray) -> Rows:
    """Rows ``idx`` of X (one pass), row-chunked like X, held where tasks run (persisted:
    on the rows' device, or the workers'), for the rounds' passes over them."""
    rows = x.data[idx].rechunk({0: max(x.chunks)})
    return x.like(rows.persist(optimize_graph=False))


def _host64(rows: Rows, a: Any) -> np.ndarray:
    """A small matrix of the rows' namespace as host float64 (one crossing)."""
    return np.asarray(rows.host(a), dtype=np.float64)


def _stacked(rows: Rows, top: Any, bottom: Any) -> Any:
    """Two blocks of rows one above the other, in the rows' namespace."""
    if rows.numpy:
        return np.concatenate([top, bottom])
    return rows.xp.concat([top, bottom], axis=0)


def _updated_diagonal(
    rows: Rows, d: np.ndarray, pivots: Any, k: int, g: np.ndarray, lower: np.ndarray,
    kernel: KernelSpec,
) -> np.ndarray:  # fmt: skip
    """The candidates' residual diagonal after a round: one task per candidate chunk
    (:func:`_round_update`); ``g`` and ``lower`` go to the rows' device once a round, and
    the chunks' shares come back joined, once (``pool`` numbers)."""
    g_there, lower_there = rows.put(g), rows.put(lower)
    parts = [
        delayed(_round_update, pure=False)(block, pivots, k, g_there, lower_there, kernel)
        for block in rows.data.to_delayed().ravel()
    ]
    taken = compute(delayed(_joined, pure=False)(parts), release_scratch=True)[0]
    return np.maximum(d - taken, 0.0)


def _joined(parts: list[Any]) -> np.ndarray:
    """Task body: the chunks' vectors one after the other, in host memory (one crossing)."""
    xp = namespace_of(*parts)
    return np.asarray(to_host(np.concatenate(parts) if is_numpy(xp) else xp.concat(parts)))


def extended_factor(factor: np.ndarray, coords: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """``[[R, 0], [W, S]]``: the lower Cholesky factor of a kernel matrix grown by new rows,
    from the old rows' factor ``R``, the new rows' coordinates ``W = (R^{-1} C)^T`` in its
    frame (``C`` the kernel between old and new rows) and ``S``, the factor of their
    Schur complement (:func:`pivoted_cholesky`). RPCholesky's rounds and ``partial_fit``
    grow their factors by it."""
    m, a = factor.shape[0], lower.shape[0]
    out = np.zeros((m + a, m + a))
    out[:m, :m] = factor
    out[m:, :m] = coords
    out[m:, m:] = lower
    return out


PIVOT_FLOOR = 1e-10
"""RPCholesky keeps a drawn row while its pivot exceeds this share of the round's largest
Schur diagonal entry (a row nearly in the span of the others adds nothing and would make
the factor unstable)."""


def pivoted_cholesky(
    matrix: np.ndarray, tol: float, *, diag: np.ndarray | None = None, room: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy pivoted Cholesky (LAPACK ``dpstrf``): the rows picked, largest remaining
    pivot first, while the pivot exceeds ``tol`` (and at most ``room`` of them), in pick
    order, and the lower factor of ``matrix`` restricted to them (in that order).

    With ``diag`` the pivots are measured relative to it (the matrix scaled to
    ``diag``'s unit diagonal: shares, as ``partial_fit`` measures a row outside the
    span); the factor returned is of ``matrix`` itself.

    >>> chosen, lower = pivoted_cholesky(np.array([[1.0, 1.0], [1.0, 1.0]]), 1e-10)
    >>> chosen.tolist(), lower.tolist()
    ([0], [[1.0]])
    """
    if matrix.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros((0, 0))
    scale = np.ones(matrix.shape[0]) if diag is None else 1.0 / np.sqrt(diag)
    scaled = np.asfortranarray(matrix * scale[:, None] * scale[None, :])
    c, piv, rank, info = lapack.dpstrf(scaled, tol=tol, lower=1)
    if info < 0:  # pragma: no cover - LAPACK argument error
        raise RuntimeError(f"dpstrf failed: info={info}")
    k = int(rank) if room is None else min(int(rank), room)
    chosen = (piv[:k] - 1).astype(np.int64)
    return chosen, np.tril(c[:k, :k]) / scale[chosen][:, None]


def check_landmarks(landmarks: Any, n: int) -> np.ndarray | int:
    """``landmarks=`` validated against the n rows of X: the count m, or the sorted indices.

    Raises :class:`InputError` naming the fix for a count above n, an index array that
    is empty, 2-D, non-integer, out of range or repeated.
    """
    if isinstance(landmarks, int | np.integer) and not isinstance(landmarks, bool):
        m = int(landmarks)
        if m > n:
            raise InputError(
                f"landmarks={m} is more than the {n} rows of X; use at most {n} "
                "(landmarks=None fits on every row)."
            )
        return m
    idx = np.asarray(landmarks)
    if idx.ndim != 1 or idx.size < 2 or idx.dtype.kind not in "iu":
        raise InputError(
            "landmarks must be an int (how many rows to choose) or a 1-D array of at least "
            f"2 integer row indices; got an array of shape {idx.shape} and dtype {idx.dtype}."
        )
    outside = idx[(idx < 0) | (idx >= n)]
    if outside.size:
        shown = ", ".join(str(int(i)) for i in outside[:5]) + (", ..." if outside.size > 5 else "")
        negative = (
            " (negative indices are not counted from the end here)" if (outside < 0).any() else ""
        )
        raise InputError(
            f"landmarks must be row indices in [0, {n}); {outside.size} of them are "
            f"{'negative or ' if negative else ''}out of range: {shown}"
            f"{' (negative indices are not counted from the end here)' if negative else ''}. "
            "Pass indices of rows of X."
        )
    values, counts = np.unique(idx, return_counts=True)
    if (counts > 1).any():
        twice = values[counts > 1]
        shown = ", ".join(str(int(i)) for i in twice[:5]) + (", ..." if twice.size > 5 else "")
        raise InputError(
            f"landmarks must be distinct row indices; {twice.size} of them are repeated "
            f"({shown}). Pass each row once, e.g. np.unique(landmarks)."
        )
    return np.sort(idx.astype(np.int64))


def select_landmarks(
    landmarks: Any,
    x: Rows | da.Array,
    kernel: KernelSpec,
    *,
    method: str,
    rng: np.random.Generator,
    report: Callable[[str], None] | None = None,
) -> np.ndarray:
    """Sorted landmark row indices from ``landmarks=`` (an int m or row indices);
    ``report`` is told of each RPCholesky round."""
    n = int(x.data.shape[0] if isinstance(x, Rows) else x.shape[0])
    checked = check_landmarks(landmarks, n)
    if isinstance(checked, np.ndarray):
        return checked
    if method == "uniform" or checked == n:
        return uniform_landmarks(n, checked, rng)
    return rpcholesky_landmarks(x, kernel, checked, rng, report=report)


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


RANDOM_STATE_PARAM = Param(
    "random_state",
    (Interval(INT, 0, None), SEED, NONE),
    None,
    "seed of the landmark draw",
    parse=number_or(int),
)
"""The ``random_state`` argument: the seed of the centres drawn (a fit takes it for its
Krylov start block too)."""

LANDMARKS_PARAM = Param(
    "landmarks",
    (
        Interval(INT, 2, None),
        InstanceOf((np.ndarray, list, tuple), "an array of row indices"),
        NONE,
    ),
    None,
    "fit on m chosen rows (an int) or these row indices; every row is then projected",
    parse=number_or(int),
)
"""The ``landmarks`` argument of a fit: m rows chosen, or their indices."""

LANDMARK_METHOD_PARAM = Param(
    "landmark_method",
    (Options(get_args(LandmarkMethod)),),
    "uniform",
    "how landmarks=m chooses rows: uniformly, or by randomly pivoted partial Cholesky",
    parse=str,
)
"""The ``landmark_method`` argument: how m landmarks are chosen (:data:`LandmarkMethod`)."""
