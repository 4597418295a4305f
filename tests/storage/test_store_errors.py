"""Store errors a caller can tell apart, a manifest check that cannot be
switched off, landmark moments kept, a truncated array
metadata file."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import zarr

import npt_dask as npt
from npt_dask.errors import (
    StoreError,
    StoreIntegrityError,
    StoreInUseError,
    StoreNotFoundError,
    StoreVersionError,
    StoreWarning,
)
from npt_dask.storage import store


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(11)
    x, z = rng.normal(size=(120, 4)), rng.normal(size=(20, 4))
    y = np.where(x[:, 0] > 0, 3, 7)
    model = npt.fit(x, "rbf", gamma=0.3, n_components=3, chunk_size=50, landmarks=40, labels=y,
                    random_state=0)  # fmt: skip
    return model, x, y, z


def _attributes(path: Path) -> dict:
    return json.loads((path / "zarr.json").read_text())


def _write_attributes(path: Path, meta: dict) -> None:
    (path / "zarr.json").write_text(json.dumps(meta))


# --- StoreError subclasses ----------------------------------------------------------------


def test_store_errors_can_be_told_apart(fitted, tmp_path):
    model, x, _, z = fitted
    with pytest.raises(StoreNotFoundError) as missing:
        npt.load(tmp_path / "absent.zarr")
    assert isinstance(missing.value, FileNotFoundError)  # as zarr's GroupNotFoundError
    assert isinstance(missing.value, StoreError)
    assert isinstance(missing.value, ValueError)
    assert "absent.zarr is not a zarr store (it does not exist)" in str(missing.value)

    path = model.save(tmp_path / "m.zarr")
    meta = _attributes(path)
    meta["attributes"]["npt"]["format_version"] = store.FORMAT_VERSION + 1
    _write_attributes(path, meta)
    with pytest.raises(StoreVersionError, match="Upgrade npt-dask"):
        npt.load(path)

    path = model.save(tmp_path / "m2.zarr")
    chunk = path / "eigenvalues" / "c" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    with pytest.raises(StoreIntegrityError, match="integrity check"):
        npt.load(path)

    path = model.save(tmp_path / "m3.zarr")
    loaded = npt.load(path)
    other = npt.fit(x[:60], "rbf", gamma=0.1, n_components=2, chunk_size=50)
    other.save(path, overwrite=True)
    with pytest.raises(StoreInUseError, match="changed while it was in use"):
        loaded.transform(z)

    for err in (missing.value, StoreIntegrityError("damaged", param="p")):
        again = pickle.loads(pickle.dumps(err))  # errors cross process boundaries (workers)
        assert (type(again), str(again), again.param) == (type(err), str(err), err.param)
    with pytest.raises(StoreError):  # an existing `except StoreError` catches them all
        npt.load(tmp_path / "absent.zarr")


@pytest.mark.parametrize("names", [["a", "b"], ["a", "b", 3], "abc"])
def test_damaged_feature_names_are_an_integrity_error(tmp_path, names):
    """A manifest whose feature_names is not one string per feature is damaged: the
    subclass that says so, not the bare base."""
    import pandas as pd

    x = pd.DataFrame(np.random.default_rng(3).normal(size=(40, 3)), columns=["a", "b", "c"])
    path = npt.fit(x, "rbf", gamma=0.3, n_components=2).save(tmp_path / "m.zarr")
    meta = _attributes(path)
    assert meta["attributes"]["npt"]["feature_names"] == ["a", "b", "c"]
    meta["attributes"]["npt"]["feature_names"] = names
    _write_attributes(path, meta)
    with pytest.raises(StoreIntegrityError, match="feature_names is not a list of 3 strings"):
        npt.load(path)


def test_damaged_store_messages_raise_the_integrity_subclass():
    """Every raise in store.py whose message calls the store damaged raises
    StoreIntegrityError (or a subclass), never the bare StoreError."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(store))
    bare = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
            continue
        func = node.exc.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        words = " ".join(
            part.value
            for part in ast.walk(node.exc)
            if isinstance(part, ast.Constant) and isinstance(part.value, str)
        )
        if name == "StoreError" and "damaged" in words:
            bare.append(node.lineno)
    assert bare == [], f"store.py raises the bare StoreError for a damaged store at {bare}"


# --- the manifest check cannot be switched off --------------------------------------------


def test_deleting_the_manifest_checksum_does_not_switch_the_check_off(fitted, tmp_path):
    model, _, _, _ = fitted
    path = model.save(tmp_path / "m.zarr")
    meta = _attributes(path)
    meta["attributes"]["npt"]["kernel"]["gamma"] = 30.0  # the edit
    del meta["attributes"][store.CHECKSUM]
    _write_attributes(path, meta)
    with pytest.raises(StoreIntegrityError, match="no checksum"):
        npt.load(path, verify=True)


def test_emptying_the_array_checksums_does_not_switch_them_off(fitted, tmp_path):
    model, _, _, _ = fitted
    path = model.save(tmp_path / "m.zarr")
    zarr.open_group(str(path), mode="r+")["eigenvalues"][0] = 123.0  # rewritten array bytes
    meta = _attributes(path)
    meta["attributes"]["npt"]["checksums"] = {}
    del meta["attributes"][store.CHECKSUM]
    _write_attributes(path, meta)
    with pytest.raises(StoreIntegrityError, match="no checksum"):
        npt.load(path)
    meta["attributes"][store.CHECKSUM] = store.checksum_of(meta["attributes"]["npt"])  # re-signed
    _write_attributes(path, meta)
    with pytest.raises(StoreIntegrityError, match=r"lists no checksum for \['eigenvalues'"):
        npt.load(path)


# --- landmark moments are saved -----------------------------------------------------------


def _same_moments(got, want) -> None:
    assert got is not None
    for a, b in zip(got.as_tuple(), want.as_tuple(), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got.classes, want.classes)
    assert np.asarray(got.classes).dtype.kind == np.asarray(want.classes).dtype.kind


@pytest.mark.parametrize("labels", ["numbers", "strings"])
def test_landmark_moments_are_saved_verified_and_loaded(fitted, tmp_path, labels):
    model, x, y, _ = fitted
    if labels == "strings":
        y = np.where(y == 3, "three", "seven")
        model = npt.fit(x, "rbf", gamma=0.3, n_components=3, chunk_size=50, landmarks=40,
                        labels=y, random_state=0)  # fmt: skip
    assert model.moments is not None
    path = model.save(tmp_path / "m.zarr")
    loaded = npt.load(path, verify=True)
    _same_moments(loaded.moments, model.moments)
    assert loaded.identity == model.identity  # the moments are part of the model's identity
    from npt_dask.methods import RidgeClassifier

    ridge = RidgeClassifier().fit_moments(loaded.moments)
    want = RidgeClassifier().fit_moments(model.moments)
    coords = model.transform(x)
    np.testing.assert_array_equal(ridge.predict(coords), want.predict(coords))
    # verified like every array: other bytes (a valid chunk) do not load
    zarr.open_group(str(path), mode="r+")["moments_gram"][0, 0] += 1.0
    with pytest.raises(StoreIntegrityError, match="moments_gram does not match its checksum"):
        npt.load(path)


def test_moments_a_store_cannot_hold_are_said_at_save_time(fitted, tmp_path):
    model, _, _, _ = fitted
    odd = np.array([("a", 1), ("b", 2)], dtype=object)[:, 0].astype(object)
    odd[:] = [("a", 1), ("b", 2)]  # tuples: no store dtype holds them
    moments = dataclasses.replace(model.moments, classes=odd)
    with pytest.warns(StoreWarning, match="saved without them"):
        path = dataclasses.replace(model, moments=moments).save(tmp_path / "m.zarr")
    assert npt.load(path).moments is None


# --- a truncated array metadata file ------------------------------------------------------


def test_truncated_array_metadata_is_a_store_error(fitted, tmp_path):
    model, _, _, _ = fitted
    path = model.save(tmp_path / "m.zarr")
    meta = path / "eigenvectors" / "zarr.json"
    meta.write_text(meta.read_text()[:40])
    with pytest.raises(StoreIntegrityError, match=r"eigenvectors/zarr.json could not be read"):
        npt.load(path)
    from npt_dask.interface.cli import main

    assert main(["info", str(path)]) == 2  # one line, no JSONDecodeError traceback


# --- a refused save names the command that writes such a model ----------------------------


def test_a_refused_save_names_the_command_of_its_model(tmp_path):
    """A grown model is written by ``npt grow``: its refusal names ``npt grow
    --overwrite``, a fitted model's ``npt fit --overwrite``."""
    x = np.random.default_rng(5).normal(size=(50, 3))
    model = npt.fit(x[:30], "rbf", gamma=0.3, n_components=None)
    fitted = model.save(tmp_path / "m.zarr")
    with pytest.raises(StoreError, match=r"replace it \(npt fit --overwrite\)"):
        model.save(fitted)
    grown = model.partial_fit(x[30:])
    path = grown.save(tmp_path / "g.zarr")
    with pytest.raises(StoreError) as refused:
        grown.save(path)
    assert "pass overwrite=True to replace it (npt grow --overwrite)" in str(refused.value)
    assert "npt fit" not in str(refused.value)


# --- two writers ------------------------------------------------------------------------------


def test_a_store_another_writer_saves_meanwhile_is_kept_without_overwrite(
    fitted, tmp_path, monkeypatch
):
    """``save(overwrite=False)`` checks the path before it writes; a writer that finishes
    first meanwhile keeps its store, and this save is refused, not swapped over it."""
    model, _, _, _ = fitted
    path = tmp_path / "m.zarr"
    other = npt.fit(np.random.default_rng(3).normal(size=(60, 4)), "rbf", gamma=0.3,
                    n_components=2)  # fmt: skip
    original = store.write_array
    done: list[bool] = []

    def meanwhile(group, name, *args, **kwargs):
        original(group, name, *args, **kwargs)
        if not done:
            done.append(True)
            other.save(path)  # the other writer, done first

    monkeypatch.setattr(store, "write_array", meanwhile)
    with pytest.raises(StoreInUseError, match="Another writer"):
        model.save(path)
    monkeypatch.undo()
    assert npt.load(path).eigenvalues.shape == (2,)  # the other writer's model, whole
