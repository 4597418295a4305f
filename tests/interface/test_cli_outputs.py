"""Where ``npt ridge`` writes: ``--predictions`` and ``--checkpoint`` never land on an
input (the path itself, a symbolic link to it, a hard link, a path inside an input
store), an existing file is replaced only with ``--overwrite``, and everything is
checked before the fit."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from npt_dask.interface.cli import main


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(80, 3))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", (x[:, 0] > 0).astype(int))
    np.save(tmp_path / "t.npy", x[:20])
    np.save(tmp_path / "ty.npy", (x[:20, 0] > 0).astype(int))
    return tmp_path


def _ridge(folder, *extra):
    return [
        "ridge", str(folder / "x.npy"), "--labels", str(folder / "y.npy"), "--test",
        str(folder / "t.npy"), "--test-labels", str(folder / "ty.npy"), "--kernel", "rbf",
        "--gamma", "0.5", "--alpha", "0.1", "--quiet", *extra,
    ]  # fmt: skip


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize(
    ("name", "which"), [("x.npy", "DATA"), ("y.npy", "--labels"), ("t.npy", "--test"),
                        ("ty.npy", "--test-labels")],
)  # fmt: skip
def test_predictions_over_an_input_are_refused_before_the_fit(folder, capsys, name, which):
    before = _snapshot(folder)
    assert main(_ridge(folder, "--predictions", str(folder / name), "--overwrite")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"npt ridge: error: --predictions {folder / name} is the input {which}")
    assert "Choose another path for --predictions" in err
    assert _snapshot(folder) == before  # nothing written, the inputs whole


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_predictions_through_a_link_to_an_input_are_refused(folder, capsys, link):
    alias = folder / "alias.npy"
    (os.symlink if link == "symlink" else os.link)(folder / "x.npy", alias)
    before = (folder / "x.npy").read_bytes()
    assert main(_ridge(folder, "--predictions", str(alias), "--overwrite")) == 2
    assert "is the input DATA" in capsys.readouterr().err
    assert (folder / "x.npy").read_bytes() == before


def test_checkpoint_over_an_input_is_refused(folder, capsys):
    before = _snapshot(folder)
    assert main(_ridge(folder, "--checkpoint", str(folder / "y.npy"))) == 2
    assert "--checkpoint" in capsys.readouterr().err
    assert _snapshot(folder) == before


def test_predictions_inside_an_input_store_are_refused(folder, capsys):
    import xarray as xr

    store = folder / "rows.zarr"
    rows = xr.Dataset({"x": (("sample", "feature"), np.load(folder / "x.npy"))})
    rows.to_zarr(store, consolidated=False)
    command = ["ridge", str(store), "--var", "x", "--labels", str(folder / "y.npy"),
               "--test-rows", "60:80", "--kernel", "rbf", "--quiet",
               "--predictions", str(store / "p.npy")]  # fmt: skip
    assert main(command) == 2
    assert "is the input DATA" in capsys.readouterr().err
    assert not (store / "p.npy").exists()


def test_an_existing_file_is_replaced_only_with_overwrite(folder, capsys):
    out = folder / "p.npy"
    out.write_bytes(b"kept")
    assert main(_ridge(folder, "--predictions", str(out))) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert out.read_bytes() == b"kept"
    assert main(_ridge(folder, "--predictions", str(out), "--overwrite")) == 0
    assert json.loads(capsys.readouterr().out)["predictions"] == str(out)
    assert np.load(out).shape == (20,)
    assert not [p for p in folder.iterdir() if p.name.startswith(".p.npy.")]  # no temporary


def test_predictions_through_a_link_are_written_where_it_points(folder, capsys):
    (folder / "out").mkdir()
    link = folder / "p.npy"
    link.symlink_to(folder / "out" / "p.npy")
    assert main(_ridge(folder, "--predictions", str(link))) == 0
    assert link.is_symlink()
    assert np.load(folder / "out" / "p.npy").shape == (20,)


def test_an_interrupted_write_leaves_the_previous_file(folder, monkeypatch, capsys):
    out = folder / "p.npy"
    np.save(out, np.arange(3))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "save", interrupted)
    assert main(_ridge(folder, "--predictions", str(out), "--overwrite")) == 130
    monkeypatch.undo()
    np.testing.assert_array_equal(np.load(out), np.arange(3))
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["x.npy", "y.npy", "t.npy", "ty.npy", "p.npy"]
    )


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--predictions", "{folder}/missing/p.npy"], "the folder {folder}/missing does not"),
        (["--test-labels", "{folder}/y.npy"], "gives (80,) labels for 20 test rows"),
    ],
)
def test_bad_test_labels_and_a_missing_folder_are_refused_before_the_fit(
    folder, capsys, monkeypatch, extra, words
):
    import npt_dask as npt

    def never(*args, **kwargs):
        raise AssertionError("the fit ran")

    monkeypatch.setattr(npt.KernelRidgeClassifier, "fit", never)
    extra = [e.format(folder=folder) for e in extra]
    assert main(_ridge(folder, *extra)) == 2
    err = capsys.readouterr().err
    assert words.format(folder=folder) in err
    assert len(err.strip().splitlines()) == 1


def test_predictions_without_test_rows_are_refused(folder, capsys):
    command = ["ridge", str(folder / "x.npy"), "--labels", str(folder / "y.npy"), "--quiet",
               "--predictions", str(folder / "p.npy")]  # fmt: skip
    assert main(command) == 2
    assert "no test rows are given: add --test FILE or --test-rows" in capsys.readouterr().err
    assert not (folder / "p.npy").exists()


def test_fit_out_over_its_warm_start_model_is_refused(folder, capsys):
    model = folder / "m.zarr"
    assert main(["fit", str(folder / "x.npy"), "--out", str(model), "--n-components", "2",
                 "--quiet"]) == 0  # fmt: skip
    before = (model / "zarr.json").read_bytes()
    command = ["fit", str(folder / "x.npy"), "--out", str(model), "--start", str(model),
               "--overwrite", "--n-components", "3", "--quiet"]  # fmt: skip
    assert main(command) == 2
    assert f"--out {model} is the input --start" in capsys.readouterr().err
    assert (model / "zarr.json").read_bytes() == before


def test_project_out_over_its_data_store_is_refused(folder, capsys):
    model = folder / "m.zarr"
    assert main(["fit", str(folder / "x.npy"), "--out", str(model), "--quiet"]) == 0
    store = folder / "rows.zarr"
    import xarray as xr

    rows = xr.Dataset({"x": (("sample", "feature"), np.load(folder / "x.npy"))})
    rows.to_zarr(store, consolidated=False)
    command = ["project", str(model), str(store), "--var", "x", "--out", str(store),
               "--overwrite", "--quiet"]  # fmt: skip
    assert main(command) == 2
    assert f"--out {store} is the input DATA" in capsys.readouterr().err
    assert xr.open_zarr(store, consolidated=False)["x"].shape == (80, 3)


def test_a_saved_models_predictions_never_overwrite_its_test_rows(folder, capsys, monkeypatch):
    """``npt ridge --model``: the test rows found through ``$NPT_DATA_DIR`` are an input like
    any other, even with ``--overwrite``; the predictions' score is the fitted model's."""
    assert main([*_ridge(folder), "--out", str(folder / "m.zarr")]) == 0
    fitted = json.loads(capsys.readouterr().out)["test_score"]
    data = folder / "data"
    data.mkdir()
    (folder / "t.npy").rename(data / "t.npy")
    monkeypatch.setenv("NPT_DATA_DIR", str(data))
    monkeypatch.chdir(folder)
    before = (data / "t.npy").read_bytes()
    code = main(["ridge", "--model", "m.zarr", "--test", "t.npy", "--test-labels", "ty.npy",
                 "--predictions", str(data / "t.npy"), "--overwrite", "--quiet"])  # fmt: skip
    assert code == 2
    assert "is the input --test" in capsys.readouterr().err
    assert (data / "t.npy").read_bytes() == before
    assert main(["ridge", "--model", "m.zarr", "--test", "t.npy", "--test-labels", "ty.npy",
                 "--predictions", "p.npy", "--quiet"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["test_score"] == fitted


def test_grow_out_inside_or_at_its_model_is_refused(folder, capsys):
    assert main(["fit", str(folder / "x.npy"), "--out", str(folder / "m.zarr"),
                 "--n-components", "2", "--quiet"]) == 0  # fmt: skip
    before = _snapshot(folder / "m.zarr")
    for out in (folder / "m.zarr", folder / "m.zarr" / "grown.zarr"):
        code = main(["grow", str(folder / "m.zarr"), str(folder / "t.npy"), "--out", str(out),
                     "--overwrite", "--quiet"])  # fmt: skip
        assert code == 2
        assert "is the input MODEL" in capsys.readouterr().err
    assert _snapshot(folder / "m.zarr") == before
