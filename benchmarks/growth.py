"""A model that grows (``partial_fit``) on MNIST, against a fresh fit of the final model.

* ``growth``: a full-rank model on ``--start`` uniform landmarks (pixels /255,
  rbf, ``--gamma``), then ``--batches`` batches of ``--batch`` rows, each
  ``model.partial_fit(batch, max_landmarks=--cap)``: per batch the seconds,
  rows added, basis size and the certificate (mean, max residual before and
  after); ridge accuracy after each batch (``RidgeClassifier`` on the basis
  rows' coordinates, scored on the 10,000 test rows; the rotation this needs
  is timed apart and done once per new basis);
* ``fresh``: ``npt.fit(basis, n_components=None)`` on the final basis rows,
  timed, and the grown model's eigenvalues against it (max |delta| / lambda_1);
* ``batch_cost``: one batch of b rows against m basis rows, b in ``--b``, m in
  ``--m``, at the cap (``max_landmarks=m``): the pass every batch makes (kernel
  ``b m d``, triangular solve ``b m^2``, the certificate); what adding rows
  costs on top (Schur complement ``b c (d + m)``, pivoted Cholesky ``c^3 / 3``
  for c candidates) shows in the growth batches that add. The Cholesky frame
  is built directly, not timed;
* ``gemm_gflops``: the float64 matrix-product rate at start-up (the machine is
  shared: timings are under load).

    NPT_DATA_DIR=../shared/data python benchmarks/growth.py \
        [--start 2000] [--batch 5000] [--batches 10] [--cap 10000] [--gamma 0.02]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import gemm_rate, peak_rss_gib


def _mnist() -> tuple[np.ndarray, ...]:
    from npt_dask.storage.datasets import data_path, load_npz

    x, y = load_npz(data_path("mnist.npz"), scale=255.0)
    return x[:60000], y[:60000], x[60000:70000], y[60000:70000]


def _accuracy(model, labels, xte, yte) -> float:
    from npt_dask.methods import RidgeClassifier

    clf = RidgeClassifier(alpha=1e-3).fit(model.train_coordinates(), labels)
    return float(np.mean(clf.predict(np.asarray(model.transform(xte))) == yte))


def _growth(args, xtr, ytr, xte, yte) -> dict:
    import npt_dask as npt

    rng = np.random.default_rng(0)
    order = rng.permutation(len(xtr))
    start_rows = order[: args.start]
    t0 = time.perf_counter()
    model = npt.fit(xtr[start_rows], kernel="rbf", gamma=args.gamma, n_components=None)
    parent_seconds = time.perf_counter() - t0
    row_index = list(start_rows)
    batches, batch_seconds = [], 0.0
    grown = model
    for i in range(args.batches):
        rows = order[args.start + i * args.batch : args.start + (i + 1) * args.batch]
        t = time.perf_counter()
        grown = grown.partial_fit(xtr[rows], max_landmarks=args.cap, residual_tol=args.tol)
        seconds = time.perf_counter() - t
        batch_seconds += seconds
        record = dict(grown.batches[-1])
        added = record["rows_added"]
        # the added rows are the last `added` basis rows: find their indices in the batch
        if added:
            new = grown.basis[-added:]
            lookup = {xtr[j].tobytes(): j for j in rows}
            row_index += [lookup[r.astype(xtr.dtype).tobytes()] for r in new]
        t = time.perf_counter()
        values = grown.eigenvalues  # the rotation, once per new basis
        rotation = time.perf_counter() - t
        record.update(
            seconds=seconds,
            rotation_seconds=rotation,
            r=int(values.size),
            ridge_accuracy=_accuracy(grown.model, ytr[np.asarray(row_index)], xte, yte),
        )
        batches.append(record)
        print(json.dumps({"batch": i, **record}), file=sys.stderr)
    t = time.perf_counter()
    fresh = npt.fit(grown.basis, kernel="rbf", gamma=args.gamma, n_components=None)
    fresh_seconds = time.perf_counter() - t
    lam, ref = grown.eigenvalues, fresh.eigenvalues
    same = lam.size == ref.size
    delta = float(np.abs(lam - ref).max() / ref[0]) if same else float("nan")
    return {
        "parent_seconds": parent_seconds,
        "batches": batches,
        "batch_seconds_total": batch_seconds,
        "rotation_seconds_total": sum(b["rotation_seconds"] for b in batches),
        "final_m": grown.n_basis,
        "fresh_fit_seconds": fresh_seconds,
        "batches_over_fresh": batch_seconds / fresh_seconds,
        "eigenvalues_max_rel_delta": delta,
        "same_rank": same,
    }


def _batch_cost(args, xtr) -> list[dict]:
    import npt_dask as npt
    from npt_dask.npt.growth import GrowingModel

    out = []
    small = npt.fit(xtr[:50], kernel="rbf", gamma=args.gamma, n_components=None)
    kernel = small.kernel
    for m in args.m:
        basis = xtr[:m].astype(np.float64)
        factor = np.linalg.cholesky(kernel(basis, basis))
        model = GrowingModel(kernel, basis, factor, True, small)
        for b in args.b:
            batch = xtr[m : m + b]
            t = time.perf_counter()
            grown = model.partial_fit(batch, residual_tol=args.tol, max_landmarks=m)
            out.append(
                {"m": m, "b": b, "seconds": time.perf_counter() - t,
                 "rows_added": grown.batches[-1]["rows_added"]}
            )  # fmt: skip
            print(json.dumps(out[-1]), file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--cap", type=int, default=10000)
    parser.add_argument("--tol", type=float, default=1e-2)
    parser.add_argument("--gamma", type=float, default=0.02)
    parser.add_argument("--b", type=int, nargs="*", default=[1000, 5000])
    parser.add_argument("--m", type=int, nargs="*", default=[2000, 5000, 10000])
    parser.add_argument("--skip-cost", action="store_true")
    args = parser.parse_args()
    xtr, ytr, xte, yte = _mnist()
    result = {"gemm_gflops": gemm_rate("float64"), "args": vars(args)}
    result["growth"] = _growth(args, xtr, ytr, xte, yte)
    if not args.skip_cost:
        result["batch_cost"] = _batch_cost(args, xtr)
    result["peak_rss_gib"] = peak_rss_gib()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
