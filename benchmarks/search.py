"""The hyperparameter search against its final fit: ``KernelRidgeClassifierCV()``.

On ``--n`` covertype rows (a seeded draw, a pandas DataFrame; standardised, then the
raw attributes), in one invocation and on the same rows:

* ``before``: the search on ``--before-rows`` rows (10,000: the old default);
* ``after``: the search on the default subproblem (``search_rows=None``: a fifth of the
  rows, from 1,000 up to 10,000);
* ``SVC(rbf, C=10, gamma="scale")`` beside them.

For each: the search's seconds (``cv_results_["seconds"]``), the final fit's (the fit's
time less the search's), their ratio, the chosen gamma and alpha, the route and its
iterations, and the accuracy on ``--test`` other rows. Prints one JSON document.

    NPT_DATA_DIR=../shared/data python benchmarks/search.py [--n 20000] [--test 20000]
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

from benchmarks._common import gemm_rate

SMOKE_ARGS = [
    "--n",
    "200",
    "--test",
    "100",
    "--before-rows",
    "150",
    "--variants",
    "standardised",
    "--no-svc",
]


def _rows(n: int, test: int, standardise: bool) -> tuple[Any, np.ndarray, Any, np.ndarray]:
    import pandas as pd

    from npt_dask.storage.datasets import data_path, load_npz

    x, y = load_npz(data_path("covertype_odds.npz"), dtype=np.float64)
    if standardise:
        x = (x - x.mean(axis=0)) / x.std(axis=0)
    order = np.random.default_rng(0).permutation(len(x))
    train, held = order[:n], order[n : n + test]
    names = [f"a{i}" for i in range(x.shape[1])]
    return (pd.DataFrame(x[train], columns=names), y[train],
            pd.DataFrame(x[held], columns=names), y[held])  # fmt: skip


def _search_and_fit(xtr, ytr, xte, yte, search_rows: int | None) -> dict[str, Any]:
    import npt_dask as npt

    clf = npt.KernelRidgeClassifierCV(search_rows=search_rows, random_state=0)
    start = time.perf_counter()
    clf.fit(xtr, ytr)
    seconds = time.perf_counter() - start
    search = float(clf.cv_results_["seconds"])
    final = seconds - search
    rows = len(clf.cv_results_["fit_rows"]) + len(clf.cv_results_["held_out_rows"])
    return {
        "search_rows": rows, "search_seconds": round(search, 2),
        "final_fit_seconds": round(final, 2), "ratio": round(search / final, 2),
        "gamma": clf.gamma_, "alpha": clf.alpha_, "route": clf.solver_,
        "n_iter": int(clf.n_iter_), "accuracy": float(np.mean(clf.predict(xte) == yte)),
    }  # fmt: skip


def _svc(xtr, ytr, xte, yte) -> dict[str, Any]:
    from sklearn.svm import SVC

    start = time.perf_counter()
    clf = SVC(kernel="rbf", C=10, gamma="scale").fit(xtr, ytr)
    seconds = time.perf_counter() - start
    return {"fit_seconds": round(seconds, 2), "accuracy": float(np.mean(clf.predict(xte) == yte))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="training rows")
    parser.add_argument("--test", type=int, default=20000, help="test rows (others)")
    parser.add_argument("--before-rows", type=int, default=10000, help="the old search_rows")
    parser.add_argument("--variants", default="standardised,raw")
    parser.add_argument("--no-svc", action="store_true", help="leave SVC out")
    args = parser.parse_args()
    report: dict[str, Any] = {"gemm_gflops_float64": round(gemm_rate("float64", 2048), 1),
                              "n": args.n, "test": args.test}  # fmt: skip
    for variant in args.variants.split(","):
        data = _rows(args.n, args.test, standardise=variant == "standardised")
        report[variant] = {
            "before": _search_and_fit(*data, search_rows=args.before_rows),
            "after": _search_and_fit(*data, search_rows=None),
        }
        if not args.no_svc:
            report[variant]["svc"] = _svc(*data)
    print(json.dumps(report, default=float))


if __name__ == "__main__":
    main()
