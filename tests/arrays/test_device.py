"""Choosing the device: ``to_device``, ``--device``, a pipeline's ``device``, ``connect(gpu=True)``.

No GPU is needed: CuPy's absence is forced (``sys.modules["cupy"] = None``, so the refusals
hold on any machine), and a stand-in ``cupy`` module (numpy arrays of a marked subclass)
checks what the GPU path does with the chunks.
"""

from __future__ import annotations

import sys
import types

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from distributed import LocalCluster

import npt_dask as npt
from npt_dask.arrays.device import check_device, device_memory_budget, to_device
from npt_dask.interface import cli
from npt_dask.interface.pipeline import PipelineConfig, run
from npt_dask.runtime.cluster import connect


class _OnDevice(np.ndarray):
    """A numpy array marked as the stand-in CuPy's."""


def _fake_cupy(available: bool = True, free: int = 8 * 2**30) -> types.ModuleType:
    cupy = types.ModuleType("cupy")
    cupy.is_available = lambda: available
    cupy.asarray = lambda a: np.asarray(a).view(_OnDevice)
    cupy.empty = lambda shape, dtype=None: np.empty(shape, dtype).view(_OnDevice)
    device = types.SimpleNamespace(mem_info=(free, 2 * free))
    cupy.cuda = types.SimpleNamespace(Device=lambda *_: device)
    return cupy


@pytest.fixture
def no_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError


@pytest.fixture
def fake_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())


# --- to_device ---------------------------------------------------------------------------


def test_cpu_leaves_the_rows_as_they_are():
    x = da.ones((10, 3), chunks=4)
    assert to_device(x, "cpu") is x
    assert to_device(x, None) is x


def test_gpu_without_cupy_is_refused_naming_the_extra(no_cupy):
    with pytest.raises(npt.DeviceError, match=r"needs CuPy.*pip install 'npt-dask\[gpu\]'"):
        to_device(np.ones((4, 2)), "gpu")
    assert device_memory_budget() is None


def test_gpu_without_a_cuda_device_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(available=False))
    with pytest.raises(npt.DeviceError, match="found no CUDA device"):
        check_device("gpu")
    assert device_memory_budget() is None


def test_unknown_device_is_refused():
    with pytest.raises(npt.InputError, match=r"'device' parameter must be one of 'cpu', 'gpu'"):
        to_device(np.ones((2, 2)), "cuda")


def test_gpu_moves_each_chunk_and_sets_the_meta(fake_cupy):
    x = da.from_array(np.arange(24.0).reshape(8, 3), chunks=(3, 3))
    moved = to_device(x, "gpu")
    assert isinstance(moved, da.Array)
    assert type(moved._meta) is _OnDevice  # dask knows the chunks are the device's
    assert moved.chunks == x.chunks
    assert moved.dtype == x.dtype
    blocks = [moved.blocks[i].compute(scheduler="sync") for i in range(moved.numblocks[0])]
    assert all(type(b) is _OnDevice for b in blocks)
    np.testing.assert_array_equal(np.vstack(blocks), x.compute())


def test_gpu_takes_numpy_and_dataarrays(fake_cupy):
    rows = np.random.default_rng(0).normal(size=(10, 2)).astype(np.float32)
    moved = to_device(rows, "gpu", chunk_rows=4)
    assert moved.chunks == ((4, 4, 2), (2,))
    assert moved.dtype == np.float32
    labelled = xr.DataArray(rows, dims=("sample", "feature"), coords={"sample": np.arange(10)})
    on_device = to_device(labelled, "gpu")
    assert isinstance(on_device, xr.DataArray)
    assert type(on_device.data._meta) is _OnDevice
    np.testing.assert_array_equal(on_device["sample"], np.arange(10))
    np.testing.assert_array_equal(np.asarray(on_device.data.compute(scheduler="sync")), rows)


def test_device_budget_is_a_share_of_the_free_memory(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(free=4 * 2**30))
    assert device_memory_budget() == 3 * 2**30
    assert device_memory_budget(share=0.5) == 2 * 2**30


# --- the command line ----------------------------------------------------------------------


@pytest.fixture
def rows(tmp_path):
    path = tmp_path / "train.npy"
    np.save(path, np.random.default_rng(1).normal(size=(40, 3)))
    return path


@pytest.mark.parametrize("command", ["fit", "project", "ridge", "grow"])
def test_cli_gpu_without_cupy_is_refused_before_any_write(command, rows, tmp_path, no_cupy,
                                                          capsys):  # fmt: skip
    out = tmp_path / "out.zarr"
    args = {
        "fit": ["fit", str(rows), "--out", str(out)],
        "project": ["project", str(tmp_path / "model.zarr"), str(rows), "--out", str(out)],
        "ridge": ["ridge", str(rows), "--labels", str(rows), "--predictions", str(out)],
        "grow": ["grow", str(tmp_path / "model.zarr"), str(rows), "--out", str(out)],
    }[command]
    assert cli.main([*args, "--device", "gpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"npt {command}: error: --device gpu needs CuPy" in err
    assert "pip install 'npt-dask[gpu]'" in err
    assert "--device cpu" in err
    assert list(tmp_path.iterdir()) == [rows]  # nothing written


def test_cli_device_cpu_fits_as_without(rows, tmp_path, capsys):
    argv = ["fit", str(rows), "--gamma", "0.5", "--n-components", "3", "--quiet", "--out"]
    assert cli.main([*argv, str(tmp_path / "cpu.zarr"), "--device", "cpu"]) == 0
    assert cli.main([*argv, str(tmp_path / "default.zarr")]) == 0
    on_cpu, default = npt.load(tmp_path / "cpu.zarr"), npt.load(tmp_path / "default.zarr")
    np.testing.assert_array_equal(on_cpu.eigenvalues, default.eigenvalues)


def test_cli_rejects_an_unknown_device(rows, tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["fit", str(rows), "--out", str(tmp_path / "m.zarr"), "--device", "cuda"])
    assert "invalid choice: 'cuda'" in capsys.readouterr().err


# --- pipelines -----------------------------------------------------------------------------

MOONS = {
    "name": "moons-gpu",
    "data": {"source": "moons", "n_samples": 60},
    "model": {"kernel": "rbf", "gamma": 2.0, "n_components": 3},
    "methods": [{"name": "kpca"}],
}


def test_config_device_key_round_trips_and_is_checked():
    config = PipelineConfig.from_dict({**MOONS, "device": "gpu"})
    assert config.device == "gpu"
    assert PipelineConfig.from_dict(config.to_dict()) == config
    assert PipelineConfig.from_dict(MOONS).device is None
    with pytest.raises(npt.InputError, match=r"top level.*'device' parameter must be one of"):
        PipelineConfig.from_dict({**MOONS, "device": "cuda"})


def test_pipeline_gpu_without_cupy_is_refused_before_any_write(tmp_path, no_cupy):
    out = tmp_path / "results"
    config = PipelineConfig.from_dict({**MOONS, "device": "gpu", "output": {"dir": str(out)}})
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster,
        cluster.get_client() as client,
        pytest.raises(npt.DeviceError, match=r"pip install 'npt-dask\[gpu\]'"),
    ):
        run(config, client=client, progress=False)
    assert not out.exists()


# --- connect(gpu=True) ---------------------------------------------------------------------


def test_connect_gpu_without_dask_cuda_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "dask_cuda", None)
    with pytest.raises(npt.DeviceError, match=r"dask-cuda is not installed.*npt-dask\[gpu\]"):
        connect(gpu=True, local_directory=tmp_path)


def test_connect_gpu_options_need_gpu_and_no_address():
    with pytest.raises(npt.InputError, match="pass gpu=True"):
        connect(rmm_pool_size="1GB")
    with pytest.raises(npt.InputError, match="cannot be used with an existing scheduler"):
        connect("tcp://127.0.0.1:8786", gpu=True)


def test_connect_gpu_starts_a_cuda_cluster_and_closes_it(monkeypatch, tmp_path):
    seen = {}

    def cuda_cluster(**options):  # dask-cuda's LocalCUDACluster, on threads
        seen.update(options)
        return LocalCluster(n_workers=1, processes=False, dashboard_address=None)

    monkeypatch.setitem(
        sys.modules, "dask_cuda", types.SimpleNamespace(LocalCUDACluster=cuda_cluster)
    )
    with connect(gpu=True, cuda_visible_devices="0,1",
                 local_directory=tmp_path, show_dashboard=False) as client:  # fmt: skip
        cluster = client.cluster
        assert client.submit(sum, [1, 2]).result() == 3
    assert cluster.status.name == "closed"
    assert seen["rmm_pool_size"] is None  # the pool: tests/test_gpu_cluster.py
    assert seen["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert seen["threads_per_worker"] == 1
    assert seen["n_workers"] is None  # dask-cuda's rule: one per GPU
    assert seen["host"] == "127.0.0.1"
