"""Choosing kernel ridge's gamma and alpha: held-out score on a subproblem, on a budget.

The procedure of ``KernelRidgeCV`` and ``KernelRidgeClassifierCV``, before their
full fit:

1. draw ``s`` rows uniformly (seeded by ``random_state``) -- one gather of s rows --
   and hold out a share ``held_out`` of them: ``search_rows`` if given (at most n),
   else :func:`subproblem_rows`: a fifth of n (:data:`SEARCH_SHARE`), from
   :data:`SEARCH_FLOOR` up to :data:`SEARCH_ROWS`;
2. for each gamma, evaluate the subproblem's kernel once: the ``s_fit`` rows
   kept for fitting against their centres (all of them without landmarks, or with
   ``m >= s_fit`` landmarks: exact kernel ridge, whose solution Nyström with every
   row a centre equals -- ``(K^2 + alpha K) c = K t`` has ``(K + alpha I) c = t``'s
   -- at a third of its flops: no ``K^T K``; else m of them: Nyström), and the
   held-out rows against the same centres;
3. for each alpha, one Cholesky factorisation, and the held-out score: R^2 for a
   regressor, and for a classifier its like on the ±1 targets, ``1 - mean squared
   error`` (:func:`target_score`; accuracy is a count of a few thousand rows, equal for
   most alphas, where the squared error still tells them apart);
4. the best pair is the full fit's; scores within :data:`TIE_TOL` of the best (relative
   to its distance from a perfect 1) are ties, broken toward the middle of the grids
   (:func:`choose`), not toward an end that no score asked for.

``alphas`` are the full problem's: the subproblem solves with
``alpha * s_fit / n`` (the same penalty per row, ``lambda = alpha / n``, whatever
the number of rows). Cost: ``len(gammas)`` kernel evaluations of
``s_fit x c + s_held x c`` entries (``c`` centres) and, per (gamma, alpha), one
``c x c`` Cholesky factorisation (``c^3 / 3`` flops): ``len(gammas) * len(alphas)``
factorisations, the search's time. A subproblem of a fifth of the rows keeps the
default grid's 40 factorisations at ``40 (0.16 n)^3 / 3``, a sixth of the direct solve
of all n rows (``n^3 / 3``). Measured (``benchmarks/search.py``, 5,000 covertype rows,
a busy 2-core machine, one run): 68 s against the direct final fit's 27 s, where the
former default (all 5,000 rows) took 918 s. One
eigendecomposition per gamma would serve every alpha, but costs more than the eight
Cholesky factorisations it replaces (the tridiagonal reduction is memory-bound: some 19
factorisations' time at 4,000 rows). Memory: the s rows and two ``c x c`` float64
matrices. Everything runs on the driver (numpy blocks of at most ``s`` rows).

Layer rule: numpy on samples; the rows are gathered through dask once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse

from npt_dask.arrays.host import to_host
from npt_dask.errors import InputError, KernelParameterError
from npt_dask.kernels import KernelSpec
from npt_dask.linalg.symmetric import syrk_update
from npt_dask.params.constraints import INT, NONE, REAL, ArrayOf, Interval, Param
from npt_dask.params.parsing import number_or
from npt_dask.ridge.normal_solve import RIDGE_JITTER, solve_symmetric
from npt_dask.runtime.scheduler import compute

__all__ = [
    "GAMMA_FACTORS",
    "HELD_OUT",
    "SEARCH_FLOOR",
    "SEARCH_PARAMS",
    "SEARCH_ROWS",
    "SEARCH_SHARE",
    "TIE_TOL",
    "SearchResult",
    "accuracy_score",
    "choose",
    "r2_score",
    "search",
    "subproblem_rows",
    "target_score",
]

TIE_TOL = 1e-3
"""Scores whose distance from a perfect 1 is within this share of the best one's are ties:
one part in a thousand of a held-out squared error is below what a held-out set of a
few thousand rows resolves (on MNIST subproblems alphas from 1e-6 to 1e-3 differ by
parts in 1e5)."""

GAMMA_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)
"""``gammas=None`` tries these multiples of ``gamma="scale"`` (``1 / (d var X)``, on the
subproblem's rows) for kernels that take a gamma."""

SEARCH_ROWS = 10_000
"""The most rows of the subproblem ``search_rows=None`` takes."""

SEARCH_SHARE = 0.2
"""``search_rows=None``: the subproblem takes this share of the rows (between
:data:`SEARCH_FLOOR` and :data:`SEARCH_ROWS`). Its factorisations cost ``(0.8 s)^3 / 3``
each, so the share keeps the search's cost a fixed fraction of the full fit's whatever
n: with half the rows (10,000 of 20,000), the default grid's 40 factorisations took 19
times the final fit."""

SEARCH_FLOOR = 1_000
"""``search_rows=None`` takes at least this many rows (all of them when the data have
fewer): below it a fifth of the rows holds out too few to tell candidates apart."""

HELD_OUT = 0.2
"""Share of the subproblem's rows held out to score each (gamma, alpha)."""

SEARCH_PARAMS: tuple[Param, ...] = (
    Param(
        "alphas",
        (ArrayOf(Interval(REAL, 0, None, "left")),),
        tuple(float(a) for a in np.logspace(-6, 1, 8)),
        "candidate alphas (the full problem's), scored on held-out rows of a subproblem",
    ),
    Param(
        "gammas",
        (ArrayOf(Interval(REAL, 0, None, "neither")), NONE),
        None,
        "candidate gammas (None: multiples of gamma='scale' for kernels that take one)",
        KernelParameterError,
    ),
    Param(
        "search_rows",
        (Interval(INT, 2, None), NONE),
        None,
        "rows of the subproblem the search scores candidates on (None: a fifth of the rows, "
        f"from {SEARCH_FLOOR:,} up to {SEARCH_ROWS:,})",
        parse=number_or(int),
    ),
    Param(
        "held_out",
        (Interval(REAL, 0, 1, "neither"),),
        HELD_OUT,
        "share of the subproblem's rows held out to score the candidates",
        parse=number_or(float),
    ),
)


@dataclass
class SearchResult:
    """The chosen pair, every score (``scores[g, a]``), the subproblem's rows (indices of
    X: those fitted, those held out), its number of centres and the seconds it took."""

    gamma: Any
    alpha: float
    gammas: list[Any]
    alphas: list[float]
    scores: np.ndarray
    fit_rows: np.ndarray
    held_out_rows: np.ndarray
    centres: int
    seconds: float = 0.0
    best_score: float = float("nan")

    def as_dict(self) -> dict[str, Any]:
        """Plain values (``cv_results_``)."""
        return {
            "gammas": [None if g is None else float(g) for g in self.gammas],
            "alphas": [float(a) for a in self.alphas],
            "scores": self.scores.tolist(),
            "gamma": None if self.gamma is None else float(self.gamma),
            "alpha": float(self.alpha),
            "fit_rows": [int(i) for i in self.fit_rows],
            "held_out_rows": [int(i) for i in self.held_out_rows],
            "centres": self.centres,
            "seconds": self.seconds,
        }


def accuracy_score(t: np.ndarray, decision: np.ndarray) -> float:
    """Share of rows whose largest decision (the sign, for one column) is the class of
    their ±1 targets."""
    if t.shape[1] == 1:
        return float(np.mean((decision[:, 0] > 0) == (t[:, 0] > 0)))
    return float(np.mean(decision.argmax(axis=1) == t.argmax(axis=1)))


def target_score(t: np.ndarray, decision: np.ndarray) -> float:
    """A classifier's continuous held-out score: ``1 - mean((decision - t)^2)`` over its
    ±1 targets (R^2's form: 1 is perfect, 0 the all-zero decision), which tells apart
    alphas that classify the same rows alike.

    >>> target_score(np.array([[1.0], [-1.0]]), np.array([[0.5], [-1.0]]))
    0.875
    """
    return float(1.0 - np.mean((decision - t) ** 2))


def choose(scores: np.ndarray) -> tuple[int, int]:
    """The chosen ``(gamma, alpha)`` indices of ``scores[g, a]`` (higher is better, 1
    perfect): among the pairs within :data:`TIE_TOL` of the best (distances from 1), the
    one nearest the middle of the alpha grid, then of the gamma grid (the smaller index
    on a draw).

    >>> choose(np.array([[0.9, 0.9, 0.9, 0.9, 0.5]]))
    (0, 2)
    >>> choose(np.array([[0.5, 0.9, 0.8]]))
    (0, 1)
    """
    if not np.isfinite(scores).any():
        raise InputError(
            "No (gamma, alpha) pair of the search gave a finite held-out score: the kernel "
            "or the targets give no usable subproblem. Check the data and the grids, or fit "
            "KernelRidge with a given alpha and gamma."
        )
    finite = np.where(np.isfinite(scores), scores, -np.inf)
    best = float(finite.max())
    gap = max(1.0 - best, 0.0)
    tied = np.argwhere(1.0 - finite <= gap * (1.0 + TIE_TOL) + 1e-12)
    mid_g, mid_a = (scores.shape[0] - 1) / 2, (scores.shape[1] - 1) / 2
    g, a = min(tied.tolist(), key=lambda ga: (abs(ga[1] - mid_a), abs(ga[0] - mid_g), ga[1]))
    return int(g), int(a)


def r2_score(t: np.ndarray, prediction: np.ndarray) -> float:
    """R^2 averaged over the targets (scikit-learn's ``r2_score``, uniform average)."""
    from sklearn.metrics import r2_score as sk_r2

    return float(sk_r2(t, prediction))


def subproblem_rows(n: int, search_rows: int | None = None) -> int:
    """Rows of the search's subproblem for n rows: ``search_rows`` (at most n), or with
    None :data:`SEARCH_SHARE` of n between :data:`SEARCH_FLOOR` and :data:`SEARCH_ROWS`.

    >>> subproblem_rows(20_000), subproblem_rows(60_000), subproblem_rows(400)
    (4000, 10000, 400)
    >>> subproblem_rows(20_000, 10_000)
    10000
    """
    if search_rows is not None:
        return min(n, int(search_rows))
    share = math.ceil(SEARCH_SHARE * n)
    return min(n, max(SEARCH_FLOOR, min(SEARCH_ROWS, share)))


def _gather(values: Any, idx: np.ndarray) -> np.ndarray | None:
    if values is None:
        return None
    if isinstance(values, da.Array):
        return np.asarray(to_host(compute(values[idx])[0]))
    if not isinstance(values, np.ndarray):  # a device's: the sampled rows cross, once
        return np.asarray(to_host(values[idx]))
    return values[idx]


def _normal_parts(
    kfc: np.ndarray, kcc: np.ndarray | None, t: np.ndarray, w: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """What every alpha's solve of a gamma shares, formed once: exact (``kcc`` None:
    ``kfc`` is the square kernel of the fit rows) ``(S K S, S t, S)``; Nyström
    ``(K^T W K, K^T W t, None)``."""
    if kcc is None:
        s = np.ones(len(t)) if w is None else np.sqrt(w)
        return kfc * s[:, None] * s[None, :], t * s[:, None], s
    weighted = kfc if w is None else kfc * np.sqrt(w)[:, None]
    gram = np.zeros((kfc.shape[1], kfc.shape[1]), order="F")
    syrk_update(gram, np.asfortranarray(weighted))
    gram = np.triu(gram) + np.triu(gram, 1).T
    rhs = weighted.T @ (t if w is None else t * np.sqrt(w)[:, None])
    return gram, rhs, None


def _normal_solve(
    parts: tuple[np.ndarray, np.ndarray, np.ndarray | None], kcc: np.ndarray | None,
    alpha: float,
) -> np.ndarray:  # fmt: skip
    """The subproblem's dual coefficients for one alpha from :func:`_normal_parts`: exact
    ``(S K S + alpha I) c' = S t``, ``c = S c'``, or Nyström ``(K^T W K + alpha K_cc) c =
    K^T W t``."""
    matrix, rhs, s = parts
    if kcc is None:
        assert s is not None
        system = np.array(matrix, order="F")  # a copy: the parts serve every alpha
        system[np.diag_indices(len(system))] += alpha
        return solve_symmetric(system, rhs, f"alpha={alpha:g}")[0] * s[:, None]
    system = np.asfortranarray(matrix + alpha * kcc)
    return solve_symmetric(system, rhs, f"alpha={alpha:g}", jitter_up_to=RIDGE_JITTER)[0]


def search(
    rows: da.Array,
    targets: Any,
    weights: Any,
    *,
    spec_for: Callable[[Any, np.ndarray], KernelSpec] | None,
    gammas: Callable[[np.ndarray], Sequence[Any]],
    alphas: Sequence[float],
    landmarks: Any,
    score: Callable[[np.ndarray, np.ndarray], float],
    rng: np.random.Generator,
    search_rows: int | None = None,
    held_out: float = HELD_OUT,
) -> SearchResult:
    """The best ``(gamma, alpha)`` by held-out score on a subproblem (see the module doc).

    ``spec_for(gamma, sample)`` gives the resolved kernel of a gamma on the sampled rows;
    None for a precomputed kernel (``rows`` is then the kernel matrix).
    ``gammas(sample)`` gives the candidate gammas (the sample: the subproblem's rows,
    float64; None for a precomputed kernel). ``landmarks``: None (exact), or the full
    fit's landmark count or indices (the subproblem takes at most as many centres).
    """
    start = time.perf_counter()
    n = int(rows.shape[0])
    if n < 2:
        raise InputError(
            f"The hyperparameter search holds rows out to score them, so it needs at least 2 "
            f"samples; got {n} sample(s). Pass more rows, or fit KernelRidge with a given "
            "alpha and gamma."
        )
    s = subproblem_rows(n, search_rows)
    idx = np.sort(rng.choice(n, s, replace=False))
    order = rng.permutation(s)
    held = min(s - 1, max(1, round(held_out * s))) if s > 1 else 0  # one fit row at least
    fit_at, test_at = np.sort(order[held:]), np.sort(order[:held])
    t = np.asarray(_gather(targets, idx), dtype=np.float64).reshape(s, -1)
    w = _gather(weights, idx)
    wf = None if w is None else np.asarray(w, dtype=np.float64)[fit_at]
    m = None if landmarks is None else (landmarks if isinstance(landmarks, int) else len(landmarks))
    exact = m is None or m >= len(fit_at)  # every fit row a centre: Nyström is exact ridge
    centres = fit_at if exact else np.sort(rng.choice(fit_at, m, False))
    given = _given_block(rows, idx) if spec_for is None else None
    sample = None if given is not None else _float64(to_host(compute(rows[idx])[0]))
    scale = (len(fit_at) / n) if n else 1.0
    candidates = list(gammas(sample if sample is not None else np.zeros((0, 1))))
    scores = np.full((len(candidates), len(alphas)), -np.inf)
    for g, gamma in enumerate(candidates):
        block = _block_fn(given, sample, spec_for, gamma)
        kfc = block(fit_at, centres)
        ktc = block(test_at, centres)
        kcc = None if exact else block(centres, centres)
        parts = _normal_parts(kfc, kcc, t[fit_at], wf)  # once per gamma, not per alpha
        for a, alpha in enumerate(alphas):
            coef = _normal_solve(parts, kcc, float(alpha) * scale)
            scores[g, a] = score(t[test_at], ktc @ coef)
    best_g, best_a = _chosen(scores, candidates, alphas)
    return SearchResult(
        candidates[best_g], float(alphas[best_a]), candidates, [float(a) for a in alphas], scores,
        fit_rows=idx[fit_at], held_out_rows=idx[test_at], centres=len(centres),
        seconds=time.perf_counter() - start, best_score=float(scores[best_g, best_a]),
    )  # fmt: skip


def _chosen(scores: np.ndarray, gammas: Sequence[Any], alphas: Sequence[float]) -> tuple[int, int]:
    """:func:`choose` on the grids in ascending order (the middle of the values, however
    they were given), as indices of ``gammas`` and ``alphas``."""
    a_order = np.argsort(np.asarray(alphas, dtype=np.float64), kind="stable")
    numeric = all(g is not None for g in gammas)
    g_order = (
        np.argsort(np.asarray(gammas, dtype=np.float64), kind="stable")
        if numeric
        else np.arange(len(gammas))
    )
    g, a = choose(scores[np.ix_(g_order, a_order)])
    return int(g_order[g]), int(a_order[a])


def _float64(rows: Any) -> Any:
    """Sampled rows in float64, a sparse sample kept sparse (the kernels take it)."""
    if scipy.sparse.issparse(rows):
        return scipy.sparse.csr_matrix(rows, dtype=np.float64)
    return np.asarray(rows, dtype=np.float64)


def _given_block(rows: da.Array, idx: np.ndarray) -> np.ndarray:
    """The given kernel matrix's sampled rows and columns (a precomputed kernel)."""
    return np.asarray(to_host(compute(rows[idx][:, idx])[0]), dtype=np.float64)


def _block_fn(
    given: np.ndarray | None,
    sample: np.ndarray | None,
    spec_for: Callable[[Any, np.ndarray], KernelSpec] | None,
    gamma: Any,
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Kernel blocks between sampled rows (positions in the sample), float64."""
    if given is not None:
        return lambda a, b: given[np.ix_(a, b)]
    assert sample is not None
    assert spec_for is not None
    spec = spec_for(gamma, sample)
    return lambda a, b: np.asarray(spec(sample[a], sample[b]), dtype=np.float64)
