"""Scratch of a ``basis="chunked"`` fit is never left behind: removed on SIGTERM, and
that of processes killed outright removed by the next fit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dask
import numpy as np
import pytest

import npt_dask as npt
from npt_dask.npt.panels import ChunkedPanels
from npt_dask.runtime.owners import owner_tag


def _dead_tag() -> str:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return owner_tag().split("-")[0] + f"-{child.pid}-0"


def _scratch(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("npt-basis-"))


def test_next_fit_removes_scratch_of_dead_processes_only(tmp_path):
    dead = tmp_path / f"npt-basis-{_dead_tag()}-abc123_x"
    live = tmp_path / f"npt-basis-{owner_tag()}-def456"
    legacy = tmp_path / "npt-basis-k2j4h5g6"  # an older npt-dask's: owner unknown, kept
    for d in (dead, live, legacy):
        d.mkdir()
        (d / "q.npy").write_bytes(b"x" * 100)
    x = np.random.default_rng(0).normal(size=(300, 4))
    with dask.config.set({"temporary-directory": str(tmp_path)}):
        npt.fit(
            x, "rbf", gamma=0.3, n_components=3, basis="chunked", chunk_size=100, solver="krylov"
        )
    assert _scratch(tmp_path) == sorted([live.name, legacy.name])


def test_sigterm_removes_this_process_scratch(tmp_path):
    calls = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        panels = ChunkedPanels(lambda v, keep: v, (10, 10), 2, str(tmp_path))
        assert len(_scratch(tmp_path)) == 1
        os.kill(os.getpid(), signal.SIGTERM)
        assert _scratch(tmp_path) == []
        assert calls == [signal.SIGTERM]  # the handler that was there still runs
        panels.close()  # harmless after the signal
    finally:
        signal.signal(signal.SIGTERM, before)


_FIT = """
import sys, dask, numpy as np, npt_dask as npt
x = np.random.default_rng(0).normal(size=(6000, 8))
with dask.config.set({"temporary-directory": sys.argv[1]}):
    npt.fit(x, "rbf", gamma=0.1, n_components=40, basis="chunked", chunk_size=500, tol=1e-14,
            solver="krylov")
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_chunked_fit_leaves_no_scratch(tmp_path, sig):
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_FIT), str(tmp_path)])
    deadline = time.monotonic() + 120
    while not any(p.glob("*.npy") for p in tmp_path.glob("npt-basis-*")):
        assert child.poll() is None, "the fit ended before it wrote scratch"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child.send_signal(sig)
    assert child.wait(timeout=60) == -sig
    if sig == signal.SIGTERM:
        assert _scratch(tmp_path) == []
        return
    assert len(_scratch(tmp_path)) == 1  # SIGKILL cannot be caught: the next fit removes it
    x = np.random.default_rng(1).normal(size=(200, 3))
    with dask.config.set({"temporary-directory": str(tmp_path)}):
        npt.fit(
            x, "rbf", gamma=0.3, n_components=3, basis="chunked", chunk_size=100, solver="krylov"
        )
    assert _scratch(tmp_path) == []
