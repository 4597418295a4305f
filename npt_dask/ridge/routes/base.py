"""What a kernel ridge route is (:class:`Route`), and the sizes its plan is made of.

A *route* is one way of solving one of kernel ridge's two problems (Nyström, with m
centres; exact, every row a centre). It says

* :meth:`Route.plan` -- its counted work (flops by stage: ``"<stage>"`` float64,
  ``"<stage>_p"`` in the kernel precision, ``"iteration*"`` per iteration) and its memory
  by part (bytes; the parts in :data:`~npt_dask.ridge.problem.DEVICE_PARTS` live where
  the kernel blocks do, the others on the host), for the sizes of a problem
  (:class:`~npt_dask.ridge.problem.RidgeSizes`), as a
  :class:`~npt_dask.ridge.problem.RidgePlan`;
* :meth:`Route.fits` -- whether that plan fits the budget;
* :meth:`Route.solve` -- the solve, following the plan.

The routes live one module each in :mod:`npt_dask.ridge.routes`, whose ``ROUTES`` is the
one registry :func:`npt_dask.ridge.planning.plan_ridge` chooses over. Pure arithmetic on
sizes here (a pass's rows per task, its bytes); no dask.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from npt_dask.engine.budget import operand_bytes
from npt_dask.ridge.problem import RidgePlan, RidgeProblem, RidgeSizes, RidgeSolution

if TYPE_CHECKING:
    from npt_dask.ridge.checkpoint import Checkpoint

__all__ = [
    "BLOCK_BYTES",
    "OLD_NAMES",
    "Route",
    "centre_bytes",
    "device_memory",
    "ridge_rows",
    "row_chunks",
    "task_bytes",
]

BLOCK_BYTES = 256 * 2**20
"""A pass's kernel block (``rows x m``, with its float64 copy when one is needed) is
kept near this size: the plan picks the rows per task from it (:func:`ridge_rows`)."""

_MIN_ROWS, _MAX_ROWS = 256, 8192

OLD_NAMES = {("direct", False): "nystrom-direct", ("direct", True): "exact-direct",
             ("cg", False): "nystrom-cg", ("cg", True): "exact-cg"}  # fmt: skip
"""The names routes had when two were named ``"direct"`` and two ``"cg"`` (stores, plans
and checkpoints written then record them), by name and problem: the name now."""


class Route(ABC):
    """One way of solving one kernel ridge problem; see the module doc.

    ``name`` is the route's own name, unique in the registry, which ``plan_["route"]``
    records; ``solver`` the public ``solver=`` value it answers to (several routes may
    answer to one: one per problem, or the plan weighs them); ``description`` one line
    for the docstrings and the command line's help; ``exact`` which problem it solves;
    ``iterative`` whether it stops on ``tol`` (then it needs alpha > 0, and
    ``solver="auto"`` weighs it by :data:`npt_dask.ridge.planning.CG_MARGIN`). Its
    solution says how many iterations it took (:attr:`RidgeSolution.iterations
    <npt_dask.ridge.problem.RidgeSolution.iterations>`, 1 for one direct solve), which
    the estimators' ``n_iter_`` reports.
    """

    name: str = ""
    solver: str = ""
    description: str = ""
    exact: bool = False
    iterative: bool = False

    @property
    def pin(self) -> str:
        """The route as a checkpoint's fingerprint names it (with its problem): the name
        it had before route names were unique, where it had one (checkpoints written
        then resume)."""
        old = {new: name for (name, _), new in OLD_NAMES.items()}.get(self.name, self.name)
        return f"{old}-{'exact' if self.exact else 'nystrom'}"

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


def device_memory(memory: dict[str, int], s: RidgeSizes, there: tuple[str, ...]) -> dict[str, int]:
    """A route's memory by part, with the rows on a device (``s.device_budget`` given):
    the parts ``there`` (what the route keeps where the rows live) named ``device_<part>``,
    and the rows themselves counted there (``device_rows``: ``n d`` values, a precomputed
    kernel's ``n x n``); as it is for rows in host memory."""
    if s.device_budget is None:
        return memory
    out = {(f"device_{k}" if k in there else k): v for k, v in memory.items()}
    out["device_rows"] = s.n * s.d * s.itemsize
    return out
