"""A scheduler killed under ``npt project --scheduler-file``: one line that says what is
kept and how to resume, no screens of traceback (issue 28 item 17). That re-running
resumes is ``test_reliability.py::test_killed_client_resumes``'s."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import npt_dask as npt
from tests._clusters import recipe

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX")


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
            "npt_dask.cli",
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
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while not list(out.glob("npt_done/c/*")):  # polling: a chunk flagged done
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "no chunk was done in time"
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
    assert lines[0].startswith("npt project: error: Lost the connection to the dask scheduler")
    assert f"kept in {out}: run the same npt project command again to resume" in lines[0]
    import xarray as xr
    import zarr

    assert zarr.open_group(str(out), mode="r")["npt_done"][:].sum() >= 1  # what the line says
    assert "npt_incomplete" in xr.open_zarr(out).attrs  # kept, and not read as a result
