"""Write the million-row deformed-MNIST store: MNIST's 60,000 training digits + deformations.

Each task of an embedded LocalCluster (``--workers`` single-threaded processes;
``--workers 0``: local threads) generates and writes its own chunk of rows;
the store is renamed into place when complete. Prints JSON: rows, seconds,
rows per second, store size. The work is image resampling and Gaussian
smoothing, no matrix product (``gemm_free``), so the rate is not compared
with a GEMM rate.

    NPT_DATA_DIR=../shared/data python benchmarks/make_mnist1m.py --out results/mnist1m.zarr

The store is read by ``pipelines/mnist1m.toml``; ``results/`` is not committed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

from npt_dask.storage.datasets import write_deformed_mnist


def _size_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/mnist1m.zarr"))
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk-size", type=int, default=10_000)
    parser.add_argument("--source", default="mnist.npz", help="relative: in $NPT_DATA_DIR")
    parser.add_argument("--workers", type=int, default=2, help="0: local threads, no cluster")
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.workers > 0:
            from npt_dask.runtime.cluster import connect

            client = stack.enter_context(connect(n_workers=args.workers, threads_per_worker=1))
            stack.enter_context(client.as_current())
        start = time.perf_counter()
        path = write_deformed_mnist(
            args.out, args.rows, args.seed, source=args.source,
            chunk_size=args.chunk_size, overwrite=args.overwrite,
        )  # fmt: skip
        seconds = time.perf_counter() - start
    report = {
        "rows": args.rows,
        "seconds": round(seconds, 1),
        "rows_per_s": round(args.rows / seconds),
        "workers": args.workers,
        "chunk_size": args.chunk_size,
        "seed": args.seed,
        "store": str(path),
        "store_gib": round(_size_bytes(path) / 2**30, 3),
        "gemm_free": True,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
