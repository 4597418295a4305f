"""Fit benchmark: npt.fit against scikit-learn's randomized KernelPCA, same run.

MNIST training subsets (pixels in [0, 1], RBF with gamma = 1 / (d var),
r = 100). Every method runs in its own process so its peak memory is its own.
The reference eigenvalues come from ARPACK (``scipy.sparse.linalg.eigsh``,
tol 1e-14) on the explicitly centred Gram, independent of both methods.
Prints one JSON document; speeds are reported as ratios to scikit-learn.

    NPT_DATA_DIR=../shared/data python benchmarks/fit.py [--sizes 10000 15000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import gemm_rate, mnist_train, peak_rss_gib, run_child

HERE = Path(__file__).resolve()


def _reference(n: int, r: int, out: Path) -> dict:
    from scipy.sparse.linalg import eigsh
    from sklearn.metrics.pairwise import rbf_kernel

    x, gamma = mnist_train(n)
    k = rbf_kernel(x, gamma=gamma)
    m = k.mean(axis=1)
    k -= m[:, None]
    k -= m[None, :]
    k += m.mean()
    values = np.sort(eigsh(k, k=r, which="LA", tol=1e-14)[0])[::-1]
    np.save(out, values)
    return {"ok": True}


def _npt(n: int, r: int, out: Path, cache: str, precision: str) -> dict:
    import npt_dask as npt

    x, gamma = mnist_train(n)
    start = time.perf_counter()
    model = npt.fit(
        x,
        "rbf",
        gamma=gamma,
        n_components=r,
        solver="krylov",
        cache=cache,
        precision=precision,
        random_state=0,
    )
    seconds = time.perf_counter() - start
    np.save(out, model.eigenvalues)
    d = model.diagnostics
    return {
        "seconds": seconds,
        "peak_rss_gib": peak_rss_gib(),
        "passes": d.passes,
        "cache": d.cache,
        "max_residual": float(d.residuals.max()),
    }


def _sklearn(n: int, r: int, out: Path) -> dict:
    from sklearn.decomposition import KernelPCA

    x, gamma = mnist_train(n)
    start = time.perf_counter()
    kpca = KernelPCA(r, kernel="rbf", gamma=gamma, eigen_solver="randomized", random_state=0).fit(x)
    seconds = time.perf_counter() - start
    np.save(out, kpca.eigenvalues_)
    n_iter = 7 if r < 0.1 * n else 4  # randomized_svd's iterated_power="auto"
    return {"seconds": seconds, "peak_rss_gib": peak_rss_gib(), "passes": 2 * n_iter + 2}


def _child(argv: list[str]) -> None:
    method, n, r, out, *rest = argv
    fn = {"reference": _reference, "npt": _npt, "sklearn": _sklearn}[method]
    print(json.dumps(fn(int(n), int(r), Path(out), *rest)))


def _max_rel_error(values: np.ndarray, ref: np.ndarray) -> float:
    k = min(len(values), len(ref))
    return float(np.max(np.abs(values[:k] - ref[:k]) / ref[:k]))


def bench_size(n: int, r: int, tmp: Path, cache: str, precision: str) -> dict:
    files = {m: tmp / f"{m}-{n}.npy" for m in ("reference", "npt", "sklearn")}
    rows = {
        "reference": run_child(HERE, ["reference", str(n), str(r), str(files["reference"])]),
        "npt": run_child(HERE, ["npt", str(n), str(r), str(files["npt"]), cache, precision]),
        "sklearn": run_child(HERE, ["sklearn", str(n), str(r), str(files["sklearn"])]),
    }
    if files["reference"].exists():
        ref = np.load(files["reference"])
        for m in ("npt", "sklearn"):
            if files[m].exists():
                rows[m]["max_rel_eigenvalue_error"] = _max_rel_error(np.load(files[m]), ref)
    if "seconds" in rows["npt"] and "seconds" in rows["sklearn"]:
        rows["speedup_vs_sklearn"] = rows["sklearn"]["seconds"] / rows["npt"]["seconds"]
        rows["memory_ratio_vs_sklearn"] = (
            rows["npt"]["peak_rss_gib"] / rows["sklearn"]["peak_rss_gib"]
        )
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 15000])
    parser.add_argument("--components", type=int, default=100)
    parser.add_argument("--cache", default="auto")
    parser.add_argument("--precision", default="float64")
    args = parser.parse_args()
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "gemm_gflops_float64": gemm_rate(),
        "components": args.components,
        "cache": args.cache,
        "precision": args.precision,
        "sizes": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            report["sizes"][str(n)] = bench_size(
                n, args.components, Path(tmp), args.cache, args.precision
            )
            print(json.dumps({str(n): report["sizes"][str(n)]}), file=sys.stderr)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
