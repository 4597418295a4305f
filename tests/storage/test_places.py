"""One rule for where every writer may write: never inside a zarr store or array (an
input's rows, a saved model's arrays), never where no file can be created; each writer
refuses with its own kind of error before anything is written."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr

import npt_dask as npt
from npt_dask.errors import CheckpointError, OutputPathError, ProjectionError, StoreError
from npt_dask.runtime.places import check_output_place, enclosing_store
from tests._clusters import tree_digest


@pytest.fixture
def saved(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(40, 3))
    est = npt.KernelRidge(kernel="rbf", gamma=0.5, alpha=0.1).fit(x, x[:, 0])
    est.save(tmp_path / "A.zarr")
    model = npt.fit(x, kernel="rbf", gamma=0.5, n_components=3)
    model.save(tmp_path / "M.zarr")
    return tmp_path, x, est, model


def test_enclosing_store_finds_the_outermost_zarr_node_through_links(tmp_path):
    zarr.open_group(str(tmp_path / "g.zarr"), mode="w").create_array("a", shape=(2,), dtype="f8")
    (tmp_path / "plain").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "g.zarr" / "a")
    assert enclosing_store(tmp_path / "g.zarr" / "a" / "x" / "y.zarr") == tmp_path / "g.zarr"
    assert enclosing_store(tmp_path / "link" / "new.zarr") == tmp_path / "g.zarr"
    assert enclosing_store(tmp_path / "plain" / "new.zarr") is None
    assert enclosing_store(tmp_path / "g.zarr") is None  # the store itself: its writer decides
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / ".zgroup").write_text("{}")
    assert enclosing_store(tmp_path / "v2" / "m.zarr") == tmp_path / "v2"


def test_every_writer_refuses_a_path_inside_a_store(saved):
    tmp_path, x, est, model = saved
    before = tree_digest(tmp_path)
    with pytest.raises(StoreError, match=r"lies inside the zarr store .*A\.zarr"):
        est.save(tmp_path / "A.zarr" / "dual_coef" / "inner.zarr")
    with pytest.raises(StoreError, match="lies inside the zarr store"):
        model.save(tmp_path / "A.zarr" / "m.zarr")
    with pytest.raises(StoreError, match="lies inside the zarr store"):
        est.save(tmp_path / "M.zarr" / "x_train" / "r.zarr")
    with pytest.raises(ProjectionError, match="lies inside the zarr store"):
        npt.project(model, x, tmp_path / "M.zarr" / "p.zarr")
    assert tree_digest(tmp_path) == before  # nothing written


def test_a_checkpoint_inside_a_store_is_refused_before_any_pass(saved):
    tmp_path, x, _, _ = saved
    est = npt.KernelRidge(kernel="rbf", gamma=0.5, solver="cg")
    with pytest.raises(CheckpointError, match=r"The checkpoint .* lies inside the zarr store"):
        est.fit(x, x[:, 0], checkpoint=tmp_path / "A.zarr" / "ck.npz")
    assert not (tmp_path / "A.zarr" / "ck.npz").exists()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc")
def test_a_checkpoint_where_no_file_can_be_created_is_refused_clearly(saved):
    _, x, _, _ = saved
    est = npt.KernelRidge(kernel="rbf", gamma=0.5, solver="cg")
    with pytest.raises(CheckpointError, match="accepts no new file") as info:
        est.fit(x, x[:, 0], checkpoint="/proc/self/status")
    assert "/proc/self/status" in str(info.value)
    assert "lock" not in str(info.value)


def test_a_folder_output_is_no_file_and_no_store(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(OutputPathError, match="is a file, and it names a folder"):
        check_output_place(tmp_path / "notes.txt", folder=True)
    zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    with pytest.raises(OutputPathError, match="is a zarr store, and it names a folder"):
        check_output_place(tmp_path / "g.zarr", folder=True)
    check_output_place(tmp_path / "new" / "deeper", folder=True)  # created later: fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.zarr", "notes.txt"]  # no probe
