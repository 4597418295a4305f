"""Krylov solver benchmark: how a fit's time grows with the number of components.

MNIST training rows (default n = 10,000, pixels in [0, 1]), RBF with
gamma = 1 / (d var), tol 1e-8, ``npt.fit(..., solver="krylov", random_state=0)``
for r = 100, 1000, 3000 in ONE process, one after the other, so the ratios
t(r) / t(100) are measured under the same load. r = 100 uses the planner's
own block width (what a user gets); larger r pass the width and basis cap of
:func:`npt_dask.npt.eigen.krylov_shape`.

Where the time goes: the solver is wrapped so every operator application
(a *pass*: one sweep of the kernel blocks, the first one also evaluating the
kept blocks) is timed; ``driver`` is the solver's own dense algebra
(re-orthogonalisation, Rayleigh-Ritz checks, restarts, final Ritz vectors).
Prints one JSON document.

    NPT_DATA_DIR=../shared/data python benchmarks/solver.py [--n 10000] [--ranks 100 1000 3000]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import gemm_rate, mnist_train, peak_rss_gib


def _timed_solver(record: dict):
    """``block_krylov_eigh`` with every operator application (a pass) timed into ``record``.

    The panels' operator is wrapped: ``matmat`` of driver panels (also used by the
    identity-block path), ``apply`` of chunked panels.
    """
    from npt_dask.npt import eigen

    def solver(matmat, *args, **kwargs):
        passes = record.setdefault("pass_seconds", [])

        def timed(call):
            def wrapper(*a):
                start = time.perf_counter()
                out = call(*a)
                passes.append(time.perf_counter() - start)
                return out

            return wrapper

        panels = kwargs.get("panels")
        if isinstance(panels, eigen.DriverPanels):
            panels.matmat = timed(panels.matmat)
        elif panels is not None:
            panels.apply = timed(panels.apply)
        else:
            matmat = timed(matmat)
        start = time.perf_counter()
        result = eigen.block_krylov_eigh(matmat, *args, **kwargs)
        record["solver_seconds"] = time.perf_counter() - start
        record["result"] = result
        return result

    return solver


def fit_one(x, gamma: float, r: int, tol: float, shape: bool) -> dict:
    import npt_dask as npt
    from npt_dask.npt import fitting
    from npt_dask.npt.eigen import krylov_shape

    record: dict = {}
    original = fitting.block_krylov_eigh
    fitting.block_krylov_eigh = _timed_solver(record)
    kwargs = {}
    if shape:
        b, cap = krylov_shape(x.shape[0], r)
        kwargs = {"block_size": b, "max_basis": cap}
    try:
        start = time.perf_counter()
        model = npt.fit(
            x,
            kernel="rbf",
            gamma=gamma,
            n_components=r,
            solver="krylov",
            tol=tol,
            max_passes=300,
            random_state=0,
            **kwargs,
        )
        seconds = time.perf_counter() - start
    finally:
        fitting.block_krylov_eigh = original
    res = record["result"]
    # none when the solver evaluated the matrix explicitly (r >= n / 4): its time is "driver"
    passes = record.get("pass_seconds") or [0.0]
    matmat = sum(passes)
    out = {
        "r": r,
        "seconds": round(seconds, 2),
        "passes": res.passes,
        "block_size": res.block_size,
        "max_basis": kwargs.get("max_basis"),
        "converged": bool(res.converged),
        "max_residual": float(res.residuals.max()),
        "kept_components": int(model.eigenvalues.size),
        "cache": model.diagnostics.cache,
        "solver_seconds": round(record["solver_seconds"], 2),
        "passes_seconds": round(matmat, 2),
        "first_pass_seconds": round(passes[0], 2),
        "later_pass_seconds_mean": round(sum(passes[1:]) / max(1, len(passes) - 1), 3),
        "driver_seconds": round(record["solver_seconds"] - matmat, 2),
        "outside_solver_seconds": round(seconds - record["solver_seconds"], 2),
        "rayleigh_ritz": res.info.get("rayleigh_ritz"),
        "restarts": res.info.get("restarts"),
        "locked": res.info.get("locked"),
        "checks": res.info.get("checks"),
    }
    del model, record
    gc.collect()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--ranks", type=int, nargs="+", default=[100, 1000, 3000])
    parser.add_argument("--tol", type=float, default=1e-8)
    args = parser.parse_args()
    report: dict = {"n": args.n, "tol": args.tol, "gemm_gflops": round(gemm_rate(), 1)}
    x, gamma = mnist_train(args.n)
    report["gamma"] = gamma
    fits = []
    for r in args.ranks:
        fits.append(fit_one(x, gamma, r, args.tol, shape=r >= 200))
        print(json.dumps(fits[-1]), file=sys.stderr, flush=True)
    report["fits"] = fits
    base = next((f["seconds"] for f in fits if f["r"] == min(args.ranks)), None)
    report["ratios"] = {
        f"t({f['r']})/t({min(args.ranks)})": round(f["seconds"] / base, 2) for f in fits
    }
    report["gemm_gflops_end"] = round(gemm_rate(), 1)
    report["peak_rss_gib"] = round(peak_rss_gib(), 2)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
