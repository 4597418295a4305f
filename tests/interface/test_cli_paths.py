"""Every check of a command's paths and widths is made before the first pass: two options
naming one place, an output inside an input or any zarr store, a place where no file can
be created, test rows of another width, a later batch of another width; each refusal
names the options, exits 2, and writes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import npt_dask as npt
from npt_dask.interface.cli import main
from tests._clusters import tree_digest


def _no_work(*args, **kwargs):
    raise AssertionError("the work ran before the refusal")


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A folder of small inputs: rows, labels, test rows of another width, a model."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(60, 3))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", (x[:, 0] > 0).astype(int))
    np.save(tmp_path / "wide.npy", rng.normal(size=(20, 4)))
    np.save(tmp_path / "ty.npy", np.zeros(20, int))
    npt.fit(x, kernel="rbf", gamma=0.5, n_components=None).save(tmp_path / "m.zarr")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _refused(argv, capsys, ws, *fragments):
    before = tree_digest(ws)
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err, err
    assert tree_digest(ws) == before  # nothing written
    return err


RIDGE = ["ridge", "x.npy", "--labels", "y.npy", "--solver", "cg", "--quiet"]


@pytest.mark.parametrize(
    ("options", "fragments"),
    [
        (["--out", "a.npz", "--checkpoint", "a.npz"], ["--out a.npz and --checkpoint a.npz",
                                                      "name the same path"]),
        (["--out", "o.zarr", "--checkpoint", "o.zarr/ck.npz"], ["--out o.zarr and --checkpoint",
                                                               "one lies inside the other"]),
        (["--test-rows", "0:20", "--predictions", "p.npy", "--checkpoint", "p.npy"],
         ["--checkpoint p.npy and --predictions p.npy", "name the same path"]),
        (["--test-rows", "0:20", "--out", "p.npy", "--predictions", "p.npy"],
         ["--out p.npy and --predictions p.npy"]),
        (["--checkpoint", "y.npy"], ["--checkpoint y.npy is the input --labels"]),
        (["--test", "wide.npy", "--test-labels", "ty.npy", "--out", "wide.npy"],
         ["--out wide.npy is the input --test"]),
        (["--out", "."], ["--out . holds the input DATA"]),
        (["--out", "m.zarr/r.zarr"], ["--out m.zarr/r.zarr lies inside the zarr store"]),
        (["--checkpoint", "m.zarr/x_train/ck.npz"], ["--checkpoint", "lies inside the zarr"]),
        (["--test", "wide.npy", "--test-labels", "ty.npy"],
         ["--test wide.npy has 4 columns per row and DATA x.npy has 3"]),
    ],
)  # fmt: skip
def test_ridge_refuses_before_the_fit(ws, capsys, monkeypatch, options, fragments):
    monkeypatch.setattr(npt.KernelRidgeClassifier, "fit", _no_work)
    _refused([*RIDGE, *options], capsys, ws, "npt ridge: error: ", *fragments)


def test_ridge_refuses_labels_of_another_count(ws, capsys, monkeypatch):
    monkeypatch.setattr(npt.KernelRidgeClassifier, "fit", _no_work)
    np.save(ws / "short.npy", np.zeros(50, int))
    _refused(["ridge", "x.npy", "--labels", "short.npy"], capsys, ws,
             "--labels short.npy gives (50,) labels for 60 rows of DATA")  # fmt: skip


def test_ridge_model_refuses_test_rows_of_another_width(ws, capsys):
    assert main(["ridge", "x.npy", "--labels", "y.npy", "--quiet", "--out", "r.zarr"]) == 0
    capsys.readouterr()
    words = "--test wide.npy has 4 columns per row and the model r.zarr has 3"
    _refused(["ridge", "--model", "r.zarr", "--test", "wide.npy", "--test-labels", "ty.npy"],
             capsys, ws, words)  # fmt: skip


def test_ridge_model_output_may_not_name_an_input(ws, capsys):
    assert main(["ridge", "x.npy", "--labels", "y.npy", "--quiet", "--out", "r.zarr"]) == 0
    capsys.readouterr()
    words = "--predictions r.zarr/p.npy is the input --model"
    _refused(["ridge", "--model", "r.zarr", "--test", "x.npy", "--predictions",
              "r.zarr/p.npy"], capsys, ws, words)  # fmt: skip


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc")
def test_a_checkpoint_where_no_file_can_be_written_is_refused_clearly(ws, capsys, monkeypatch):
    monkeypatch.setattr(npt.KernelRidgeClassifier, "fit", _no_work)
    err = _refused([*RIDGE, "--checkpoint", "/proc/self/status"], capsys, ws,
                   "Cannot write --checkpoint /proc/self/status", "accepts no new file",
                   "Choose a path in a folder you can write to")  # fmt: skip
    assert "lock" not in err


def test_fit_project_grow_refuse_an_output_inside_a_store(ws, capsys):
    _refused(["fit", "x.npy", "--out", "m.zarr/x_train/new.zarr"], capsys, ws,
             "lies inside the zarr store")  # fmt: skip
    _refused(["project", "m.zarr", "x.npy", "--out", "m.zarr/p.zarr"], capsys, ws,
             "--out m.zarr/p.zarr", "is the input MODEL")  # fmt: skip
    npt.fit(np.load(ws / "x.npy"), n_components=2).save(ws / "other.zarr")
    _refused(["project", "m.zarr", "x.npy", "--out", "other.zarr/p.zarr"], capsys, ws,
             "--out other.zarr/p.zarr lies inside the zarr store")  # fmt: skip
    _refused(["grow", "m.zarr", "x.npy", "--out", "other.zarr/g.zarr"], capsys, ws,
             "lies inside the zarr store")  # fmt: skip


def test_fit_out_under_a_file_is_refused_naming_the_file(ws, capsys):
    _refused(["fit", "x.npy", "--out", "y.npy/m.zarr"], capsys, ws, "y.npy is a file, not a folder")


def test_grow_checks_every_batch_before_the_first(ws, capsys, monkeypatch):
    from npt_dask.npt.model import NPTModel

    monkeypatch.setattr(NPTModel, "partial_fit", _no_work)
    np.save(ws / "day1.npy", np.random.default_rng(1).normal(size=(5, 3)))
    _refused(["grow", "m.zarr", "day1.npy", "wide.npy", "--out", "g.zarr"], capsys, ws,
             "DATA wide.npy has 4 columns per row and MODEL m.zarr has 3")  # fmt: skip
    _refused(["grow", "m.zarr", "day1.npy", "none.npy", "--out", "g.zarr"], capsys, ws,
             "none.npy does not exist")  # fmt: skip


def test_zarr_data_as_input_store(ws, capsys, monkeypatch):
    """``npt ridge --out DATA.zarr/m.zarr``: the model would be written inside the input."""
    import zarr

    monkeypatch.setattr(npt.KernelRidgeClassifier, "fit", _no_work)
    zarr.open_array(str(ws / "data.zarr"), mode="w", shape=(60, 3), dtype="f8")[:] = np.load(
        ws / "x.npy"
    )
    _refused(["ridge", "data.zarr", "--labels", "y.npy", "--out", "data.zarr/m.zarr"],
             capsys, ws, "--out data.zarr/m.zarr is the input DATA")  # fmt: skip
    assert sorted(p.name for p in Path(ws / "data.zarr").iterdir()) == ["c", "zarr.json"]
