"""The fit plan: solver, block width, basis cap and kept blocks, within the memory budget.

Pure arithmetic on sizes; no data, no dask. :func:`plan_fit` is the one place
that decides how a fit uses memory, and the one place that checks it:
:mod:`npt_dask.npt.fitting` follows the :class:`FitPlan` it returns
(:class:`~npt_dask.engine.operator.KernelOperator` receives the kept block pairs,
:func:`~npt_dask.npt.eigen.block_krylov_eigh` the width and the cap), and the
plan is recorded in the model's diagnostics, its manifest and ``npt info``.

The memory a fit holds beyond its input rows, all counted against
``memory_budget``:

* on the driver, the Krylov basis ``Q`` and its image ``K Q``
  (:func:`basis_bytes`), the solver's work arrays (:func:`work_bytes`) and
  its small matrices (:func:`small_bytes`); for the dense solver the n x n
  matrix and its eigendecomposition (:func:`dense_bytes`);
* or, when the basis does not fit there (``basis="chunked"``), only the small
  matrices and the result (:func:`chunked_driver_bytes`): the basis and the
  n-row panels live as row-chunked arrays (:mod:`npt_dask.npt.panels`) on the
  workers of a cluster or on local disk, ``panel_bytes`` in the plan, outside
  ``memory_budget`` (workers bound them by their own memory limit and spill);
* where the tasks run (the workers of a cluster, else this process), the
  kernel blocks in flight (:func:`in_flight_bytes`) and the blocks kept
  between passes (:func:`kept_pairs`).

Device memory apart from host memory: the kernel blocks in flight and the kept blocks
live where the blocks' array namespace does (:mod:`npt_dask.engine.consumers` chooses it: a
GPU's memory for CuPy or torch on a GPU) -- for the dense solver the blocks of the explicit
matrix, each crossing to the host as it is made, and for a landmark fit the certificate
pass over X (:func:`certificate_bytes`) --, the driver's matrices in host RAM;
:attr:`FitPlan.device_bytes` and :attr:`FitPlan.host_bytes` report the split (so a GPU
namespace is planned against its own device budget: ``device_memory_budget``, by default
:func:`~npt_dask.engine.budget.default_device_budget` of the rows, a share of the GPU's
free memory). On numpy (``device_memory_budget=None``) both are host RAM and the check
against ``memory_budget`` counts them together; otherwise each part is checked against
its own budget, and a plan whose device part does not fit is refused before any pass
(:func:`~npt_dask.engine.budget.check_budgets`: naming both budgets and the fix).

A fixed overhead (thread pools, BLAS buffers: :data:`FIXED_OVERHEAD`) comes
on top; ``tests/npt/test_planning.py`` measures peak RSS against the RSS after
loading the input + budget + overhead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from npt_dask.engine.budget import (
    BLOCKS_PER_TASK,
    cached_fraction,
    check_budgets,
    default_memory_budget,
    in_flight_bytes,
    kept_bytes,
    kept_for,
)
from npt_dask.errors import InputError
from npt_dask.params.parsing import format_bytes

__all__ = [
    "AUTO_DENSE_FRACTION",
    "DENSE_FRACTION",
    "DENSE_MAX_SAMPLES",
    "DENSE_VECTORS",
    "DEVICE_BLOCKS_PER_TASK",
    "DEVICE_PASS_PANELS",
    "FIXED_OVERHEAD",
    "LARGE_R",
    "FitPlan",
    "basis_bytes",
    "basis_columns",
    "block_candidates",
    "blocks_in_flight",
    "certificate_bytes",
    "chunked_driver_bytes",
    "default_block_size",
    "dense_bytes",
    "device_pass_bytes",
    "estimated_passes",
    "fit_cost",
    "krylov_cap",
    "krylov_shape",
    "max_rank",
    "min_basis",
    "pass_bytes",
    "plan_fit",
    "small_bytes",
    "takes_explicit_path",
    "work_bytes",
]

DENSE_MAX_SAMPLES = 2000
"""``solver="auto"`` uses the dense solver up to this many training rows."""

FIXED_OVERHEAD = 64 * 2**20
"""Bytes a fit may add beyond its plan: thread pools, BLAS buffers, small temporaries
(the interpreter and libraries come before: the RSS after loading the input)."""

ELEMENTWISE_FLOPS = 60.0
"""Flop-equivalents of the elementwise work per kernel entry (exp, norms, casts): the
time an RBF block spends outside its matrix product, in flops at the product rate."""

PRODUCT_EFFICIENCY = 0.75
"""Block times a skinny (b ~ 100) panel runs at ~75% of the square-product rate."""

DEVICE_BLOCKS_PER_TASK = 3
"""Kernel blocks' worth a task holds at once while it evaluates a block on a device (the
rows' namespace is not numpy's): the product, its clipped copy and its exponential -- the
array API has no in-place ufuncs, where numpy's path works in place
(:data:`~npt_dask.engine.budget.BLOCKS_PER_TASK` there). A plan with a device budget
counts these."""


def blocks_in_flight(chunk: int, threads: int, device: bool) -> int:
    """Bytes of the kernel blocks being evaluated at once, ``chunk x chunk`` float64 per
    block: :func:`~npt_dask.engine.budget.in_flight_bytes` on the host,
    :data:`DEVICE_BLOCKS_PER_TASK` blocks a task on a device.

    >>> blocks_in_flight(100, 2, True) == 3 * blocks_in_flight(100, 2, False) // 2
    True
    """
    if not device:
        return in_flight_bytes(chunk, threads)
    return threads * DEVICE_BLOCKS_PER_TASK * 8 * chunk * chunk


DEVICE_PASS_PANELS = 4
"""n-row panels of width ``b + 1`` a Krylov pass holds on a device besides its blocks: V
moved there, the row sums' chains, their join before it crosses to the host, and the pair
products in flight."""


def device_pass_bytes(n: int, b: int) -> int:
    """A Krylov pass's n-row panels on a device (:data:`DEVICE_PASS_PANELS` float64
    ``n x (b + 1)``)."""
    return DEVICE_PASS_PANELS * 8 * n * (b + 1)


PASS_PANELS = 6
"""n-row panels of width ``b + 1`` a pass holds where its tasks run (see :func:`pass_bytes`),
with room to spare."""


LARGE_R = 200
"""From this many wanted pairs on, :func:`krylov_shape` picks blocks narrower than r."""


def min_basis(n_components: int, b: int) -> int:
    """The fewest Krylov basis columns for ``n_components`` pairs with ``b``-wide blocks:
    ``r + 2 b``, what a thick restart needs (the one rule of the plan's checks and the
    solver's); a basis is never wider than ``n``, so callers take
    ``min(n, min_basis(r, b))``.

    >>> min_basis(10, 20)
    50
    """
    return n_components + 2 * b


def krylov_shape(n: int, n_components: int) -> tuple[int, int]:
    """Block width ``b`` and basis cap the Krylov solver wants for ``n_components`` of ``n``.

    * ``r < 200``: ``b = r + max(10, r // 5)``, ``cap = max(12 b, 2 r + 2 b)`` -- the
      shape of earlier releases; the Rayleigh-Ritz steps are cheap at this size.
    * ``r >= 200``: ``b = max(100, r // 10)``, ``cap = 4 r + 2 b``. Narrow blocks need the
      fewest operator columns for a given accuracy (the polynomial degree grows with the
      passes; MNIST RBF r = 1000: 3,400 columns at b = 100, 4,400 at b = 200), and the
      driver's algebra grows with the columns (re-orthogonalisation as k^2, Rayleigh-Ritz
      as k^3) while a kept-block pass costs about the same per column from b = 100 on.
      Block Lanczos reaches a 1e-8 residual within about 4 r columns on kernel spectra,
      so the basis rarely restarts. A restart (thick, Krylov-Schur style,
      with locking) stays correct when memory planning caps the basis lower.

    Both are capped by ``n`` and ``cap >= r + 2 b`` (:func:`min_basis`).
    Memory: the basis and its image take ``16 n cap`` bytes on the driver.
    """
    r = int(n_components)
    if r < LARGE_R:
        b = min(n, r + max(10, r // 5))
        return b, krylov_cap(n, r, b)
    b = min(n, max(LARGE_R // 2, r // 10))
    return b, min(n, max(4 * r + 2 * b, min_basis(r, b)))


def krylov_cap(n: int, n_components: int, b: int) -> int:
    """The solver's basis cap for ``b``-wide blocks below :data:`LARGE_R`, and for a width
    the caller chose: ``max(12 b, 2 r + 2 b)`` columns, at most ``n``."""
    return min(n, max(12 * b, 2 * n_components + 2 * b))


DENSE_FRACTION = 0.25
"""From ``r >= DENSE_FRACTION * n`` on, :func:`~npt_dask.npt.eigen.block_krylov_eigh`
decomposes the operator explicitly (see its ``dense_fraction``)."""


AUTO_DENSE_FRACTION = 0.15
"""From ``r >= AUTO_DENSE_FRACTION * n`` on, ``solver="auto"`` takes the dense solver when
the explicit matrix fits the memory budget: there the dense solver (one tridiagonal
reduction, the wanted pairs only) costs about what Krylov does, and its cost hardly grows
with r while Krylov's does (``benchmarks/large_r.py`` times both)."""


def takes_explicit_path(
    n: int, n_components: int, cap: int, dense_fraction: float = DENSE_FRACTION
) -> bool:
    """Whether :func:`~npt_dask.npt.eigen.block_krylov_eigh` (driver panels) decomposes the
    explicit matrix: the
    wanted pairs are at least ``dense_fraction * n`` and the basis may take half of n."""
    return n_components >= dense_fraction * n and 2 * cap >= n


def default_block_size(n_components: int) -> int:
    """The solver's own block width for ``n_components`` (:func:`krylov_shape`)."""
    return krylov_shape(2**62, n_components)[0]


# --- what each part of a fit holds --------------------------------------------------------


def basis_bytes(n: int, columns: int) -> int:
    """The Krylov basis ``Q`` and its image ``K Q``: two float64 ``n x columns`` arrays."""
    return 2 * 8 * n * columns


def work_bytes(n: int, b: int, n_components: int) -> int:
    """The solver's n-row work arrays besides the basis.

    About twelve ``n x (b + 1)`` arrays (the block V with its column of ones,
    its centred copy, the pass result, the orthogonalisation temporaries)
    and four ``n x r`` (Ritz vectors, their image, the residual terms).
    """
    return 8 * n * (12 * (b + 1) + 4 * n_components)


def small_bytes(columns: int) -> int:
    """The solver's small matrices: the projected ``T`` (``columns x columns`` float64), the
    symmetric copy ``eigh`` works on, and its Ritz coefficients (at most half as many
    columns: a restart keeps half the basis): two and a half such matrices."""
    return 20 * columns * columns


def pass_bytes(n: int, b: int) -> int:
    """A pass's n-row values where the tasks run: :data:`PASS_PANELS` panels ``n x (b + 1)``.

    The block V (every pair needs its rows), the running row sums and the
    result, its centred copy; held where the tasks run, whatever holds the basis.
    """
    return PASS_PANELS * 8 * n * (b + 1)


def chunked_driver_bytes(n: int, columns: int, n_components: int) -> int:
    """What the driver holds with the basis off it: the small matrices and the ``n x r``
    eigenvectors it receives at the end of the solve, then (the small matrices gone) those
    and their sign-fixed copy; and the row means."""
    result = 8 * n * n_components
    return max(small_bytes(columns) + result, 2 * result) + 8 * n


def panel_bytes(n: int, columns: int, b: int, n_components: int) -> int:
    """The chunked panels: the basis and its image, and the n-row panels of a step (eight
    ``n x b`` and four ``n x r`` held at once at most)."""
    return basis_bytes(n, columns) + 8 * n * (8 * b + 4 * n_components)


DENSE_VECTORS = 64
"""n-vectors of float64 the dense solver holds besides its n x n arrays: LAPACK's
``6 n + 1`` real and ``5 n + 3`` integer work, the eigenvalues, the row sums and means,
the residual norms and signs, the kernel evaluation's and dask's bookkeeping, with room
to spare."""


def certificate_bytes(
    *, chunk: int, m: int, d: int, n_components: int, itemsize: int, threads: int,
    device: bool = False,
) -> int:  # fmt: skip
    """A landmark fit's certificate pass (:mod:`npt_dask.npt.training`) where its tasks
    run: per task thread, the kernel block of a chunk of X against the ``m`` landmarks
    (:data:`~npt_dask.engine.budget.BLOCKS_PER_TASK` blocks ``chunk x m`` of float64 with
    the temporaries of their evaluation, :data:`DEVICE_BLOCKS_PER_TASK` on a device) and
    four ``chunk x (r + 2)`` float64 panels (the
    products ``[y | residual]``, the moments' coordinates); and once, the landmarks and
    their projection weights (``m (d + r + 1)`` values, twice: as gathered and as moved)
    and two moment sums per thread (``r^2 + 2 r`` float64 with up to ``r`` targets).

    On a device it is device memory, beside the fit's (the pass runs after the solve:
    the larger of the two counts); on the host it is the tasks' working memory.

    >>> certificate_bytes(chunk=100, m=60, d=5, n_components=10, itemsize=8, threads=2)
    288032
    """
    r = n_components
    blocks = DEVICE_BLOCKS_PER_TASK if device else BLOCKS_PER_TASK
    per_task = blocks * 8 * chunk * m + 4 * 8 * chunk * (r + 2)
    centres = 2 * max(itemsize, 8) * m * (d + r + 1)
    sums = 2 * 8 * (r * r + 2 * r + 1)
    return threads * (per_task + sums) + centres


def dense_bytes(n: int) -> int:
    """The dense solver's peak: the n x n matrix, LAPACK's copy of it (its eigenvectors)
    and LAPACK's ``2 n^2`` work, at once inside ``eigh`` (4 n^2 float64), and
    :data:`DENSE_VECTORS` n-vectors. The residuals are formed a panel of columns at a
    time (:func:`~npt_dask.npt.eigen.dense_eigh`), so they add only two ``n x 64`` panels
    (the ``eigh`` work is gone by then)."""
    return 8 * (4 * n * n + DENSE_VECTORS * n)


# --- the block width ----------------------------------------------------------------------


def estimated_passes(b: int, n_components: int) -> float:
    """Passes to a 1e-8 residual: ``9 (b / 1.2 r) ** -0.45``.

    Fitted to MNIST RBF spectra (r = 100, b from 20 to 300: 21, 17, 15, 12,
    11, 9, 8, 7 passes); narrower blocks need more passes but fewer columns.
    """
    return max(2.0, 9.0 * (b / (1.2 * n_components)) ** -0.45, n_components / b + 1)


def basis_columns(n: int, n_components: int, b: int, memory_budget: int) -> int:
    """Krylov basis width: what the expected passes fill, with a quarter to spare.

    ``1.25 * estimated_passes * b`` columns (past them the solver restarts
    thickly, slower but correct), capped by half of ``memory_budget`` and
    never below ``n_components + 2 b`` (what a thick restart needs; whether
    that fits is :func:`plan_fit`'s check).
    """
    affordable = memory_budget // (2 * basis_bytes(n, 1))
    least = min_basis(n_components, b)
    wanted = math.ceil(1.25 * estimated_passes(b, n_components) * b)
    return int(min(n, max(wanted, least), max(affordable, least)))


def fit_cost(
    b: int, *, n: int, d: int, n_components: int, chunk: int, cached: float, itemsize: int
) -> float:
    """Flop-equivalents of a fit with block width ``b`` (kernel, products, driver)."""
    entries = (n * n + n * chunk) / 2
    kernel = entries * (2.0 * d * (0.5 if itemsize == 4 else 1.0) + ELEMENTWISE_FLOPS)
    passes = estimated_passes(b, n_components)
    products = 2.0 * (b + 1) * n * n / PRODUCT_EFFICIENCY
    driver = n * b * (8.0 * passes * b / 2 + 4.0 * n_components)
    return kernel * cached + passes * (kernel * (1.0 - cached) + products + driver)


def block_candidates(n: int, n_components: int) -> list[int]:
    """Block widths worth comparing: 0.2 r to 2.5 r, and the default."""
    r = n_components
    candidates = {default_block_size(r), math.ceil(1.6 * r), math.ceil(2.5 * r)}
    candidates |= {max(8, math.ceil(k * r)) for k in (0.2, 0.3, 0.4, 0.6, 0.8)}
    return sorted({min(n, c) for c in candidates if c >= max(8, math.ceil(r / 5))})


# --- the plan -----------------------------------------------------------------------------


@dataclass(frozen=True)
class FitPlan:
    """How a fit will run and what it will hold; see :func:`plan_fit`.

    ``driver_bytes`` is what the process calling ``fit`` holds (basis and
    work arrays, or the dense matrix; with ``basis="chunked"`` only the small
    matrices and the result); ``worker_bytes`` what the tasks hold (blocks in
    flight and kept blocks), on the workers of a cluster or in the same
    process under the threaded scheduler. Their sum is within
    ``memory_budget`` unless ``cache="memory"`` asked to keep every block.
    ``panel_bytes`` is the chunked basis and panels (workers' memory or local
    disk: ``basis_home``), zero when the basis is on the driver.
    ``kept_bytes`` is what the kept blocks hold (:func:`kept_bytes`, entries of
    ``itemsize`` bytes, the kernel precision), part of ``worker_bytes``.
    ``explicit``: the Krylov solver is to decompose the explicit matrix
    (:func:`takes_explicit_path`, decided here once; the solver obeys it).
    :attr:`device_bytes` and :attr:`host_bytes` split ``driver_bytes + worker_bytes`` by
    where the memory lives (the kernel blocks' namespace, or host RAM);
    ``device_memory_budget`` bounds the device part (None: device memory is host memory,
    both parts counted against ``memory_budget``).
    """

    solver: str
    n: int
    n_components: int | None
    row_chunks: tuple[int, ...]
    block_size: int
    max_basis: int
    kept: tuple[tuple[int, int], ...]
    driver_bytes: int
    worker_bytes: int
    memory_budget: int
    threads: int
    basis: str = "driver"
    panel_bytes: int = 0
    basis_home: str = "driver"
    itemsize: int = 8
    kept_bytes: int = 0
    explicit: bool = False
    device_memory_budget: int | None = None
    certificate_bytes: int = 0

    @property
    def n_pairs(self) -> int:
        """Kernel blocks a pass evaluates (the upper triangle)."""
        nb = len(self.row_chunks)
        return nb * (nb + 1) // 2

    @property
    def cached_fraction(self) -> float:
        """Share of the kernel work kept between passes."""
        return cached_fraction(self.row_chunks, self.kept) if self.solver == "krylov" else 0.0

    @property
    def solve_device_bytes(self) -> int:
        """What the solve's tasks hold in the blocks' namespace: the kernel blocks in flight
        and the kept blocks (Krylov), or the blocks in flight of the explicit matrix
        (dense: each crosses to the host as it is made); part of ``worker_bytes``."""
        if self.solver != "krylov":
            return self.worker_bytes
        device = self.device_memory_budget is not None
        blocks = blocks_in_flight(max(self.row_chunks), self.threads, device)
        panels = device_pass_bytes(self.n, self.block_size) if device else 0
        return blocks + panels + self.kept_bytes

    @property
    def device_bytes(self) -> int:
        """The memory of the blocks' array namespace (a GPU's for CuPy; host RAM on numpy)
        at its peak: the solve's (:attr:`solve_device_bytes`), or a landmark fit's
        certificate pass (:attr:`certificate_bytes`, after the solve), whichever is larger."""
        return max(self.solve_device_bytes, self.certificate_bytes)

    @property
    def host_bytes(self) -> int:
        """The driver's matrices and the rest the tasks hold (the chunked passes' panels):
        host RAM, whatever the namespace."""
        return self.driver_bytes + self.worker_bytes - self.solve_device_bytes

    def with_certificate(self, nbytes: int) -> FitPlan:
        """This plan with a landmark fit's certificate pass (:func:`certificate_bytes`),
        checked against the device budget when the rows live on a device (refused before
        any pass, naming both budgets and the fix)."""
        plan = dataclasses.replace(self, certificate_bytes=int(nbytes))
        budget = plan.device_memory_budget
        if budget is not None and plan.device_bytes > budget:
            check_budgets(plan.host_bytes, plan.device_bytes, plan.memory_budget, budget,
                          f"The landmark fit on m={plan.n} rows (its certificate pass: "
                          f"{format_bytes(nbytes)})")  # fmt: skip
        return plan

    @property
    def cache(self) -> str:
        """``"memory"`` (every block kept), ``"partial"``, ``"recompute"`` or ``"none"``."""
        if self.solver != "krylov":
            return "none"
        if not self.kept:
            return "recompute"
        return "memory" if len(self.kept) == self.n_pairs else "partial"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable summary (kept blocks as a count: they are a prefix)."""
        return {
            "solver": self.solver,
            "n": self.n,
            "n_components": self.n_components,
            "chunk_size": max(self.row_chunks),
            "n_chunks": len(self.row_chunks),
            "block_size": self.block_size,
            "max_basis": self.max_basis,
            "kept_blocks": len(self.kept),
            "n_blocks": self.n_pairs,
            "cache": self.cache,
            "cached_fraction": round(self.cached_fraction, 6),
            "driver_bytes": self.driver_bytes,
            "worker_bytes": self.worker_bytes,
            "memory_budget": self.memory_budget,
            "threads": self.threads,
            "basis": self.basis,
            "basis_home": self.basis_home,
            "panel_bytes": self.panel_bytes,
            "itemsize": self.itemsize,
            "kept_bytes": self.kept_bytes,
            "explicit": self.explicit,
            "device_bytes": self.device_bytes,
            "host_bytes": self.host_bytes,
            "device_memory_budget": self.device_memory_budget,
            "certificate_bytes": self.certificate_bytes,
        }


def max_rank(n: int, center: bool) -> int:
    """The most components a model of ``n`` rows can have: the rank of its kernel matrix
    is at most ``n``, and centring removes one (the constant direction)."""
    return n - 1 if center else n


def _check_rank(n: int, r: int | None, center: bool) -> None:
    max_r = max_rank(n, center)
    if r is not None and r > max_r:
        raise InputError(
            f"n_components={r} is larger than possible: a {'centred ' if center else ''}"
            f"kernel matrix of {n} samples has rank at most {max_r}."
        )


def _choose_solver(n: int, r: int | None, solver: str, budget: int) -> str:
    """``"auto"``: dense for the full rank, small n, or a large share of the spectrum
    (``r >= AUTO_DENSE_FRACTION * n``, where the Krylov basis outgrows its passes) when
    the explicit matrix fits the memory budget; Krylov otherwise."""
    if solver == "auto":
        wide = r is not None and r >= AUTO_DENSE_FRACTION * n and dense_bytes(n) <= budget
        solver = "dense" if r is None or n <= DENSE_MAX_SAMPLES or wide else "krylov"
    if solver == "krylov" and r is None:
        raise InputError(
            "n_components=None (the full effective rank) needs solver='dense'; "
            "give n_components for the Krylov solver."
        )
    return solver


def _dense_plan(
    n: int, r: int | None, chunks: tuple[int, ...], budget: int, threads: int,
    device_budget: int | None = None,
) -> FitPlan:  # fmt: skip
    need = dense_bytes(n)
    if need > budget:
        raise InputError(
            f"solver='dense' needs about {format_bytes(need)} for n={n} (the n x n kernel "
            f"matrix and its eigendecomposition), above memory_budget="
            f"{format_bytes(budget)}. Use solver='krylov' with n_components."
        )
    blocks = blocks_in_flight(min(max(chunks), n), threads, device_budget is not None)
    return FitPlan("dense", n, r, chunks, 0, 0, (), need, blocks, budget, threads,
                   device_memory_budget=device_budget)  # fmt: skip


def _krylov_candidate(
    b: int, *, n: int, r: int, chunks: tuple[int, ...], itemsize: int, cache: str,
    budget: int, max_basis: int | None, threads: int, home: str,
    device_budget: int | None = None,
) -> FitPlan:  # fmt: skip
    """The plan for width ``b``, its basis on the driver (``home="driver"``) or chunked
    (``home`` is ``"workers"`` or ``"disk"``)."""
    in_flight = blocks_in_flight(max(chunks), threads, device_budget is not None)
    if device_budget is not None:  # a pass's panels live there too
        in_flight += device_pass_bytes(n, b)
    chunked = home != "driver"
    if max_basis:
        columns = min(n, max_basis)
    elif chunked:  # the columns the solver wants: the budget does not hold them
        columns = _wanted_columns(n, r, b)
    elif r >= LARGE_R:  # the solver's own cap, or what the budget affords (it restarts)
        cap = krylov_shape(n, r)[1]
        spare = budget - work_bytes(n, b, r) - small_bytes(cap) - in_flight
        columns = min(cap, max(spare // basis_bytes(n, 1), min(n, min_basis(r, b))))
    else:
        columns = basis_columns(n, r, b, budget)
    explicit = not chunked and takes_explicit_path(n, r, columns)
    if chunked:
        driver = chunked_driver_bytes(n, columns, r)
    elif explicit:  # the solver decomposes the explicit matrix
        driver = dense_bytes(n)
    else:
        driver = basis_bytes(n, columns) + work_bytes(n, b, r) + small_bytes(columns)
    spare = budget - driver - in_flight - (pass_bytes(n, b) if chunked else 0)
    if device_budget is not None:  # the kept blocks live beside the blocks in flight
        spare = device_budget - in_flight
    kept = kept_for(cache, chunks, itemsize, spare)
    held = kept_bytes(chunks, kept, itemsize)
    tasks = in_flight + held + (pass_bytes(n, b) if chunked else 0)  # on the driver: in work
    return FitPlan(
        "krylov", n, r, chunks, b, columns, kept, driver, tasks, budget, threads,
        basis="chunked" if chunked else "driver",
        panel_bytes=panel_bytes(n, columns, b, r) if chunked else 0,
        basis_home=home, itemsize=itemsize, kept_bytes=held, explicit=explicit,
        device_memory_budget=device_budget,
    )  # fmt: skip


def _wanted_columns(n: int, r: int, b: int) -> int:
    """The basis the solver would take with no memory limit."""
    return krylov_shape(n, r)[1] if r >= LARGE_R else basis_columns(n, r, b, 2**62)


def _wanted(plan: FitPlan) -> int:
    return _wanted_columns(plan.n, plan.n_components or 0, plan.block_size)


def _leanest(plans: list[FitPlan]) -> FitPlan | None:
    return min(plans, key=lambda p: p.driver_bytes) if plans else None


def _fits(plan: FitPlan) -> bool:
    least = min(plan.n, min_basis(plan.n_components or 0, plan.block_size))
    if plan.device_memory_budget is not None:  # each part within its own budget
        return (
            plan.max_basis >= least
            and plan.host_bytes <= plan.memory_budget
            and plan.device_bytes <= plan.device_memory_budget
        )
    held = plan.driver_bytes + plan.worker_bytes
    kept_all = len(plan.kept) == plan.n_pairs and plan.n_pairs > 0
    if kept_all and held > plan.memory_budget:  # cache="memory": the blocks are the user's call
        held -= plan.kept_bytes
    return plan.max_basis >= least and held <= plan.memory_budget


def _refuse(plan: FitPlan, max_basis: int | None, chunked: FitPlan | None = None) -> None:
    n, b = plan.n, plan.block_size
    off = (
        "" if chunked is None
        else f" With the basis off the driver (basis='chunked') the driver would still need "
        f"{format_bytes(chunked.driver_bytes)} and the tasks "
        f"{format_bytes(chunked.worker_bytes)}."
    )  # fmt: skip
    least = min_basis(plan.n_components or 0, b)
    device = plan.device_memory_budget
    in_flight = blocks_in_flight(max(plan.row_chunks), plan.threads, device is not None)
    if device is not None and plan.device_bytes > device:
        check_budgets(plan.host_bytes, plan.device_bytes, plan.memory_budget, device,
                      f"The Krylov fit of n={n} ({format_bytes(in_flight)} of kernel blocks "
                      f"in flight on the device)")  # fmt: skip
    raise InputError(
        f"The Krylov basis for n={n} needs {plan.max_basis} columns "
        f"({format_bytes(basis_bytes(n, plan.max_basis))} for Q and K Q, plus "
        f"{format_bytes(work_bytes(n, b, plan.n_components or 0))} of work arrays and "
        f"{format_bytes(in_flight)} of kernel blocks in flight), which memory_budget="
        f"{format_bytes(plan.memory_budget)} or max_basis={max_basis} does not allow (at "
        f"least n_components + 2 * block_size = {least} columns).{off} Raise memory_budget, "
        "lower n_components, block_size or chunk_size."
    )


def plan_fit(
    *,
    n: int,
    d: int,
    n_components: int | None,
    row_chunks: Sequence[int],
    itemsize: int,
    center: bool = True,
    solver: str = "auto",
    cache: str = "auto",
    memory_budget: int | None = None,
    block_size: int | None = None,
    max_basis: int | None = None,
    threads: int = 1,
    basis: str = "auto",
    cluster: bool = False,
    device_memory_budget: int | None = None,
) -> FitPlan:
    """The fit plan: the cheapest solver set-up that fits in ``memory_budget``.

    For the Krylov solver every candidate block width (the user's, else
    :func:`block_candidates`) gets its own basis cap (:func:`basis_columns`,
    or ``max_basis``) and kept blocks (what the budget leaves after the
    driver's arrays and the blocks in flight); the cheapest by
    :func:`fit_cost` among those that fit is chosen. Nothing that does not
    fit is ever chosen: with no candidate left this raises an
    :class:`~npt_dask.errors.InputError` naming the sizes. ``memory_budget=None``
    is :func:`default_memory_budget`.

    ``device_memory_budget``: bytes of device memory the kernel blocks (in flight and
    kept) may take when the rows live on a GPU (the caller passes
    :func:`~npt_dask.engine.budget.default_device_budget` of its rows); the rest, the
    driver's host part, is then checked against ``memory_budget`` alone. None (numpy
    rows): both counted together against ``memory_budget``, as on a CPU. A plan whose
    device part does not fit is refused, naming both budgets and the fix.

    Where the basis lives (``basis``): ``"driver"``; ``"chunked"`` (row-chunked
    panels on the workers when ``cluster``, else on local disk); ``"auto"``:
    on the driver when the basis the solver wants fits there, else chunked
    when that fits, else on the driver with a smaller basis (thick restarts).

    Examples
    --------
    >>> from npt_dask.npt.planning import plan_fit
    >>> plan = plan_fit(n=60_000, d=784, n_components=100, row_chunks=[4096] * 14 + [2656],
    ...                 itemsize=8, memory_budget=4 * 2**30, threads=2)
    >>> plan.solver, plan.block_size, plan.cache
    ('krylov', 160, 'partial')
    >>> plan.driver_bytes + plan.worker_bytes <= plan.memory_budget
    True
    >>> plan_fit(n=60_000, d=784, n_components=100, row_chunks=[4096] * 14 + [2656],
    ...          itemsize=8, memory_budget=400 * 2**20, threads=2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    npt_dask.errors.InputError: The Krylov basis for n=60000 needs ...
    """
    chunks = tuple(int(c) for c in row_chunks)
    if memory_budget is None:
        memory_budget = default_memory_budget()
    _check_rank(n, n_components, center)
    chosen = _choose_solver(n, n_components, solver, memory_budget)
    if chosen == "dense":
        return _dense_plan(n, n_components, chunks, memory_budget, threads, device_memory_budget)
    r = int(n_components or 0)
    if block_size:
        widths = [min(n, block_size)]
    elif r >= LARGE_R:  # large r: the solver's narrow blocks (the cost model is fitted for r ~ 100)
        widths = [krylov_shape(n, r)[0]]
    else:
        widths = block_candidates(n, r)
    home = "workers" if cluster else "disk"

    def candidates(where: str) -> list[FitPlan]:
        return [
            _krylov_candidate(
                b, n=n, r=r, chunks=chunks, itemsize=itemsize, cache=cache,
                budget=memory_budget, max_basis=max_basis, threads=threads, home=where,
                device_budget=device_memory_budget,
            )
            for b in widths
        ]  # fmt: skip

    on_driver = candidates("driver") if basis != "chunked" else []
    chunked = candidates(home) if basis != "driver" else []
    roomy = [p for p in on_driver if _fits(p) and p.max_basis >= _wanted(p)]
    feasible = (
        roomy or [p for p in chunked if _fits(p)] or [p for p in on_driver if _fits(p)]
    )  # fmt: skip
    if not feasible:
        lean_chunked = _leanest(chunked)
        leanest = _leanest(on_driver) or lean_chunked
        assert leanest is not None  # there is at least one candidate width
        _refuse(leanest, max_basis, lean_chunked if on_driver else None)
    return min(
        feasible,
        key=lambda p: fit_cost(
            p.block_size, n=n, d=d, n_components=r, chunk=max(chunks),
            cached=p.cached_fraction, itemsize=itemsize,
        ),
    )  # fmt: skip
