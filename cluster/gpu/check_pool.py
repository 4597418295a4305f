"""Check a GPU cluster's memory: CuPy allocates from each worker's RMM pool, and the fit's
default device budget is read on the workers.

Starts ``npt.connect(gpu=True, rmm_pool_size=...)`` (one worker per GPU), allocates a
little on each worker with CuPy, and prints one JSON object: per worker, whether CuPy's
allocator is RMM's, the pool's size and the GPU's free memory; and the default device
budget (:func:`npt_dask.arrays.device.device_memory_budget`, the least worker's)::

    python cluster/gpu/check_pool.py --rmm-pool-size 16GB [--devices 0]

Exit status 0 when every worker's CuPy allocates from its pool, 1 when one does not, 2
when the cluster cannot start (the one-line reason on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["main", "worker_memory"]


def worker_memory() -> dict[str, Any]:
    """On a worker: CuPy's allocator, the RMM pool's size, the GPU's free bytes, after a
    64 MiB CuPy allocation (taken from the pool when the allocator is RMM's)."""
    import cupy
    from distributed.diagnostics import rmm as rmm_diagnostics
    from rmm.allocators.cupy import rmm_cupy_allocator

    block = cupy.ones(2**23)  # 64 MiB
    found = {
        "cupy_allocates_from_rmm": cupy.cuda.get_allocator() is rmm_cupy_allocator,
        "rmm_pool_bytes": rmm_diagnostics.real_time()["rmm-total"],
        "device_free_bytes": int(cupy.cuda.Device().mem_info[0]),
    }
    del block
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rmm-pool-size", default="16GB", help="pool per worker, e.g. 60GB")
    parser.add_argument("--devices", help="GPUs to use, e.g. 0,1 (default: all visible)")
    args = parser.parse_args(argv)
    import npt_dask as npt
    from npt_dask.arrays.device import device_memory_budget

    try:
        client = npt.connect(gpu=True, rmm_pool_size=args.rmm_pool_size,
                             cuda_visible_devices=args.devices, show_dashboard=False)  # fmt: skip
    except npt.NPTError as exc:
        print(f"cluster/gpu/check_pool.py: error: {exc}", file=sys.stderr)
        return 2
    with client:
        workers = client.run(worker_memory)
        budget = device_memory_budget(client=client)
    gib = None if budget is None else round(budget / 2**30, 2)
    report = {"rmm_pool_size": args.rmm_pool_size, "workers": workers,
              "device_memory_budget_gib": gib}  # fmt: skip
    print(json.dumps(report, indent=2))
    return 0 if all(w["cupy_allocates_from_rmm"] for w in workers.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
