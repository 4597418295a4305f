"""Model stores that cannot lie: manifest checksum, forward compatibility, corrupted
chunks at transform, and recovery from a killed save."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import npt_dask as npt
from npt_dask.errors import StoreError, StoreWarning
from npt_dask.runtime.owners import owner_tag
from npt_dask.storage import store
from tests.conftest import dead_owner_tag


def _edit_manifest(path: Path, edit) -> None:
    meta = json.loads((path / "zarr.json").read_text())
    edit(meta["attributes"]["npt"])
    (path / "zarr.json").write_text(json.dumps(meta))


# --- every field of the manifest is verified ----------------------------------------------


def test_edited_kernel_gamma_is_refused(fitted, tmp_path):
    model, _ = fitted
    path = model.save(tmp_path / "m.zarr")
    _edit_manifest(path, lambda m: m["kernel"].update(gamma=0.35))
    with pytest.raises(StoreError, match="manifest does not match its checksum"):
        npt.load(path, verify=True)
    with pytest.raises(StoreError, match="altered"):
        npt.load(path, verify=False)  # cheap: checked on every load


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.update(center=False),
        lambda m: m.update(grand_mean=m["grand_mean"] + 1e-3),
        lambda m: m["diagnostics"].update(tol=0.5),
    ],
)
def test_edited_result_fields_are_refused(fitted, tmp_path, edit):
    model, _ = fitted
    path = model.save(tmp_path / "m.zarr")
    _edit_manifest(path, edit)
    with pytest.raises(StoreError, match="checksum"):
        npt.load(path)


# --- forward compatibility ----------------------------------------------------------------


def _without_checksum(path: Path, edit) -> None:
    """Edit the manifest and sign it again (as a newer npt-dask, or a careful hand, would):
    the edit then meets the checks behind the checksum. (Deleting the checksum instead,
    as earlier versions of these tests did, is now refused on its own.)"""
    meta = json.loads((path / "zarr.json").read_text())
    edit(meta["attributes"]["npt"])
    meta["attributes"][store.CHECKSUM] = store.checksum_of(meta["attributes"]["npt"])
    (path / "zarr.json").write_text(json.dumps(meta))


def test_unknown_fields_of_a_newer_version_are_kept_with_a_note(fitted, tmp_path):
    model, z = fitted
    path = model.save(tmp_path / "m.zarr")
    _without_checksum(path, lambda m: (m["diagnostics"].update(new_metric=1.5), m.update(new=2)))
    with pytest.warns(StoreWarning) as notes:
        loaded = npt.load(path)
    text = " ".join(str(n.message) for n in notes)
    assert "new_metric" in text
    assert "['new']" in text
    manifest = store.read_manifest(path, note=False)
    np.testing.assert_array_equal(loaded.transform(z), model.transform(z))
    assert manifest.to_dict()["new"] == 2  # kept: the identity is that of the stored text


def test_unknown_fields_keep_the_checksum_valid(fitted, tmp_path):
    model, _ = fitted
    path = model.save(tmp_path / "m.zarr")
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"]["npt"]["future_field"] = {"a": 1}
    manifest = store.ModelManifest.from_dict(meta["attributes"]["npt"], note=False)
    meta["attributes"][store.CHECKSUM] = store.manifest_checksum(manifest)
    (path / "zarr.json").write_text(json.dumps(meta))
    with pytest.warns(StoreWarning, match="future_field"):
        npt.load(path)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m["diagnostics"].update(passes="three"),
        lambda m: m.update(n_components="4"),
        lambda m: m.update(kernel={"name": "rbf", "gamma": "hot"}),
        lambda m: m["diagnostics"].pop("solver"),
    ],
)
def test_malformed_fields_are_a_store_error(fitted, tmp_path, edit):
    model, _ = fitted
    path = model.save(tmp_path / "m.zarr")
    _without_checksum(path, edit)
    with pytest.raises(StoreError, match="damaged"):
        npt.load(path)


# --- a corrupted chunk read after load(verify=False) --------------------------------------


def test_corrupted_chunk_at_transform_names_path_and_array(fitted, tmp_path):
    model, z = fitted
    path = model.save(tmp_path / "m.zarr")
    loaded = npt.load(path, verify=False)
    chunk = sorted(p for p in (path / "x_train" / "c").rglob("*") if p.is_file())[1]
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"m\.zarr/x_train failed its integrity check"):
        loaded.transform(z)
    with pytest.raises(StoreError, match=r"m\.zarr/x_train"):
        np.asarray(loaded.x_train)


# --- a save killed over an existing model -------------------------------------------------


def _fitted_other(z_dim: int = 5):
    x = np.random.default_rng(9).normal(size=(120, z_dim))
    return npt.fit(x, "rbf", gamma=0.2, n_components=3, chunk_size=64, random_state=0)


def test_kill_between_the_renames_restores_the_old_model(fitted, tmp_path):
    model, z = fitted
    path = model.save(tmp_path / "m.zarr")
    tag = dead_owner_tag()
    os.replace(path, tmp_path / f".m.zarr.old-{tag}-0123abcd")  # first rename done
    (tmp_path / f".m.zarr.tmp-{tag}-89abcdef").mkdir()  # the new one, half written
    assert not path.exists()
    loaded = npt.load(path)
    np.testing.assert_array_equal(loaded.transform(z), model.transform(z))
    assert sorted(os.listdir(tmp_path)) == ["m.zarr"]


def test_kill_after_the_new_model_was_complete_finishes_the_swap(fitted, tmp_path):
    model, z = fitted
    other = _fitted_other()
    path = model.save(tmp_path / "m.zarr")
    tag = dead_owner_tag()
    os.replace(path, tmp_path / f".m.zarr.old-{tag}-0123abcd")
    other.save(tmp_path / "new.zarr")
    os.replace(tmp_path / "new.zarr", tmp_path / f".m.zarr.tmp-{tag}-89abcdef")
    other.save(tmp_path / "other.zarr")  # what the swap should give
    np.testing.assert_array_equal(npt.load(path).transform(z), other.transform(z))
    assert sorted(os.listdir(tmp_path)) == ["m.zarr", "other.zarr"]


def test_next_save_removes_stale_temporaries_of_dead_writers_only(fitted, tmp_path):
    model, z = fitted
    path = model.save(tmp_path / "m.zarr")
    dead, alive = dead_owner_tag(), owner_tag()
    shutil.copytree(path, tmp_path / f".m.zarr.tmp-{dead}-0123abcd")
    shutil.copytree(path, tmp_path / f".m.zarr.old-{dead}-0123abce")
    (tmp_path / f".m.zarr.tmp-{alive}-0123abcf").mkdir()  # a save in progress: kept
    model.save(path, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == [f".m.zarr.tmp-{alive}-0123abcf", "m.zarr"]
    np.testing.assert_array_equal(npt.load(path).transform(z), model.transform(z))
