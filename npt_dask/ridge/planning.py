"""The kernel ridge plan: direct or iterative, from counted flops and memory.

Pure arithmetic on sizes; no data, no dask. :func:`plan_ridge` is the one place
that decides how a kernel ridge fit runs and what it holds, and says why;
:mod:`npt_dask.ridge.solvers` follows the :class:`RidgePlan` it returns, and
the plan is recorded in the estimator's ``plan_``.

Two problems (n rows, m centres, d features, k targets, sample weights W):

* **Nyström kernel ridge** (``landmarks`` = m centres):
  ``(K_nm^T W K_nm + alpha K_mm) c = K_nm^T W Y``;
* **exact kernel ridge** (``landmarks=None``, every row a centre):
  ``(W^1/2 K W^1/2 + alpha I) c' = W^1/2 Y``, ``c = W^1/2 c'`` (scikit-learn's).

Two routes each (a multiply-add counts two flops; "p" marks work in the kernel
precision, the rest is float64):

=========  ================================================  ==========================
route      work                                              memory
=========  ================================================  ==========================
direct     Nyström: kernel 2nmd (p), moments ``K^T W K``     ``chains`` m x m sums
           n m^2 (symmetric rank-k updates), factor m^3/3    (float64), ``K_mm``
           per distinct alpha; exact: the n x n kernel        exact: the n x n matrix
           2n^2 d (p), factor n^3/3
cg         Nyström: preconditioner m^3 (p: two Cholesky      Nyström: one m x m (p);
           factors and a triangular product, Falkon's), then exact: the n x l low-rank
           per iteration 2nmd + 4nmk (p) + 4m^2 k; exact:    factor, kept blocks
           low-rank preconditioner from an l-row landmark
           model, per iteration n^2 d (upper triangle, less
           the kept blocks) + 4n^2 k (p)
=========  ================================================  ==========================

``solver="auto"`` for **exact** kernel ridge takes the direct route whenever the
n x n kernel matrix fits ``memory_budget``, whatever n: it is scikit-learn's
solve, exact to rounding, where CG stops on a residual of ``tol``. Only when it
does not fit does auto take CG, and the plan's ``reason`` (which the estimators
turn into one :class:`~npt_dask.errors.RidgeWarning`) says so: the tolerance,
and the budget the exact solve needs (or landmarks). For **Nyström** kernel
ridge auto takes the direct route when it fits unless the iterative one is
counted :data:`CG_MARGIN` times cheaper, counting float32 work at half the
float64 cost (BLAS's single-precision rate is about twice the double) and the
iterative route at :data:`CG_ITERATIONS` iterations (or ``max_iter`` if fewer).
The plan's ``reason`` says which and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from npt_dask.engine.blocks import PREPARED_BYTES
from npt_dask.engine.budget import cached_fraction, in_flight_bytes, kept_bytes, kept_pairs
from npt_dask.errors import InputError
from npt_dask.linalg.tiles import tiled_bytes
from npt_dask.runtime.params import format_bytes

__all__ = [
    "BLOCK_BYTES",
    "CG_ITERATIONS",
    "CG_MARGIN",
    "DEVICE_PARTS",
    "EXACT_WORK_VECTORS",
    "PRECONDITIONER_RANK",
    "RidgePlan",
    "plan_ridge",
    "ridge_rows",
]

CG_ITERATIONS = 20
"""Iterations the plan expects of preconditioned CG when it compares routes (Falkon's
typical count; the exact MNIST run in ``../shared/kernel-ridge-notes.md`` took 15). It
only weighs the choice; the solver stops on ``tol`` or ``max_iter``."""

CG_MARGIN = 2.0
"""``solver="auto"`` takes the iterative route over a direct one that fits only when it is
counted at least this many times cheaper: its iteration count is an estimate, and it
stops on a residual of ``tol`` (of the normal equations, whose condition number is large:
its predictions differ from the direct solve's by more than ``tol``), where the direct one
is exact to rounding."""

PRECONDITIONER_RANK = 3000
"""Most rows of the landmark model that preconditions exact kernel ridge (the rank of
its Nyström approximation of K): a tenth of n up to this many, fewer when its ``n x l``
factor would not fit half the budget."""

BLOCK_BYTES = 256 * 2**20
"""A pass's kernel block (``rows x m``, with its float64 copy when one is needed) is
kept near this size: the plan picks the rows per task from it (:func:`ridge_rows`)."""

_MIN_ROWS, _MAX_ROWS = 256, 8192
_SINGLE = 0.5  # float32 work, in float64-flop equivalents

DEVICE_PARTS = frozenset({"blocks", "kept_blocks", "prepared"})
"""The parts of :attr:`RidgePlan.memory` held where the kernel blocks' array namespace
lives (the tasks' rows, blocks and products; the kept blocks): device memory for a GPU
namespace. The others (matrices, sums, preconditioner, vectors) are the driver's, host
RAM."""


@dataclass(frozen=True)
class RidgePlan:
    """How a kernel ridge fit runs and what it holds; see :func:`plan_ridge`.

    ``flops`` per stage (``"<stage>"`` float64, ``"<stage>_p"`` in the kernel precision;
    ``"iteration*"`` is per CG iteration), ``memory`` per part in bytes (the solve's
    matrices, the preconditioner, the running sums, the blocks in flight, the vectors),
    all counted against ``memory_budget`` (on a cluster the sums and blocks are the
    workers'). ``reason`` says why this route. :attr:`device_bytes` (the parts of
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

    @property
    def device_bytes(self) -> int:
        """The memory of the blocks' array namespace (a GPU's for CuPy; host RAM on numpy)."""
        return sum(v for k, v in self.memory.items() if k in DEVICE_PARTS)

    @property
    def host_bytes(self) -> int:
        """The driver's matrices, sums and vectors: host RAM, whatever the namespace."""
        return sum(v for k, v in self.memory.items() if k not in DEVICE_PARTS)

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
                "threads", "memory_budget", "max_iter", "tol", "preconditioner_rank", "reason",
            )
        }  # fmt: skip
        out["kept_blocks"] = len(self.kept)
        out["flops"] = {k: float(v) for k, v in self.flops.items()}
        out["memory"] = {k: int(v) for k, v in self.memory.items()}
        out["device_bytes"], out["host_bytes"] = self.device_bytes, self.host_bytes
        return out


def ridge_rows(m: int, itemsize: int, *, float64_copy: bool) -> int:
    """Rows per task so that the kernel block (and its float64 copy) is about
    :data:`BLOCK_BYTES`, a multiple of 64 in [256, 8192]."""
    per_row = m * (itemsize + (8 if float64_copy else 0))
    rows = BLOCK_BYTES // max(per_row, 1)
    return int(min(_MAX_ROWS, max(_MIN_ROWS, rows // 64 * 64)))


def _task_bytes(rows: int, m: int, d: int, itemsize: int, k: int, copy: bool) -> int:
    block = rows * m * (itemsize + (8 if copy else 0))
    return rows * d * itemsize + block + 8 * (2 * rows * k + m * k)


@dataclass(frozen=True)
class _Problem:
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

    @property
    def single(self) -> float:
        return _SINGLE if self.itemsize == 4 else 1.0

    @property
    def iterations(self) -> int:
        return min(self.max_iter, CG_ITERATIONS)


def _centre_bytes(p: _Problem) -> int:
    """The centres' rows and their prepared copy (:data:`npt_dask.engine.blocks.PREPARED_BYTES`:
    shifted rows and norms, once per process), ``2 m d`` values."""
    return 2 * p.m * p.d * p.itemsize + 8 * p.m


def _direct_nystrom(p: _Problem) -> tuple[dict[str, float], dict[str, int], int, int]:
    """Work, memory by part, rows per task and running sums (0: none fits) of the
    moments route: ``chains`` float64 sums of ``G``'s upper tiles while the pass runs
    (:func:`npt_dask.linalg.tiles.tiled_bytes`, about ``4 m^2``; the first becomes ``G``),
    ``K_mm`` in the kernel precision, and the factored copy of ``G + alpha K_mm``
    (one at a time, whatever the distinct alphas)."""
    rows = ridge_rows(p.m, p.itemsize, float64_copy=True)
    square = tiled_bytes(p.m)
    # one running sum per worker process, its threads all in its BLAS calls: two tasks
    # of one thread each ran the tile products at 22 GFLOP/s apiece, one task of two
    # threads at 89 (m = 10,000, c = 2,176, 2 cores, GEMM 104 GFLOP/s)
    fixed = {
        "centres": _centre_bytes(p),
        "kmm": p.m * p.m * p.itemsize,
        "factor": square,
        "blocks": p.threads * _task_bytes(rows, p.m, p.d, p.itemsize, p.k, True),
        "vectors": 8 * 4 * p.m * p.k,
    }
    spare = p.budget - sum(fixed.values())
    chains = int(min(p.workers, spare // square)) if spare > 0 else 0
    flops = {
        "kernel_p": 2.0 * p.n * p.m * p.d,
        "moments": float(p.n) * p.m * p.m + 2.0 * p.n * p.m * p.k,
        "factor": p.alphas * p.m**3 / 3.0,
        "solve": 2.0 * p.alphas * p.m * p.m * p.k,
    }
    return flops, {"sums": max(chains, 1) * square, **fixed}, rows, chains


def _cg_nystrom(p: _Problem) -> tuple[dict[str, float], dict[str, int], int]:
    """Work and memory of preconditioned CG on the Nyström system: the preconditioner's
    two triangular factors share one m x m matrix (kernel precision)."""
    rows = ridge_rows(p.m, p.itemsize, float64_copy=False)
    flops = {
        "preconditioner_p": 2.0 * p.m * p.m * p.d + float(p.m) ** 3,
        "rhs_p": 2.0 * p.n * p.m * p.d + 2.0 * p.n * p.m * p.k,
        "iteration_p": 2.0 * p.n * p.m * p.d + 4.0 * p.n * p.m * p.k + 4.0 * p.m * p.m * p.k,
    }
    memory = {
        "centres": _centre_bytes(p),
        "preconditioner": p.m * p.m * p.itemsize,
        "blocks": p.threads * _task_bytes(rows, p.m, p.d, p.itemsize, p.k, False),
        "sums": p.threads * 8 * p.m * p.k,
        "vectors": 8 * 8 * p.m * p.k,
    }
    return flops, memory, rows


EXACT_WORK_VECTORS = 64
"""n-vectors of float64 the direct exact route holds besides its n x n arrays: the kernel
evaluation's row norms and prepared rows, the solve's diagonal, LAPACK's and dask's
bookkeeping (measured: about 30 at n = 1,800 to 5,000, laplacian and rbf)."""


def _direct_exact(p: _Problem) -> tuple[dict[str, float], dict[str, int]]:
    """scikit-learn's solve: the n x n kernel matrix, factored in place; at its peak a
    second n x n array (the blocks while they are gathered, an evaluated block's
    temporary, or the copy an extra alpha factors), and n-vectors of work."""
    flops = {
        "kernel_p": 2.0 * p.n * p.n * p.d,
        "factor": p.alphas * p.n**3 / 3.0,
        "solve": 2.0 * p.alphas * p.n * p.n * p.k,
    }
    memory = {
        "kernel_matrix": 8 * p.n * p.n,
        "factor": 8 * p.n * p.n,
        "vectors": 8 * 3 * p.n * p.k,
        "work": 8 * EXACT_WORK_VECTORS * p.n,
    }
    return flops, memory


def _rank(p: _Problem) -> int:
    """The preconditioner's rank: a tenth of n, at most :data:`PRECONDITIONER_RANK`, its
    factor (and the float64 coordinates it is built from) at most half the budget."""
    affordable = (p.budget // 2) // max(1, p.n * (p.itemsize + 8))
    return int(max(1, min(PRECONDITIONER_RANK, -(-p.n // 10), affordable)))


def _cg_exact(
    p: _Problem, rank: int
) -> tuple[dict[str, float], dict[str, int], tuple[tuple[int, int], ...]]:
    """Work, memory and kept kernel blocks of preconditioned CG on the exact system: the
    landmark model's ``n x l`` factor (and its float64 coordinates while it is built),
    the pass's blocks in flight (:func:`npt_dask.engine.budget.in_flight_bytes`), the kernel
    blocks kept between passes in what the budget leaves (each pass then evaluates only
    the others)."""
    chunks = _row_chunks(p.n, p.chunk)
    memory = {
        "preconditioner": p.n * rank * (p.itemsize + 8),
        "prepared": min(PREPARED_BYTES, p.n * p.d * p.itemsize),
        "blocks": in_flight_bytes(max(chunks), p.threads),
        "vectors": 8 * 8 * p.n * p.k,
    }
    kept = kept_pairs(chunks, p.itemsize, max(0, p.budget - sum(memory.values())))
    memory["kept_blocks"] = kept_bytes(chunks, kept, p.itemsize)
    fresh = 1.0 - cached_fraction(chunks, kept)
    flops = {
        "preconditioner_p": 2.0 * rank * rank * p.d + 4.0 * rank**3 + 4.0 * p.n * rank * p.d
        + 3.0 * p.n * rank * rank,
        "first_pass_p": float(p.n) * p.n * p.d,
        "iteration_p": fresh * p.n * p.n * p.d + 2.0 * p.n * p.n * p.k + 4.0 * p.n * rank * p.k,
    }  # fmt: skip
    return flops, memory, kept


def _row_chunks(n: int, chunk: int) -> tuple[int, ...]:
    """The exact route's row chunks: ``chunk`` rows each, the last one shorter."""
    return tuple(min(chunk, n - s) for s in range(0, n, chunk))


def _cost(flops: Mapping[str, float], p: _Problem) -> float:
    """Float64-equivalent work; per-iteration stages times the expected iterations."""
    total = 0.0
    for stage, value in flops.items():
        scale = p.single if stage.endswith("_p") else 1.0
        total += scale * value * (p.iterations if stage.startswith("iteration") else 1)
    return total


def _fits(memory: Mapping[str, int], budget: int) -> bool:
    return sum(memory.values()) <= budget


def plan_ridge(
    *,
    n: int,
    m: int | None,
    d: int,
    k: int,
    itemsize: int,
    alphas: int = 1,
    solver: str = "auto",
    memory_budget: int,
    threads: int = 1,
    max_iter: int = 100,
    tol: float = 1e-3,
    chunk_size: int = 4096,
    positive_alpha: bool = True,
    workers: int = 1,
) -> RidgePlan:
    """The plan of a kernel ridge fit: n rows, ``m`` centres (None: every row), d features,
    k targets, ``alphas`` distinct ridge values, kernel blocks of ``itemsize`` bytes,
    ``threads`` task threads in ``workers`` processes (the direct route keeps one running
    sum per process, its threads in each task's BLAS calls).

    ``solver`` is ``"direct"``, ``"cg"`` or ``"auto"`` (exact: the direct route whenever
    it fits ``memory_budget``, CG only when it does not; Nyström: least counted work
    among the routes that fit). ``positive_alpha=False`` (alpha = 0) leaves only
    the direct route, as scikit-learn solves it. Raises :class:`~npt_dask.errors.InputError`
    when no route fits, naming the sizes and the fix.

    >>> plan = plan_ridge(n=60_000, m=20_000, d=784, k=10, itemsize=4,
    ...                   memory_budget=12 * 2**30, threads=2)
    >>> plan.route, plan.chains, plan.blas_threads
    ('direct', 1, 2)
    >>> plan_ridge(n=60_000, m=20_000, d=784, k=10, itemsize=4,
    ...            memory_budget=4 * 2**30, threads=2).route
    'cg'
    """
    exact = m is None
    p = _Problem(n, n if m is None else int(m), d, k, itemsize, max(1, alphas), max(1, threads),
                 int(memory_budget), int(max_iter), float(tol), int(chunk_size),
                 max(1, workers))  # fmt: skip
    base = RidgePlan(
        "", exact, n, p.m, d, k, "float32" if itemsize == 4 else "float64", p.chunk, 1,
        p.threads, p.budget, p.max_iter, p.tol,
    )  # fmt: skip
    if exact:
        rank = _rank(p)
        d_flops, d_mem = _direct_exact(p)
        c_flops, c_mem, kept = _cg_exact(p, rank)
        direct = replace(base, route="direct", flops=d_flops, memory=d_mem)
        cg = replace(base, route="cg", flops=c_flops, memory=c_mem, preconditioner_rank=rank,
                     kept=kept)  # fmt: skip
        direct_ok = _fits(d_mem, p.budget)
    else:
        d_flops, d_mem, d_rows, chains = _direct_nystrom(p)
        c_flops, c_mem, c_rows = _cg_nystrom(p)
        direct = replace(base, route="direct", row_chunk=d_rows, chains=max(chains, 1),
                         flops=d_flops, memory=d_mem)  # fmt: skip
        cg = replace(base, route="cg", row_chunk=c_rows, flops=c_flops, memory=c_mem)
        direct_ok = chains >= 1 and _fits(d_mem, p.budget)
    cg_ok = _fits(cg.memory, p.budget) and positive_alpha
    return _choose(direct, cg, direct_ok, cg_ok, solver, p, positive_alpha)


def _with_reason(plan: RidgePlan, reason: str) -> RidgePlan:
    return replace(plan, reason=reason)


def _describe(plan: RidgePlan, p: _Problem) -> str:
    return f"{_cost(plan.flops, p):.3g} flops, {format_bytes(sum(plan.memory.values()))}"


def _choose(
    direct: RidgePlan, cg: RidgePlan, direct_ok: bool, cg_ok: bool, solver: str, p: _Problem,
    positive_alpha: bool,
) -> RidgePlan:  # fmt: skip
    what = "the n x n kernel matrix" if direct.exact else "the m x m normal matrix"
    budget = format_bytes(p.budget)
    if solver == "cg" and not positive_alpha:
        raise InputError(
            "alpha=0 has no iterative route (conjugate gradient needs a positive definite "
            "system, alpha > 0): use solver='direct' or 'auto', which solves it as "
            "scikit-learn does (least squares when singular), or give alpha > 0."
        )
    if solver == "direct" or not positive_alpha:
        if not direct_ok:
            fix = " or solver='cg'" if positive_alpha else ""
            raise InputError(
                f"The direct route holds {what} ({format_bytes(sum(direct.memory.values()))} "
                f"in all), above memory_budget={budget}. Raise memory_budget{fix}"
                + ("" if direct.exact else ", or use fewer landmarks")
                + ("." if positive_alpha else " (alpha=0 has no iterative route: CG needs "
                   "alpha > 0).")
            )  # fmt: skip
        why = "alpha = 0 (solved directly, as scikit-learn does)" if not positive_alpha else (
            "solver='direct'")  # fmt: skip
        return _with_reason(direct, f"direct: {why}; {_describe(direct, p)}")
    if solver == "cg":
        if not cg_ok:
            raise InputError(
                f"The iterative route holds {format_bytes(sum(cg.memory.values()))} "
                f"(preconditioner and blocks in flight), above memory_budget={budget}. "
                "Raise memory_budget, or use fewer landmarks."
            )
        return _with_reason(cg, f"cg: solver='cg'; {_describe(cg, p)} at {p.iterations} "
                                "expected iterations")  # fmt: skip
    if not (direct_ok or cg_ok):
        raise InputError(
            f"Neither route fits memory_budget={budget}: direct needs "
            f"{format_bytes(sum(direct.memory.values()))} ({what}), cg needs "
            f"{format_bytes(sum(cg.memory.values()))}. Raise memory_budget or use fewer "
            "landmarks."
        )
    if direct.exact:
        return _choose_exact(direct, cg, direct_ok, p)
    direct_cost, cg_cost = _cost(direct.flops, p), _cost(cg.flops, p)
    if direct_ok and (not cg_ok or direct_cost <= CG_MARGIN * cg_cost):
        why = (
            f"its work ({direct_cost:.3g} flops) is at most {CG_MARGIN:g} x that of "
            f"{p.iterations} CG iterations ({cg_cost:.3g})" if cg_ok
            else "the iterative route does not fit memory_budget"
        )  # fmt: skip
        return _with_reason(direct, f"direct: {why}; it holds "
                                    f"{format_bytes(sum(direct.memory.values()))}")  # fmt: skip
    why = (
        f"{what} ({format_bytes(sum(direct.memory.values()))}) does not fit "
        f"memory_budget={budget}" if not direct_ok else
        f"{p.iterations} CG iterations ({cg_cost:.3g} flops) cost less than 1/{CG_MARGIN:g} "
        f"of the direct route ({direct_cost:.3g})"
    )  # fmt: skip
    return _with_reason(cg, f"cg: {why}; it holds {format_bytes(sum(cg.memory.values()))}")


def _choose_exact(direct: RidgePlan, cg: RidgePlan, direct_ok: bool, p: _Problem) -> RidgePlan:
    """``solver="auto"`` on exact kernel ridge: scikit-learn's direct solve whenever the
    n x n matrix fits the budget; CG only when it does not, its reason saying so (the
    tolerance, and what the exact solve needs)."""
    held = format_bytes(sum(direct.memory.values()))
    if direct_ok:
        return _with_reason(direct, "direct: the n x n kernel matrix fits memory_budget="
                                    f"{format_bytes(p.budget)} (exact, as scikit-learn; it "
                                    f"holds {held})")  # fmt: skip
    return _with_reason(
        cg,
        f"cg: the n x n kernel matrix ({held} with its solve) does not fit memory_budget="
        f"{format_bytes(p.budget)}, so the fit is iterative and stops at a relative "
        f"residual of tol={p.tol:g}, not scikit-learn's exact solve; for that raise "
        f"memory_budget to {held}, or use landmarks (Nyström) for a direct solve in less "
        f"memory; it holds {format_bytes(sum(cg.memory.values()))}",
    )
