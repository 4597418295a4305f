"""Planning a Krylov fit: memory shares and the block width, from small cost models.

Pure arithmetic on sizes; no data, no dask. :mod:`npt_dask.fitting` asks
these functions how wide the Krylov basis may grow, how many bytes the kernel
block cache may use, and which block width makes the fit cheapest.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

__all__ = [
    "basis_columns",
    "block_candidates",
    "cache_budget",
    "choose_block_size",
    "default_block_size",
    "estimated_passes",
    "fit_cost",
]

ELEMENTWISE_FLOPS = 60.0
"""Flop-equivalents of the elementwise work per kernel entry (exp, norms, casts).

Measured: a 4096 x 4096 float64 RBF block spends ~25 ms outside its matrix
product on one core (~1.5 ns an entry, ~70 flops at 49 GFLOP/s)."""

PRODUCT_EFFICIENCY = 0.75
"""Block times a skinny (b ~ 100) panel runs at ~75% of the square-product rate."""


def default_block_size(n_components: int) -> int:
    """``n_components + max(10, n_components // 5)``: the width used for memory planning."""
    return n_components + max(10, n_components // 5)


def basis_columns(n: int, n_components: int, b: int, memory_budget: int) -> int:
    """Krylov basis width: what the expected passes fill, with a quarter to spare.

    ``1.25 * estimated_passes * b`` columns (past them the solver restarts
    thickly, slower but correct), capped by half of ``memory_budget`` (the
    basis Q and its image K Q take ``2 * 8 * n * columns`` bytes) and never
    below ``n_components + 2 b`` (what a thick restart needs).
    """
    affordable = memory_budget // (2 * 2 * 8 * n)
    least = n_components + 2 * b
    wanted = math.ceil(1.25 * estimated_passes(b, n_components) * b)
    return int(min(n, max(wanted, least), max(affordable, least)))


def cache_budget(n: int, chunk: int, b: int, columns: int, memory_budget: int) -> int:
    """What ``memory_budget`` leaves for kept kernel blocks.

    The budget covers everything a fit holds beyond the input rows: the
    Krylov basis and its image (``2 * 8 * n * columns``), the driver's n x b
    work arrays (about twelve: V, its centred copy, the pass result, Ritz
    vectors and residuals, the orthogonalisation temporaries), and the blocks
    in flight (three ``chunk**2`` float64 arrays per worker thread). The rest
    may hold blocks.
    """
    basis = 2 * 8 * n * columns
    driver = 12 * 8 * n * (b + 1)
    in_flight = (os.cpu_count() or 1) * 3 * 8 * chunk * chunk
    return max(0, memory_budget - basis - driver - in_flight)


def estimated_passes(b: int, n_components: int) -> float:
    """Passes to a 1e-8 residual: ``9 (b / 1.2 r) ** -0.45``.

    Fitted to MNIST RBF spectra (r = 100, b from 20 to 300: 21, 17, 15, 12,
    11, 9, 8, 7 passes); narrower blocks need more passes but fewer columns.
    """
    return max(2.0, 9.0 * (b / (1.2 * n_components)) ** -0.45, n_components / b + 1)


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


def choose_block_size(
    *,
    n: int,
    d: int,
    n_components: int,
    chunk: int,
    cached: Callable[[int], float],
    itemsize: int,
) -> int:
    """The cheapest block width by :func:`fit_cost` among :func:`block_candidates`.

    ``cached(b)`` is the share of kernel work the cache can keep with block
    width ``b`` (wider blocks leave less memory for it). Kept blocks make a
    pass cost only its products, so narrow blocks win (more passes, fewer
    columns); recomputed blocks make every pass pay the kernel, so wide
    blocks win (fewer passes).
    """
    return min(
        block_candidates(n, n_components),
        key=lambda b: fit_cost(
            b,
            n=n,
            d=d,
            n_components=n_components,
            chunk=chunk,
            cached=cached(b),
            itemsize=itemsize,
        ),
    )
