"""Model store: round trip, integrity and atomicity of zarr v3 models."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import zarr

import npt_dask as npt
from npt_dask.storage import store


def _chunk_files(path: Path, name: str) -> list[Path]:
    return sorted(p for p in (path / name / "c").rglob("*") if p.is_file())


def test_round_trip_is_bit_for_bit(fitted, tmp_path):
    model, z = fitted
    path = model.save(tmp_path / "m.zarr")
    loaded = npt.load(path)
    np.testing.assert_array_equal(loaded.transform(z), model.transform(z))
    np.testing.assert_array_equal(loaded.residual(z), model.residual(z))
    np.testing.assert_array_equal(loaded.train_coordinates(), model.train_coordinates())
    assert loaded.kernel == model.kernel
    assert loaded.diagnostics.passes == model.diagnostics.passes
    assert loaded.chunk_size == model.chunk_size
    manifest = store.ModelManifest.from_dict(zarr.open_group(str(path)).attrs["npt"])
    assert manifest.n_samples == 200
    assert manifest.kernel == model.kernel.to_dict()
    assert len(store.manifest_checksum(manifest)) == 64


def test_manifest_round_trip_and_frozen(fitted, tmp_path):
    model, _ = fitted
    path = model.save(tmp_path / "m.zarr")
    data = zarr.open_group(str(path)).attrs["npt"]
    manifest = store.ModelManifest.from_dict(data)
    assert manifest.to_dict() == dict(data)
    with pytest.raises(AttributeError):
        manifest.n_samples = 3


def test_flipped_byte_fails_loudly(fitted, tmp_path):
    model, _ = fitted
    path = model.save(tmp_path / "m.zarr")
    chunk = _chunk_files(path, "eigenvectors")[1]
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(store.StoreError, match="integrity"):
        npt.load(path)


def test_missing_chunk_is_detected(fitted, tmp_path):
    model, _ = fitted
    path = model.save(tmp_path / "m.zarr")
    _chunk_files(path, "x_train")[-1].unlink()
    with pytest.raises(store.StoreError, match="chunks missing"):
        npt.load(path)


def test_truncated_manifest(fitted, tmp_path):
    model, _ = fitted
    path = model.save(tmp_path / "m.zarr")
    meta = path / "zarr.json"
    meta.write_text(meta.read_text()[:40])
    with pytest.raises(store.StoreError):
        npt.load(path)


def test_not_a_model(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(store.StoreError, match="not a zarr store"):
        npt.load(tmp_path / "empty")
    zarr.open_group(str(tmp_path / "plain.zarr"), mode="w")
    with pytest.raises(store.StoreError, match="not an npt model"):
        npt.load(tmp_path / "plain.zarr")


def test_newer_format_is_refused(fitted, tmp_path):
    model, _ = fitted
    path = model.save(tmp_path / "m.zarr")
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"]["npt"]["format_version"] = store.FORMAT_VERSION + 1
    (path / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(store.StoreError, match="Upgrade npt-dask"):
        npt.load(path)


def test_shape_mismatch_is_detected(fitted, tmp_path):
    model, _ = fitted
    path = model.save(tmp_path / "m.zarr")
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"]["npt"]["arrays"]["eigenvalues"]["shape"] = [3]
    meta["attributes"][store.CHECKSUM] = store.checksum_of(meta["attributes"]["npt"])  # re-signed
    (path / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(store.StoreError, match="manifest says"):
        npt.load(path)


def test_failed_save_keeps_previous_model(fitted, tmp_path, monkeypatch):
    model, z = fitted
    path = model.save(tmp_path / "m.zarr")
    before = npt.load(path).transform(z)
    original = store.write_array

    def failing(group, name, *args, **kwargs):
        if name == "x_train":
            raise OSError("disk full (simulated)")
        return original(group, name, *args, **kwargs)

    monkeypatch.setattr(store, "write_array", failing)
    with pytest.raises(OSError, match="simulated"):
        model.save(path, overwrite=True)
    np.testing.assert_array_equal(npt.load(path).transform(z), before)
    assert sorted(os.listdir(tmp_path)) == ["m.zarr"]  # no temporary left behind


def test_refuses_to_replace_a_foreign_directory(fitted, tmp_path):
    model, _ = fitted
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("precious")
    with pytest.raises(store.StoreError, match="not a zarr store"):
        model.save(target)
    assert (target / "notes.txt").read_text() == "precious"


def test_loaded_training_rows_stay_lazy(fitted, tmp_path):
    model, _ = fitted
    loaded = npt.load(model.save(tmp_path / "m.zarr"))
    assert loaded.x_train.chunks[0][0] == model.chunk_size
    assert type(loaded.x_train).__name__ == "Array"
