"""A run that stopped because its dask scheduler went away: told apart from a task's own
error (:func:`scheduler_lost`) and said in one :class:`~npt_dask.errors.ClusterError`
with what is kept and how to go on (:func:`on_lost_scheduler`), wherever in the run it
happened: an input check's pass, the work itself, or the write of its results."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from npt_dask.errors import ClusterError, NPTError

__all__ = ["LOST_SCHEDULER_WAIT", "on_lost_scheduler", "scheduler_lost"]

LOST_SCHEDULER_WAIT = 5.0
"""Seconds a connection error waits for the client to notice a lost scheduler."""


def scheduler_lost(client: Any, exc: BaseException, wait: float = LOST_SCHEDULER_WAIT) -> bool:
    """Whether ``exc`` ended a run because the client lost its scheduler (killed, or the
    network gone), not because a task failed. A connection error (``OSError``: distributed's
    ``CommClosedError``, ``ConnectionResetError``) can reach the caller a moment before the
    client marks itself disconnected: then the client's status is watched for ``wait``
    seconds (seen: 2 in 6 killed schedulers gave a bare "Connection reset by peer")."""

    def lost() -> bool:
        return getattr(client, "status", "running") not in ("running", "newly-created")

    if lost() or "scheduler-connection-lost" in str(exc):
        return True
    if not isinstance(exc, OSError):
        return False
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if lost():
            return True
    return False


@contextlib.contextmanager
def on_lost_scheduler(
    client: Any, hint: Callable[[], str], spellings: dict[str, str] | None = None
) -> Iterator[None]:
    """Turn a lost scheduler anywhere in the block into one :class:`ClusterError`:
    "Lost the connection to the dask scheduler at ADDRESS: ...", then ``hint()`` (what is
    kept and how to go on, read when it happens: a check may fail before anything was
    written). npt-dask's own errors and a task's own error pass as they are; so does
    everything where ``client`` is None (local threads have no scheduler to lose)."""

    try:
        yield
    except NPTError:
        raise
    except Exception as exc:
        if client is None or not scheduler_lost(client, exc):
            raise
        address = getattr(getattr(client, "scheduler", None), "address", "?")
        raise ClusterError(
            f"Lost the connection to the dask scheduler at {address}: it stopped, or the "
            f"network to it failed.{hint()}",
            spellings=spellings,
        ) from None
