"""Progress on stderr for long operations: projection chunks and Krylov passes.

In a terminal (and in Jupyter, which honours ``\\r`` in stream output) the
report is one line, rewritten in place at most twice a second. Anywhere else
-- a log file, a pipe, a batch job's output -- it is line-oriented: one full
line per update, at most every :data:`LOG_EVERY` seconds, and the final line
once. The driver, not the workers, reports, so this works under any dask
scheduler. Nothing is printed when disabled, so ``--quiet`` and
``progress=False`` are free.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TextIO

import numpy as np

from npt_dask.params.constraints import Options, Param
from npt_dask.runtime.scheduler import compute, current_client

__all__ = [
    "LOG_EVERY",
    "FitProgress",
    "ProgressBar",
    "compute_counted",
    "count",
    "label_in_force",
    "progress_label",
]

LOG_EVERY = 5.0
"""Seconds between progress lines when the stream is not a terminal."""

_clock = time.perf_counter

_LABEL: ContextVar[str | None] = ContextVar("npt_dask_progress_label", default=None)


@contextmanager
def progress_label(label: str) -> Iterator[str]:
    """Name the progress lines of what runs inside ``label``: an estimator's name from
    Python (``KernelRidgeClassifier``), ``npt ridge`` from the command line. The outermost
    caller wins (the command line's name stays when its estimator names itself); yields
    the label in force."""
    outer = _LABEL.get()
    if outer is not None:
        yield outer
        return
    token = _LABEL.set(label)
    try:
        yield label
    finally:
        _LABEL.reset(token)


def label_in_force(default: str) -> str:
    """The label :func:`progress_label` set around this call, else ``default``."""
    return _LABEL.get() or default


def count(n: int, word: str, plural: str | None = None) -> str:
    """``n`` and the word, plural unless ``n`` is 1: ``"1 pass"``, ``"3 passes"``.

    >>> count(1, "pass", "passes"), count(3, "feature")
    ('1 pass', '3 features')
    """
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def _rewrites_in_place(stream: TextIO) -> bool:
    """Whether ``\\r`` rewrites the line: a terminal, or a Jupyter kernel's stream."""
    if type(stream).__module__.startswith("ipykernel"):
        return True  # its OutStream says isatty() False but renders \r in place
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class _Line:
    def __init__(self, enabled: bool, stream: TextIO | None = None, every: float = 0.5) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.in_place = _rewrites_in_place(self.stream)
        self.start = _clock()
        self.every = every if self.in_place else max(every, LOG_EVERY)
        self._last = -float("inf")
        self._shown = ""  # text currently on the line (in place) or last line written

    @property
    def elapsed(self) -> float:
        return _clock() - self.start

    def write(self, text: str, *, final: bool = False, force: bool = False) -> None:
        """Show ``text``; at most once per ``every`` seconds unless ``final`` or ``force``.

        The throttle keeps a saved notebook's output and a log file short (each
        write is a stream message or a line there). ``final`` ends the report:
        in place it ends the line; in a log it writes ``text`` unless that very
        line was the last one written.
        """
        now = _clock()
        if not self.enabled or (not (final or force) and now - self._last < self.every):
            return
        self._last = now
        if self.in_place:
            pad = max(0, len(self._shown) - len(text))  # blank out a longer previous text
            self.stream.write(f"\r{text}{' ' * pad}" + ("\n" if final else ""))
            self._shown = "" if final else text
        elif text != self._shown or not final:
            self.stream.write(text + "\n")
            self._shown = text
        self.stream.flush()

    def note(self, text: str) -> None:
        """A line of its own (before the report starts, or between its updates)."""
        if not self.enabled:
            return
        if self.in_place and self._shown:
            self.stream.write("\n")
        self.stream.write(text + "\n")
        self.stream.flush()
        self._shown = ""


class ProgressBar(_Line):
    """``label [#####     ] done/total unit  12.3s``, one ``step()`` per finished item."""

    def __init__(
        self,
        label: str,
        total: int,
        unit: str,
        enabled: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        super().__init__(enabled and total > 0, stream)
        self.label, self.total, self.unit, self.done = label, total, unit, 0

    def resuming(self, already: int) -> None:
        """Say, first, that ``already`` of the items were done by an earlier run; the
        count goes on from there (the next step shows ``already + 1``)."""
        self.done = already
        if already:
            self.note(
                f"{self.label}: resuming: {already} of {self.total} {self.unit} already done "
                "(their input rows are checked, not projected again)"
            )

    def step(self) -> None:
        """One more item finished."""
        self.done += 1
        bar = "#" * int(30 * self.done / self.total) if self.total else ""
        self.write(
            f"{self.label} [{bar:<30}] {self.done}/{self.total} {self.unit} {self.elapsed:6.1f}s",
            final=self.done == self.total,
        )


class FitProgress(_Line):
    """Fit reporter.

    For the Krylov solver it is the ``callback(passes, ritz_values, residuals)``,
    showing the pass count, how many of the r wanted pairs meet ``tol`` and the
    largest relative residual. Any solver can report a stage with
    :meth:`stage` (the dense solver: building the kernel matrix, then the
    eigendecomposition). :meth:`close` ends the report.
    """

    def __init__(
        self,
        n_components: int,
        tol: float,
        enabled: bool = True,
        stream: TextIO | None = None,
        *,
        prefix: str = "npt fit",
    ) -> None:
        super().__init__(enabled, stream)
        self.r, self.tol, self.last, self.prefix = n_components, tol, "", prefix

    def __call__(self, passes: int, values: np.ndarray, residuals: np.ndarray) -> None:
        """Report after a pass."""
        res = np.asarray(residuals)[: self.r]
        done = int(np.sum(res <= self.tol))
        worst = float(res.max()) if res.size else float("nan")
        self.last = (
            f"{self.prefix}: pass {passes:3d}, {done}/{self.r} pairs converged, "
            f"max residual {worst:.1e} (tol {self.tol:.0e}) {self.elapsed:6.1f}s"
        )
        self.write(self.last)

    def stage(self, text: str) -> None:
        """Report a stage now (not throttled): ``<prefix>: <text>  12.3s``."""
        self.last = f"{self.prefix}: {text} {self.elapsed:6.1f}s"
        self.write(self.last, force=True)

    def close(self) -> None:
        """Show the last report (however recent) and end the line."""
        if self.last:
            self.write(self.last, final=True)


def compute_counted(
    counted: Sequence[Any], rest: Sequence[Any], bar: ProgressBar, *, blas_threads: int = 1
) -> list[Any]:
    """Compute the Delayed ``counted`` and ``rest`` together, one ``bar.step()`` per finished
    task of ``counted``, under local threads or a ``distributed`` client (the driver
    reports); results in order, ``counted`` first. Per-thread block buffers are released
    afterwards, as :func:`npt_dask.runtime.scheduler.compute` with ``release_scratch``
    (``blas_threads`` per task as there)."""
    tasks = [*counted, *rest]
    client = current_client()
    if client is not None:
        from distributed import as_completed

        futures = client.compute(tasks)
        keys = {t.key for t in counted}
        for future in as_completed(futures):  # type: ignore[no-untyped-call]
            if future.key in keys:
                bar.step()
        return list(client.gather(futures))
    from dask.callbacks import Callback

    keys = {t.key for t in counted}

    class _Tick(Callback):  # called in this thread, after each task
        def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
            if key in keys:
                bar.step()

    with _Tick():  # type: ignore[no-untyped-call]
        return list(compute(*tasks, release_scratch=True, blas_threads=blas_threads))


PROGRESS_PARAM = Param(
    "progress", (Options((True, False)),), False, "report each Krylov pass on stderr"
)
"""The ``progress`` argument of a fit (kernel ridge's says its own words)."""
