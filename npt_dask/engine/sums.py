"""Graph helpers shared by every streamed pass: summation trees over Delayed parts.

Layer rule: graph code. Task bodies come from :mod:`npt_dask.engine.blocks` (numpy
only); nothing here computes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dask.array as da
import numpy as np
from dask import delayed
from dask.delayed import Delayed

from npt_dask.engine.blocks import FAN_IN, add_tuples
from npt_dask.runtime.scheduler import compute

__all__ = ["chunk_sums", "tree_reduce"]


def tree_reduce(
    parts: Sequence[Delayed], combine: Callable[[list[Any]], Any], *, key: str | None = None
) -> Delayed:
    """Combine Delayed ``parts`` with a tree of fan-in :data:`~npt_dask.engine.blocks.FAN_IN`.

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
