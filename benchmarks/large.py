"""Large-scale benchmarks: the out-of-core fit, projection, precision, scaling, cluster.

Targets (see the performance issue) and how each is measured here:

* ``fit60k``   -- full MNIST training split (n = 60,000, d = 784), RBF, r = 100,
  tol 1e-8: wall time, peak RSS, passes, seconds per pass, and seconds per
  pass over the pass's flops at the measured matrix-product rate. Then the
  10,000 test rows are projected: throughput as a fraction of that rate,
  counting ``2 m n (d + r)`` flops.
* ``float32``  -- the same fit with ``precision="float32"``: speed-up over the
  float64 fit of the same run and max relative eigenvalue difference.
* ``project15k`` -- n = 15,000: ``model.transform`` against
  ``KernelPCA.transform`` of the 10,000 test rows, same process.
* ``scaling``  -- fit time, passes, seconds per pass / n^2 and peak RSS for
  several n; plus covertype (n = 286,048, d = 10, r = 20) with ``--covertype``.
* ``cluster``  -- the same fit on the local threaded scheduler and on a
  LocalCluster of 2 single-threaded worker processes; task count per pass and
  bytes of numpy constants embedded in one pass's graph.

Every measurement runs in a fresh child process (peak RSS is its own).

    NPT_DATA_DIR=../shared/data python benchmarks/large.py fit60k float32 project15k
    NPT_DATA_DIR=../shared/data python benchmarks/large.py scaling --sizes 10000 20000 40000
    NPT_DATA_DIR=../shared/data python benchmarks/large.py covertype
    NPT_DATA_DIR=../shared/data python benchmarks/large.py cluster --n 20000
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
R = 100


def _fit(x: np.ndarray, gamma: float, **kw):
    import npt_dask as npt

    start = time.perf_counter()
    model = npt.fit(
        x, "rbf", gamma=gamma, n_components=kw.pop("r", R), solver="krylov", random_state=0, **kw
    )
    return model, time.perf_counter() - start


def fit_flops(n: int, d: int, b: int, chunk: int, passes: int, cached: float) -> float:
    """Flops of a whole fit: every kernel block once, uncached ones on every later pass."""
    kernel = 2.0 * d * (n * n + n * chunk) / 2
    products = 2.0 * (b + 1) * (n * n)
    return kernel * (1 + (passes - 1) * (1 - cached)) + products * passes


def _fit_report(model, seconds: float, rate: float) -> dict:
    """``rate`` is the measured matrix-product rate in GFLOP/s."""
    d = model.diagnostics
    n, dim = model.n_samples, model.n_features
    cached = d.cached_fraction
    flops = fit_flops(n, dim, d.block_size, model.chunk_size, d.passes, cached) / d.passes
    per_pass = seconds / d.passes
    return {
        "n": n,
        "d": dim,
        "r": model.n_components,
        "seconds": round(seconds, 2),
        "passes": d.passes,
        "seconds_per_pass": round(per_pass, 3),
        "mean_pass_flops": flops,
        "pass_time_over_ideal": round(per_pass / (flops / (rate * 1e9)), 3),
        "cached_fraction": round(cached, 3),
        "cache": d.cache,
        "max_residual": float(d.residuals.max()),
        "peak_rss_gib": round(peak_rss_gib(), 3),
        "precision": str(model.precision),
    }


def child_fit(n: int, precision: str, out: str, project: str, cache: str = "auto") -> dict:
    rate = gemm_rate("float64")
    x, gamma = mnist_train(n)
    model, seconds = _fit(x, gamma, precision=precision, cache=cache)
    report = _fit_report(model, seconds, rate)
    report["gemm_gflops_float64"] = round(rate, 1)
    np.save(out, model.eigenvalues)
    if project == "yes":
        from npt_dask.storage.datasets import data_path, load_npz

        z, _ = load_npz(
            data_path("mnist.npz"), rows=slice(60000, 70000), scale=255.0, dtype=x.dtype
        )
        start = time.perf_counter()
        model.transform_with_residual(z)
        t = time.perf_counter() - start
        flops = 2.0 * len(z) * n * (x.shape[1] + model.n_components)
        report["projection"] = {
            "m": len(z),
            "seconds": round(t, 2),
            "gflops": round(flops / t / 1e9, 1),
            "fraction_of_gemm_rate": round(flops / t / (rate * 1e9), 3),
        }
    return report


def child_project15k() -> dict:
    from sklearn.decomposition import KernelPCA

    from npt_dask.storage.datasets import data_path, load_npz

    x, gamma = mnist_train(15000)
    z, _ = load_npz(data_path("mnist.npz"), rows=slice(60000, 70000), scale=255.0)
    model, _ = _fit(x, gamma)
    kpca = KernelPCA(R, kernel="rbf", gamma=gamma, eigen_solver="randomized", random_state=0).fit(x)
    start = time.perf_counter()
    ours = model.transform(z)
    t_npt = time.perf_counter() - start
    start = time.perf_counter()
    ref = kpca.transform(z)
    t_sk = time.perf_counter() - start
    k = min(ours.shape[1], ref.shape[1], 20)
    corr = np.abs(
        np.sum(ours[:, :k] * ref[:, :k], axis=0)
        / np.linalg.norm(ours[:, :k], axis=0)
        / np.linalg.norm(ref[:, :k], axis=0)
    )
    return {
        "n": 15000,
        "m": len(z),
        "npt_transform_seconds": round(t_npt, 2),
        "sklearn_transform_seconds": round(t_sk, 2),
        "speedup": round(t_sk / t_npt, 2),
        "min_abs_correlation_first_20_components": float(corr.min()),
    }


def child_covertype() -> dict:
    from npt_dask.storage.datasets import data_path, load_npz

    rate = gemm_rate("float64")
    x, _ = load_npz(data_path("covertype_odds.npz"))
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    model, seconds = _fit(x, 1.0 / x.shape[1], r=20)
    report = _fit_report(model, seconds, rate)
    report["gram_gb_float64"] = round(x.shape[0] ** 2 * 8 / 1e9, 1)
    return report


def _graph_stats(model_x, gamma: float) -> dict:
    """Task count and embedded numpy bytes of one operator pass graph."""
    from dask.base import collections_to_expr

    from npt_dask.engine.operator import KernelOperator
    from npt_dask.kernels import KernelSpec

    op = KernelOperator(model_x, KernelSpec("rbf", gamma=gamma), cache="recompute")
    graph = op._pass_graph(np.zeros((op.n, R + 20)))
    dsk = dict(collections_to_expr(graph).__dask_graph__())
    seen: dict[int, int] = {}

    def walk(obj) -> None:
        if isinstance(obj, np.ndarray):
            seen[id(obj)] = obj.nbytes
        elif isinstance(obj, list | tuple | set):
            for item in obj:
                walk(item)
        elif isinstance(obj, dict):
            for item in obj.values():
                walk(item)
        else:
            for attr in ("value", "args", "kwargs", "container"):
                if hasattr(obj, attr):
                    walk(getattr(obj, attr))

    for task in dsk.values():
        walk(task)
    embedded = sum(seen.values())
    return {"tasks_per_pass": len(dsk), "embedded_numpy_bytes": embedded}


def child_cluster(n: int, mode: str) -> dict:
    import dask.array as da

    x, gamma = mnist_train(n)
    if mode == "threads":
        model, seconds = _fit(x, gamma, cache="recompute")
        stats = _graph_stats(da.from_array(x, chunks=(4096, -1)), gamma)
    else:
        from distributed import Client, LocalCluster

        with (
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
            ) as cluster,
            Client(cluster),
        ):
            model, seconds = _fit(x, gamma, cache="recompute")
            stats = _graph_stats(da.from_array(x, chunks=(4096, -1)).persist(), gamma)
    return {"mode": mode, "seconds": round(seconds, 2), "passes": model.diagnostics.passes, **stats}


def _child(argv: list[str]) -> None:
    name, *args = argv
    if name == "fit":
        result = child_fit(int(args[0]), *args[1:])
    elif name == "project15k":
        result = child_project15k()
    elif name == "covertype":
        result = child_covertype()
    else:
        result = child_cluster(int(args[0]), args[1])
    print(json.dumps(result))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "targets",
        nargs="+",
        choices=["fit60k", "float32", "project15k", "scaling", "covertype", "cluster"],
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 20000, 40000])
    parser.add_argument("--n", type=int, default=60000, help="rows for 'cluster'")
    parser.add_argument("--cache", default="auto", help="cache policy for 'scaling'")
    args = parser.parse_args()
    report: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "gemm_gflops": {
            "float64": gemm_rate("float64"),
            "float32": gemm_rate("float32"),
        },
    }
    with tempfile.TemporaryDirectory() as tmp:
        eig = {p: str(Path(tmp) / f"{p}.npy") for p in ("float64", "float32")}
        for target in args.targets:
            if target == "fit60k":
                report["fit60k"] = run_child(
                    HERE, ["fit", "60000", "float64", eig["float64"], "yes"]
                )
            elif target == "float32":
                report["float32"] = run_child(
                    HERE, ["fit", "60000", "float32", eig["float32"], "no"]
                )
                if Path(eig["float64"]).exists() and Path(eig["float32"]).exists():
                    a, b = np.load(eig["float64"]), np.load(eig["float32"])
                    report["float32"]["max_rel_eigenvalue_diff_vs_float64"] = float(
                        np.max(np.abs(a - b) / a)
                    )
                    report["float32"]["speedup_vs_float64"] = (
                        report["fit60k"]["seconds"] / report["float32"]["seconds"]
                    )
            elif target == "project15k":
                report["project15k"] = run_child(HERE, ["project15k"])
            elif target == "scaling":
                report["scaling"] = [
                    run_child(
                        HERE,
                        ["fit", str(n), "float64", str(Path(tmp) / f"s{n}.npy"), "no", args.cache],
                    )
                    for n in args.sizes
                ]
            elif target == "covertype":
                report["covertype"] = run_child(HERE, ["covertype"], timeout=7200)
            else:
                rows = [
                    run_child(HERE, ["cluster", str(args.n), m]) for m in ("threads", "distributed")
                ]
                report["cluster"] = {"rows": rows}
                if all("seconds" in r for r in rows):
                    report["cluster"]["distributed_over_threads"] = (
                        rows[1]["seconds"] / rows[0]["seconds"]
                    )
            print(json.dumps({target: report[target]}), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
