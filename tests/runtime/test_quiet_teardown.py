"""A correct run on an embedded LocalCluster ends quietly: the workers are given time to
stop before the scheduler closes, so a busy machine's slow worker exit prints no "Worker
process still alive after 4.0 seconds, killing" and no CommClosedError traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SLOW_EXIT = """
import time

def dask_setup(worker):
    pass

def dask_teardown(worker):
    time.sleep(6)  # a worker that takes 6 s to stop, as on a loaded machine
"""

CONFIG = """
name = "teardown"

[data]
source = "moons"
n_samples = 200
noise = 0.2
test_fraction = 0.25

[model]
kernel = "rbf"
gamma = 2.0
n_components = 5
chunk_size = 50

[[methods]]
name = "kpca"

[cluster]
n_workers = 2
threads_per_worker = 1

[output]
plots = false
"""


def test_npt_run_on_a_local_cluster_ends_without_tracebacks(tmp_path):
    (tmp_path / "npt_slow_exit.py").write_text(textwrap.dedent(SLOW_EXIT))
    (tmp_path / "job.toml").write_text(CONFIG)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    env["DASK_DISTRIBUTED__WORKER__PRELOAD"] = '["npt_slow_exit"]'
    cmd = [sys.executable, "-m", "npt_dask", "run", str(tmp_path / "job.toml"), "--quiet",
           "--output", str(tmp_path / "out")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["report"].endswith("report.json")
    assert "Traceback" not in proc.stderr
    assert "CommClosedError" not in proc.stderr
    assert "still alive" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr  # nothing at all after a correct quiet run
