"""The Krylov basis off the driver: chunked panels equal the driver's.

References: the driver path (numpy panels) and dense ``eigh``. The chunked
panels run on local disk (threaded scheduler) and on a ``distributed``
cluster's workers; the plan moves the basis off the driver when the budget
is tight; and the driver's peak RSS stays flat while n grows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.linalg

import npt_dask as npt
from npt_dask.engine.operator import KernelOperator
from npt_dask.kernels import make_kernel
from npt_dask.npt.eigen import DriverPanels, block_krylov_eigh
from npt_dask.npt.panels import ChunkedPanels
from npt_dask.npt.planning import FIXED_OVERHEAD, basis_bytes, plan_fit
from tests.conftest import REPO, align_signs, centered_gram

CHUNKS = (400, 300, 517, 283)  # irregular on purpose
MIB = 2**20


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return np.random.default_rng(5).normal(size=(sum(CHUNKS), 6))


def _solve(x, panels_kind, tmp_path, **kw):
    spec = make_kernel("rbf", gamma=0.3)
    op = KernelOperator(da.from_array(x, chunks=(CHUNKS, -1)), spec)
    if panels_kind == "driver":
        panels = DriverPanels(op.matmat, x.shape[0], CHUNKS)
    else:
        panels = ChunkedPanels(op.chunked_matmat, CHUNKS, kw["block_size"], str(tmp_path))
    try:
        result = block_krylov_eigh(None, x.shape[0], panels=panels, random_state=1, **kw)
    finally:
        if isinstance(panels, ChunkedPanels):
            panels.close()
    return result, op, panels


@pytest.mark.parametrize("max_basis", [None, 90])  # 90: thick restarts with locking
def test_chunked_panels_equal_driver_panels_and_dense(rows, tmp_path, max_basis):
    kw = {"n_components": 30, "block_size": 12, "tol": 1e-11, "max_basis": max_basis}
    ref, op_ref, _ = _solve(rows, "driver", tmp_path, **kw)
    got, op, panels = _solve(rows, "chunked", tmp_path, **kw)
    assert got.passes == ref.passes
    assert got.info["restarts"] == ref.info["restarts"]
    if max_basis:
        assert got.info["restarts"] > 0
        assert got.info["locked"] > 0
    np.testing.assert_allclose(got.eigenvalues, ref.eigenvalues, rtol=0, atol=1e-10)
    # the solver leaves signs to select_eigenpairs: compare sign-invariantly
    aligned = align_signs(got.eigenvectors, ref.eigenvectors)
    np.testing.assert_allclose(aligned, ref.eigenvectors, rtol=0, atol=1e-10)
    np.testing.assert_allclose(op.row_means, op_ref.row_means, rtol=0, atol=1e-13)
    assert got.residuals.max() <= 1e-11
    dense = scipy.linalg.eigh(centered_gram(make_kernel("rbf", gamma=0.3)(rows, rows)))
    top = dense[0][::-1][:30]
    np.testing.assert_allclose(got.eigenvalues, top, rtol=0, atol=1e-10 * top[0])
    vecs = dense[1][:, ::-1][:, :30]
    np.testing.assert_allclose(align_signs(got.eigenvectors, vecs), vecs, atol=1e-7)
    assert panels.writes > 3 * got.passes  # every tall panel went through the store
    assert not os.listdir(tmp_path)  # closed: the scratch directory is gone


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fit_with_chunked_basis_equals_driver_basis(rows, dtype):
    x = da.from_array(rows.astype(dtype), chunks=(CHUNKS, -1))
    kw = {"gamma": 0.3, "n_components": 25, "solver": "krylov", "random_state": 4,
          "chunk_size": None, "tol": 1e-10 if dtype == np.float64 else 1e-6}  # fmt: skip
    ref = npt.fit(x, basis="driver", **kw)
    got = npt.fit(x, basis="chunked", **kw)
    assert got.diagnostics.passes == ref.diagnostics.passes
    assert got.diagnostics.plan["basis"] == "chunked"
    assert got.diagnostics.plan["basis_home"] == "disk"
    assert ref.diagnostics.plan["basis"] == "driver"
    np.testing.assert_allclose(got.eigenvalues, ref.eigenvalues, rtol=1e-12)
    np.testing.assert_allclose(got.eigenvectors, ref.eigenvectors, rtol=0, atol=1e-10)
    z = rows[:40].astype(dtype)
    np.testing.assert_allclose(got.transform(z), ref.transform(z), rtol=0, atol=1e-9)


def test_warm_start_with_chunked_basis(rows):
    x = da.from_array(rows, chunks=(CHUNKS, -1))
    kw = {"gamma": 0.3, "n_components": 20, "solver": "krylov", "chunk_size": None,
          "tol": 1e-10, "random_state": 2}  # fmt: skip
    start = npt.fit(x, landmarks=300, **kw)
    ref = npt.fit(x, start=start, basis="driver", **kw)
    got = npt.fit(x, start=start, basis="chunked", **kw)
    assert got.diagnostics.plan["basis"] == "chunked"
    np.testing.assert_allclose(got.eigenvalues, ref.eigenvalues, rtol=1e-12)
    np.testing.assert_allclose(got.eigenvectors, ref.eigenvectors, rtol=0, atol=1e-10)


def test_basis_on_cluster_workers_equals_driver(rows):
    from distributed import Client, LocalCluster

    x = da.from_array(rows, chunks=(CHUNKS, -1))
    kw = {"gamma": 0.3, "n_components": 25, "solver": "krylov", "random_state": 4,
          "chunk_size": None, "tol": 1e-10}  # fmt: skip
    ref = npt.fit(x, basis="driver", **kw)
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        got = npt.fit(x, basis="chunked", **kw)
    assert got.diagnostics.plan["basis_home"] == "workers"
    np.testing.assert_allclose(got.eigenvalues, ref.eigenvalues, rtol=1e-12)
    np.testing.assert_allclose(got.eigenvectors, ref.eigenvectors, rtol=0, atol=1e-10)


def test_plan_moves_the_basis_off_the_driver_only_when_it_must():
    kw = {"n": 200_000, "d": 50, "n_components": 300, "row_chunks": [2000] * 100,
          "itemsize": 8, "threads": 2}  # fmt: skip
    roomy = plan_fit(memory_budget=64 * 2**30, **kw)
    assert roomy.basis == "driver"
    assert roomy.panel_bytes == 0
    tight = plan_fit(memory_budget=2 * 2**30, **kw)
    assert tight.basis == "chunked"
    assert tight.basis_home == "disk"
    assert tight.max_basis == roomy.max_basis  # the solver keeps its full basis
    assert basis_bytes(200_000, tight.max_basis) > 2 * 2**30  # which would not fit here
    assert tight.driver_bytes + tight.worker_bytes <= 2 * 2**30
    assert tight.panel_bytes >= basis_bytes(200_000, tight.max_basis)
    assert plan_fit(memory_budget=2 * 2**30, cluster=True, **kw).basis_home == "workers"
    forced = plan_fit(memory_budget=64 * 2**30, basis="chunked", **kw)
    assert forced.basis == "chunked"
    capped = plan_fit(memory_budget=6 * 2**30, basis="driver", **kw)
    assert capped.basis == "driver"
    assert capped.max_basis < roomy.max_basis
    assert plan_fit(memory_budget=6 * 2**30, **kw).basis == "chunked"  # auto: full basis
    with pytest.raises(ValueError, match="basis='chunked'"):  # the refusal names the way out
        plan_fit(memory_budget=2 * 2**30, basis="auto", **(kw | {"row_chunks": [20_000] * 10}))


def test_bad_basis_value_is_refused_before_work():
    wording = r"The 'basis' parameter must be one of 'auto', 'driver', 'chunked'\. Got 'gpu'"
    with pytest.raises(ValueError, match=wording):
        npt.fit(np.zeros((10, 2)), n_components=2, basis="gpu")


_CHILD = """
import contextlib, json, threading, numpy as np, psutil, npt_dask as npt
from distributed import Client, LocalCluster


def sampled(fn):
    # peak RSS of this process while fn runs, sampled every 5 ms (ru_maxrss would also
    # count what happened before, e.g. while the cluster started)
    proc, peak, done = psutil.Process(), [0], threading.Event()
    def watch():
        while not done.wait(0.005):
            peak[0] = max(peak[0], proc.memory_info().rss)
    base = proc.memory_info().rss
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        out = fn()
    finally:
        done.set()
        thread.join()
    return out, max(peak[0], base) - base


if __name__ == "__main__":
    with contextlib.ExitStack() as stack:
        cluster = {cluster}
        if cluster is not None:
            stack.enter_context(cluster)
            stack.enter_context(Client(cluster))
        x = np.random.default_rng(0).normal(size=({n}, 8))
        model, growth = sampled(lambda: npt.fit(
            x, "rbf", gamma=0.05, n_components=10, solver="krylov", chunk_size=2000,
            memory_budget={budget}, basis="{basis}", block_size=60, max_basis=600,
            max_passes=6, random_state=0, cache="recompute"))
        print(json.dumps({{"growth": growth, "plan": model.diagnostics.plan}}))
"""
_LOCAL_CLUSTER = (
    "LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)"
)


def _growth(n: int, basis: str, *, cluster: bool = False, budget: int = 256 * MIB) -> dict:
    code = _CHILD.format(
        n=n, budget=budget, basis=basis, cluster=_LOCAL_CLUSTER if cluster else "None"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
        check=True, cwd=REPO, env=env,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_peak_rss_within_plan_with_the_basis_on_local_disk():
    """Threaded scheduler: the driver and the tasks share this process; both in the plan."""
    for n in (8_000, 24_000):
        run = _growth(n, "chunked")
        plan = run["plan"]
        assert plan["basis"] == "chunked"
        assert plan["basis_home"] == "disk"
        assert run["growth"] <= plan["driver_bytes"] + plan["worker_bytes"] + FIXED_OVERHEAD, run


@pytest.mark.slow  # test_basis_on_cluster_workers_equals_driver (the basis on the workers)
# and test_peak_rss_within_plan_with_the_basis_on_local_disk (RSS within the plan) cover it
def test_driver_peak_rss_stays_flat_while_n_grows_on_a_cluster():
    """The driver (the client process) with the basis on the workers: 6 passes of 60
    columns, n = 8,000 then 24,000. On the driver the basis alone would grow by
    16,000 x 2 x 360 x 8 bytes = 92 MB (its work arrays as much again); chunked, the
    driver holds 10 columns of result and 600 x 600 matrices, and the graphs' and the
    client's own buffers."""
    small = _growth(8_000, "chunked", cluster=True)
    large = _growth(24_000, "chunked", cluster=True)
    assert large["plan"]["basis_home"] == "workers"
    grown = large["growth"] - small["growth"]
    driver = _growth(24_000, "driver", cluster=True, budget=2**30)
    assert driver["plan"]["basis"] == "driver"
    assert grown < 0.5 * basis_bytes(16_000, 6 * 60), (small, large)
    assert driver["growth"] - large["growth"] > basis_bytes(24_000, 6 * 60), (driver, large)


def test_synchronous_scheduler_uses_disk_panels(rows):
    x = da.from_array(rows[:900], chunks=(300, -1))
    with dask.config.set(scheduler="sync"):
        got = npt.fit(x, gamma=0.3, n_components=8, solver="krylov", basis="chunked",
                      chunk_size=None, random_state=0, tol=1e-10)  # fmt: skip
    assert got.diagnostics.plan["basis_home"] == "disk"
    ref = npt.fit(x, gamma=0.3, n_components=8, solver="krylov", basis="driver",
                  chunk_size=None, random_state=0, tol=1e-10)  # fmt: skip
    np.testing.assert_allclose(got.eigenvalues, ref.eigenvalues, rtol=1e-12)
