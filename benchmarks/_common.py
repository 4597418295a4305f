"""Helpers shared by the benchmark scripts: data, GEMM rate, child processes."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from npt_dask.storage.datasets import data_path, load_npz

__all__ = ["gemm_rate", "mnist_train", "peak_rss_gib", "run_child"]


def mnist_train(n: int) -> tuple[np.ndarray, float]:
    """First n MNIST training rows in [0, 1] and gamma = 1 / (d * var)."""
    x, _ = load_npz(data_path("mnist.npz"), rows=slice(0, n), scale=255.0)
    return x, 1.0 / (x.shape[1] * x.var())


def gemm_rate(dtype: str = "float64", size: int = 4096, repeat: int = 3) -> float:
    """Measured dense matrix-product rate of this machine, GFLOP/s (best of repeat)."""
    rng = np.random.default_rng(0)
    a = rng.random((size, size), dtype=np.float64).astype(dtype)
    b = rng.random((size, size), dtype=np.float64).astype(dtype)
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        np.dot(a, b)
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best / 1e9


def peak_rss_gib() -> float:
    """Peak resident memory of this process so far, GiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_child(script: Path, args: list[str], timeout: float = 3600) -> dict:
    """Run ``script --child ...`` in a fresh process and parse its last JSON line."""
    proc = subprocess.run(
        [sys.executable, str(script), "--child", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": f"exit {proc.returncode}", "stderr": proc.stderr[-2000:]}
    return json.loads(lines[-1])
