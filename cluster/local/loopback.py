"""A loopback Dask cluster from the command line tools: ``dask scheduler`` + ``dask worker``.

Starts one scheduler and N workers as separate process groups, all bound to
127.0.0.1 (no dashboards), writes a scheduler file, and stops everything on
exit. Used by npt-dask's reliability tests; runnable on its own::

    python cluster/local/loopback.py --workers 2 --scheduler-file /tmp/npt-scheduler.json
    npt project model.zarr test.npy --out proj.zarr --scheduler-file /tmp/npt-scheduler.json

With ``--tls-dir`` (certificates from ``cluster/tls/make_certs.py``) the
scheduler and workers speak ``tls://`` and require client certificates.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["LoopbackCluster", "main"]

HOST = "127.0.0.1"


def _dask_command() -> list[str]:
    """``dask`` beside this interpreter, else on PATH (the CLI of distributed)."""
    beside = Path(sys.executable).with_name("dask")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("dask")
    if found is None:
        raise FileNotFoundError("the 'dask' command was not found; pip install distributed")
    return [found]


def _tls_args(tls_dir: Path | None, role: str) -> list[str]:
    if tls_dir is None:
        return []
    return [
        "--tls-ca-file", str(tls_dir / "ca.pem"),
        "--tls-cert", str(tls_dir / f"{role}.pem"),
        "--tls-key", str(tls_dir / f"{role}-key.pem"),
    ]  # fmt: skip


class LoopbackCluster:
    """One ``dask scheduler`` and ``n_workers`` ``dask worker`` processes on 127.0.0.1.

    Parameters
    ----------
    n_workers : int
        Worker processes (each with its nanny, in its own process group).
    workdir : path, optional
        Scheduler file, logs and spill directories; default a new temporary directory.
    threads_per_worker : int
        ``--nthreads`` of each worker.
    memory_limit : str
        ``--memory-limit`` of each worker (e.g. ``"400MiB"``, ``"auto"``).
    tls_dir : path, optional
        Directory with ``ca.pem``, ``scheduler.pem``/``-key.pem`` and
        ``worker.pem``/``-key.pem``: the cluster then speaks ``tls://`` only.
    env : mapping, optional
        Extra environment of every process (e.g. ``DASK_DISTRIBUTED__...``).
    timeout : float
        Seconds to wait for the scheduler and each worker to come up.
    idle_timeout : str, optional
        ``dask scheduler --idle-timeout``: the scheduler (and then its workers)
        exit after this long without work, should the owner die without
        cleaning up.
    """

    def __init__(
        self,
        n_workers: int = 2,
        *,
        workdir: str | os.PathLike | None = None,
        threads_per_worker: int = 1,
        memory_limit: str = "auto",
        tls_dir: str | os.PathLike | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        idle_timeout: str | None = None,
    ) -> None:
        self.n_workers = n_workers
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="npt-loopback-"))
        self.threads_per_worker = threads_per_worker
        self.memory_limit = memory_limit
        self.tls_dir = None if tls_dir is None else Path(tls_dir)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        self.scheduler: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self._started = 0

    @property
    def scheduler_file(self) -> Path:
        """The JSON file ``dask scheduler --scheduler-file`` writes."""
        return self.workdir / "scheduler.json"

    @property
    def address(self) -> str:
        """The scheduler's address (``tcp://127.0.0.1:PORT`` or ``tls://...``)."""
        return json.loads(self.scheduler_file.read_text())["address"]

    def _spawn(self, args: Sequence[str], log: Path) -> subprocess.Popen:
        with open(log, "wb") as out:
            return subprocess.Popen(
                [*_dask_command(), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.workdir,
                start_new_session=True,  # its own process group: killpg reaches the nanny's child
            )

    def _wait_for(self, log: Path, text: str, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if log.exists() and text in log.read_text(errors="replace"):
                return
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"{log.name}: no {text!r} within {self.timeout}s:\n{log.read_text()}")

    def _wait_for_scheduler_file(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError, KeyError):
                self.address  # noqa: B018  (parses the file)
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.scheduler_file} was not written within {self.timeout}s")

    def start(self) -> LoopbackCluster:
        """Start the scheduler, then the workers; return once all are registered."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.scheduler_file.unlink(missing_ok=True)
        protocol = "tls" if self.tls_dir else "tcp"
        log = self.workdir / "scheduler.log"
        idle = ["--idle-timeout", self.idle_timeout] if self.idle_timeout else []
        self.scheduler = self._spawn(
            ["scheduler", "--host", HOST, "--port", "0", "--protocol", protocol,
             "--no-dashboard", "--dashboard-address", f"{HOST}:0",
             "--scheduler-file", str(self.scheduler_file), *idle,
             *_tls_args(self.tls_dir, "scheduler")],
            log,
        )  # fmt: skip
        self._wait_for(log, "Scheduler at:", self.scheduler)
        self._wait_for_scheduler_file()
        for _ in range(self.n_workers):
            self.add_worker()
        return self

    def add_worker(self) -> subprocess.Popen:
        """Start one more worker (with its nanny) and wait until it is registered."""
        name = f"w{self._started}"
        self._started += 1
        log = self.workdir / f"{name}.log"
        proc = self._spawn(
            ["worker", self.address, "--host", HOST, "--name", name, "--nworkers", "1",
             "--nthreads", str(self.threads_per_worker), "--memory-limit", self.memory_limit,
             "--local-directory", str(self.workdir / name),
             "--no-dashboard", "--dashboard-address", f"{HOST}:0",
             "--death-timeout", "30", *_tls_args(self.tls_dir, "worker")],
            log,
        )  # fmt: skip
        self.workers.append(proc)
        self._wait_for(log, "Registered to:", proc)
        return proc

    def live_workers(self) -> list[subprocess.Popen]:
        """Worker process groups still running."""
        return [p for p in self.workers if p.poll() is None]

    def kill_worker(self, index: int = 0) -> None:
        """SIGKILL live worker ``index``'s process group (nanny and worker: no restart)."""
        proc = self.live_workers()[index]
        _killpg(proc, signal.SIGKILL)
        proc.wait(timeout=self.timeout)

    def pids(self) -> list[int]:
        """Process ids of every live process of the cluster (nannies' children included)."""
        import psutil

        out = []
        for proc in [self.scheduler, *self.workers]:
            if proc is None or proc.poll() is not None:
                continue
            with contextlib.suppress(psutil.Error):
                parent = psutil.Process(proc.pid)
                out += [parent.pid, *(c.pid for c in parent.children(recursive=True))]
        return out

    def close(self) -> None:
        """SIGTERM every process group, then SIGKILL what is left."""
        procs = [p for p in [*self.workers, self.scheduler] if p is not None]
        for proc in procs:
            _killpg(proc, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            _killpg(proc, signal.SIGKILL)  # also reaches children left in the group
            proc.wait(timeout=10)

    def __enter__(self) -> LoopbackCluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _killpg(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # start_new_session: the group id is the leader's pid


def main(argv: Sequence[str] | None = None) -> int:
    """Start a loopback cluster and keep it up until Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--threads", type=int, default=1, help="threads per worker")
    parser.add_argument("--memory-limit", default="auto", help="per worker, e.g. 2GiB")
    parser.add_argument("--workdir", help="logs and spill directories (default: a temp dir)")
    parser.add_argument("--scheduler-file", help="also copy the scheduler file here")
    parser.add_argument("--tls-dir", help="certificates from cluster/tls/make_certs.py")
    args = parser.parse_args(argv)
    cluster = LoopbackCluster(
        args.workers,
        workdir=args.workdir,
        threads_per_worker=args.threads,
        memory_limit=args.memory_limit,
        tls_dir=args.tls_dir,
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with cluster:
        if args.scheduler_file:
            shutil.copy(cluster.scheduler_file, args.scheduler_file)
        print(f"scheduler {cluster.address}  (scheduler file {cluster.scheduler_file})")
        print(f"workers {args.workers}, logs in {cluster.workdir}; Ctrl-C stops the cluster")
        sys.stdout.flush()
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":  # workers spawn: keep the entry point behind the guard
    sys.exit(main())
