"""What this machine's BLAS gives the products a Krylov pass is made of.

A pass over kept kernel blocks multiplies each ``c x c`` block by two skinny
``c x b`` panels (:func:`npt_dask.engine.blocks.block_products`). Its speed is set by how well BLAS
runs such skinny products, not by the square-product rate the other
benchmarks quote. This script measures, in one process:

* the square ``4096^3`` product on one thread and on all threads;
* ``B @ V`` and ``V^T @ B`` for a 4096 x 4096 block and widths b;
* the fused ``block_products`` (both products in one sweep over B);
* a streaming read of the same block (``B.sum()``), the memory-bound floor.

Every rate is also printed as a fraction of the one-thread square rate, so
figures from different machines compare.

    python benchmarks/blas.py [--widths 20 40 ...] [--size 4096] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZE = 4096

SMOKE_ARGS = ["--size", "64", "--widths", "4", "--repeat", "1"]
"""A tiny run (``tests/architecture/test_benchmarks_smoke.py``): the code paths, not the figures."""


def _best(func, repeat: int) -> float:
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best


def measure(widths: list[int], size: int = SIZE, repeat: int = 3) -> dict:
    from threadpoolctl import threadpool_limits

    from npt_dask.engine.blocks import block_products

    def best(func) -> float:
        return _best(func, repeat)

    rng = np.random.default_rng(0)
    block = rng.random((size, size))
    square = 2.0 * size**3
    report: dict = {"block": size, "all_threads_square_gflops": None, "widths": {}}
    report["all_threads_square_gflops"] = round(square / best(lambda: block @ block) / 1e9, 1)
    with threadpool_limits(1):
        one = square / best(lambda: block @ block) / 1e9
        report["one_thread_square_gflops"] = round(one, 1)
        read = best(lambda: block.sum())
        report["stream_read_gb_per_s"] = round(block.nbytes / read / 1e9, 1)
        for b in widths:
            v_i, v_j = rng.random((size, b)), rng.random((size, b))
            flops = 2.0 * size * size * b
            fused = best(lambda v_i=v_i, v_j=v_j: block_products(block, v_i, v_j, False))
            rates = {
                "B@V": flops / best(lambda v_j=v_j: block @ v_j),
                "VT@B": flops / best(lambda v_i=v_i: v_i.T @ block),
                "fused_pair": 2 * flops / fused,
            }
            report["widths"][b] = {
                name: {"gflops": round(r / 1e9, 1), "of_square": round(r / 1e9 / one, 3)}
                for name, r in rates.items()
            }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[20, 40, 60, 100, 160])
    parser.add_argument("--size", type=int, default=SIZE, help="rows of the square block")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    report = {
        "date": time.strftime("%Y-%m-%d"),
        **measure(args.widths, args.size, args.repeat),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
