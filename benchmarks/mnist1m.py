"""The million-row job: the landmark route on deformed MNIST, tested on the true test rows.

The training rows are a zarr store written once by
``npt_dask.datasets.write_deformed_mnist`` (the 60,000 MNIST training images
and their seeded affine/elastic deformations; ``--make`` writes it). Each
size runs in its own process, end to end with the data already in zarr:
``npt.fit(X, landmarks=m, labels=y, precision="float32")`` reading X chunk
by chunk (the landmark rows once, then the one training pass: certificate
and ridge moments), ``RidgeClassifier.fit_moments``, then the 10,000 MNIST
test rows projected and classified. Reported per size: accuracy, seconds per
stage, the route's floating-point work at the GEMM rates measured at
start-up, and peak RSS (the whole process: driver and the local threads'
tasks) -- flat in n if nothing on the driver grows with n.

    NPT_DATA_DIR=../shared/data python benchmarks/mnist1m.py --store results/mnist1m.zarr \
        [--make] [--sizes 250000,500000,1000000] [--m 10000] [--r full]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import gemm_rate, peak_rss_gib, run_child
from benchmarks.landmark_route import flops, ideal_seconds

HERE = Path(__file__).resolve()
GAMMA = 0.02
ALPHAS = np.logspace(-6, 0, 7)


def _open(store: str, n: int) -> tuple[Any, Any]:
    import xarray as xr

    ds = xr.open_zarr(store)
    x = ds["x"].data[:n]
    label = "y" if "y" in ds else "label"
    return x, ds[label].data[:n]


def _child(store: str, n: int, m: int, r: int | None, precision: str) -> dict:
    import npt_dask as npt
    from npt_dask.datasets import data_path, load_npz
    from npt_dask.methods import RidgeClassifier

    xte, yte = load_npz(data_path("mnist.npz"), rows=slice(60000, 70000), scale=255.0,
                        dtype=np.float32)  # fmt: skip
    x, y = _open(store, n)
    t0 = time.perf_counter()
    model = npt.fit(x.astype(precision), "rbf", gamma=GAMMA, landmarks=m, n_components=r,
                    labels=y, precision=precision, random_state=0)  # fmt: skip
    t1 = time.perf_counter()
    clf = RidgeClassifier(alpha=ALPHAS).fit_moments(model.moments)
    t2 = time.perf_counter()
    acc = float(np.mean(clf.predict(model.transform(xte.astype(precision))) == yte))
    t3 = time.perf_counter()
    cert = model.diagnostics.landmarks["certificate"]
    solve = float(model.diagnostics.seconds)
    return {
        "n": n,
        "m": m,
        "r": model.n_components,
        "accuracy": acc,
        "seconds": t3 - t0,
        "stages": {
            "landmark_solve": solve,
            "landmark_rows_and_training_pass": t1 - t0 - solve,
            "ridge": t2 - t1,
            "test": t3 - t2,
        },
        "alpha": float(clf.alpha_),
        "certificate_mean": cert["mean"],
        "certificate_relative_mean": cert["relative_mean"],
        "peak_rss_gib": round(peak_rss_gib(), 2),
    }


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        store, n, m, r, precision = sys.argv[2:7]
        out = _child(store, int(n), int(m), None if r == "full" else int(r), precision)
        print(json.dumps(out))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True, help="zarr store of the training rows")
    parser.add_argument("--make", action="store_true", help="write the store first")
    parser.add_argument("--sizes", default="1000000")
    parser.add_argument("--m", type=int, default=10000)
    parser.add_argument("--r", default="full")
    parser.add_argument("--precision", default="float32")
    args = parser.parse_args()
    report: dict[str, Any] = {}
    if args.make:
        from npt_dask.datasets import write_deformed_mnist

        t0 = time.perf_counter()
        write_deformed_mnist(args.store, n_rows=max(int(s) for s in args.sizes.split(",")))
        report["generation_seconds"] = time.perf_counter() - t0
    rates = {"float64": gemm_rate("float64"), "float32": gemm_rate("float32")}
    rates["prec"] = rates[args.precision]
    report["gemm_gflops"] = {k: round(v, 1) for k, v in rates.items() if k != "prec"}
    runs = []
    for n in (int(s) for s in args.sizes.split(",")):
        res = run_child(HERE, [args.store, str(n), str(args.m), args.r, args.precision],
                        timeout=4 * 3600)  # fmt: skip
        if "r" in res:
            work = flops(n, 10000, 784, args.m, res["r"], 10)
            res["ideal_seconds"] = round(ideal_seconds(work, rates), 1)
            res["over_ideal"] = round(res["seconds"] / res["ideal_seconds"], 3)
        runs.append(res)
        print(json.dumps(res), file=sys.stderr, flush=True)
    report["runs"] = runs
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
