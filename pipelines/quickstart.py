"""Quickstart job: fit NPT on a local Dask cluster, project, classify, report.

Runs on nothing but a ``pip install``: an embedded ``LocalCluster``, the
handwritten digits bundled with scikit-learn (1,797 images, 8 x 8), and a
results folder on local disk. It fits an RBF NPT model with the streaming
Krylov solver, projects the held-out images chunk by chunk, trains a linear
SVM on the NPT coordinates and compares it with scikit-learn's kernel SVM on
the raw pixels (the two are the same model at full rank; here r < rank), and
writes ``report.json``.

    python -m pipelines.quickstart [--out results/quickstart] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from distributed import Client, LocalCluster
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.svm import SVC, LinearSVC

import npt_dask as npt

__all__ = ["main", "run"]


def run(out: Path, *, n_workers: int = 2, n_components: int = 300) -> dict:
    """Run the job on a fresh LocalCluster and return the report."""
    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    gamma = 1.0 / (x.shape[1] * x_tr.var())
    with (
        LocalCluster(
            n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        t0 = time.perf_counter()
        model = npt.fit(
            x_tr,
            kernel="rbf",
            gamma=gamma,
            n_components=n_components,
            solver="krylov",
            chunk_size=256,
            random_state=0,
        )
        t_fit = time.perf_counter() - t0
        y_train = model.train_coordinates()
        y_test, residual = model.transform_with_residual(x_te)
        dashboard = client.dashboard_link
    svm = LinearSVC(C=1.0, max_iter=20000).fit(y_train, y_tr)
    ksvm = SVC(kernel="rbf", gamma=gamma, C=1.0).fit(x_tr, y_tr)
    report = {
        "data": {"name": "sklearn digits", "n_train": len(x_tr), "n_test": len(x_te)},
        "model": {
            "kernel": model.kernel.to_dict(),
            "n_components": model.n_components,
            "diagnostics": model.diagnostics.to_dict(),
        },
        "fit_seconds": round(t_fit, 3),
        "accuracy_linear_svm_on_npt": float(svm.score(y_test, y_te)),
        "accuracy_kernel_svm_sklearn": float(ksvm.score(x_te, y_te)),
        "residual_test_mean": float(np.mean(residual)),
        "dashboard": dashboard,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=float))
    return report


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/quickstart"))
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    report = run(args.out, n_workers=args.workers)
    print(json.dumps({k: v for k, v in report.items() if k != "model"}, indent=2))
    print(
        f"model: {report['model']['kernel']}, r={report['model']['n_components']}, "
        f"passes={report['model']['diagnostics']['passes']}; report in {args.out}/report.json"
    )


if __name__ == "__main__":
    main()
