"""A kernel ridge problem and what is told of it: its sizes (:class:`RidgeSizes`), the
plan a route makes for it (:class:`RidgePlan`: counted work, memory by part, where each
part lives), the problem as a route takes it (:class:`RidgeProblem`) and the solution it
gives (:class:`RidgeSolution`, timed by :class:`Clock`).

A route (:class:`npt_dask.ridge.routes.base.Route`) plans and solves one of kernel
ridge's two problems (Nyström, with m centres; exact, every row a centre); the plan
that chooses one is :mod:`npt_dask.ridge.planning`. Records and arithmetic on sizes
here; no pass.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np

from npt_dask.arrays.host import to_host
from npt_dask.engine.rows import Rows
from npt_dask.kernels import KernelSpec
from npt_dask.runtime.scheduler import compute

__all__ = [
    "DEVICE_PARTS",
    "Clock",
    "RidgePlan",
    "RidgeProblem",
    "RidgeSizes",
    "RidgeSolution",
    "on_the_device",
    "total_weight",
]


_SINGLE = 0.5  # float32 work, in float64-flop equivalents

DEVICE_PARTS = frozenset({"blocks", "kept_blocks", "prepared"})
"""The parts of :attr:`RidgePlan.memory` held where the kernel blocks' array namespace
lives (the tasks' rows, blocks and products; the kept blocks), with every part named
``device_*``: when the rows are on a device, the rows themselves, the exact direct
route's ``n x n`` matrix and factor, the Nyström direct route's ``G``, ``K_mm`` and
factored system, the CG routes' preconditioner factors and iterates, the centres and the
vectors each route keeps there (:func:`npt_dask.ridge.routes.base.device_memory`):
device memory for a GPU namespace. The others (matrices, sums, preconditioner, vectors)
are the driver's, host RAM."""


def on_the_device(part: str) -> bool:
    """Whether a part of a plan's memory lives where the kernel blocks do."""
    return part in DEVICE_PARTS or part.startswith("device_")


@dataclass(frozen=True)
class RidgePlan:
    """How a kernel ridge fit runs and what it holds; see :func:`npt_dask.ridge.planning.
    plan_ridge`.

    ``flops`` per stage (``"<stage>"`` float64, ``"<stage>_p"`` in the kernel precision;
    ``"iteration*"`` is per iteration), ``memory`` per part in bytes (the solve's
    matrices, the preconditioner, the running sums, the blocks in flight, the vectors),
    all counted against ``memory_budget`` (on a cluster the sums and blocks are the
    workers'). ``iterations``: the iterations the plan expects (iterative routes).
    ``reason`` says why this route. :attr:`device_bytes` (the parts of
    :data:`DEVICE_PARTS`) and :attr:`host_bytes` split ``memory`` by where it lives.
    """

    route: str
    exact: bool
    n: int
    m: int
    d: int
    k: int
    precision: str
    row_chunk: int
    chains: int
    threads: int
    memory_budget: int
    max_iter: int
    tol: float
    preconditioner_rank: int = 0
    kept: tuple[tuple[int, int], ...] = ()
    flops: Mapping[str, float] = field(default_factory=dict)
    memory: Mapping[str, int] = field(default_factory=dict)
    reason: str = ""
    iterations: int = 0

    @property
    def device_bytes(self) -> int:
        """The memory of the blocks' array namespace (a GPU's for CuPy; host RAM on numpy)."""
        return sum(v for k, v in self.memory.items() if on_the_device(k))

    @property
    def host_bytes(self) -> int:
        """The driver's matrices, sums and vectors: host RAM, whatever the namespace."""
        return sum(v for k, v in self.memory.items() if not on_the_device(k))

    @property
    def total_bytes(self) -> int:
        return sum(self.memory.values())

    @property
    def blas_threads(self) -> int:
        """BLAS threads per task of the direct route's pass (threads shared by the chains)."""
        return max(1, self.threads // max(1, self.chains))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable summary."""
        out = {
            k: getattr(self, k)
            for k in (
                "route", "exact", "n", "m", "d", "k", "precision", "row_chunk", "chains",
                "threads", "memory_budget", "max_iter", "tol", "preconditioner_rank",
                "iterations", "reason",
            )
        }  # fmt: skip
        out["kept_blocks"] = len(self.kept)
        out["flops"] = {k: float(v) for k, v in self.flops.items()}
        out["memory"] = {k: int(v) for k, v in self.memory.items()}
        out["device_bytes"], out["host_bytes"] = self.device_bytes, self.host_bytes
        return out


@dataclass(frozen=True)
class RidgeSizes:
    """The sizes a route is planned on: n rows, m centres (n: exact), d features, k
    targets, kernel blocks of ``itemsize`` bytes, ``alphas`` distinct ridge values,
    ``threads`` task threads in ``workers`` processes, the budget, the stopping rule and
    the exact route's row chunk."""

    n: int
    m: int
    d: int
    k: int
    itemsize: int
    alphas: int
    threads: int
    budget: int
    max_iter: int
    tol: float
    chunk: int
    workers: int = 1
    exact: bool = False
    positive_alpha: bool = True
    alpha: float = 0.0  # the smallest alpha (0: not known), for iteration estimates
    device_budget: int | None = None  # bytes of device memory (None: the rows on the host)

    @property
    def single(self) -> float:
        """float32 work in float64-flop equivalents (BLAS's single rate is about twice)."""
        return _SINGLE if self.itemsize == 4 else 1.0

    def cost(self, flops: Mapping[str, float], iterations: int) -> float:
        """Float64-equivalent work; per-iteration stages times ``iterations``."""
        total = 0.0
        for stage, value in flops.items():
            scale = self.single if stage.endswith("_p") else 1.0
            total += scale * value * (iterations if stage.startswith("iteration") else 1)
        return total


@dataclass(frozen=True)
class RidgeProblem:
    """A kernel ridge problem as the solvers take it.

    ``rows``: the training rows (:class:`~npt_dask.engine.rows.Rows`, decided once at the
    estimator's entrance: where they live, their namespace), row-chunked, in the kernel
    precision (for a precomputed kernel the given ``n x n`` matrix, its columns chunked
    like its rows). ``targets`` ``(n, k)`` float64 and ``weights`` ``(n,)`` or None:
    numpy, dask, or arrays of the rows' device, moved by each route once
    (:meth:`~npt_dask.engine.rows.Rows.aligned`, :meth:`~npt_dask.engine.rows.Rows.put`).
    ``alphas`` one per target column, ``centres`` the sorted landmark row indices (None:
    every row), ``plan`` the route, ``centre_x`` the landmarks' rows gathered once
    (:func:`~npt_dask.ridge.centre_rows.centre_rows`: in the rows' namespace, on their
    device) and ``centre_host`` the same rows in host memory (numpy: the same array; None
    for a precomputed kernel or without landmarks).
    """

    rows: Rows
    kernel: KernelSpec
    targets: Any
    weights: Any
    alphas: np.ndarray
    centres: np.ndarray | None
    plan: RidgePlan
    random_state: Any = None
    landmark_method: str = "uniform"
    centre_x: Any = None
    centre_host: np.ndarray | None = None

    @property
    def k(self) -> int:
        return int(self.targets.shape[1])

    @property
    def dtype(self) -> np.dtype:
        """The kernel precision (the rows' dtype)."""
        return np.dtype(self.rows.data.dtype)


@dataclass
class RidgeSolution:
    """Dual coefficients ``coef`` (``m x k``, one row per centre) and how they were found:
    ``iterations`` (the route's count, which ``n_iter_`` reports: 1 for one direct solve)
    and the relative residual after each (iterative routes), per-column ``converged``,
    seconds per stage, the preconditioner's size and jitter."""

    coef: np.ndarray
    iterations: int = 1
    residuals: list[float] = field(default_factory=list)
    converged: np.ndarray | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    plan: RidgePlan | None = None  # the plan as the route refined it (None: as planned)


class Clock:
    """Seconds per stage."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._start = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - self._start
        self._start = now


def total_weight(problem: RidgeProblem) -> float:
    """The sum of the sample weights (n without): one number crosses."""
    if problem.weights is None:
        return float(problem.rows.n)
    w = problem.weights
    if isinstance(w, np.ndarray | da.Array):
        return float(compute(da.asarray(w).sum())[0])
    return float(np.asarray(to_host(w.sum())))  # a device's weights: their sum crosses
