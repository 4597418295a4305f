"""CG's iteration estimate against the iterations taken: the plan's prior, the route's
update once the preconditioner is built, and (with ``--full``) the count to tol.

Cases (``--cases``, comma-separated ``data:n:m:tol:alpha:gamma[:budget GiB[:precision]]``,
m = ``all`` for exact kernel ridge, the budget 4 GiB unless given: it sets exact CG's
rank): MNIST
(pixels / 255, float32; float64 for a tol below 1e-4) and covertype (standardised, a
seeded draw, float64),
``KernelRidgeClassifier(solver="cg", random_state=0)``. Without ``--full`` each fit
stops after one iteration (the estimates are made before the first). Prints one
JSON document.

    NPT_DATA_DIR=../shared/data python benchmarks/iterations.py [--full] [--cases ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = (
    "mnist:60000:all:1e-3:1e-3:0.02:12,mnist:20000:all:1e-3:1e-3:0.02,"
    "mnist:10000:all:1e-3:1e-3:0.02,mnist:10000:all:1e-3:1e-4:0.02,mnist:5000:all:1e-3:1e-3:0.02,"
    "mnist:2000:all:1e-3:1e-3:0.02,covertype:20000:all:1e-3:1e-3:0.1,"
    "covertype:10000:all:1e-3:1e-2:1.0,covertype:5000:all:1e-3:1e-3:0.1,"
    "mnist:20000:5000:1e-6:1e-3:0.02,mnist:20000:5000:1e-6:1e-3:0.02:4:float32,mnist:10000:2000:1e-6:1e-3:0.02,"
    "covertype:20000:2000:1e-3:1e-3:0.1,covertype:20000:2000:1e-6:1e-3:0.1,"
    "covertype:10000:1000:1e-6:1e-3:0.1"
)
SMOKE_ARGS = ["--cases", "covertype:600:60:1e-3:1e-2:0.1,covertype:600:all:1e-3:1e-2:0.1"]


def _rows(data: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    from npt_dask.storage.datasets import data_path, load_npz

    if data == "mnist":
        x, y = load_npz(data_path("mnist.npz"), scale=255.0, dtype=np.float32)
        return x[:n], y[:n]
    x, y = load_npz(data_path("covertype_odds.npz"), dtype=np.float64)
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    rows = np.random.default_rng(0).permutation(len(x))[:n]
    return x[rows], y[rows]


def _case(spec: str, full: bool) -> dict[str, Any]:
    import npt_dask as npt
    from npt_dask.errors import ConvergenceWarning
    from npt_dask.ridge.estimate import nystrom_prior

    data, n, m, tol, alpha, gamma, *given = spec.split(":")
    budget = int(float(given[0] if given else 4.0) * 2**30)
    precision = given[1] if len(given) > 1 else "float64" if float(tol) < 1e-4 else None
    x, y = _rows(data, int(n))
    clf = npt.KernelRidgeClassifier(
        alpha=float(alpha), kernel="rbf", gamma=float(gamma),
        landmarks=None if m == "all" else int(m), solver="cg", tol=float(tol),
        max_iter=1000 if full else 1, random_state=0, memory_budget=budget,
        precision=precision,
    )  # fmt: skip
    start = time.perf_counter()
    with warnings.catch_warnings():
        if not full:  # stopped after one iteration on purpose
            warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(x, y)
    out = {
        "case": spec,
        # the Nystrom plan caps its prior at max_iter (1 without --full)
        "prior": clf.solve_details_["expected_iterations_prior"] if m == "all"
        else nystrom_prior(float(tol)),
        "estimate": clf.solve_details_["expected_iterations"],
        "rank": clf.plan_["preconditioner_rank"], "seconds": round(time.perf_counter() - start, 1),
    }  # fmt: skip
    if full:
        out["taken"] = int(clf.n_iter_)
        out["estimate_over_taken"] = round(out["estimate"] / out["taken"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=CASES)
    parser.add_argument("--full", action="store_true", help="run each fit to tol")
    args = parser.parse_args()
    cases = []
    for spec in args.cases.split(","):
        cases.append(_case(spec, args.full))
        print(json.dumps(cases[-1]), file=sys.stderr, flush=True)  # each as it is done
    print(json.dumps({"full": args.full, "cases": cases}))


if __name__ == "__main__":
    main()
