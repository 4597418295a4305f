"""``npt.connect(gpu=True, rmm_pool_size=...)`` and the device budget read on the workers.

No GPU is needed: ``dask_cuda``, ``rmm`` and ``cupy`` are stand-in modules put in
``sys.modules``. The stand-in ``LocalCUDACluster`` records its arguments and starts a
``LocalCluster`` of in-process workers, so the worker plugin that hands the RMM pool to
CuPy really runs on workers, and ``client.run`` really reads each worker's GPU.
"""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types

import array_api_strict
import distributed.diagnostics.rmm
import numpy as np
import pytest
from distributed import Client, LocalCluster

import npt_dask as npt
from npt_dask.arrays import device
from npt_dask.arrays.device import device_memory_budget
from npt_dask.engine.budget import default_device_budget
from npt_dask.runtime.cluster import CupyFromRMMPool, connect
from tests._clusters import recipe

GB = 10**9


class _Pool:
    """rmm.mr.PoolMemoryResource as distributed's RMM reading sees it."""

    def __init__(self, size: int) -> None:
        self.size = size

    def pool_size(self) -> int:
        return self.size


class _Tracking:
    """rmm.mr.TrackingResourceAdaptor over a pool: it knows the bytes handed out."""

    def __init__(self, upstream: _Pool, used: int) -> None:
        self.upstream_mr = upstream
        self.used = used

    def get_allocated_bytes(self) -> int:
        return self.used


def _default_allocator(nbytes):  # CuPy's own (its memory pool's malloc)
    raise AssertionError("not called")


def _stack(monkeypatch, *, free=20 * GB, cached=GB, pool=60 * GB, used=None, rmm=True):
    """Stand-in ``cupy`` and ``rmm`` (a pool of ``pool`` bytes, ``used`` handed out when
    a tracking adaptor knows), in ``sys.modules`` and in distributed's RMM reading."""
    cuda = types.SimpleNamespace(allocator=_default_allocator)
    cuda.Device = lambda *_: types.SimpleNamespace(mem_info=(free, 80 * GB))
    cuda.set_allocator = lambda allocator: setattr(cuda, "allocator", allocator)
    cuda.get_allocator = lambda: cuda.allocator
    cupy = types.ModuleType("cupy")
    cupy.is_available = lambda: True
    cupy.cuda = cuda
    cupy.ones = lambda n: np.ones(4)
    cupy.get_default_memory_pool = lambda: types.SimpleNamespace(free_bytes=lambda: cached)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    if not rmm:
        for name in ("rmm", "rmm.allocators", "rmm.allocators.cupy"):
            monkeypatch.setitem(sys.modules, name, None)
        return cupy, None
    allocators = types.ModuleType("rmm.allocators.cupy")
    allocators.rmm_cupy_allocator = lambda nbytes: ("from the pool", nbytes)
    resource = _Pool(pool) if used is None else _Tracking(_Pool(pool), used)
    module = types.ModuleType("rmm")
    module.mr = types.SimpleNamespace(
        PoolMemoryResource=_Pool, get_current_device_resource=lambda: resource
    )
    module.allocators = types.SimpleNamespace(cupy=allocators)
    monkeypatch.setitem(sys.modules, "rmm", module)
    monkeypatch.setitem(sys.modules, "rmm.allocators", module.allocators)
    monkeypatch.setitem(sys.modules, "rmm.allocators.cupy", allocators)
    monkeypatch.setattr(distributed.diagnostics.rmm, "rmm", module)
    return cupy, allocators.rmm_cupy_allocator


@pytest.fixture
def cuda_cluster(monkeypatch):
    """A stand-in ``dask_cuda``: its ``LocalCUDACluster`` records the arguments it was
    given and starts two in-process workers (or raises ``fails``)."""
    seen: dict = {}

    def local_cuda_cluster(**options):
        seen.update(options)
        if "fails" in seen:
            raise seen["fails"]
        return LocalCluster(n_workers=2, processes=False, dashboard_address=None)

    monkeypatch.setitem(
        sys.modules, "dask_cuda", types.SimpleNamespace(LocalCUDACluster=local_cuda_cluster)
    )
    return seen


def _cupy_allocates_from_rmm() -> bool:
    allocator = sys.modules["rmm.allocators.cupy"].rmm_cupy_allocator
    return sys.modules["cupy"].cuda.get_allocator() is allocator


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    return text


# --- connect(gpu=True, rmm_pool_size=...) -----------------------------------------------------


def test_pool_without_rmm_is_refused_in_one_line_before_any_worker(monkeypatch, cuda_cluster,
                                                                   tmp_path):  # fmt: skip
    _stack(monkeypatch, rmm=False)
    with pytest.raises(npt.DeviceError) as refused:
        connect(gpu=True, rmm_pool_size="60GB", local_directory=tmp_path)
    text = _one_line(refused)
    for needed in ("rmm_pool_size='60GB'", "rmm-cu13 or rmm-cu12", "pip install 'npt-dask[gpu]'",
                   "'npt-dask[gpu-cu12]'", "rmm_pool_size=None"):  # fmt: skip
        assert needed in text, needed
    assert cuda_cluster == {}  # dask-cuda was never asked


def test_pool_without_cupy_is_refused_naming_it(monkeypatch, cuda_cluster, tmp_path):
    _stack(monkeypatch)
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(npt.DeviceError, match=r"CuPy is not installed here: pip install") as no:
        connect(gpu=True, rmm_pool_size=GB, local_directory=tmp_path)
    _one_line(no)
    assert cuda_cluster == {}


def test_an_rmm_that_does_not_import_says_why(monkeypatch, cuda_cluster, tmp_path):
    _stack(monkeypatch)
    monkeypatch.delitem(sys.modules, "rmm")

    class Broken:  # rmm installed, but its CUDA library missing
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "rmm":
                return importlib.machinery.ModuleSpec("rmm", Broken)
            return None

        @staticmethod
        def create_module(spec):
            return None

        @staticmethod
        def exec_module(module):
            raise ImportError("libcuda.so.1: cannot open shared object file")

    monkeypatch.setattr(sys, "meta_path", [Broken, *sys.meta_path])
    with pytest.raises(npt.DeviceError) as broken:
        connect(gpu=True, rmm_pool_size="60GB", local_directory=tmp_path)
    assert "rmm does not import (ImportError: libcuda.so.1: cannot open" in _one_line(broken)
    assert cuda_cluster == {}


@pytest.mark.parametrize("size", ["lots", "0GB", -1, 0, 1.5, True, [1]])
def test_unreadable_pool_sizes_are_refused_before_any_worker(size, monkeypatch, cuda_cluster,
                                                             tmp_path):  # fmt: skip
    _stack(monkeypatch)
    with pytest.raises(npt.InputError, match=r"is not a pool size: give bytes, a size such as"):
        connect(gpu=True, rmm_pool_size=size, local_directory=tmp_path)
    assert cuda_cluster == {}


@pytest.mark.parametrize(
    ("raised", "error", "says"),
    [
        (ValueError("RMM pool or managed memory requested but module 'rmm' is not available.\n"
                    "For installation instructions, please see https://github.com/rapidsai/rmm"),
         npt.DeviceError, "ValueError: RMM pool or managed memory requested but module 'rmm'"),
        (ValueError("Can not scale beyond visible devices", [0]),
         npt.ClusterError, "more workers than there are visible GPUs"),
        (RuntimeError("Nanny failed to start.\nTraceback ..."),
         npt.DeviceError, "(RuntimeError: Nanny failed to start.). Check that a CUDA device"),
        (MemoryError("std::bad_alloc: out_of_memory: RMM failure"),
         npt.DeviceError, "that rmm_pool_size fits in each GPU's memory"),
    ],
)  # fmt: skip
def test_dask_cuda_errors_become_one_line_naming_the_fix(raised, error, says, monkeypatch,
                                                         cuda_cluster, tmp_path):  # fmt: skip
    _stack(monkeypatch)
    cuda_cluster["fails"] = raised
    with pytest.raises(error) as failed:
        connect(gpu=True, rmm_pool_size="60GB", n_workers=3, local_directory=tmp_path)
    assert says in _one_line(failed)
    assert failed.value.__cause__ is raised  # the original kept for a traceback


def test_the_pool_reaches_dask_cuda_and_cupy_on_every_worker(monkeypatch, cuda_cluster,
                                                              tmp_path):  # fmt: skip
    cupy, rmm_allocator = _stack(monkeypatch)
    with connect(gpu=True, rmm_pool_size="60GB", local_directory=tmp_path,
                 show_dashboard=False) as client:  # fmt: skip
        assert cuda_cluster["rmm_pool_size"] == "60GB"
        on_rmm = client.run(_cupy_allocates_from_rmm)  # (a closure would travel as a copy)
        assert list(on_rmm.values()) == [True, True]
        client.cluster.scale(3)  # a worker that joins later takes it too
        client.wait_for_workers(3, timeout=30)
        plugged = client.run(lambda dask_worker: CupyFromRMMPool.name in dask_worker.plugins)
        assert list(plugged.values()) == [True, True, True]
    assert cupy.cuda.get_allocator() is rmm_allocator


def test_without_a_pool_cupy_keeps_its_allocator(monkeypatch, cuda_cluster, tmp_path):
    cupy, _ = _stack(monkeypatch)
    with connect(gpu=True, local_directory=tmp_path, show_dashboard=False) as client:
        plugged = client.run(lambda dask_worker: CupyFromRMMPool.name in dask_worker.plugins)
        assert list(plugged.values()) == [False, False]
    assert cuda_cluster["rmm_pool_size"] is None
    assert cupy.cuda.get_allocator() is _default_allocator


def test_workers_that_cannot_take_the_pool_close_the_cluster_with_one_line(monkeypatch,
                                                                          cuda_cluster,
                                                                          tmp_path):  # fmt: skip
    _stack(monkeypatch)
    started = []

    def local_cuda_cluster(**options):
        cluster = LocalCluster(n_workers=1, processes=False, dashboard_address=None)
        started.append(cluster)
        monkeypatch.setitem(sys.modules, "rmm.allocators.cupy", None)  # breaks on the worker
        return cluster

    monkeypatch.setattr(sys.modules["dask_cuda"], "LocalCUDACluster", local_cuda_cluster)
    with pytest.raises(npt.ClusterError, match="could not hand them to CuPy") as failed:
        connect(gpu=True, rmm_pool_size="60GB", local_directory=tmp_path, show_dashboard=False)
    assert "ModuleNotFoundError: import of rmm.allocators.cupy" in _one_line(failed)
    assert started[0].status.name == "closed"


def test_the_pool_check_recipe_reports_each_worker(monkeypatch, cuda_cluster, capsys):
    _stack(monkeypatch, free=18 * GB, cached=0, pool=60 * GB)
    check = recipe("gpu/check_pool.py")
    assert check.main(["--rmm-pool-size", "60GB"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert cuda_cluster["rmm_pool_size"] == "60GB"
    assert len(report["workers"]) == 2
    for worker in report["workers"].values():
        assert worker == {"cupy_allocates_from_rmm": True, "rmm_pool_bytes": 60 * GB,
                          "device_free_bytes": 18 * GB}  # fmt: skip
    assert report["device_memory_budget_gib"] == round(0.75 * 78 * GB / 2**30, 2)
    monkeypatch.setitem(sys.modules, "rmm", None)
    assert check.main(["--rmm-pool-size", "60GB"]) == 2
    assert "check_pool.py: error: connect(gpu=True, rmm_pool_size='60GB')" in (
        capsys.readouterr().err)  # fmt: skip


# --- the device budget, read on the workers --------------------------------------------------


@pytest.fixture
def two_workers():
    with (
        LocalCluster(n_workers=2, processes=False, dashboard_address=None) as cluster,
        Client(cluster, set_as_default=True) as client,
    ):
        yield client


def test_budget_is_the_least_reading_of_the_workers_gpus(monkeypatch, two_workers):
    addresses = sorted(two_workers.scheduler_info()["workers"])
    readings = dict(zip(addresses, [40 * GB, 16 * GB], strict=True))

    def on_worker(dask_worker):  # dask_worker is given on a worker only: not read here
        return readings[dask_worker.address]

    monkeypatch.setattr(device, "_free_device_bytes", on_worker)
    assert device_memory_budget(client=two_workers) == 12 * GB
    assert device_memory_budget(0.5, client=two_workers) == 8 * GB
    rows = array_api_strict.asarray(np.ones((4, 2)))  # rows off numpy: a device budget
    assert default_device_budget(rows) == 12 * GB  # the client in force is asked
    readings[addresses[0]] = None  # a worker without a GPU is left out
    assert device_memory_budget(client=two_workers) == 12 * GB
    readings[addresses[1]] = None
    assert device_memory_budget(client=two_workers) is None


def test_a_pool_cupy_allocates_from_counts_as_free(monkeypatch):
    cupy, rmm_allocator = _stack(monkeypatch, free=18 * GB, cached=2 * GB, pool=60 * GB)
    assert device_memory_budget(1.0) == 20 * GB  # CuPy's own allocator: not the pool's
    cupy.cuda.set_allocator(rmm_allocator)
    assert device_memory_budget(1.0) == 80 * GB  # device 18 + CuPy's cache 2 + pool 60
    assert device_memory_budget() == 60 * GB


def test_a_tracked_pool_counts_what_it_has_not_handed_out(monkeypatch, two_workers):
    cupy, rmm_allocator = _stack(monkeypatch, free=18 * GB, cached=0, pool=60 * GB,
                                 used=45 * GB)  # fmt: skip
    cupy.cuda.set_allocator(rmm_allocator)
    assert device_memory_budget(1.0) == 33 * GB
    assert device_memory_budget(1.0, client=two_workers) == 33 * GB  # the same, on workers


def test_no_gpu_on_the_workers_gives_no_budget(monkeypatch, two_workers):
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert device_memory_budget(client=two_workers) is None
