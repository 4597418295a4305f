"""Fit and project with npt-dask on SLURM or PBS workers through dask-jobqueue.

Run on a login node (or in a small batch job), in an environment with
npt-dask and dask-jobqueue installed::

    pip install npt-dask dask-jobqueue
    DASK_CONFIG=cluster/jobqueue python cluster/jobqueue/run.py slurm \\
        --jobs 4 --train train.npy --test test.npy --n-components 100 --out results/

The scheduler runs in this process; workers are batch jobs configured by
``jobqueue.yaml``. With ``--tls-dir`` (from ``cluster/tls/make_certs.py``)
every connection is mutual TLS.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "make_cluster"]


def make_cluster(system: str, tls_dir: str | None = None) -> Any:
    """A dask-jobqueue cluster (``SLURMCluster`` or ``PBSCluster``) from the dask config."""
    import dask_jobqueue

    cls = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster}[system]
    if tls_dir is None:
        return cls()
    from distributed import Security

    certs = Path(tls_dir)
    security = Security(
        tls_ca_file=str(certs / "ca.pem"),
        tls_scheduler_cert=str(certs / "scheduler.pem"),
        tls_scheduler_key=str(certs / "scheduler-key.pem"),
        tls_worker_cert=str(certs / "worker.pem"),
        tls_worker_key=str(certs / "worker-key.pem"),
        tls_client_cert=str(certs / "client.pem"),
        tls_client_key=str(certs / "client-key.pem"),
        require_encryption=True,
    )
    return cls(protocol="tls://", security=security)


def _tls(tls_dir: str | None) -> Any:
    if tls_dir is None:
        return None
    from npt_dask.runtime.cluster import TLSConfig

    certs = Path(tls_dir)
    return TLSConfig(
        str(certs / "ca.pem"), str(certs / "client.pem"), str(certs / "client-key.pem")
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Start the batch cluster, fit, save, project, and stop the cluster."""
    import npt_dask as npt

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("system", choices=["slurm", "pbs"])
    parser.add_argument("--jobs", type=int, default=2, help="batch jobs (one worker each)")
    parser.add_argument("--train", required=True, help=".npy training rows")
    parser.add_argument("--test", required=True, help=".npy rows to project")
    parser.add_argument("--kernel", default="rbf")
    parser.add_argument("--gamma", type=float)
    parser.add_argument("--n-components", type=int, required=True)
    parser.add_argument("--out", required=True, help="directory for model.zarr and proj.zarr")
    parser.add_argument("--tls-dir", help="certificates from cluster/tls/make_certs.py")
    args = parser.parse_args(argv)

    out = Path(args.out)
    with make_cluster(args.system, args.tls_dir) as cluster:
        cluster.scale(jobs=args.jobs)
        with npt.connect(cluster.scheduler_address, tls=_tls(args.tls_dir), timeout=60) as client:
            client.wait_for_workers(1, timeout=3600)  # batch queues can be slow
            data = npt.projection.open_data(args.train)
            model = npt.fit(data, args.kernel, gamma=args.gamma, n_components=args.n_components)
            model = npt.load(model.save(out / "model.zarr"))  # projections stream from the store
            npt.project(model, args.test, out / "proj.zarr")  # resumable: rerun after a failure
    print(f"model {out / 'model.zarr'}, projection {out / 'proj.zarr'}")
    return 0


if __name__ == "__main__":  # workers and spawned helpers import this file: keep the guard
    sys.exit(main())
