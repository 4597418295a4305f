"""What a kernel ridge route is: its sizes, its plan record, and the interface it implements.

A *route* (:class:`Route`) is one way of solving one of kernel ridge's two problems
(Nyström, with m centres; exact, every row a centre). It says

* :meth:`Route.plan` -- its counted work (flops by stage: ``"<stage>"`` float64,
  ``"<stage>_p"`` in the kernel precision, ``"iteration*"`` per iteration) and its memory
  by part (bytes; the parts in :data:`DEVICE_PARTS` live where the kernel blocks do, the
  others on the host), for the sizes of a problem (:class:`RidgeSizes`), as a
  :class:`RidgePlan`;
* :meth:`Route.fits` -- whether that plan fits the budget;
* :meth:`Route.solve` -- the solve, following the plan.

The routes live one module each in :mod:`npt_dask.ridge.routes`, whose ``ROUTES`` is the
one registry :func:`npt_dask.ridge.planning.plan_ridge` chooses over. Pure arithmetic on
sizes here, and the records a route takes and gives
(:class:`RidgeProblem`, :class:`RidgeSolution`); no dask.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from npt_dask.engine.budget import operand_bytes
from npt_dask.kernels import KernelSpec

if TYPE_CHECKING:
    import dask.array as da

    from npt_dask.ridge.checkpoint import Checkpoint

__all__ = [
    "BLOCK_BYTES",
    "CG_ITERATIONS",
    "DEVICE_PARTS",
    "RidgePlan",
    "RidgeProblem",
    "RidgeSizes",
    "RidgeSolution",
    "Route",
    "centre_bytes",
    "ridge_rows",
    "row_chunks",
    "task_bytes",
]

CG_ITERATIONS = 20
"""Iterations the plan expects of preconditioned CG on the Nyström system when it compares
routes (Falkon's typical count). It only weighs the choice; the solver stops on ``tol`` or
``max_iter``. (Exact CG estimates its own: :mod:`npt_dask.ridge.routes.cg`.)"""

BLOCK_BYTES = 256 * 2**20
"""A pass's kernel block (``rows x m``, with its float64 copy when one is needed) is
kept near this size: the plan picks the rows per task from it (:func:`ridge_rows`)."""

_MIN_ROWS, _MAX_ROWS = 256, 8192
_SINGLE = 0.5  # float32 work, in float64-flop equivalents

DEVICE_PARTS = frozenset({
    "blocks", "kept_blocks", "prepared", "device_matrix", "device_factor", "device_sums",
    "device_kmm",
})  # fmt: skip
"""The parts of :attr:`RidgePlan.memory` held where the kernel blocks' array namespace
lives (the tasks' rows, blocks and products; the kept blocks; the exact direct route's
``n x n`` matrix and factor, the Nyström direct route's ``G``, ``K_mm`` and factored
system, when the rows are on a device): device memory for a GPU
namespace. The others (matrices, sums, preconditioner, vectors) are the driver's, host
RAM."""


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
        return sum(v for k, v in self.memory.items() if k in DEVICE_PARTS)

    @property
    def host_bytes(self) -> int:
        """The driver's matrices, sums and vectors: host RAM, whatever the namespace."""
        return sum(v for k, v in self.memory.items() if k not in DEVICE_PARTS)

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

    ``rows``: the training rows, row-chunked, in the kernel precision (for a precomputed
    kernel the given ``n x n`` matrix, its columns chunked like its rows). ``targets``
    ``(n, k)`` float64, ``weights`` ``(n,)`` or None, ``alphas`` one per target column,
    ``centres`` the sorted landmark row indices (None: every row), ``plan`` the route,
    ``centre_x`` the landmarks' rows (numpy, gathered once: :func:`centre_rows`; None for
    a precomputed kernel or without landmarks).
    """

    rows: da.Array
    kernel: KernelSpec
    targets: Any
    weights: Any
    alphas: np.ndarray
    centres: np.ndarray | None
    plan: RidgePlan
    random_state: Any = None
    landmark_method: str = "uniform"
    centre_x: np.ndarray | None = None

    @property
    def k(self) -> int:
        return int(self.targets.shape[1])


@dataclass
class RidgeSolution:
    """Dual coefficients ``coef`` (``m x k``, one row per centre) and how they were found:
    ``iterations`` and the relative residual after each (iterative routes), per-column
    ``converged``, seconds per stage, the preconditioner's size and jitter."""

    coef: np.ndarray
    iterations: int = 0
    residuals: list[float] = field(default_factory=list)
    converged: np.ndarray | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    plan: RidgePlan | None = None  # the plan as the route refined it (None: as planned)


class Route(ABC):
    """One way of solving one kernel ridge problem; see the module doc.

    ``name`` is what ``solver=`` names and ``plan_["route"]`` records; ``exact`` which
    problem it solves; ``iterative`` whether it stops on ``tol`` (then it needs alpha > 0,
    and ``solver="auto"`` weighs it by :data:`npt_dask.ridge.planning.CG_MARGIN`).
    """

    name: str = ""
    exact: bool = False
    iterative: bool = False

    @abstractmethod
    def plan(self, sizes: RidgeSizes, base: RidgePlan) -> RidgePlan:
        """``base`` with this route's flops, memory and parameters for ``sizes``."""

    def fits(self, plan: RidgePlan, sizes: RidgeSizes) -> bool:
        """Whether the plan can run: within the budget (with a device, the host part within
        ``memory_budget`` and the device part within ``device_memory_budget``), and
        alpha > 0 when iterative."""
        if sizes.device_budget is None:
            held = plan.total_bytes <= sizes.budget
        else:
            held = plan.host_bytes <= sizes.budget and plan.device_bytes <= sizes.device_budget
        return held and (sizes.positive_alpha or not self.iterative)

    @abstractmethod
    def solve(
        self, problem: RidgeProblem, *, checkpoint: Checkpoint | None = None,
        progress: bool = False,
    ) -> RidgeSolution:  # fmt: skip
        """The dual coefficients of ``problem``, following ``problem.plan``."""


def ridge_rows(m: int, itemsize: int, *, float64_copy: bool) -> int:
    """Rows per task so that the kernel block (and its float64 copy) is about
    :data:`BLOCK_BYTES`, a multiple of 64 in [256, 8192]."""
    per_row = m * (itemsize + (8 if float64_copy else 0))
    rows = BLOCK_BYTES // max(per_row, 1)
    return int(min(_MAX_ROWS, max(_MIN_ROWS, rows // 64 * 64)))


def task_bytes(rows: int, m: int, d: int, itemsize: int, k: int, copy: bool) -> int:
    """A task of a Nyström pass: its rows and their shifted copy
    (:func:`npt_dask.engine.budget.operand_bytes`), its kernel block (and float64 copy),
    vectors."""
    block = rows * m * (itemsize + (8 if copy else 0))
    return rows * d * itemsize + operand_bytes(rows, d, itemsize) + block + 8 * (
        2 * rows * k + m * k)  # fmt: skip


def centre_bytes(s: RidgeSizes) -> int:
    """The centres' rows and their prepared copy (:data:`npt_dask.engine.blocks.PREPARED_BYTES`:
    shifted rows and norms, once per process), ``2 m d`` values."""
    return 2 * s.m * s.d * s.itemsize + 8 * s.m


def row_chunks(n: int, chunk: int) -> tuple[int, ...]:
    """The exact route's row chunks: ``chunk`` rows each, the last one shorter."""
    return tuple(min(chunk, n - s) for s in range(0, n, chunk))
