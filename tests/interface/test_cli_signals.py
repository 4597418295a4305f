"""SIGTERM (a ``kill``, a batch system's time limit) stops a checkpointed ``npt ridge`` as
Ctrl-C does: one line saying what is kept and how to resume, status 128 + signal."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_under_a_checkpointed_npt_ridge_says_what_is_kept(tmp_path, signum):
    rng = np.random.default_rng(6)
    x = rng.normal(size=(3000, 8))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", (x[:, 0] + 0.3 * x[:, 1] > 0).astype(int))
    checkpoint = tmp_path / "cg.npz"
    cmd = [
        sys.executable, "-m", "npt_dask", "ridge", str(tmp_path / "x.npy"),
        "--labels", str(tmp_path / "y.npy"), "--kernel", "rbf", "--gamma", "0.05",
        "--alpha", "1e-6", "--solver", "cg", "--tol", "1e-12", "--max-iter", "100000",
        "--chunk-size", "500", "--checkpoint", str(checkpoint), "--quiet",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not checkpoint.exists():  # an iteration's state is written
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no checkpoint was written in time"
            time.sleep(0.05)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, err
    assert out == ""  # no result: the fit did not finish
    lines = [line for line in err.splitlines() if line.strip()]
    by = "" if signum == signal.SIGINT else " by SIGTERM"
    assert lines == [
        f"npt ridge: interrupted{by}; CG's state is kept in {checkpoint}: run the same "
        "command again to resume from it."
    ]
