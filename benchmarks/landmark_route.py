"""The landmark route against its floating-point work and a plain numpy script, one run.

The route: m uniform landmarks, a model of rank r on them, every training row
projected (certificate + ridge moments), the ridge solve, the test rows
projected and classified. Three measurements on the same rows, same landmarks,
same kernel, same precision, in this invocation:

* ``npt``: ``npt.fit(X, landmarks=m, n_components=r, labels=y)`` (the fused
  training pass), ``RidgeClassifier.fit_moments``, ``transform`` + ``predict``
  of the test rows; each stage timed;
* ``numpy``: the same maths as a plain numpy/scipy script (the floor any of
  our code must reach);
* ``ideal``: the route's floating-point work at the matrix-product rates
  (float64 and float32) measured at start-up.

Flop counts (d features, n training rows, t test rows, k classes):
landmark kernel ``2 m^2 d``; eigendecomposition ``(4/3) m^3 + 2 m^2 r``
(tridiagonal reduction and back-transformation of r vectors); training pass
``2 n m d + 2 n m (r + 1) + n r^2 + 2 n r k``; ridge ``(4/3 + 2) r^3`` for
the 7 alphas (one eigendecomposition; :func:`ridge_flops`); test
``2 t m d + 2 t m (r + 1)``. Kernel blocks, their products and the moments'
Gram panels run at the precision's rate, the rest at float64's.

    NPT_DATA_DIR=../shared/data python benchmarks/landmark_route.py \
        [--dataset mnist|fashion] [--n 60000] [--m 5000] [--r full] [--precision float32]
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

from benchmarks._common import gemm_rate, peak_rss_gib

ALPHAS = np.logspace(-6, 0, 7)


def dataset(name: str, n: int | None, precision: str) -> tuple[np.ndarray, ...]:
    from npt_dask.storage.datasets import data_path, load_npz

    if name == "mnist":
        x, y = load_npz(data_path("mnist.npz"), scale=255.0, dtype=np.float32)
        train, test = slice(0, 60000), slice(60000, 70000)
    else:
        x, y = load_npz(data_path("fashion_mnist_8class.npz"), scale=255.0, dtype=np.float32)
        train, test = slice(0, 48000), slice(48000, 56000)
    xtr, ytr, xte, yte = x[train], y[train], x[test], y[test]
    if n is not None:
        xtr, ytr = xtr[:n], ytr[:n]
    return xtr.astype(precision), ytr, xte.astype(precision), yte


def ridge_flops(r: int, n_alphas: int) -> float:
    """The r x r solve: a Cholesky factorisation and triangular inverse per alpha (GCV's
    trace), or one eigendecomposition for many alphas (``CHOLESKY_MAX_ALPHAS``)."""
    from npt_dask.methods.linear_ridge import CHOLESKY_MAX_ALPHAS

    if n_alphas <= CHOLESKY_MAX_ALPHAS:
        return n_alphas * 2.0 / 3.0 * r**3
    return 4.0 / 3.0 * r**3 + 2.0 * r**3


def flops(n: int, t: int, d: int, m: int, r: int, k: int) -> dict[str, tuple[float, str]]:
    """Floating-point work per stage and the rate it runs at ("prec" or "float64")."""
    return {
        "landmark_kernel": (2.0 * m * m * d, "prec"),
        "eigh": (4.0 / 3.0 * m**3 + 2.0 * m * m * r, "float64"),
        "pass_kernel_and_projection": (2.0 * n * m * d + 2.0 * n * m * (r + 1), "prec"),
        "pass_moments": (1.0 * n * r * r + 2.0 * n * r * k, "prec"),  # Gram panels: prec
        "ridge": (ridge_flops(r, len(ALPHAS)), "float64"),
        "test": (2.0 * t * m * d + 2.0 * t * m * (r + 1), "prec"),
    }


def ideal_seconds(work: dict[str, tuple[float, str]], rates: dict[str, float]) -> float:
    return sum(f / (rates[kind] * 1e9) for f, kind in work.values())


def run_npt(data, m: int, r: int | None, gamma: float, precision: str, seed: int) -> dict:
    import npt_dask as npt
    from npt_dask.methods import RidgeClassifier

    xtr, ytr, xte, yte = data
    t0 = time.perf_counter()
    model = npt.fit(xtr, "rbf", gamma=gamma, landmarks=m, n_components=r, labels=ytr,
                    precision=precision, random_state=seed)  # fmt: skip
    t1 = time.perf_counter()
    clf = RidgeClassifier(alpha=ALPHAS).fit_moments(model.moments)
    t2 = time.perf_counter()
    acc = float(np.mean(clf.predict(model.transform(xte)) == yte))
    t3 = time.perf_counter()
    solve = float(model.diagnostics.seconds)
    return {
        "accuracy": acc,
        "seconds": t3 - t0,
        "stages": {
            "landmark_solve": solve,
            "training_pass": t1 - t0 - solve,
            "ridge": t2 - t1,
            "test": t3 - t2,
        },
        "r": model.n_components,
        "alpha": clf.alpha_,
        "indices": model.diagnostics.landmarks["indices"],
        "certificate_mean": model.diagnostics.landmarks["certificate"]["mean"],
    }


def run_numpy(data, idx: np.ndarray, r: int, gamma: float, precision: str) -> dict:
    """The same maths in plain numpy/scipy, chunk by chunk: the floor."""
    import scipy.linalg

    xtr, ytr, xte, yte = data
    dtype = np.dtype(precision)
    classes = np.unique(ytr)

    def rbf(a, b):
        g = a @ b.T
        g *= -2.0
        g += (a * a).sum(1)[:, None]
        g += (b * b).sum(1)[None, :]
        np.maximum(g, 0, out=g)
        g *= dtype.type(-gamma)
        return np.exp(g, out=g)

    t0 = time.perf_counter()
    land = xtr[idx]
    kll = rbf(land, land).astype(np.float64)
    means = kll.mean(axis=0)
    g = means.mean()
    m = len(idx)
    kc = kll - means[:, None] - means[None, :] + g
    if 2 * r < m:  # the fastest LAPACK route for each case
        w, u = scipy.linalg.eigh(kc, subset_by_index=[m - r, m - 1], driver="evr")
    else:
        w, u = np.linalg.eigh(kc)
        w, u = w[m - r :], u[:, m - r :]
    a = u[:, ::-1] / np.sqrt(w[::-1])
    a_p, offset, ones = a.astype(dtype), means @ a, a.sum(axis=0)

    def coords(z):
        c = rbf(z, land)
        y = (c @ a_p).astype(np.float64) - offset
        return y - (c.mean(axis=1, dtype=np.float64) - g)[:, None] * ones

    t1 = time.perf_counter()
    gram, cross, ysum = np.zeros((r, r)), np.zeros((r, len(classes))), np.zeros(r)
    for i in range(0, len(xtr), 4096):
        y = coords(xtr[i : i + 4096])
        t = np.where(ytr[i : i + 4096, None] == classes[None, :], 1.0, -1.0)
        y_p = y.astype(dtype)  # the Gram in the route's precision, summed in float64 (as npt)
        gram += y_p.T @ y_p
        cross += y.T @ t
        ysum += y.sum(axis=0)
    t2 = time.perf_counter()
    n = len(xtr)
    tsum = np.array([(2.0 * (ytr == c).sum() - n) for c in classes])
    xm, tm = ysum / n, tsum / n
    vals, vecs = np.linalg.eigh(gram - np.outer(ysum, xm))  # one eigh for 7 alphas
    vals = np.maximum(vals, 0)
    proj = vecs.T @ (cross - np.outer(ysum, tm))
    t2n = n - tsum * tm
    gcv = [np.mean(np.maximum(t2n - (proj**2 * (vals[:, None] + 2 * al)
                                     / (vals[:, None] + al) ** 2).sum(0), 0))
           / (1 - (1 + np.sum(vals / (vals + al))) / n) ** 2 for al in ALPHAS]  # fmt: skip
    alpha = ALPHAS[int(np.argmin(gcv))]
    coef = vecs @ (proj / (vals + alpha)[:, None])
    intercept = tm - xm @ coef
    t3 = time.perf_counter()
    acc = float(np.mean(classes[np.argmax(coords(xte) @ coef + intercept, axis=1)] == yte))
    t4 = time.perf_counter()
    return {
        "accuracy": acc,
        "seconds": t4 - t0,
        "alpha": float(alpha),
        "stages": {
            "landmark_solve": t1 - t0,
            "training_pass": t2 - t1,
            "ridge": t3 - t2,
            "test": t4 - t3,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", default="mnist", choices=["mnist", "fashion"])
    parser.add_argument("--n", type=int, default=None, help="training rows (default all)")
    parser.add_argument("--m", type=int, default=5000)
    parser.add_argument("--r", default="full", help="components, or 'full' (m)")
    parser.add_argument("--gamma", type=float, default=0.02)
    parser.add_argument("--precision", default="float32", choices=["float32", "float64"])
    parser.add_argument("--skip-numpy", action="store_true")
    args = parser.parse_args()
    rates = {"float64": gemm_rate("float64"), "float32": gemm_rate("float32")}
    rates["prec"] = rates[args.precision]
    data = dataset(args.dataset, args.n, args.precision)
    r = None if args.r == "full" else int(args.r)
    ours = run_npt(data, args.m, r, args.gamma, args.precision, seed=0)
    idx = np.asarray(ours.pop("indices"))
    n, d = data[0].shape
    work = flops(n, len(data[2]), d, args.m, ours["r"], len(np.unique(data[1])))
    ideal = ideal_seconds(work, rates)
    report: dict[str, Any] = {
        "gemm_gflops": {k: round(v, 1) for k, v in rates.items() if k != "prec"},
        "setting": {
            "dataset": args.dataset,
            "n": n,
            "m": args.m,
            "r": ours["r"],
            "gamma": args.gamma,
            "precision": args.precision,
        },
        "gflop": {k: round(f / 1e9, 1) for k, (f, _) in work.items()},
        "ideal_seconds": round(ideal, 2),
        "npt": ours,
        "npt_over_ideal": round(ours["seconds"] / ideal, 3),
    }
    if not args.skip_numpy:
        floor = run_numpy(data, idx, ours["r"], args.gamma, args.precision)
        report["numpy"] = floor
        report["numpy_over_ideal"] = round(floor["seconds"] / ideal, 3)
        report["npt_over_numpy"] = round(ours["seconds"] / floor["seconds"], 3)
    report["peak_rss_gib"] = round(peak_rss_gib(), 2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
