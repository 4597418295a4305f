"""Chunked, resumable projection into zarr, read back with xarray."""

from __future__ import annotations

import dask
import numpy as np
import pytest
import xarray as xr
import zarr

import npt_dask as npt
from npt_dask.npt import projection_store as project_module
from npt_dask.npt.projection_store import ProjectionError, project
from tests._clusters import tree_digest


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(400, 5))
    model = npt.fit(
        x, "rbf", gamma=0.4, n_components=6, solver="krylov", chunk_size=100, random_state=0
    )
    return model, rng.normal(size=(1000, 5))


def test_chunked_projection_equals_in_memory_transform(fitted, tmp_path):
    model, _ = fitted
    z = np.random.default_rng(7).normal(size=(50_000, 5))  # the 50k rows
    ds = project(model, z, tmp_path / "p.zarr", chunk_size=4096, progress=False)
    y, res = model.transform_with_residual(z)
    np.testing.assert_allclose(ds["coordinates"].values, y, atol=1e-12)
    np.testing.assert_allclose(ds["residual"].values, res, atol=1e-12)
    reopened = xr.open_zarr(tmp_path / "p.zarr", consolidated=False)
    assert reopened["coordinates"].dims == ("sample", "component")
    assert reopened["coordinates"].chunks[0][0] == 4096
    assert "npt_projection" in reopened.attrs


def test_resume_projects_only_missing_chunks_and_is_byte_identical(fitted, tmp_path, monkeypatch):
    model, z = fitted
    full = tmp_path / "full.zarr"
    project(model, z, full, chunk_size=100, progress=False)
    part = tmp_path / "part.zarr"
    original = project_module._write_chunk
    calls = []

    def crashing(zb, index, *args, **kwargs):
        if index == 6:
            raise RuntimeError("worker killed (simulated)")
        calls.append(index)
        return original(zb, index, *args, **kwargs)

    monkeypatch.setattr(project_module, "_write_chunk", crashing)
    # synchronous, so no other task is still finishing when the error surfaces
    with dask.config.set(scheduler="sync"), pytest.raises(RuntimeError, match="simulated"):
        project(model, z, part, chunk_size=100, progress=False)
    monkeypatch.setattr(
        project_module,
        "_write_chunk",
        lambda zb, index, *a, **k: calls.append(("again", index)) or original(zb, index, *a, **k),
    )
    done_before = set(np.flatnonzero(zarr.open_group(str(part))["npt_done"][:]))
    project(model, z, part, chunk_size=100, progress=False)
    again = {c[1] for c in calls if isinstance(c, tuple)}
    assert again == set(range(10)) - done_before
    assert 6 in again
    assert tree_digest(part) == tree_digest(full)


def test_resume_removes_torn_chunk_writes(fitted, tmp_path):
    """A writer killed mid-write leaves zarr's ``<key>.<uuid>.partial``; resume drops it."""
    model, z = fitted
    project(model, z, tmp_path / "full.zarr", chunk_size=100, progress=False)
    part = tmp_path / "part.zarr"
    project(model, z, part, chunk_size=100, progress=False)
    zarr.open_group(str(part), mode="r+")["npt_done"][7] = 0  # chunk 7 was being written
    chunk = part / "coordinates" / "c" / "7" / "0"
    torn = chunk.with_suffix(f".{'ab' * 16}.partial")
    torn.write_bytes(chunk.read_bytes()[:10])
    chunk.unlink()
    project(model, z, part, chunk_size=100, progress=False)
    assert not torn.exists()
    assert tree_digest(part) == tree_digest(tmp_path / "full.zarr")


def test_refuses_other_model_or_input(fitted, tmp_path):
    model, z = fitted
    out = tmp_path / "p.zarr"
    project(model, z, out, chunk_size=100, progress=False)
    other = npt.fit(model.x_train.compute(), "rbf", gamma=0.5, n_components=6)
    with pytest.raises(ProjectionError, match="model"):
        project(other, z, out, chunk_size=100, progress=False)
    with pytest.raises(ProjectionError, match="n_rows"):
        project(model, z[:500], out, chunk_size=100, progress=False)
    changed = z.copy()
    changed[3, 0] += 1.0
    with pytest.raises(ProjectionError, match="differ"):
        project(model, changed, out, chunk_size=100, progress=False)
    ds = project(model, changed, out, chunk_size=100, progress=False, resume=False)
    np.testing.assert_allclose(
        ds["coordinates"].values[3], model.transform(changed[3:4])[0], atol=1e-12
    )


def test_xarray_coordinates_survive(fitted, tmp_path):
    model, z = fitted
    arr = xr.DataArray(
        z,
        dims=("sample", "feature"),
        coords={"sample": np.arange(1000) * 3, "label": ("sample", z[:, 0] > 0)},
    )
    ds = project(
        model, arr.chunk({"sample": 250}), tmp_path / "p.zarr", chunk_size=250, progress=False
    )
    np.testing.assert_array_equal(ds["sample"].values, np.arange(1000) * 3)
    np.testing.assert_array_equal(ds["label"].values, z[:, 0] > 0)


def test_paths_as_input(fitted, tmp_path):
    model, z = fitted
    np.save(tmp_path / "z.npy", z)
    np.savez(tmp_path / "z.npz", rows=z)
    a = project(model, tmp_path / "z.npy", tmp_path / "a.zarr", progress=False)
    b = project(model, tmp_path / "z.npz", tmp_path / "b.zarr", key="rows", progress=False)
    np.testing.assert_array_equal(a["coordinates"].values, b["coordinates"].values)
    with pytest.raises(npt.InputError, match="no array 'x'"):
        project(model, tmp_path / "z.npz", tmp_path / "c.zarr", progress=False)


def test_npy_input_is_read_by_the_tasks_not_shipped_in_the_graph(tmp_path):
    """A ``.npy`` path opens as chunks that map the file: the graph holds no rows."""
    import cloudpickle

    z = np.random.default_rng(3).normal(size=(20_000, 50))  # 8 MB
    np.save(tmp_path / "z.npy", z)
    x = project_module.open_data(tmp_path / "z.npy")
    assert len(cloudpickle.dumps(dict(x.__dask_graph__()))) < 10_000
    np.testing.assert_array_equal(x.compute(), z)
    np.testing.assert_array_equal(x.rechunk((3_000, 50))[5:17_000:3].compute(), z[5:17_000:3])


def test_progress_bar(fitted, tmp_path, capsys):
    model, z = fitted
    project(model, z[:300], tmp_path / "p.zarr", chunk_size=100, progress=True)
    assert "3/3 chunks" in capsys.readouterr().err


def test_to_dataset_and_accessor(fitted, tmp_path):
    model, z = fitted
    ds = model.to_dataset()
    assert ds["eigenvectors"].dims == ("sample", "component")
    np.testing.assert_array_equal(ds["train_coordinates"].values, model.train_coordinates())
    ds.to_zarr(tmp_path / "model_view.zarr", consolidated=False)
    back = xr.open_zarr(tmp_path / "model_view.zarr", consolidated=False)
    np.testing.assert_array_equal(back["eigenvalues"].values, model.eigenvalues)
    arr = xr.DataArray(z[:50], dims=("sample", "feature"))
    np.testing.assert_array_equal(arr.npt.transform(model).values, model.transform(z[:50]))
    np.testing.assert_array_equal(arr.npt.residual(model).values, model.residual(z[:50]))
    out = arr.npt.project(model, tmp_path / "a.zarr", progress=False)
    via_ds = xr.Dataset({"x": arr}).npt.project(model, tmp_path / "b.zarr", var="x", progress=False)
    np.testing.assert_array_equal(out["coordinates"].values, via_ds["coordinates"].values)


def test_stored_model_streams_training_blocks_bit_for_bit(fitted, tmp_path):
    model, z = fitted
    loaded = npt.load(model.save(tmp_path / "m.zarr"))
    assert loaded.store_path is not None
    a = project(model, z, tmp_path / "a.zarr", chunk_size=100, progress=False)
    b = project(loaded, z, tmp_path / "b.zarr", chunk_size=100, progress=False)
    np.testing.assert_array_equal(a["coordinates"].values, b["coordinates"].values)
    np.testing.assert_array_equal(a["residual"].values, b["residual"].values)


def test_project_checks_chunk_size_by_the_fit_table(fitted, tmp_path):
    """Bug: npt.project refused chunk_size=np.int64(20), which npt.fit accepts: project
    checked its parameter by hand. Now both check it by the one parameter table."""
    from npt_dask.npt.params import PARAMS

    model, z = fitted
    ds = project(model, z[:100], tmp_path / "p.zarr", chunk_size=np.int64(20), progress=False)
    assert ds.coordinates.chunks[0] == (20,) * 5
    x = np.random.default_rng(0).normal(size=(60, 3))
    (param,) = [p for p in PARAMS if p.name == "chunk_size"]
    for bad in param.invalid_values():
        with pytest.raises((ValueError, TypeError)) as by_fit:
            npt.fit(x, n_components=2, chunk_size=bad)
        with pytest.raises(type(by_fit.value)) as by_project:
            project(model, z[:100], tmp_path / "q.zarr", chunk_size=bad, progress=False)
        assert str(by_project.value) == str(by_fit.value)
        assert not (tmp_path / "q.zarr").exists()
