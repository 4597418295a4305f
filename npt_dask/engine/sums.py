"""The sums of a pass: their task bodies (:func:`sum_parts`, :func:`add_tuples`,
:func:`host_rows`) and the summation trees over Delayed parts that use them
(:func:`tree_reduce`, :func:`chunk_sums`), every tree of fan-in :data:`FAN_IN`.

Layer rule: the task bodies are arrays in, arrays out (the namespace of their parts);
the trees are graph code and compute only in :func:`chunk_sums`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dask.array as da
import numpy as np
from dask import delayed
from dask.delayed import Delayed

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import is_numpy, namespace_of
from npt_dask.runtime.scheduler import compute

__all__ = [
    "FAN_IN",
    "add_into",
    "add_tuples",
    "chunk_sums",
    "host_rows",
    "join_rows",
    "sum_parts",
    "tree_reduce",
]


FAN_IN = 8
"""Inputs per node of every summation tree (bounded memory per task)."""


def add_into(total: Any, part: Any) -> Any:
    """``total += part`` in place (element by element for tuples of arrays), in the
    namespace of the parts: the one addition of every running sum of a pass."""
    if isinstance(total, tuple):
        for acc, term in zip(total, part, strict=True):
            acc += term
        return total
    total += part
    return total


def sum_parts(parts: Sequence[Any], which: Sequence[int | None]) -> np.ndarray:
    """``sum_k parts[k][which[k]]`` (``which[k] is None``: the part itself), a new array
    (the first term copied, the others added into it by :func:`add_into`)."""
    out = None
    for part, w in zip(parts, which, strict=True):
        term = part if w is None else part[w]
        out = term.copy() if out is None else add_into(out, term)
    assert out is not None, "sum_parts needs at least one part"
    return out


def join_rows(parts: Sequence[Any]) -> Any:
    """Row blocks of a pass's result stacked in their namespace (on their device)."""
    xp = namespace_of(*parts)
    return np.concatenate(parts, axis=0) if is_numpy(xp) else xp.concat(list(parts), axis=0)


def host_rows(parts: Sequence[Any]) -> np.ndarray:
    """Row blocks of a pass's result stacked in their namespace, then taken to host once
    (a numpy result is concatenated as the driver did: the crossing point counts)."""
    return np.asarray(to_host(join_rows(parts)))


def add_tuples(parts: Sequence[tuple[Any, ...]]) -> tuple[np.ndarray, ...]:
    """Element-wise sum of tuples of arrays (or scalars) of fixed shapes."""
    total = [np.array(p, copy=True) for p in parts[0]]
    for part in parts[1:]:
        for acc, term in zip(total, part, strict=True):
            acc += term
    return tuple(total)


def tree_reduce(
    parts: Sequence[Delayed], combine: Callable[[list[Any]], Any], *, key: str | None = None
) -> Delayed:
    """Combine Delayed ``parts`` with a tree of fan-in :data:`FAN_IN`.

    ``combine(list_of_values)`` is applied to groups of at most ``FAN_IN``
    values, level by level, so no task holds more than ``FAN_IN`` partial
    results. ``key`` names the nodes ``{key}-l{level}-{k}`` (stable keys for
    progress and retries); without it dask derives them.
    """
    level, items = 1, list(parts)
    while len(items) > 1:
        items = [
            delayed(combine, pure=True)(
                items[k : k + FAN_IN],
                **({"dask_key_name": f"{key}-l{level}-{k // FAN_IN}"} if key else {}),
            )
            for k in range(0, len(items), FAN_IN)
        ]
        level += 1
    return items[0]


def chunk_sums(
    func: Callable[..., tuple[np.ndarray, ...]],
    arrays: Sequence[da.Array],
    *args: Any,
    compute_now: bool = True,
    combine: Callable[[list[Any]], Any] = add_tuples,
) -> Any:
    """``sum over chunks k of func(a[k] for a in arrays, *args)``, one read pass.

    ``arrays`` share their row chunks; ``func`` returns a tuple of numpy
    arrays (or scalars) of fixed shapes, summed with a tree of fan-in 8
    (``combine`` merges a group of them: element-wise sums by default).
    Returns the summed tuple, or the lazy ``Delayed`` with ``compute_now=False``.
    """
    blocks = [list(a.to_delayed().ravel()) for a in arrays]  # type: ignore[no-untyped-call]
    parts = [delayed(func, pure=True)(*chunk, *args) for chunk in zip(*blocks, strict=True)]
    total = tree_reduce(parts, combine)
    if not compute_now:
        return total
    return compute(total)[0]
