"""Thousands of components on full MNIST: time per pass against its flops, memory against the plan.

``npt.fit`` on the first n MNIST training rows (default all 60,000, pixels in
[0, 1], float64), RBF with gamma = 1 / (d var), tol 1e-8, r = 2,000 by
default, and every other option at its default: the memory budget (a sixth
of physical memory), the fit plan's block width, basis cap, kept blocks and
basis location (``basis="auto"``: off the driver when the basis does not fit
it). The GEMM rate (float64, 4096^2 product) is measured at start-up.

Each pass is timed (the kernel operator's ``matmat`` / ``chunked_matmat``);
the rest of the solver is the driver's algebra (re-orthogonalisation,
Rayleigh-Ritz checks, restarts, final Ritz vectors), split further into the
``eigh`` checks. Flops of a pass: the kernel blocks not kept (``2 d`` per
entry of the upper triangle, its product part) plus the block products
(``2 n^2 b``) plus the driver's CGS2 re-orthogonalisation (``8 n k b`` for k
basis columns); the ratio ``seconds / (flops / GEMM rate)`` is what the issue
bounds by 1.5. Peak RSS (this process: driver and threaded-scheduler tasks
together) is compared with the plan's ``driver_bytes + worker_bytes`` plus
``planning.FIXED_OVERHEAD`` above the RSS after loading the data.
Prints one JSON document.

    NPT_DATA_DIR=../shared/data python benchmarks/large_r.py [--n 60000] [--r 2000]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import gemm_rate, mnist_train


class _RssSampler(threading.Thread):
    """Peak RSS of this process, sampled every 0.2 s (ru_maxrss covers it all)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        proc = psutil.Process()
        while not self.stop.wait(0.2):
            self.peak = max(self.peak, proc.memory_info().rss)


def _instrument(record: dict) -> None:
    """Time every pass and every Rayleigh-Ritz ``eigh``, and the basis width at each pass."""
    from npt_dask.engine import operator as operator_module
    from npt_dask.npt import eigen

    passes = record.setdefault("passes", [])
    checks = record.setdefault("eigh", [])

    def timed(name):
        original = getattr(operator_module.KernelOperator, name)

        def wrapper(self, v, *args):
            start = time.perf_counter()
            out = original(self, v, *args)
            passes.append((time.perf_counter() - start, int(v.shape[1])))
            return out

        setattr(operator_module.KernelOperator, name, wrapper)

    timed("matmat")
    timed("chunked_matmat")
    ritz = eigen._ritz

    def timed_ritz(t, need):
        start = time.perf_counter()
        out = ritz(t, need)
        checks.append((t.shape[0], round(time.perf_counter() - start, 2)))
        return out

    eigen._ritz = timed_ritz


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60_000)
    parser.add_argument("--r", type=int, default=2_000)
    parser.add_argument("--tol", type=float, default=1e-8)
    args = parser.parse_args()
    import npt_dask as npt
    from npt_dask.npt.planning import FIXED_OVERHEAD

    rate = gemm_rate()
    x, gamma = mnist_train(args.n)
    base = psutil.Process().memory_info().rss
    sampler = _RssSampler()
    sampler.start()
    record: dict = {}
    _instrument(record)
    start = time.perf_counter()
    model = npt.fit(x, gamma=gamma, n_components=args.r, solver="krylov", tol=args.tol,
                    max_passes=500, random_state=0, progress=True)  # fmt: skip
    seconds = time.perf_counter() - start
    sampler.stop.set()
    peak = max(sampler.peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    plan = model.diagnostics.plan
    n, d = x.shape
    kernel_flops = (1.0 - plan["cached_fraction"]) * (n * n / 2) * 2 * d
    pass_times = [t for t, _ in record["passes"]]
    per_pass, cols = [], 0
    for _, width in record["passes"]:
        cols = min(cols + width, plan["max_basis"])
        flops = kernel_flops + 2.0 * n * n * width + 8.0 * n * cols * width
        per_pass.append(flops / (rate * 1e9))
    solver_driver = seconds - sum(pass_times)
    allowed = plan["driver_bytes"] + plan["worker_bytes"] + FIXED_OVERHEAD
    report = {
        "n": n,
        "d": d,
        "r": args.r,
        "tol": args.tol,
        "gamma": gamma,
        "gemm_gflops_float64": round(rate, 1),
        "seconds": round(seconds, 1),
        "passes": len(pass_times),
        "pass_seconds_mean": round(sum(pass_times) / len(pass_times), 2),
        "pass_flops_seconds_mean": round(sum(per_pass) / len(per_pass), 2),
        "pass_seconds_over_flops": round(sum(pass_times) / sum(per_pass), 2),
        "pass_plus_driver_over_flops": round(seconds / sum(per_pass), 2),
        "passes_seconds": round(sum(pass_times), 1),
        "driver_seconds": round(solver_driver, 1),
        "eigh_seconds": round(sum(s for _, s in record["eigh"]), 1),
        "eigh_checks": record["eigh"],
        "max_residual": float(model.diagnostics.residuals.max()),
        "converged": bool(model.diagnostics.converged),
        "components": int(model.eigenvalues.size),
        "plan": plan,
        "planned_gib": round((plan["driver_bytes"] + plan["worker_bytes"]) / 2**30, 2),
        "allowed_gib": round(allowed / 2**30, 2),
        "peak_growth_gib": round((peak - base) / 2**30, 2),
        "within_plan": bool(peak - base <= allowed),
        "panels_on_disk_gib": round(plan["panel_bytes"] / 2**30, 2),
        "gemm_gflops_float64_end": round(gemm_rate(), 1),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
