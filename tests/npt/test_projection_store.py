"""Projection stores that cannot lie: one writer at a time, a pinned model, atomic
creation, non-finite kernels, precomputed models."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import dask
import numpy as np
import pytest
import zarr

import npt_dask as npt
from npt_dask.errors import InputError, ProjectionError, ResidualWarning, StoreError
from npt_dask.npt import projection_store as projection
from npt_dask.runtime.owners import owner_tag


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    rng = np.random.default_rng(3)
    x, z = rng.normal(size=(150, 4)), rng.normal(size=(90, 4))
    model = npt.fit(x, "rbf", gamma=0.4, n_components=3, chunk_size=50, random_state=0)
    path = model.save(tmp_path_factory.mktemp("models") / "m.zarr")
    return path, model, z


def _done(out: Path) -> np.ndarray:
    return np.asarray(zarr.open_group(str(out), mode="r")["npt_done"][:])


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _lock_of(child: subprocess.Popen, out: Path) -> None:
    content = {"owner": owner_tag(child.pid), "host": "here", "pid": child.pid, "started": "now"}
    (out / projection._LOCK).write_text(json.dumps(content))


# --- two writers on one store -------------------------------------------------------------


def test_second_live_writer_is_refused_naming_the_holder(saved, tmp_path):
    _, model, z = saved
    out = tmp_path / "p.zarr"
    npt.project(model, z, out, chunk_size=30, progress=False)
    child = _sleeper()  # another process, holding the store's lock
    try:
        _lock_of(child, out)
        with pytest.raises(ProjectionError, match=rf"being written by process {child.pid}"):
            npt.project(model, z, out, chunk_size=30, progress=False)
        with pytest.raises(ProjectionError, match="one writer at a time"):
            npt.project(model, z, out, chunk_size=30, progress=False, resume=False)
        assert (out / projection._LOCK).exists()  # not ours to remove
    finally:
        child.kill()
        child.wait()
    # the holder died (SIGKILL): its lock is stale, broken, and the run resumes
    ds = npt.project(model, z, out, chunk_size=30, progress=False)
    np.testing.assert_allclose(ds["coordinates"].values, model.transform(z), atol=1e-12)
    assert not (out / projection._LOCK).exists()


def test_a_writer_holds_the_lock_while_it_runs(saved, tmp_path, monkeypatch):
    _, model, z = saved
    out = tmp_path / "p.zarr"
    seen = []
    original = projection._run

    def spy(tasks, bar):
        lock = json.loads((out / projection._LOCK).read_text())
        seen.append(lock["pid"])
        return original(tasks, bar)

    monkeypatch.setattr(projection, "_run", spy)
    npt.project(model, z, out, chunk_size=30, progress=False)
    assert seen == [os.getpid()]
    assert not (out / projection._LOCK).exists()


_WRITER = """
import sys, npt_dask as npt
from npt_dask.errors import ProjectionError
try:
    npt.project(npt.load(sys.argv[1]), sys.argv[2], sys.argv[3], chunk_size=7, progress=False)
except ProjectionError as exc:
    print("REFUSED", exc)
"""


@pytest.mark.slow
def test_identical_concurrent_runs_never_corrupt_the_store(saved, tmp_path):
    path, model, z = saved
    np.save(tmp_path / "z.npy", z)
    out = tmp_path / "p.zarr"
    args = [sys.executable, "-c", textwrap.dedent(_WRITER), str(path), str(tmp_path / "z.npy")]
    runs = [subprocess.Popen([*args, str(out)], stdout=subprocess.PIPE, text=True) for _ in "ab"]
    outputs = [r.communicate(timeout=120)[0] for r in runs]
    assert [r.returncode for r in runs] == [0, 0]
    for text in outputs:
        assert text == "" or "being written by process" in text
    ds = npt.project(model, z, out, chunk_size=7, progress=False)  # all done: checks only
    np.testing.assert_allclose(ds["coordinates"].values, model.transform(z), atol=1e-12)
    assert _done(out).all()


# --- the model changes under a running projection -----------------------------------------


def test_model_replaced_after_load_is_refused(saved, tmp_path):
    _, model, z = saved
    path = model.save(tmp_path / "live.zarr")
    loaded = npt.load(path)
    other = npt.fit(np.random.default_rng(8).normal(size=(150, 4)), "rbf", gamma=0.1,
                    n_components=3, chunk_size=50, random_state=0)  # fmt: skip
    other.save(path, overwrite=True)  # replaces the model while `loaded` is in use
    out = tmp_path / "p.zarr"
    with pytest.raises(StoreError, match="changed while it was in use"):
        npt.project(loaded, z, out, chunk_size=30, progress=False)
    assert not out.exists() or not _done(out).any()  # refused before, or nothing marked done
    with pytest.raises(StoreError, match="changed"):
        loaded.transform(z)
    with pytest.raises(StoreError, match="changed"):  # its training rows, read lazily
        loaded.x_train.compute()


def test_model_replaced_mid_run_fails_loudly(saved, tmp_path):
    _, model, z = saved
    path = model.save(tmp_path / "live.zarr")
    loaded = npt.load(path)
    other = npt.fit(np.random.default_rng(8).normal(size=(150, 4)), "rbf", gamma=0.1,
                    n_components=3, chunk_size=50, random_state=0)  # fmt: skip
    from dask.callbacks import Callback

    class ReplaceAfterFirstChunk(Callback):
        def _posttask(self, key, result, dsk, state, worker_id):
            if str(key).startswith("_write_chunk") and not (tmp_path / "swapped").exists():
                (tmp_path / "swapped").touch()
                other.save(path, overwrite=True)

    out = tmp_path / "p.zarr"
    changed = pytest.raises(StoreError, match="changed while it was in use")
    with dask.config.set(scheduler="sync"), ReplaceAfterFirstChunk(), changed:
        npt.project(loaded, z, out, chunk_size=30, progress=False)
    assert _done(out).sum() == 1  # only the chunk computed from the recorded model
    with pytest.raises(ProjectionError, match="model_checksum"):  # the new model: refused
        npt.project(npt.load(path), z, out, chunk_size=30, progress=False)


@pytest.mark.parametrize("shape", [(200, 4, 5), (90, 4, 2)])
@pytest.mark.parametrize("when", ["opening", "reading"])
def test_model_of_another_shape_replaced_mid_run_is_a_store_in_use_error(
    saved, tmp_path, monkeypatch, shape, when
):
    """Another n and r saved over the store a running projection reads
    ended it with a bare broadcasting ValueError (saved just before a task opened the
    store), or called the store damaged (saved between two of its reads)."""
    from npt_dask.errors import StoreInUseError

    _, model, z = saved
    path = model.save(tmp_path / "live.zarr")
    loaded = npt.load(path)
    n, d, r = shape
    other = npt.fit(np.random.default_rng(8).normal(size=(n, d)), "rbf", gamma=0.1,
                    n_components=r, chunk_size=50, random_state=0)  # fmt: skip
    from npt_dask.storage import store

    # the save lands after a task's first check of the store, or after its first block
    owner, hook = (
        (store.StoredTraining, "check_identity") if when == "opening"
        else (store, "projection_weights")
    )  # fmt: skip
    original = getattr(owner, hook)

    def replace_inside_a_task(*args):
        result = original(*args)
        if not (tmp_path / "swapped").exists():
            (tmp_path / "swapped").touch()
            other.save(path, overwrite=True)
        return result

    monkeypatch.setattr(owner, hook, replace_inside_a_task)
    out = tmp_path / "p.zarr"
    changed = pytest.raises(StoreInUseError, match="changed while it was in use")
    with dask.config.set(scheduler="sync"), changed:
        npt.project(loaded, z, out, chunk_size=30, progress=False)
    assert not _done(out).any()  # nothing computed from the replaced model is kept


# --- a partial store does not read as a result --------------------------------------------


def test_partial_store_does_not_read_as_a_result_and_resumes(saved, tmp_path, monkeypatch):
    import xarray as xr

    _, model, z = saved
    original = projection._write_chunk
    written = []

    def crashing(zb, index, *args, **kwargs):  # killed after one chunk, whichever runs first
        if written:
            raise RuntimeError("killed (simulated)")
        written.append(index)
        return original(zb, index, *args, **kwargs)

    out = tmp_path / "p.zarr"
    monkeypatch.setattr(projection, "_write_chunk", crashing)
    with dask.config.set(scheduler="sync"), pytest.raises(RuntimeError, match="simulated"):
        npt.project(model, z, out, chunk_size=30, progress=False)
    monkeypatch.undo()
    assert _done(out).sum() == 1
    ds = xr.open_zarr(out)  # a plain reader, as the issue's
    assert "coordinates" not in ds
    assert "residual" not in ds
    with pytest.raises(AttributeError):
        ds.coordinates  # noqa: B018 - the issue's ds.coordinates[:, 0].mean()
    assert "incomplete" in ds.attrs["npt_incomplete"]
    assert "Re-run the same npt project command" in ds.attrs["npt_incomplete"]
    assert "coordinates" not in zarr.open_group(str(out), mode="r")  # plain zarr: the same
    resumed = npt.project(model, z, out, chunk_size=30, progress=False)
    np.testing.assert_allclose(resumed["coordinates"].values, model.transform(z), atol=1e-12)
    ds = xr.open_zarr(out)
    assert "npt_incomplete" not in ds.attrs
    np.testing.assert_array_equal(ds["coordinates"].values, resumed["coordinates"].values)
    assert sorted(p.name for p in out.iterdir()) == [
        "component", "coordinates", "npt_digest", "npt_done", "residual", "sample", "zarr.json",
    ]  # fmt: skip


def test_interrupted_finish_still_reads_as_incomplete_and_resumes(saved, tmp_path, monkeypatch):
    """Killed while moving the results into view: still incomplete, finished by a re-run."""
    import xarray as xr

    _, model, z = saved
    out = tmp_path / "p.zarr"
    moved = []

    def one_then_kill(member, target):
        if moved:
            raise KeyboardInterrupt
        moved.append(member.name)
        return promote(member, target)

    from npt_dask.runtime.atomic import promote

    monkeypatch.setattr(projection, "promote", one_then_kill)
    with pytest.raises(KeyboardInterrupt):
        npt.project(model, z, out, chunk_size=30, progress=False)
    monkeypatch.undo()
    assert len(moved) == 1
    assert (out / moved[0]).is_dir()  # one result array moved, the rest not
    assert "npt_incomplete" in xr.open_zarr(out).attrs
    assert "coordinates" not in xr.open_zarr(out)
    ds = npt.project(model, z, out, chunk_size=30, progress=False)
    np.testing.assert_allclose(ds["coordinates"].values, model.transform(z), atol=1e-12)
    assert not (out / projection.INCOMPLETE).exists()


# --- a kill or a full disk while the store is created -------------------------------------


def _half_store(saved, out: Path, drop: str) -> None:
    _, model, z = saved
    npt.project(model, z, out, chunk_size=30, progress=False)
    target = out / drop  # the store as an older npt-dask, killed while creating it, left it
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink()


@pytest.mark.parametrize("drop", ["zarr.json", "npt_done", "npt_digest", "sample"])
@pytest.mark.parametrize("resume", [True, False])
def test_half_created_store_is_recreated(saved, tmp_path, drop, resume):
    _, model, z = saved
    out = tmp_path / "p.zarr"
    _half_store(saved, out, drop)
    ds = npt.project(model, z, out, chunk_size=30, progress=False, resume=resume)
    np.testing.assert_allclose(ds["coordinates"].values, model.transform(z), atol=1e-12)
    assert set(ds.coords) >= {"sample", "component"}
    assert _done(out).all()


def test_full_disk_while_creating_leaves_nothing(saved, tmp_path, monkeypatch):
    _, model, z = saved
    out = tmp_path / "p.zarr"
    original = projection._create_store

    def full(where, *args):
        original(where, *args)
        raise OSError(28, "No space left on device (simulated)")

    monkeypatch.setattr(projection, "_create_store", full)
    with pytest.raises(OSError, match="No space left"):
        npt.project(model, z, out, chunk_size=30, progress=False)
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    ds = npt.project(model, z, out, chunk_size=30, progress=False)
    np.testing.assert_allclose(ds["coordinates"].values, model.transform(z), atol=1e-12)


def test_builds_of_killed_writers_are_removed(saved, tmp_path):
    _, model, z = saved
    child = _sleeper()
    child.send_signal(signal.SIGKILL)
    child.wait()
    dead = owner_tag(os.getpid()).split("-")[0] + f"-{child.pid}-0"
    (tmp_path / f".p.zarr.npt-new-{dead}-0123abcd").mkdir()
    live = tmp_path / f".p.zarr.npt-new-{owner_tag()}-0123abce"
    live.mkdir()
    npt.project(model, z, tmp_path / "p.zarr", chunk_size=30, progress=False)
    assert sorted(os.listdir(tmp_path)) == [live.name, "p.zarr"]


# --- NaN from a callable kernel -----------------------------------------------------------


def _nan_beyond_five(a, b):
    k = np.exp(-0.4 * ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))
    k[a[:, 0] > 5] = np.nan
    return k


def test_nan_from_a_callable_kernel_is_an_error_and_nothing_is_done(tmp_path):
    rng = np.random.default_rng(1)
    x = np.clip(rng.normal(size=(120, 3)), -3, 3)
    model = npt.fit(x, _nan_beyond_five, n_components=3, chunk_size=40, random_state=0)
    z = rng.normal(size=(25, 3))
    z[7, 0] = 6.0
    with pytest.raises(InputError, match="_nan_beyond_five returned NaN"):
        model.transform(z)
    out = tmp_path / "p.zarr"
    with pytest.raises(InputError, match="_nan_beyond_five"):
        npt.project(model, z, out, progress=False)
    assert not _done(out).any()


# --- a saved precomputed-kernel model -----------------------------------------------------


def test_saved_precomputed_model_projects_test_kernel_rows(tmp_path):
    rng = np.random.default_rng(2)
    x, z = rng.normal(size=(100, 4)), rng.normal(size=(30, 4))
    model = npt.fit(x @ x.T, "precomputed", n_components=3, chunk_size=40)
    loaded = npt.load(model.save(tmp_path / "m.zarr"))
    kz = z @ x.T  # test x train kernel rows
    want = model.transform(kz)
    nan_residual = pytest.warns(ResidualWarning, match=r"residual column is NaN")
    with nan_residual:  # said, as residual() says it
        ds = npt.project(loaded, kz, tmp_path / "p.zarr", chunk_size=7, progress=False)
    np.testing.assert_allclose(ds["coordinates"].values, want, atol=1e-12)
    assert np.isnan(ds["residual"].values).all()
    with nan_residual:  # resumes
        ds = npt.project(loaded, kz, tmp_path / "p.zarr", chunk_size=7, progress=False)
    np.testing.assert_allclose(ds["coordinates"].values, want, atol=1e-12)
    kz[3, 5] += 1.0
    with nan_residual, pytest.raises(ProjectionError, match="differ from those projected"):
        npt.project(loaded, kz, tmp_path / "p.zarr", chunk_size=7, progress=False)
