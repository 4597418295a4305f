"""Classification benchmark: NPT coordinates + a linear method against kernel SVMs, one run.

Full MNIST (60,000 training rows, 10,000 test rows, pixels in [0, 1]); in the
same invocation and on the same rows:

* ``SVC(kernel="rbf", C=10, gamma="scale")`` on all 60,000 rows (scikit-learn);
* scikit-learn's ``benchmarks/bench_mnist.py`` approximation:
  ``Nystroem(gamma=0.015, n_components=1000)`` + ``LinearSVC(C=100)``;
* npt-dask over a grid of (landmarks m, components r, precision, landmark
  method): the landmark route -- ``npt.fit(..., landmarks=m, labels=y)`` (one
  training pass gives the certificate and the ridge moments),
  ``RidgeClassifier.fit_moments`` (GCV over its alphas), the test rows
  projected and classified;
* with ``--million PATH``: the same route on the 1,000,000-row deformed-MNIST
  store at PATH (``benchmarks/mnist1m.py``), tested on the 10,000 MNIST test rows.

Time is end to end for every system: fit, projection of train and test,
classifier, prediction. Each system runs in its own process (its peak memory
is its own); the GEMM rate measured at start-up puts the seconds in context.
Then the best MNIST setting runs on Fashion-MNIST (8 classes) and covertype,
with their SVC beside it when ``--svc-limit`` allows. Prints one JSON document
and writes a PNG of accuracy against seconds (``--plot``).

    NPT_DATA_DIR=../shared/data python benchmarks/classify.py [--quick] [--plot out.png]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import gemm_rate, peak_rss_gib, run_child

HERE = Path(__file__).resolve()

GAMMA = 0.02  # bandwidth 5 on [0, 1] pixels (EigenPro's MNIST setting)
GRID = [  # (landmarks, n_components, precision, landmark_method)
    (2000, None, "float32", "uniform"),
    (5000, None, "float32", "uniform"),
    (5000, None, "float64", "uniform"),
    (5000, None, "float32", "rpcholesky"),
    (10000, 2000, "float32", "uniform"),
    (10000, 5000, "float32", "uniform"),
    (10000, None, "float32", "uniform"),
    (10000, None, "float32", "rpcholesky"),
]
QUICK_GRID = [(1000, None, "float32", "uniform"), (1000, None, "float32", "rpcholesky"),
              (2000, 500, "float64", "uniform")]  # fmt: skip


def _dataset(name: str, quick: bool) -> tuple[np.ndarray, ...]:
    from npt_dask.datasets import data_path, load_npz

    if name == "mnist":
        x, y = load_npz(data_path("mnist.npz"), scale=255.0, dtype=np.float32)
        train, test = slice(0, 60000), slice(60000, 70000)
    elif name == "fashion":
        x, y = load_npz(data_path("fashion_mnist_8class.npz"), scale=255.0, dtype=np.float32)
        train, test = slice(0, 48000), slice(48000, 56000)
    else:  # covertype: standardised attributes, a random 80/20 split
        x, y = load_npz(data_path("covertype_odds.npz"), dtype=np.float32)
        x = (x - x.mean(axis=0)) / x.std(axis=0)
        order = np.random.default_rng(0).permutation(len(x))
        x, y = x[order], y[order]
        cut = int(0.8 * len(x))
        train, test = slice(0, cut), slice(cut, len(x))
    xtr, ytr, xte, yte = x[train], y[train], x[test], y[test]
    if quick:
        xtr, ytr, xte, yte = xtr[:6000], ytr[:6000], xte[:2000], yte[:2000]
    return xtr, ytr, xte, yte


def _svc(xtr, ytr, xte, yte) -> dict[str, Any]:
    from sklearn.svm import SVC

    t0 = time.perf_counter()
    clf = SVC(kernel="rbf", C=10, gamma="scale").fit(xtr, ytr)
    t1 = time.perf_counter()
    acc = float((clf.predict(xte) == yte).mean())
    t2 = time.perf_counter()
    return {"accuracy": acc, "fit_seconds": t1 - t0, "predict_seconds": t2 - t1,
            "seconds": t2 - t0}  # fmt: skip


def _nystroem(xtr, ytr, xte, yte) -> dict[str, Any]:
    from sklearn.kernel_approximation import Nystroem
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import LinearSVC

    t0 = time.perf_counter()
    clf = make_pipeline(
        Nystroem(gamma=0.015, n_components=1000, random_state=0), LinearSVC(C=100)
    ).fit(xtr, ytr)
    acc = float((clf.predict(xte) == yte).mean())
    return {"accuracy": acc, "seconds": time.perf_counter() - t0}


def _npt(xtr, ytr, xte, yte, m: int, r: int | None, precision: str, method: str) -> dict:
    import npt_dask as npt
    from npt_dask.methods import RidgeClassifier

    t0 = time.perf_counter()
    model = npt.fit(xtr.astype(precision), "rbf", gamma=GAMMA, landmarks=min(m, len(xtr)),
                    n_components=r, precision=precision, landmark_method=method, labels=ytr,
                    random_state=0)  # fmt: skip
    t1 = time.perf_counter()
    clf = RidgeClassifier(alpha=np.logspace(-6, 0, 7)).fit_moments(model.moments)
    t2 = time.perf_counter()
    acc = float((clf.predict(model.transform(xte.astype(precision))) == yte).mean())
    t3 = time.perf_counter()
    cert = model.diagnostics.landmarks["certificate"]
    return {
        "accuracy": acc, "seconds": t3 - t0, "fit_and_pass_seconds": t1 - t0,
        "landmark_solve_seconds": model.diagnostics.seconds, "ridge_seconds": t2 - t1,
        "test_seconds": t3 - t2, "n_components": model.n_components,
        "alpha": float(clf.alpha_), "certificate_mean": cert["mean"],
        "certificate_relative_mean": cert["relative_mean"],
    }  # fmt: skip


def _child(args: list[str]) -> None:
    kind, dataset, quick = args[0], args[1], args[2] == "1"
    data = _dataset(dataset, quick)
    if kind == "svc":
        out = _svc(*data)
    elif kind == "nystroem":
        out = _nystroem(*data)
    else:
        m, r, precision, method = args[3:7]
        out = _npt(*data, int(m), None if r == "full" else int(r), precision, method)
    out["peak_rss_gib"] = round(peak_rss_gib(), 3)
    print(json.dumps(out))


def _run(kind: str, dataset: str, quick: bool, *rest: Any, timeout: float = 7200) -> dict:
    args = [kind, dataset, "1" if quick else "0", *[str(a) for a in rest]]
    return run_child(HERE, args, timeout=timeout)


def _setting_name(m: int, r: int | None, precision: str, method: str) -> str:
    return f"npt m={m} r={'full' if r is None else r} {precision} {method}"


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="6,000/2,000 rows, small grid")
    parser.add_argument("--plot", help="write accuracy-against-seconds PNG here")
    parser.add_argument("--others", default="fashion,covertype", help="datasets after MNIST")
    parser.add_argument("--svc-limit", type=float, default=1800, help="seconds SVC may take")
    parser.add_argument("--landmarks", help="comma-separated m values (default: the grid's)")
    parser.add_argument("--million", help="the 1M-row store (benchmarks/mnist1m.py --make)")
    args = parser.parse_args()
    grid = QUICK_GRID if args.quick else GRID
    if args.landmarks:
        grid = [(int(m), None, "float32", "uniform") for m in args.landmarks.split(",")]
    report: dict[str, Any] = {
        "gemm_gflops_float64": round(gemm_rate("float64"), 1),
        "gemm_gflops_float32": round(gemm_rate("float32"), 1),
        "quick": args.quick,
        "mnist": {},
    }
    mnist = report["mnist"]
    mnist["svc_rbf_all_rows"] = _run("svc", "mnist", args.quick)
    mnist["nystroem1000_linearsvc"] = _run("nystroem", "mnist", args.quick)
    for setting in grid:
        mnist[_setting_name(*setting)] = _run("npt", "mnist", args.quick, *_cli(setting))
    best = max(grid, key=lambda s: mnist[_setting_name(*s)].get("accuracy", 0.0))
    report["best_setting"] = _setting_name(*best)
    svc = mnist["svc_rbf_all_rows"]
    npt_best = mnist[_setting_name(*best)]
    if "seconds" in svc and "seconds" in npt_best:
        report["best_vs_svc"] = {
            "accuracy_gain": npt_best["accuracy"] - svc["accuracy"],
            "time_ratio": npt_best["seconds"] / svc["seconds"],
        }
    if args.million:
        proc = subprocess.run(
            [sys.executable, str(HERE.parent / "mnist1m.py"), "--store", args.million],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        report["million"] = json.loads("\n".join(lines)) if proc.returncode == 0 else {
            "error": proc.stderr[-2000:]}  # fmt: skip
    for name in [s for s in args.others.split(",") if s]:
        other = {_setting_name(*best): _run("npt", name, args.quick, *_cli(best))}
        other["svc_rbf_all_rows"] = _run("svc", name, args.quick, timeout=args.svc_limit)
        report[name] = other
    print(json.dumps(report, indent=2))
    if args.plot:
        _plot(mnist, args.plot)


def _cli(setting: tuple) -> list[str]:
    m, r, precision, method = setting
    return [str(m), "full" if r is None else str(r), precision, method]


def _plot(results: dict[str, dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, res in results.items():
        if "accuracy" not in res:
            continue
        mark = "o" if name.startswith("npt") else "s"
        ax.scatter(res["seconds"], 100 * res["accuracy"], marker=mark)
        ax.annotate(name.replace("npt ", ""), (res["seconds"], 100 * res["accuracy"]),
                    fontsize=7, xytext=(4, 2), textcoords="offset points")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("end-to-end seconds (fit, project, classify, predict)")
    ax.set_ylabel("MNIST test accuracy (%)")
    ax.set_title("Accuracy against time, same machine, same run")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
