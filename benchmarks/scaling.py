"""A scaling model of one Krylov pass, checked against distributed's transfer logs.

On paper, for a fit of ``(n, d, r)`` on ``W`` workers (row chunk ``c``, block
width ``b``, basis cap ``k`` from :func:`npt_dask.npt.eigen.krylov_shape`, kernel
blocks recomputed every pass as they must be at large n):

* **flops per pass**: kernel entries ``n^2 / 2`` (upper-triangle blocks, each
  used twice) at ``2 d + 60`` flop-equivalents each (matrix product plus the
  elementwise work, :data:`npt_dask.npt.planning.ELEMENTWISE_FLOPS`) and the two
  block products ``2 n^2 (b + 1)``; the driver's re-orthogonalisation
  ``8 n k b`` (CGS2 against a basis of ``k`` columns).
* **bytes per worker per pass** (what ``KernelOperator._pass_graph`` ships):
  V is broadcast (``ship_blocks``): every worker ends up with all of it,
  ``8 n b`` received; the pair tasks ``(i, j)``, ``i <= j``, read row chunks
  ``X_i, X_j``: a worker holding ``1/W`` of X fetches the rest it needs, at
  most ``(1 - 1/W) n d s`` (``s`` bytes per feature); each pair task returns
  two ``c x b`` partial products that fan-in-8 tree sums combine: ``n^2 b 8 / c``
  bytes of partial products per pass in all, ``8/7`` of that with the upper
  tree levels, of which ``(1 - 1/W)`` cross between workers, spread over W
  workers (sent and received). The driver sends ``8 n b`` (V, once; the
  replicas come from the workers) and receives ``8 n b`` (the row sums).
* **memory**: driver ``16 n k`` (basis Q and its image K Q) ``+ 8 k^2`` (T)
  ``+ 12 * 8 n b`` (work arrays); worker ``3 * 8 c^2`` per thread (a kernel
  block, its float64 copy, scratch) ``+ 8 n b`` (the V replica) ``+ n d s / W``
  (its share of X) ``+`` in-flight partial products.

``--validate`` runs passes of the real operator on a loopback LocalCluster
(processes, one thread each) and compares the bytes the workers report
sending and receiving (``Worker.transfer_outgoing_bytes_total`` and
``transfer_incoming_log``) with the model. ``--table`` extrapolates to
n = 1e6 and 1e7 on 8 / 64 / 512 workers. Prints JSON.

    python benchmarks/scaling.py --validate --table
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ELEMENTWISE = 60.0
FAN_IN = 8


SMOKE_ARGS = ["--table"]
"""A tiny run (``tests/architecture/test_benchmarks_smoke.py``): the on-paper table, no cluster."""


def model(
    n: int,
    d: int,
    r: int,
    workers: int,
    *,
    chunk: int = 4096,
    itemsize: int = 4,
    b: int | None = None,
    k: int | None = None,
    threads: int = 1,
    basis: str = "driver",
) -> dict:
    """Per-pass flops, bytes and memory of a recompute-mode Krylov pass.

    ``basis="chunked"`` (``npt.fit(basis="chunked")``): Q and K Q are row-chunked
    on the workers, so the re-orthogonalisation's ``8 n k b`` flops run there
    (``1/W`` each), the driver only all-reduces ``k x b`` coefficients, and its
    memory is the small matrices (:func:`npt_dask.npt.planning.small_bytes`) and the
    ``n x r`` result; each worker holds ``16 n k / W`` of basis.
    """
    from npt_dask.npt.eigen import krylov_shape
    from npt_dask.npt.planning import chunked_driver_bytes, panel_bytes, pass_bytes

    sb, sk = krylov_shape(n, r)
    b = b or sb
    k = k or sk
    nb = math.ceil(n / chunk)
    pairs = nb * (nb + 1) // 2
    entries = n * n / 2 + n * chunk / 2
    kernel = entries * (2 * d + ELEMENTWISE)
    products = 2.0 * n * n * (b + 1)
    chunked = basis == "chunked"
    reorth = 8.0 * n * k * b
    driver = 0.0 if chunked else reorth
    share = 1.0 - 1.0 / workers
    v = 8.0 * n * (b + 1)
    x_fetch = share * n * d * itemsize
    partial = 8.0 * n * n * (b + 1) / chunk * FAN_IN / (FAN_IN - 1) * share
    coefficients = 3 * 8.0 * k * b * 2 if chunked else 0.0  # CGS2 and T's columns, all-reduced
    per_worker_in = v * share + x_fetch + partial / workers + coefficients
    per_worker_out = per_worker_in  # what one receives another sends
    return {
        "n": n,
        "d": d,
        "r": r,
        "workers": workers,
        "chunk": chunk,
        "b": b,
        "basis": k,
        "pairs": pairs,
        "flops_kernel": kernel,
        "flops_products": products,
        "flops_driver": driver,
        "flops_reorth_per_worker": reorth / workers if chunked else 0.0,
        "basis_location": basis,
        "worker_in_bytes": per_worker_in,
        "worker_out_bytes": per_worker_out,
        "worker_in_v": v * share,
        "worker_in_x": x_fetch,
        "worker_in_partials": partial / workers,
        "driver_send_bytes": 0.0 if chunked else v,
        "driver_recv_bytes": 3 * 8.0 * k * b if chunked else 8.0 * n * b,
        "driver_memory": (
            chunked_driver_bytes(n, k, r)
            if chunked
            else 16.0 * n * k + 8.0 * k * k + 12 * 8.0 * n * b
        ),
        "worker_memory": 3 * 8.0 * chunk * chunk * threads
        + 8.0 * n * b
        + n * d * itemsize / workers
        + (panel_bytes(n, k, b, r) + pass_bytes(n, b)) / workers * chunked,
    }


def pass_time(m: dict, *, worker_gflops: float, link_gbs: float, driver_gflops: float) -> dict:
    """Seconds of one pass: the slowest of workers' compute, their links, the driver."""
    worker_flops = (m["flops_kernel"] + m["flops_products"]) / m["workers"]
    compute = (worker_flops + m["flops_reorth_per_worker"]) / (worker_gflops * 1e9)
    network = max(m["worker_in_bytes"], m["worker_out_bytes"]) / (link_gbs * 1e9)
    driver = m["flops_driver"] / (driver_gflops * 1e9) + (
        m["driver_send_bytes"] + m["driver_recv_bytes"]
    ) / (link_gbs * 1e9)
    return {
        "compute_s": compute,
        "network_s": network,
        "driver_s": driver,
        "pass_s": max(compute, network) + driver,
        "bound": max(
            (("compute", compute), ("network", network), ("driver", driver)), key=lambda t: t[1]
        )[0],
    }


def validate(n: int, chunk: int, r: int, b: int, workers_list: list[int], passes: int) -> list:
    """Bytes the workers move per pass on a LocalCluster, against the model."""
    import dask.array as da
    import numpy as np
    from distributed import Client, LocalCluster

    from benchmarks._common import mnist_train
    from npt_dask.engine.operator import KernelOperator
    from npt_dask.kernels import make_kernel

    x, gamma = mnist_train(n)
    x = x.astype(np.float32)
    d = x.shape[1]
    out = []
    for workers in workers_list:
        with (
            LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                memory_limit="2GiB",
            ) as cluster,
            Client(cluster) as client,
        ):
            xs = da.from_array(x, chunks=(chunk, d)).persist()
            kernel = make_kernel("rbf", gamma=gamma).resolve(d)
            op = KernelOperator(xs, kernel, center=True, cache="recompute")
            v = np.random.default_rng(0).standard_normal((n, b))
            op.matmat(v)  # first pass: row sums ride along

            def counters(dask_worker):
                incoming = sum(e.get("total", 0) for e in dask_worker.transfer_incoming_log)
                return incoming, dask_worker.transfer_outgoing_bytes_total

            before = client.run(counters)
            start = time.perf_counter()
            for _ in range(passes):
                op.matmat(v)
            seconds = (time.perf_counter() - start) / passes
            after = client.run(counters)
            measured_in = [(after[w][0] - before[w][0]) / passes for w in after]
            measured_out = [(after[w][1] - before[w][1]) / passes for w in after]
            m = model(n, d, r, workers, chunk=chunk, itemsize=4, b=b)
            out.append(
                {
                    "n": n,
                    "chunk": chunk,
                    "b": b,
                    "workers": workers,
                    "seconds_per_pass": round(seconds, 3),
                    "measured_in_mb_per_worker": [round(x / 1e6, 2) for x in measured_in],
                    "measured_out_mb_per_worker": [round(x / 1e6, 2) for x in measured_out],
                    "model_in_mb_per_worker": round(m["worker_in_bytes"] / 1e6, 2),
                    "model_parts_mb": {
                        "v": round(m["worker_in_v"] / 1e6, 2),
                        "x": round(m["worker_in_x"] / 1e6, 2),
                        "partials": round(m["worker_in_partials"] / 1e6, 2),
                    },
                    "measured_over_model": round(
                        float(np.mean(measured_in)) / m["worker_in_bytes"], 2
                    ),
                }
            )
            print(json.dumps(out[-1]), file=sys.stderr, flush=True)
    return out


def table(worker_gflops: float, link_gbs: float, driver_gflops: float) -> list:
    rows = []
    grid = itertools.product(
        (1_000_000, 10_000_000), (100, 1000), (8, 64, 512), ("driver", "chunked")
    )
    for n, r, workers, basis in grid:
        m = model(n, 784, r, workers, chunk=4096, itemsize=4, basis=basis)
        t = pass_time(
            m, worker_gflops=worker_gflops, link_gbs=link_gbs, driver_gflops=driver_gflops
        )
        rows.append(
            {
                "n": n,
                "r": r,
                "workers": workers,
                "basis_location": basis,
                "b": m["b"],
                "basis": m["basis"],
                "pflop_per_pass": round((m["flops_kernel"] + m["flops_products"]) / 1e15, 2),
                "driver_gflop_per_pass": round(m["flops_driver"] / 1e9, 0),
                "worker_in_gb": round(m["worker_in_bytes"] / 1e9, 2),
                "worker_out_gb": round(m["worker_out_bytes"] / 1e9, 2),
                "driver_memory_gb": round(m["driver_memory"] / 1e9, 1),
                "worker_memory_gb": round(m["worker_memory"] / 1e9, 2),
                **{key: round(val, 1) if isinstance(val, float) else val for key, val in t.items()},
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validate", action="store_true")
    parser.add_argument("--table", action="store_true")
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--b", type=int, default=20)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--worker-gflops", type=float, default=1000.0, help="per worker (node)")
    parser.add_argument("--link-gbs", type=float, default=1.25, help="GB/s per worker link")
    parser.add_argument("--driver-gflops", type=float, default=100.0)
    args = parser.parse_args()
    report: dict = {
        "assumptions": {
            "worker_gflops": args.worker_gflops,
            "link_gb_per_s": args.link_gbs,
            "driver_gflops": args.driver_gflops,
            "d": 784,
            "chunk": 4096,
            "x_itemsize": 4,
            "cache": "recompute",
        }
    }
    if args.validate:
        report["validation"] = validate(args.n, args.chunk, 20, args.b, args.workers, args.passes)
    if args.table:
        report["table"] = table(args.worker_gflops, args.link_gbs, args.driver_gflops)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
