"""Warm start benchmark: an exact fit started from a landmark model, against a cold fit.

Full MNIST training rows (n = 60,000, pixels in [0, 1], RBF gamma = 1/(d var),
r = 100, tol 1e-8), in one run and in separate processes: the cold exact fit,
then a landmark model (m rows at full landmark rank) and the exact fit
started from its coordinates of X. Reports passes over the full kernel,
seconds of each part and the ratio (warm total incl. the landmark model) /
cold. Eigenvalues of the two exact fits are compared.

    NPT_DATA_DIR=../shared/data python benchmarks/warmstart.py [--n 60000] [--m 2000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import gemm_rate, mnist_train, peak_rss_gib, run_child

HERE = Path(__file__).resolve()


def _child(args: list[str]) -> None:
    import npt_dask as npt

    kind, n, r, m = args[0], int(args[1]), int(args[2]), int(args[3])
    x, gamma = mnist_train(n)
    out: dict = {}
    t0 = time.perf_counter()
    if kind == "warm":
        guide = npt.fit(x, "rbf", gamma=gamma, landmarks=m, n_components=None, random_state=0)
        out["landmark_seconds"] = time.perf_counter() - t0
        out["certificate_relative_mean"] = guide.diagnostics.landmarks["certificate"][
            "relative_mean"
        ]
        t1 = time.perf_counter()
        model = npt.fit(x, "rbf", gamma=gamma, n_components=r, solver="krylov", start=guide,
                        random_state=0)  # fmt: skip
        out["exact_seconds"] = time.perf_counter() - t1
    else:
        model = npt.fit(x, "rbf", gamma=gamma, n_components=r, solver="krylov", random_state=0)
    out.update(
        seconds=time.perf_counter() - t0,
        passes=model.diagnostics.passes,
        converged=model.diagnostics.converged,
        max_residual=float(np.max(model.diagnostics.residuals)),
        block_size=model.diagnostics.block_size,
        eigenvalues=[float(v) for v in model.eigenvalues],
        peak_rss_gib=round(peak_rss_gib(), 3),
    )
    print(json.dumps(out))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=60000)
    parser.add_argument("--r", type=int, default=100)
    parser.add_argument("--m", type=int, default=2000)
    args = parser.parse_args()
    report = {"gemm_gflops_float64": round(gemm_rate("float64"), 1), "n": args.n, "r": args.r,
              "landmarks": args.m}  # fmt: skip
    common = [str(args.n), str(args.r), str(args.m)]
    cold = run_child(HERE, ["cold", *common], timeout=7200)
    warm = run_child(HERE, ["warm", *common], timeout=7200)
    if "eigenvalues" in cold and "eigenvalues" in warm:
        a, b = np.array(cold.pop("eigenvalues")), np.array(warm.pop("eigenvalues"))
        report["max_relative_eigenvalue_difference"] = float(np.max(np.abs(a - b)) / a[0])
        report["warm_over_cold_time"] = warm["seconds"] / cold["seconds"]
    report.update(cold=cold, warm=warm)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
