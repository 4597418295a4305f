"""Progress on stderr for long operations: projection chunks and Krylov passes.

One line, rewritten in place with a carriage return: that works in a
terminal, in Jupyter (which honours ``\\r`` in stream output) and under any
dask scheduler, because the driver -- not the workers -- reports. Nothing is
printed when disabled, so ``--quiet`` and ``progress=False`` are free.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

import numpy as np

__all__ = ["FitProgress", "ProgressBar"]


class _Line:
    def __init__(self, enabled: bool, stream: TextIO | None = None, every: float = 0.5) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.every, self._last = every, -float("inf")

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def write(self, text: str, *, final: bool = False) -> None:
        """Rewrite the line; at most once per ``every`` seconds unless ``final``.

        The throttle keeps a saved notebook's output short (each write is a
        stream message there) and costs nothing in a terminal.
        """
        now = time.perf_counter()
        if not self.enabled or (not final and now - self._last < self.every):
            return
        self._last = now
        self.stream.write(f"\r{text}" + ("\n" if final else ""))
        self.stream.flush()


class ProgressBar(_Line):
    """``label [#####     ] done/total unit  12.3s``, one ``step()`` per finished item."""

    def __init__(self, label: str, total: int, unit: str, enabled: bool = True) -> None:
        super().__init__(enabled and total > 0)
        self.label, self.total, self.unit, self.done = label, total, unit, 0

    def step(self) -> None:
        """One more item finished."""
        self.done += 1
        bar = "#" * int(30 * self.done / self.total) if self.total else ""
        self.write(
            f"{self.label} [{bar:<30}] {self.done}/{self.total} {self.unit} {self.elapsed:6.1f}s",
            final=self.done == self.total,
        )


class FitProgress(_Line):
    """Krylov-pass reporter: ``callback(passes, ritz_values, residuals)`` of the solver.

    Shows the pass count, how many of the r wanted pairs meet ``tol`` and the
    largest relative residual.
    """

    def __init__(self, n_components: int, tol: float, enabled: bool = True) -> None:
        super().__init__(enabled)
        self.r, self.tol, self.last = n_components, tol, ""

    def __call__(self, passes: int, values: np.ndarray, residuals: np.ndarray) -> None:
        """Report after a pass."""
        res = np.asarray(residuals)[: self.r]
        done = int(np.sum(res <= self.tol))
        worst = float(res.max()) if res.size else float("nan")
        self.last = (
            f"npt fit: pass {passes:3d}, {done}/{self.r} pairs converged, "
            f"max residual {worst:.1e} (tol {self.tol:.0e}) {self.elapsed:6.1f}s"
        )
        self.write(self.last)

    def close(self) -> None:
        """Show the last pass (however recent) and end the line."""
        if self.last:
            self.write(self.last, final=True)
