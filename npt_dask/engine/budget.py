"""Memory budgets of a pass: the default budget, blocks in flight and blocks kept.

Pure arithmetic on sizes, the one rule shared by the NPT fit plan
(:mod:`npt_dask.npt.planning`), the kernel ridge plan (:mod:`npt_dask.ridge.planning`),
pre-images and the pair pass (:mod:`npt_dask.engine.operator`) that keeps the blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from npt_dask.arrays.device import device_memory_budget
from npt_dask.arrays.namespace import is_numpy, namespace_and_device
from npt_dask.errors import InputError, MemoryBudgetWarning, warn
from npt_dask.params.constraints import INT, NONE, ByteSize, Interval, Param
from npt_dask.params.parsing import budget_bytes, format_bytes, parse_bytes

__all__ = [
    "BLOCKS_PER_TASK",
    "block_bytes",
    "cached_fraction",
    "check_budgets",
    "default_device_budget",
    "default_memory_budget",
    "in_flight_bytes",
    "kept_bytes",
    "kept_for",
    "kept_pairs",
    "machine_memory",
    "operand_bytes",
    "resolve_device_budget",
    "resolve_memory_budget",
    "upper_pairs",
]

BLOCKS_PER_TASK = 2
"""Kernel blocks' worth of float64 a task holds at once: its block (in the
kernel precision) and, for float32 blocks, a float64 copy or panels."""


def default_memory_budget() -> int:
    """A sixth of this machine's physical memory, in bytes."""
    import psutil

    return int(psutil.virtual_memory().total // 6)


def default_device_budget(*arrays: Any) -> int | None:
    """The device budget of a pass over ``arrays`` (rows, centres: numpy, CuPy, dask
    arrays or DataArrays of them): None when they live in host memory (numpy: the device
    memory is the host's, counted with it against the host budget), else
    :func:`~npt_dask.arrays.device.device_memory_budget` (a share of the free memory of
    the GPU that runs the tasks: under a distributed client its workers' GPUs, read on
    each, the least counting; None without a GPU).

    >>> import numpy as np
    >>> default_device_budget(np.ones((3, 2))) is None
    True
    """
    from npt_dask.runtime.scheduler import current_client

    xp, _device = namespace_and_device(*arrays)
    return None if is_numpy(xp) else device_memory_budget(client=current_client())


def resolve_device_budget(value: int | str | None, *arrays: Any) -> int | None:
    """A fit's ``device_memory_budget`` in bytes for a pass over ``arrays``: None (the
    default) gives :func:`default_device_budget` (None for rows in host memory), a size
    with units is read as ``memory_budget`` is. A budget given for rows in host memory
    has nothing to bound -- their blocks are host memory, counted against
    ``memory_budget`` -- so it is set aside with a
    :class:`~npt_dask.errors.MemoryBudgetWarning` naming the fix.

    >>> import numpy as np
    >>> resolve_device_budget(None, np.ones((3, 2))) is None
    True
    """
    default = default_device_budget(*arrays)
    budget = budget_bytes(value)
    if budget is None or default is not None:
        return default if budget is None else budget
    warn(
        f"device_memory_budget={format_bytes(budget)} has no effect here: the rows live in "
        "host memory, where their kernel blocks count against memory_budget. Leave "
        "device_memory_budget=None, or move the rows to the device (e.g. "
        "x.map_blocks(cupy.asarray)) for it to bound the device's memory.",
        MemoryBudgetWarning,
    )
    return None


def check_budgets(
    host_bytes: int,
    device_bytes: int,
    host_budget: int,
    device_budget: int | None,
    what: str,
) -> None:
    """Refuse, before any pass, a plan whose host or device part exceeds its budget.

    ``device_budget=None``: the device memory is host memory (numpy), so
    ``host_bytes + device_bytes`` is checked against ``host_budget``; otherwise each part
    against its own budget. ``what`` names the plan in the message (e.g. ``"Nystrom
    kernel ridge with m=20000 centres"``).

    Raises
    ------
    InputError
        Naming both parts, both budgets and the fixes: a smaller ``chunk_size``
        (the kernel blocks in flight), fewer ``landmarks`` (the m x m matrices), or a
        larger ``memory_budget=`` / ``device_memory_budget=``.

    >>> check_budgets(2**20, 2**20, 2**30, None, "this fit")
    >>> check_budgets(2**20, 2**31, 2**30, 2**30, "this fit")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    npt_dask.errors.InputError: this fit needs 2.0 GiB of device memory, above ...
    """
    fixes = (
        "Use a smaller chunk_size (fewer kernel entries in flight), fewer landmarks (smaller "
        "m x m matrices), or raise"
    )
    if device_budget is None:
        held = host_bytes + device_bytes
        if held > host_budget:
            raise InputError(
                f"{what} needs {format_bytes(held)} of memory ({format_bytes(host_bytes)} "
                f"on the host and {format_bytes(device_bytes)} for the kernel blocks, both "
                f"in host memory here), above memory_budget={format_bytes(host_budget)} "
                f"(device_memory_budget=None: no device, counted together). {fixes} "
                "memory_budget=..."
            )
        return
    over_device = device_bytes > device_budget
    if over_device or host_bytes > host_budget:
        where, need, budget, name = (
            ("device", device_bytes, device_budget, "device_memory_budget") if over_device
            else ("host", host_bytes, host_budget, "memory_budget")
        )  # fmt: skip
        raise InputError(
            f"{what} needs {format_bytes(need)} of {where} memory, above {name}="
            f"{format_bytes(budget)} (host: {format_bytes(host_bytes)} of memory_budget="
            f"{format_bytes(host_budget)}; device: {format_bytes(device_bytes)} of "
            f"device_memory_budget={format_bytes(device_budget)}). {fixes} {name}=..."
        )


def machine_memory() -> int:
    """This machine's physical memory, in bytes."""
    import psutil

    return int(psutil.virtual_memory().total)


def resolve_memory_budget(value: int | str | None) -> int:
    """A fit's ``memory_budget`` in bytes: :func:`default_memory_budget` for None, a size
    with units (``"40GB"``) read as the command line reads it, an int as it is.

    A budget above this machine's physical memory is valid (the plan trusts it) but
    almost surely a mistake -- the fit would page or be killed long before it is used:
    a :class:`~npt_dask.errors.MemoryBudgetWarning` names the machine's memory and the fix.
    """
    budget = budget_bytes(value)
    if budget is None:
        return default_memory_budget()
    total = machine_memory()
    if budget > total:
        warn(
            f"memory_budget={format_bytes(budget)} is more than this machine's physical "
            f"memory ({format_bytes(total)}): a plan that uses it pages or is killed before "
            "it finishes. Give a budget below the machine's memory (e.g. "
            f"memory_budget='{total // 2 // 10**9}GB'), or None for the default (a sixth "
            "of it).",
            MemoryBudgetWarning,
        )
    return budget


def in_flight_bytes(chunk: int, threads: int) -> int:
    """Kernel blocks being evaluated at once: :data:`BLOCKS_PER_TASK` per task thread."""
    return threads * BLOCKS_PER_TASK * 8 * chunk * chunk


def operand_bytes(rows: int, d: int, itemsize: int) -> int:
    """What a task holds beside its rows while it evaluates a kernel block against
    centres: its rows shifted and scaled for the product (an rbf block,
    :func:`npt_dask.kernels.numerics.rbf_block`), ``rows x d`` float64 as they are
    computed, with their cast for float32 rows (the other kernels scale a copy in the
    kernel precision: less).

    >>> operand_bytes(100, 10, 8), operand_bytes(100, 10, 4)
    (8000, 12000)
    """
    return rows * d * (8 + (itemsize if itemsize < 8 else 0))


def upper_pairs(n_chunks: int) -> list[tuple[int, int]]:
    """Block pairs ``(i, j)``, ``i <= j``, of a pass, in the order they are kept."""
    return [(i, j) for i in range(n_chunks) for j in range(i, n_chunks)]


def block_bytes(row_chunks: Sequence[int], pair: tuple[int, int], itemsize: int) -> int:
    """Bytes of the kernel block ``pair = (i, j)``: ``rows_i x rows_j`` entries of ``itemsize``."""
    i, j = pair
    return row_chunks[i] * row_chunks[j] * itemsize


def kept_bytes(row_chunks: Sequence[int], kept: Sequence[tuple[int, int]], itemsize: int) -> int:
    """Bytes the kept blocks hold between passes (:func:`block_bytes` summed)."""
    return sum(block_bytes(row_chunks, pair, itemsize) for pair in kept)


def kept_pairs(
    row_chunks: Sequence[int], itemsize: int, budget: int
) -> tuple[tuple[int, int], ...]:
    """The longest prefix of :func:`upper_pairs` whose blocks fit in ``budget`` bytes.

    >>> kept_pairs([100, 100, 50], 8, 3 * 100 * 100 * 8)
    ((0, 0), (0, 1), (0, 2))
    """
    kept, used = [], 0
    for pair in upper_pairs(len(row_chunks)):
        used += block_bytes(row_chunks, pair, itemsize)
        if used > budget:
            break
        kept.append(pair)
    return tuple(kept)


def kept_for(
    cache: str, row_chunks: Sequence[int], itemsize: int, budget: int
) -> tuple[tuple[int, int], ...]:
    """The blocks a pass keeps for the next: every block (``cache="memory"``), none
    (``"recompute"``), or (``"auto"``) the longest prefix within ``budget`` bytes
    (:func:`kept_pairs`). The one rule of the fit plan and the kernel operator.

    >>> kept_for("auto", [100, 100], 8, 2 * 100 * 100 * 8), kept_for("recompute", [100], 8, 0)
    (((0, 0), (0, 1)), ())
    """
    if cache == "memory":
        return tuple(upper_pairs(len(row_chunks)))
    if cache == "recompute":
        return ()
    return kept_pairs(row_chunks, itemsize, budget)


def cached_fraction(row_chunks: Sequence[int], kept: Sequence[tuple[int, int]]) -> float:
    """Share of a pass's kernel entries that the kept blocks hold."""
    total = sum(row_chunks[i] * row_chunks[j] for i, j in upper_pairs(len(row_chunks)))
    return sum(row_chunks[i] * row_chunks[j] for i, j in kept) / max(total, 1)


MEMORY_BUDGET_PARAM = Param(
    "memory_budget",
    (Interval(INT, 1, None), ByteSize(), NONE),
    None,
    "bytes the fit may hold beyond the input rows: an int, or a size with units "
    "('40GB', '1.5GiB'; the same units everywhere) (None: a sixth of physical memory)",
    parse=parse_bytes,
)
"""The ``memory_budget`` argument (host memory) of a fit, a projection and kernel ridge."""

DEVICE_MEMORY_BUDGET_PARAM = Param(
    "device_memory_budget",
    (Interval(INT, 1, None), ByteSize(), NONE),
    None,
    "bytes of device (GPU) memory the kernel blocks and device matrices may hold when "
    "the rows live on a device, units as memory_budget (None: a share of the device's "
    "free memory; rows in host memory count against memory_budget alone)",
    parse=parse_bytes,
)
"""The ``device_memory_budget`` argument (device memory) of a fit and kernel ridge."""
