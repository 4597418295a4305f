"""How many iterations kernel ridge's conjugate gradient takes: the one rule of every
estimate, the plan's before the data are seen and the route's once its preconditioner is
built.

Preconditioned CG reaches a relative residual ``tol`` within ``1/2 sqrt(kappa) ln(2 / tol)``
iterations, ``kappa`` the condition number of the preconditioned system. With ``kappa``
measured (the preconditioned spectrum's ends, from the Lanczos coefficients of the
iterations themselves) the counts taken on MNIST and covertype were 0.4 to 0.6 of that
bound: :func:`cg_iterations` takes :data:`BOUND_SHARE` of it. What each route knows of
``kappa``:

* **exact** kernel ridge, preconditioned by a randomized Nyström approximation of rank l
  (Frangella, Tropp & Udell 2023): the directions it leaves keep their eigenvalues plus
  alpha, so the bottom of the spectrum is alpha plus the kernel matrix's own smallest
  eigenvalue (:func:`kernel_floor`: estimated from :data:`PROBE_ROWS` sampled rows, it
  falls as 1/n; MNIST's is about 15 / n, covertype's 0); its top lies at the
  approximation's own eigenvalue of index about l / :data:`RANK_SHARE` (measured at
  l / 4.1 on covertype and l / 4.7 on MNIST: a uniform landmark model of rank l
  preconditions like the exact top l / 4 eigenvectors). The plan's prior models the
  spectrum before it is seen (:data:`npt_dask.ridge.routes.cg.SPECTRUM`); the route
  updates it with the landmark model's eigenvalues and the sampled rows
  (:func:`exact_estimate`).
* **Nyström** kernel ridge, Falkon's preconditioner (``P ~ H / w``, w the total
  weight): the prior (:func:`nystrom_prior`) is Falkon's typical count at tol 1e-3,
  scaled by ``ln(2 / tol)``. The route updates it from a sample of the rows: row x weighs
  ``||A^-T T^-T k_m(x)||^2`` in the preconditioned system (the half-preconditioned
  kernel row), so the eigenvalues of those vectors' Gram over :data:`PROBE_ROWS` rows
  sample the top of the spectrum (rows of a region the centres under-represent weigh
  most: covertype's top was 294, MNIST's 3.8); its bottom is taken as
  :data:`FALKON_BOTTOM`. :func:`nystrom_iterations`.

Layer rule: arithmetic on a few numbers and one spectrum; each route's update gathers
:data:`PROBE_ROWS` rows of a few chunks once (:func:`probe_rows`) and evaluates their
kernel on the driver.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import dask.array as da
import numpy as np

from npt_dask.arrays.host import to_host
from npt_dask.engine.rows import Rows
from npt_dask.linalg.preconditioners import FalkonCholesky, LowRank
from npt_dask.ridge.problem import RidgePlan, RidgeProblem, total_weight

__all__ = [
    "BOUND_SHARE",
    "FALKON_BOTTOM",
    "NYSTROM_KAPPA",
    "OUTLIER_COST",
    "PROBE_CHUNKS",
    "PROBE_ROWS",
    "RANK_SHARE",
    "Estimate",
    "cg_iterations",
    "exact_estimate",
    "exact_iterations",
    "gather_rows",
    "kernel_floor",
    "nystrom_estimate",
    "nystrom_iterations",
    "nystrom_prior",
    "probe_rows",
    "updated",
]

BOUND_SHARE = 0.55
"""The share of CG's bound ``1/2 sqrt(kappa) ln(2 / tol)`` that the estimates take (the
counts taken were 0.4 to 0.6 of the bound at the measured ``kappa``; 0.55 centres the
estimates of the MNIST and covertype fits of ``benchmarks/iterations.py`` on their
counts)."""

RANK_SHARE = 4
"""Exact kernel ridge: the top of the spectrum a rank-l landmark preconditioner leaves is
its eigenvalue number ``l / RANK_SHARE``."""

FALKON_BOTTOM = 0.35
"""The bottom of the spectrum Falkon's preconditioner leaves, relative to a perfect 1, as
:func:`nystrom_iterations` takes it: measured 0.11 on covertype and 0.22 on MNIST, times
the 2 to 5 by which a sample of :data:`PROBE_ROWS` rows overstates the top (each sampled
row weighs n / q times its share)."""

OUTLIER_COST = 3
"""Iterations CG spends on each eigenvalue it resolves above the rest of the spectrum (one
in exact arithmetic; fitted on covertype, MNIST and a smooth 5-d problem, tol 1e-3 and
1e-6: their estimates fell within 0.6 to 1.8 of the counts)."""

PROBE_ROWS = 512
"""Rows a route samples once its preconditioner is built: the exact route's kernel floor
(their ``q x q`` kernel, one symmetric eigendecomposition), the Nyström route's top of
the spectrum (``2 m^2 q`` flops of triangular solves, about ``1000 / m`` of the
preconditioner's ``m^3``: a twentieth at m = 20,000)."""

PROBE_CHUNKS = 8
"""The sampled rows come from at most this many row chunks, drawn at random (a gather
reads only those)."""

NYSTROM_KAPPA = 90.0
"""Nyström kernel ridge's prior condition number under Falkon's preconditioner: about 20
iterations at tol 1e-3 (Falkon's typical count), 38 at 1e-6."""


@dataclass(frozen=True)
class Estimate:
    """An iteration estimate and the condition number it stands on, in words."""

    iterations: int
    kappa: float
    why: str


def cg_iterations(kappa: float, tol: float) -> int:
    """:data:`BOUND_SHARE` of CG's bound ``1/2 sqrt(kappa) ln(2 / tol)``, at least 1.

    >>> cg_iterations(90.0, 1e-3), cg_iterations(90.0, 1e-6)
    (20, 38)
    """
    bound = 0.5 * math.sqrt(max(kappa, 1.0)) * math.log(2.0 / tol)
    return max(1, math.ceil(BOUND_SHARE * bound))


def exact_iterations(values: np.ndarray, alpha: float, tol: float, floor: float = 0.0
                     ) -> Estimate:  # fmt: skip
    """Exact CG under a landmark preconditioner whose approximation has eigenvalues
    ``values`` (descending, scaled to the n rows), for a kernel matrix whose smallest
    eigenvalue is ``floor``: ``kappa = (lambda_(l/4) + bottom) / bottom``, ``bottom =
    alpha + floor``.

    >>> exact_iterations(np.array([9.0, 4.0, 1.0, 0.5]), 1e-3, 1e-3).iterations
    199
    """
    values = np.asarray(values, dtype=np.float64)
    bottom = alpha + max(floor, 0.0)
    if not len(values):
        return Estimate(cg_iterations(1.0, tol), 1.0, "no preconditioner")
    index = max(1, math.ceil(len(values) / RANK_SHARE))
    top = max(float(values[index - 1]), 0.0)
    kappa = (top + bottom) / bottom
    why = (f"its eigenvalue {index:,} of {len(values):,} ({top:.3g}) stands for the top of "
           f"the preconditioned spectrum, alpha + the kernel's floor ({bottom:.3g}) for its "
           "bottom")  # fmt: skip
    return Estimate(cg_iterations(kappa, tol), kappa, why)


def kernel_floor(kqq: np.ndarray, n: int) -> float:
    """The smallest eigenvalue of an n-row kernel matrix from ``kqq``, the kernel of q
    rows sampled from it: ``lambda_min(K_qq) q / n`` (it falls as 1/n: on MNIST,
    ``lambda_min q`` was 15.8, 16.0, 15.2 and 15.0 at q = 250, 500, 1,000, 2,000), 0 for
    a matrix singular to rounding.

    >>> kernel_floor(np.eye(3) * 0.5, 30)
    0.05
    """
    if not len(kqq):
        return 0.0
    smallest = float(np.linalg.eigvalsh(kqq)[0])
    return max(smallest, 0.0) * len(kqq) / n


def nystrom_prior(tol: float) -> int:
    """The plan's Nyström CG estimate before the data are seen.

    >>> nystrom_prior(1e-3), nystrom_prior(1e-6)
    (20, 38)
    """
    return cg_iterations(NYSTROM_KAPPA, tol)


def nystrom_iterations(half: np.ndarray, weights: np.ndarray | None, tol: float) -> Estimate:
    """Nyström CG under Falkon's preconditioner, from ``half = A^-T T^-T K_mq`` of q sampled
    rows (``m x q``) and their weights relative to the mean weight (None: equal).

    The eigenvalues ``theta_1 >= theta_2 >= ...`` of ``half W half^T / q`` (its ``q x q``
    Gram's) sample the top of the preconditioned spectrum, its bottom is
    :data:`FALKON_BOTTOM`; CG spends about :data:`OUTLIER_COST` iterations on each
    eigenvalue it resolves above the rest, so the estimate is ``min_j (OUTLIER_COST j +
    cg_iterations(theta_(j+1) / bottom))`` (a few outlying eigenvalues cost a few
    iterations, not their condition number's).

    >>> nystrom_iterations(np.eye(4) * 2.0, None, 1e-6).iterations  # each row weighs 1
    7
    """
    q = half.shape[1]
    if q == 0:
        return Estimate(cg_iterations(NYSTROM_KAPPA, tol), NYSTROM_KAPPA, "no rows sampled")
    scaled = half if weights is None else half * np.sqrt(weights)[None, :]
    theta = np.maximum(np.linalg.eigvalsh(scaled.T @ scaled / q)[::-1], 1.0)
    counts = [OUTLIER_COST * j + cg_iterations(t / FALKON_BOTTOM, tol)
              for j, t in enumerate(theta)]  # fmt: skip
    j = int(np.argmin(counts))
    kappa = float(theta[j]) / FALKON_BOTTOM
    why = (f"{q:,} sampled rows put the top of the preconditioned spectrum at "
           f"{theta[0]:.3g}, {j} eigenvalue(s) above {theta[j]:.3g} (its bottom taken as "
           f"{FALKON_BOTTOM:g})")  # fmt: skip
    return Estimate(int(counts[j]), kappa, why)


def probe_rows(rows: da.Array, rng: np.random.Generator, exclude: Any = None) -> np.ndarray:
    """Indices of up to :data:`PROBE_ROWS` rows spread over at most :data:`PROBE_CHUNKS`
    row chunks drawn at random, none of ``exclude`` (the centres: they weigh exactly 1)."""
    starts = np.concatenate([[0], np.cumsum(rows.chunks[0])])
    picked = np.sort(rng.choice(len(starts) - 1, min(PROBE_CHUNKS, len(starts) - 1), False))
    pool = np.concatenate([np.arange(starts[c], starts[c + 1]) for c in picked])
    if exclude is not None:
        pool = np.setdiff1d(pool, np.asarray(exclude), assume_unique=True)
    if len(pool) <= PROBE_ROWS:
        return pool
    return np.sort(rng.choice(pool, PROBE_ROWS, replace=False))


def gather_rows(values: Any, idx: np.ndarray) -> np.ndarray:
    """``values[idx]`` (sorted ``idx``; ``values`` rows, or a vector of one value a row)
    as host float64, dense: :meth:`~npt_dask.engine.rows.Rows.take`, the one gather."""
    values = values if isinstance(values, da.Array) else da.asarray(values)
    column = values.ndim == 1
    got = Rows.of(values[:, None] if column else values).take(idx, host=True)
    got = np.asarray(got, dtype=np.float64)
    return got[:, 0] if column else got


def _probe_kernel(problem: RidgeProblem, rows: da.Array, idx: np.ndarray) -> tuple[
    np.ndarray, np.ndarray | None
]:  # fmt: skip
    """The kernel between the rows ``idx`` of ``rows`` and the problem's centres (all the
    sampled rows themselves on the exact route), float64, and the rows' weights relative
    to the mean weight (None without weights)."""
    exact = problem.centres is None
    if problem.kernel.precomputed:  # rows: the given matrix (exact) or its centre columns
        kernel = gather_rows(rows, idx)
        kernel = kernel[:, idx] if exact else kernel
    else:
        sample = gather_rows(rows, idx)
        against = sample if exact else problem.centre_x
        assert against is not None
        if not isinstance(against, np.ndarray):  # the centres' rows on a device: once
            against = np.asarray(to_host(against))
        dtype = np.dtype(rows.dtype)
        kernel = np.asarray(problem.kernel(sample.astype(dtype), against.astype(dtype)),
                            dtype=np.float64)  # fmt: skip
    if problem.weights is None:
        return kernel, None
    w = gather_rows(da.asarray(problem.weights), idx)
    return kernel, w * (float(rows.shape[0]) / total_weight(problem))


def exact_estimate(problem: RidgeProblem, rows: da.Array, pc: LowRank) -> Estimate:
    """:func:`exact_iterations` with the built preconditioner's eigenvalues and the
    kernel's floor (:func:`kernel_floor`) on :func:`probe_rows` (weighted as the system
    is: ``S K S``), seeded by the problem's ``random_state``."""
    rng = np.random.default_rng(problem.random_state)
    idx = probe_rows(rows, rng)
    kqq, w = _probe_kernel(problem, rows, idx)
    if w is not None:
        mean = float(total_weight(problem)) / float(rows.shape[0])
        s = np.sqrt(w * mean)
        kqq = kqq * s[:, None] * s[None, :]
    floor = kernel_floor(kqq, int(rows.shape[0]))
    return exact_iterations(pc.values, float(problem.alphas.min()), problem.plan.tol, floor)


def nystrom_estimate(problem: RidgeProblem, rows: da.Array, pc: FalkonCholesky) -> Estimate:
    """:func:`nystrom_iterations` on :func:`probe_rows` of the Nyström pass's ``rows`` (X,
    or a precomputed kernel's centre columns), seeded by the problem's ``random_state``:
    one gather of those rows, their kernel against the centres, two triangular solves."""
    rng = np.random.default_rng(problem.random_state)
    idx = probe_rows(rows, rng, exclude=problem.centres)
    kqm, weights = _probe_kernel(problem, rows, idx)
    return nystrom_iterations(pc.half(kqm.T), weights, problem.plan.tol)


def updated(plan: RidgePlan, estimate: Estimate) -> RidgePlan:
    """The plan with the route's estimate once its preconditioner is built: its iterations,
    and its reason saying so beside the plan's prior."""
    note = (f"the built preconditioner expects about {estimate.iterations} iterations to "
            f"tol={plan.tol:g} (the plan's prior: {plan.iterations}; {estimate.why})")  # fmt: skip
    return replace(plan, iterations=estimate.iterations, reason=f"{plan.reason}; {note}")
