"""Graph helpers shared by every streamed pass: summation trees over Delayed parts.

Layer rule: graph code. Task bodies come from :mod:`npt_dask.blocks` (numpy
only); nothing here computes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dask import delayed
from dask.delayed import Delayed

from npt_dask.blocks import FAN_IN

__all__ = ["tree_reduce"]


def tree_reduce(
    parts: Sequence[Delayed], combine: Callable[[list[Any]], Any], *, key: str | None = None
) -> Delayed:
    """Combine Delayed ``parts`` with a tree of fan-in :data:`~npt_dask.blocks.FAN_IN`.

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
