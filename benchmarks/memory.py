"""Peak memory of an out-of-core fit: MNIST n = 20,000, chunk_size 2,048, r = 100.

A float64 Gram of 20,000 rows is 3.2 GB; the fit must stay well under it.
Prints JSON: wall time, passes, peak resident memory of this process.

    NPT_DATA_DIR=../shared/data python benchmarks/memory.py [--n 20000] [--chunk-size 2048]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

import npt_dask as npt
from npt_dask.storage.datasets import data_path, load_npz


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--chunk-size", type=int, default=2048)
    parser.add_argument("--components", type=int, default=100)
    parser.add_argument("--cache", default="recompute")
    args = parser.parse_args()
    x, _ = load_npz(data_path("mnist.npz"), rows=slice(0, args.n), scale=255.0)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    gamma = 1.0 / (x.shape[1] * x.var())
    start = time.perf_counter()
    model = npt.fit(
        x,
        "rbf",
        gamma=gamma,
        n_components=args.components,
        solver="krylov",
        chunk_size=args.chunk_size,
        cache=args.cache,
        random_state=0,
    )
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        json.dumps(
            {
                "n": args.n,
                "chunk_size": args.chunk_size,
                "r": model.n_components,
                "cache": model.diagnostics.cache,
                "passes": model.diagnostics.passes,
                "seconds": round(seconds, 2),
                "peak_rss_gib": round(peak, 3),
                "rss_after_loading_data_gib": round(base, 3),
                "float64_gram_gib": round(args.n**2 * 8 / 2**30, 3),
                "max_residual": float(np.max(model.diagnostics.residuals)),
            }
        )
    )


if __name__ == "__main__":
    main()
