"""Classification benchmark: kernel ridge at any n and m against kernel SVMs, one run.

Full MNIST (60,000 training rows, 10,000 test rows, pixels in [0, 1], RBF
gamma = 0.02: bandwidth 5, EigenPro's setting); in the same invocation and on
the same rows:

* ``SVC(kernel="rbf", C=10, gamma="scale")`` on all 60,000 rows (scikit-learn);
* the same ``SVC`` from scikit-learn-intelex (``sklearnex.svm.SVC``, oneDAL's solver: the
  CPU kernel SVM a user would pick), where it is installed (``pip install
  'npt-dask[bench]'``); where it is not, its entry says so and the run goes on;
* scikit-learn's ``benchmarks/bench_mnist.py`` approximation:
  ``Nystroem(gamma=0.015, n_components=1000)`` + ``LinearSVC(C=100)``;
* npt-dask's kernel ridge routes (``KernelRidgeClassifier``, ±1 one-vs-all
  targets, float32 kernel blocks): direct Nyström with m = 10,000 / 15,000 /
  20,000 landmarks (one pass of moments, a Cholesky factorisation), iterative
  Nyström with m = 20,000 / 40,000 (Falkon-preconditioned CG), and exact kernel
  ridge with all 60,000 rows as centres (CG preconditioned by a 3,000-row landmark
  model). alpha is chosen for each by :class:`npt_dask.KernelRidgeClassifierCV`'s
  held-out search on a 10,000-row subproblem (gamma fixed at 0.02); the search's
  seconds are part of the route's;
* with ``--landmark-grid``: the eigen-frame landmark route of earlier rounds
  (``npt.fit(..., landmarks=m, labels=y)`` + ``RidgeClassifier.fit_moments``).

Time is end to end for every system: the search, the fit, prediction of the
test rows. Each system runs in its own process (its peak memory is its own).
The GEMM rates (float64, float32) measured at start-up turn each route's
counted flops per stage (its fit plan's) into ideal seconds: ``over_ideal`` is
a stage's time over them. Prints one JSON document; ``--plot`` writes accuracy
against seconds.

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
ALPHAS = tuple(float(a) for a in np.logspace(-6, 0, 7))
ROUTES = {  # name: (landmarks or "all", solver, tol, max_iter, memory budget GiB, alpha)
    "direct m=10000": (10000, "direct", 1e-3, 1, 12, "search"),
    "direct m=15000": (15000, "direct", 1e-3, 1, 12, "search"),
    "direct m=20000": (20000, "direct", 1e-3, 1, 12, "search"),
    "cg m=20000": (20000, "cg", 1e-3, 20, 12, "search"),
    "cg m=40000": (40000, "cg", 1e-3, 20, 16, "search"),
    "exact cg all rows": ("all", "cg", 1e-3, 200, 12, "search"),
    # alpha given: the notes' exact kernel ridge setting (mu = 1e-3), no search; to tol
    "exact cg all rows alpha=1e-3": ("all", "cg", 1e-3, 200, 12, 1e-3),
}
QUICK_ROUTES = {
    "direct m=1000": (1000, "direct", 1e-3, 1, 4, "search"),
    "cg m=2000": (2000, "cg", 1e-3, 20, 4, "search"),
    "exact cg all rows": ("all", "cg", 1e-3, 15, 4, "search"),
}
LANDMARK_GRID = [  # the eigen-frame route of earlier rounds: (landmarks, r, method)
    (10000, None, "uniform"),
    (10000, None, "rpcholesky"),
]


def _dataset(name: str, quick: bool) -> tuple[np.ndarray, ...]:
    from npt_dask.storage.datasets import data_path, load_npz

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


ONEDAL_MISSING = (
    "scikit-learn-intelex is not installed, so oneDAL's SVC did not run: pip install "
    "'npt-dask[bench]' (or scikit-learn-intelex) to run it beside stock SVC"
)


def _svc_onedal(xtr, ytr, xte, yte) -> dict[str, Any]:
    """scikit-learn-intelex's ``SVC`` (oneDAL), with stock ``SVC``'s parameters."""
    import importlib.util

    if importlib.util.find_spec("sklearnex") is None:
        return {"skipped": ONEDAL_MISSING}
    import sklearnex
    from sklearnex.svm import SVC

    t0 = time.perf_counter()
    clf = SVC(kernel="rbf", C=10, gamma="scale").fit(xtr, ytr)
    t1 = time.perf_counter()
    acc = float((clf.predict(xte) == yte).mean())
    t2 = time.perf_counter()
    return {"accuracy": acc, "fit_seconds": t1 - t0, "predict_seconds": t2 - t1,
            "seconds": t2 - t0, "version": sklearnex.__version__}  # fmt: skip


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


def fit_passes(clf: Any) -> int:
    """Passes over the kernel blocks a fitted kernel ridge estimator's solve made: CG's
    iterations and its true-residual check, or the direct route's one."""
    return int(clf.solve_details_.get("passes", clf.n_iter_))


def stage_ideal(plan: dict, passes: int, rates: dict[str, float]) -> dict[str, float]:
    """Ideal seconds per stage of the fit: the plan's flops at the measured rates
    (``*_p`` stages at the kernel precision's, the rest at float64's; CG's per-iteration
    work times its passes: the iterations and the pass that checks the true residual)."""
    prec = rates[plan["precision"]]
    flops = plan["flops"]
    seconds = {k: v / (prec if k.endswith("_p") else rates["float64"]) / 1e9
               for k, v in flops.items()}  # fmt: skip
    if plan["route"] == "direct" and not plan["exact"]:
        return {"pass": seconds["kernel_p"] + seconds["moments"],
                "solve": seconds["factor"] + seconds["solve"]}  # fmt: skip
    if plan["route"] == "direct":
        return {"kernel": seconds["kernel_p"], "solve": seconds["factor"] + seconds["solve"]}
    out = {
        "preconditioner": seconds["preconditioner_p"],
        "rhs": seconds.get("rhs_p", 0.0),
        "iterations": passes * seconds["iteration_p"] + seconds.get("first_pass_p", 0.0),
    }
    return out  # fmt: skip


def _krr(xtr, ytr, xte, yte, landmarks, solver, tol, max_iter, budget_gib, alpha, rates) -> dict:
    import npt_dask as npt

    common = {"kernel": "rbf", "landmarks": None if landmarks == "all" else int(landmarks),
              "solver": solver, "tol": tol, "max_iter": max_iter, "precision": "float32",
              "random_state": 0, "memory_budget": int(budget_gib * 2**30)}  # fmt: skip
    t0 = time.perf_counter()
    if alpha == "search":
        clf = npt.KernelRidgeClassifierCV(alphas=ALPHAS, gammas=[GAMMA], **common)
    else:
        clf = npt.KernelRidgeClassifier(alpha=float(alpha), gamma=GAMMA, **common)
    clf.fit(xtr, ytr)
    searched = getattr(clf, "cv_results_", {"seconds": 0.0, "scores": None})
    t1 = time.perf_counter()
    acc = float((clf.predict(xte) == yte).mean())
    t2 = time.perf_counter()
    passes = fit_passes(clf)
    ideal = stage_ideal(clf.plan_, passes, rates)
    seconds = dict(clf.fit_seconds_)
    return {
        "accuracy": acc, "seconds": t2 - t0, "search_seconds": searched["seconds"],
        "fit_seconds": t1 - t0, "predict_seconds": t2 - t1,
        "alpha": clf.alpha_ if hasattr(clf, "alpha_") else clf.alpha,
        "route": clf.solver_, "reason": clf.plan_["reason"], "n_iter": clf.n_iter_,
        "passes": passes,
        "residuals": [round(float(r), 5) for r in clf.residuals_],
        "stage_seconds": seconds, "stage_ideal_seconds": ideal,
        "over_ideal": {k: seconds[k] / v for k, v in ideal.items() if k in seconds and v > 0},
        "plan_flops": clf.plan_["flops"],
        "plan_memory_gib": sum(clf.plan_["memory"].values()) / 2**30,
        "search_scores": searched["scores"], "details": clf.solve_details_,
    }  # fmt: skip


def _landmark_route(xtr, ytr, xte, yte, m: int, r: int | None, method: str) -> dict:
    import npt_dask as npt
    from npt_dask.methods import RidgeClassifier

    t0 = time.perf_counter()
    model = npt.fit(
        xtr, "rbf", gamma=GAMMA, landmarks=min(m, len(xtr)), n_components=r,
        precision="float32", landmark_method=method, labels=ytr, random_state=0,
    )  # fmt: skip
    clf = RidgeClassifier(alpha=np.logspace(-6, 0, 7)).fit_moments(model.moments)
    acc = float((clf.predict(model.transform(xte)) == yte).mean())
    return {"accuracy": acc, "seconds": time.perf_counter() - t0, "alpha": float(clf.alpha_),
            "n_components": model.n_components}  # fmt: skip


def _child(args: list[str]) -> None:
    kind, dataset, quick = args[0], args[1], args[2] == "1"
    data = _dataset(dataset, quick)
    if kind == "svc":
        out = _svc(*data)
    elif kind == "svc_onedal":
        out = _svc_onedal(*data)
    elif kind == "nystroem":
        out = _nystroem(*data)
    elif kind == "krr":
        landmarks, solver, tol, max_iter, budget, alpha, r64, r32 = args[3:11]
        rates = {"float64": float(r64), "float32": float(r32)}
        out = _krr(*data, landmarks, solver, float(tol), int(max_iter), float(budget), alpha,
                   rates)  # fmt: skip
    else:
        m, r, method = args[3:6]
        out = _landmark_route(*data, int(m), None if r == "full" else int(r), method)
    out["peak_rss_gib"] = round(peak_rss_gib(), 3)
    print(json.dumps(out, default=float))


def _run(kind: str, dataset: str, quick: bool, *rest: Any, timeout: float = 7200) -> dict:
    args = [kind, dataset, "1" if quick else "0", *[str(a) for a in rest]]
    return run_child(HERE, args, timeout=timeout)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="6,000/2,000 rows, small routes")
    parser.add_argument("--plot", help="write accuracy-against-seconds PNG here")
    parser.add_argument("--routes", help="comma-separated route names (default: all)")
    parser.add_argument("--others", default="fashion,covertype", help="datasets after MNIST")
    parser.add_argument("--svc-limit", type=float, default=1800, help="seconds SVC may take")
    parser.add_argument("--landmark-grid", action="store_true", help="add the eigen-frame route")
    parser.add_argument("--million", help="the 1M-row store (benchmarks/mnist1m.py --make)")
    args = parser.parse_args()
    routes = QUICK_ROUTES if args.quick else ROUTES
    if args.routes:
        routes = {
            k: v for k, v in {**ROUTES, **QUICK_ROUTES}.items() if k in args.routes.split(",")
        }
    rates = {"float64": gemm_rate("float64"), "float32": gemm_rate("float32")}
    report: dict[str, Any] = {
        "gemm_gflops_float64": round(rates["float64"], 1),
        "gemm_gflops_float32": round(rates["float32"], 1),
        "quick": args.quick,
        "mnist": {},
    }
    mnist = report["mnist"]
    mnist["svc_rbf_all_rows"] = _run("svc", "mnist", args.quick)
    mnist["svc_onedal_all_rows"] = _run("svc_onedal", "mnist", args.quick)
    mnist["nystroem1000_linearsvc"] = _run("nystroem", "mnist", args.quick)
    for name, route in routes.items():
        mnist[name] = _run("krr", "mnist", args.quick, *route, rates["float64"], rates["float32"])
        print(json.dumps({name: mnist[name]}, default=float), file=sys.stderr, flush=True)
    if args.landmark_grid:
        for m, r, method in LANDMARK_GRID:
            name = f"eigen-frame m={m} r={'full' if r is None else r} {method}"
            mnist[name] = _run(
                "landmark", "mnist", args.quick, m, "full" if r is None else r, method
            )
    svc = mnist["svc_rbf_all_rows"]
    ours = {k: v for k, v in mnist.items() if k in routes and "accuracy" in v}
    if "seconds" in svc and ours:
        best = max(ours, key=lambda k: ours[k]["accuracy"])
        report["best_route"] = best
        report["vs_svc"] = {k: {"accuracy_gain": v["accuracy"] - svc["accuracy"],
                                "time_ratio": v["seconds"] / svc["seconds"]}
                            for k, v in ours.items()}  # fmt: skip
    onedal = mnist["svc_onedal_all_rows"]
    if "seconds" in onedal and ours:
        report["vs_svc_onedal"] = {k: {"accuracy_gain": v["accuracy"] - onedal["accuracy"],
                                       "time_ratio": v["seconds"] / onedal["seconds"]}
                                   for k, v in ours.items()}  # fmt: skip
    if args.million:
        proc = subprocess.run(
            [sys.executable, str(HERE.parent / "mnist1m.py"), "--store", args.million],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        report["million"] = json.loads("\n".join(lines)) if proc.returncode == 0 else {
            "error": proc.stderr[-2000:]}  # fmt: skip
    if "best_route" in report:
        route = routes[report["best_route"]]
        for name in [s for s in args.others.split(",") if s]:
            other = {report["best_route"]: _run("krr", name, args.quick, *route, rates["float64"],
                                                rates["float32"])}  # fmt: skip
            other["svc_rbf_all_rows"] = _run("svc", name, args.quick, timeout=args.svc_limit)
            other["svc_onedal_all_rows"] = _run("svc_onedal", name, args.quick,
                                                timeout=args.svc_limit)  # fmt: skip
            report[name] = other
    print(json.dumps(report, indent=2, default=float))
    if args.plot:
        _plot(mnist, args.plot)


def _plot(results: dict[str, dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.4))
    for name, res in results.items():
        if "accuracy" not in res:
            continue
        mark = "s" if name.startswith(("svc", "nystroem")) else "o"
        ax.scatter(res["seconds"], 100 * res["accuracy"], marker=mark)
        ax.annotate(name, (res["seconds"], 100 * res["accuracy"]), fontsize=7,
                    xytext=(4, 2), textcoords="offset points")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("end-to-end seconds (search, fit, predict)")
    ax.set_ylabel("MNIST test accuracy (%)")
    ax.set_title("Accuracy against time, same machine, same run")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
