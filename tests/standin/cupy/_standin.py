"""The stand-in's counters: crossings, synchronisations, Fortran copies, live device bytes.

Every counter is process-wide and thread-safe (one lock; an array's death only appends to a
queue, drained under the lock at the next event, so a finaliser never waits on the lock).

* ``h2d`` / ``h2d_bytes``: host→device copies (``cupy.asarray``/``array`` of anything but a
  stand-in array, ``ndarray.set``, a numpy index or value in ``x[...]``).
* ``d2h`` / ``d2h_bytes``: device→host copies (``get``, ``asnumpy``, ``item``, ``tolist``,
  ``float``/``int``/``bool``/``complex`` of an array, ``repr``, pickling, DLPack to the CPU).
* ``syncs``: synchronisations: each device→host copy (they block), the explicit ones
  (``cuda.Device().synchronize()``, ``cuda.runtime.deviceSynchronize()``, a stream's
  ``synchronize()``), and the implicit ones of outputs whose shape depends on values
  (``nonzero``, ``unique``, boolean-mask indexing ...).
* ``fortran_copies`` / ``fortran_bytes``: a C-ordered matrix copied to Fortran order for
  cuBLAS/cuSOLVER (``cupyx.scipy.linalg.solve_triangular``).
* ``live_bytes``: device bytes held now: each buffer counted once, while any stand-in array
  (the buffer's owner or a view of it) is alive. ``high_water``: the most ever held.

:func:`count` opens a window: its fields are the increments since it was opened (frozen
when it closes), and ``peak`` is the most device bytes held at once inside the window
*beyond* what was held when it was opened: ``max(live_bytes during the window) -
live_bytes at entry`` (0 if nothing new was allocated; arrays freed inside the window lower
``live_bytes`` and so make room before they count against the peak).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

_LOCK = threading.RLock()
_DEAD: collections.deque[int] = collections.deque()  # buffer ids released by dying arrays
_HELD: dict[int, list[Any]] = {}  # id(root buffer) -> [root, holders, nbytes]
_OPEN: list[Window] = []


@dataclasses.dataclass
class Counts:
    """The counters (totals since import, or a window's increments)."""

    h2d: int = 0
    h2d_bytes: int = 0
    d2h: int = 0
    d2h_bytes: int = 0
    syncs: int = 0
    fortran_copies: int = 0
    fortran_bytes: int = 0
    allocations: int = 0
    live_bytes: int = 0
    high_water: int = 0


_TOTAL = Counts()
_EVENTS = ("h2d", "h2d_bytes", "d2h", "d2h_bytes", "syncs", "fortran_copies", "fortran_bytes")


class Window(Counts):
    """The counts inside one :func:`count` block; ``peak``: see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.entry_bytes = _TOTAL.live_bytes
        self.peak = 0
        self.open = True

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)}" for k in (*_EVENTS, "peak"))
        return f"Window({fields})"


def _drain() -> None:
    while _DEAD:
        key = _DEAD.popleft()
        entry = _HELD.get(key)
        if entry is None:
            continue
        entry[1] -= 1
        if entry[1] == 0:
            del _HELD[key]
            _TOTAL.live_bytes -= entry[2]


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def hold(a: np.ndarray) -> int:
    """Register one more stand-in array on ``a``'s buffer; the key :func:`release` takes."""
    root = _root(a)
    key = id(root)
    with _LOCK:
        _drain()
        entry = _HELD.get(key)
        if entry is not None:
            entry[1] += 1
            return key
        _HELD[key] = [root, 1, root.nbytes]
        _TOTAL.live_bytes += root.nbytes
        _TOTAL.allocations += 1
        _TOTAL.high_water = max(_TOTAL.high_water, _TOTAL.live_bytes)
        for w in _OPEN:
            w.allocations += 1
            w.peak = max(w.peak, _TOTAL.live_bytes - w.entry_bytes)
    return key


def release(key: int) -> None:
    """A stand-in array died (called from ``__del__``: no lock taken here)."""
    _DEAD.append(key)


def record(**events: int) -> None:
    """Add to the event counters (``h2d=1, h2d_bytes=n`` ...), totals and open windows."""
    with _LOCK:
        for name, value in events.items():
            setattr(_TOTAL, name, getattr(_TOTAL, name) + value)
            for w in _OPEN:
                setattr(w, name, getattr(w, name) + value)


def device_to_host(nbytes: int) -> None:
    """One device→host copy of ``nbytes`` (a blocking copy: one synchronisation too)."""
    record(d2h=1, d2h_bytes=int(nbytes), syncs=1)


def host_to_device(nbytes: int) -> None:
    record(h2d=1, h2d_bytes=int(nbytes))


def counters() -> Counts:
    """A snapshot of the totals since import (``live_bytes`` now, ``high_water`` ever)."""
    with _LOCK:
        _drain()
        return dataclasses.replace(_TOTAL)


def live_bytes() -> int:
    with _LOCK:
        _drain()
        return _TOTAL.live_bytes


@contextlib.contextmanager
def count(collect: bool = True) -> Iterator[Window]:
    """Count what happens inside the block (every thread's events; see the module doc).

    ``collect``: run the garbage collector first, so that arrays already unreachable in
    reference cycles die before the window opens rather than inside it (where they would
    make room the peak then does not count); a full collection takes 0.05-0.2 s.

    >>> import cupy
    >>> with cupy._standin.count() as seen:
    ...     x = cupy.asarray([1.0, 2.0])
    ...     total = float(x.sum())
    >>> seen.h2d, seen.d2h, seen.peak
    (1, 1, 16)
    """
    if collect:
        import gc

        gc.collect()
    with _LOCK:
        _drain()
        window = Window()
        _OPEN.append(window)
    try:
        yield window
    finally:
        with _LOCK:
            _drain()
            _OPEN.remove(window)
            window.live_bytes = _TOTAL.live_bytes - window.entry_bytes
            window.high_water = window.entry_bytes + window.peak
            window.open = False


# --- what the fake device reports ----------------------------------------------------------

DEVICE_BYTES = 16 * 2**30
"""The fake device's memory (``cuda.Device().mem_info``'s total)."""

AVAILABLE = True
"""What ``cupy.is_available()`` answers (a test may set it False)."""

LINALG_ERRORS = "ignore"
"""``cupyx.errstate(linalg=...)``: ``"ignore"`` (CuPy's default: failed factorisations are
silent) or ``"raise"``."""
