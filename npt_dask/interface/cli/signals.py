"""How the command line stops on a signal: SIGINT (Ctrl-C) and SIGTERM (``kill``, a batch
system's time limit, a container stopping) take one path, so each ends with the same
line saying what is kept and how to go on, and the exit status ``128 + signal``."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["SIGNALS", "Stopped", "exit_status", "signal_name", "stop_on_signals"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals that stop a command as Ctrl-C does."""


class Stopped(KeyboardInterrupt):
    """A command stopped by ``signum``: a :class:`KeyboardInterrupt`, so every place that
    cleans up after Ctrl-C (a cluster's queued work cancelled, a lock released, a
    checkpoint kept) does so for SIGTERM too."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise :class:`Stopped` (one handler for
    both); the handlers before are put back after. Signal handlers belong to the main
    thread: called from another (a command run inside a program's thread), nothing is
    changed and Python's own handling stays."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {signum: signal.signal(signum, _stop) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def signal_name(exc: KeyboardInterrupt) -> str:
    """The signal that stopped a command: ``"SIGTERM"``, or ``"SIGINT"`` for Ctrl-C."""
    return signal.Signals(getattr(exc, "signum", signal.SIGINT)).name


def exit_status(exc: KeyboardInterrupt) -> int:
    """``128 + signal``, the shell's status for a command a signal stopped (130 for
    Ctrl-C, 143 for SIGTERM)."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))
