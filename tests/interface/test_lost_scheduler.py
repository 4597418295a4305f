"""A scheduler killed under ``npt project --scheduler-file``: one line that says what is
kept and how to resume, no screens of traceback. That re-running
resumes is ``test_reliability.py::test_killed_client_resumes``'s."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import npt_dask as npt
from tests._clusters import recipe

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX")


def _kill_scheduler_once(cmd, ready, loopback, cluster):
    """Run ``cmd``, kill the cluster's scheduler once ``ready()`` holds, and return the
    non-blank lines the command printed on stderr (it must exit 2)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ready():  # polling: the command has done some work
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no work was done in time"
            time.sleep(0.05)
        loopback._killpg(cluster.scheduler, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err  # no traceback, no log records
    return lines


def test_killed_scheduler_ends_npt_project_with_one_line_saying_how_to_resume(tmp_path):
    rng = np.random.default_rng(5)
    model = npt.fit(rng.normal(size=(1000, 10)), "rbf", gamma=0.05, n_components=5,
                    solver="krylov", chunk_size=500, random_state=0)  # fmt: skip
    path = model.save(tmp_path / "m.zarr")
    z = rng.normal(size=(20_000, 10))
    np.save(tmp_path / "z.npy", z)
    out = tmp_path / "p.zarr"
    loopback = recipe("local/loopback.py")
    with loopback.LoopbackCluster(1, workdir=tmp_path / "cluster", timeout=60) as cluster:
        cmd = [
            sys.executable,
            "-m",
            "npt_dask",
            "project",
            str(path),
            str(tmp_path / "z.npy"),
            "--out",
            str(out),
            "--chunk-size",
            "300",
            "--quiet",
            "--scheduler-file",
            str(cluster.scheduler_file),
            "--scheduler-timeout",
            "2",
        ]  # fmt: skip (a lost scheduler: 2 s to come back)
        lines = _kill_scheduler_once(cmd, lambda: bool(list(out.glob("npt_done/c/*"))),
                                     loopback, cluster)  # a chunk flagged done  # fmt: skip
    assert lines[0].startswith("npt project: error: Lost the connection to the dask scheduler")
    assert f"kept in {out}: run the same npt project command again to resume" in lines[0]
    import xarray as xr
    import zarr

    assert zarr.open_group(str(out), mode="r")["npt_done"][:].sum() >= 1  # what the line says
    assert "npt_incomplete" in xr.open_zarr(out).attrs  # kept, and not read as a result


class _Client:
    """A client that notices its lost scheduler ``after`` seconds late (or never)."""

    def __init__(self, after: float | None) -> None:
        self.start, self.after = time.monotonic(), after

    @property
    def status(self) -> str:
        late = self.after is not None and time.monotonic() - self.start >= self.after
        return "closed" if late else "running"


def test_a_connection_error_before_the_client_notices_is_a_lost_scheduler():
    """The race the probe saw in 2 of 6 kills: ``ConnectionResetError`` reaches ``npt
    project`` while the client still says "running"; it is the lost scheduler (one line,
    re-run to resume), not a task's error. A task's own error stays one."""
    from npt_dask.npt.projection_store import scheduler_lost

    reset = ConnectionResetError(104, "Connection reset by peer")
    assert scheduler_lost(_Client(after=0.3), reset, wait=3.0)
    assert not scheduler_lost(_Client(after=None), reset, wait=0.3)  # a live scheduler
    assert not scheduler_lost(_Client(after=0.0 + 1e9), ValueError("a task's"), wait=3.0)


def test_killed_scheduler_ends_npt_ridge_with_one_line_saying_how_to_resume(tmp_path):
    """A scheduler killed under a checkpointed ``npt ridge``: one line naming the lost
    scheduler and the checkpoint a re-run resumes from; no traceback."""
    rng = np.random.default_rng(6)
    x = rng.normal(size=(3000, 8))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", (x[:, 0] + 0.3 * x[:, 1] > 0).astype(int))
    checkpoint = tmp_path / "cg.npz"
    loopback = recipe("local/loopback.py")
    with loopback.LoopbackCluster(1, workdir=tmp_path / "cluster", timeout=60) as cluster:
        cmd = [
            sys.executable, "-m", "npt_dask.interface.cli", "ridge", str(tmp_path / "x.npy"),
            "--labels", str(tmp_path / "y.npy"), "--kernel", "rbf", "--gamma", "0.05",
            "--alpha", "1e-6", "--solver", "cg", "--tol", "1e-12", "--max-iter", "100000",
            "--chunk-size", "500", "--checkpoint", str(checkpoint), "--quiet",
            "--scheduler-file", str(cluster.scheduler_file), "--scheduler-timeout", "2",
        ]  # fmt: skip
        lines = _kill_scheduler_once(cmd, checkpoint.exists, loopback, cluster)  # a state written
    assert lines[0].startswith("npt ridge: error: Lost the connection to the dask scheduler")
    assert f"kept in {checkpoint}" in lines[0]
    assert "run the same command again to resume" in lines[0]


class _CloseOnFirstTask:
    """A scheduler plugin that closes its scheduler as the first task is sent to run."""

    name = "close-on-first-task"

    def __init__(self, scheduler) -> None:
        self.scheduler, self.closing = scheduler, False

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        if finish == "processing" and not self.closing:
            import asyncio

            self.closing = True
            asyncio.get_running_loop().create_task(self.scheduler.close())


def test_scheduler_lost_in_npt_projects_finiteness_pass_is_the_same_one_line(tmp_path, capsys):
    """The scheduler lost while ``npt project`` reads a lazy input for NaN/inf (its first
    pass, before the store exists): the one line the rest of the run gives, with how to go
    on, exit 2; not a traceback of distributed's cancelled future."""
    import zarr
    from distributed import LocalCluster
    from distributed.diagnostics.plugin import SchedulerPlugin

    from npt_dask.interface.cli.program import main

    rng = np.random.default_rng(7)
    model = npt.fit(rng.normal(size=(300, 4)), "rbf", gamma=0.2, n_components=3,
                    random_state=0)  # fmt: skip
    path = model.save(tmp_path / "m.zarr")
    data = zarr.create_array(tmp_path / "z.zarr", shape=(4000, 4), chunks=(100, 4),
                             dtype="f8")  # fmt: skip  # a lazy input: 40 chunks to check
    data[:] = rng.normal(size=(4000, 4))
    out = tmp_path / "p.zarr"
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                           protocol="tcp://", host="127.0.0.1", dashboard_address=None)  # fmt: skip
    try:
        plugin = type("Closer", (_CloseOnFirstTask, SchedulerPlugin), {})(cluster.scheduler)
        cluster.scheduler.add_plugin(plugin)
        address = cluster.scheduler_address
        code = main(["project", str(path), str(tmp_path / "z.zarr"), "--out", str(out),
                     "--quiet", "--scheduler", address, "--scheduler-timeout", "2"])  # fmt: skip
    finally:  # its scheduler is gone: stop the worker, and do not wait long for the rest
        for worker in list(cluster.workers.values()):
            cluster.sync(worker.close, timeout=5)
        with contextlib.suppress(TimeoutError):
            cluster.close(timeout=2)
    assert plugin.closing  # the scheduler went away during the pass
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"npt project: error: Lost the connection to the dask scheduler "
                               f"at {address}")  # fmt: skip
    assert f"Nothing was written to {out} yet: run the same npt project command again" in lines[0]
    assert not out.exists()
