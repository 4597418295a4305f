"""A dask-cuda ``LocalCUDACluster`` on this machine: one worker per GPU, kept up until Ctrl-C.

Needs a GPU extra (CuPy, dask-cuda and RMM; ``gpu-cu12`` for CUDA 12 drivers)::

    pip install 'npt-dask[gpu]'
    python cluster/gpu/cuda_cluster.py --scheduler-file /tmp/npt-gpu.json --rmm-pool-size 60GB
    npt fit train.npy --device gpu --n-components 100 --out model.zarr \\
        --scheduler-file /tmp/npt-gpu.json

Each worker is a process that sees one GPU first in its ``CUDA_VISIBLE_DEVICES``
(``--devices 0,1`` picks which), runs one thread, and takes an RMM memory pool of
``--rmm-pool-size`` on its GPU at start-up, which CuPy then allocates from. Everything
binds to 127.0.0.1. The same cluster from Python is
``npt.connect(gpu=True, rmm_pool_size="60GB")``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["main", "make_client"]


def make_client(devices: str | None = None, rmm_pool_size: str | None = None) -> Any:
    """A client owning a LocalCUDACluster (closing it stops the workers)."""
    import npt_dask as npt

    return npt.connect(gpu=True, cuda_visible_devices=devices, rmm_pool_size=rmm_pool_size)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler-file", required=True, help="where to write its address")
    parser.add_argument("--devices", help="GPUs to use, e.g. 0,1 (default: all visible)")
    parser.add_argument("--rmm-pool-size", help="RMM pool per worker on its GPU, e.g. 60GB")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from npt_dask.errors import NPTError

    try:
        client = make_client(args.devices, args.rmm_pool_size)
    except NPTError as exc:  # no dask-cuda, no GPU: one line, not a traceback
        print(f"cluster/gpu/cuda_cluster.py: error: {exc}", file=sys.stderr)
        return 2
    with client:
        client.write_scheduler_file(args.scheduler_file)
        workers = client.scheduler_info()["workers"]
        print(
            f"{len(workers)} GPU worker(s) at {client.scheduler.address}; "
            f"scheduler file {args.scheduler_file}; Ctrl-C stops them",
            file=sys.stderr,
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
