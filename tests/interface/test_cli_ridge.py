"""``npt ridge`` with labels in a ``.npy`` file, a search given only its gammas, and
candidate arrays refused by the table's entries in the
command line's words."""

from __future__ import annotations

import json

import numpy as np
import pytest

from npt_dask.interface.cli import main
from npt_dask.ridge.search import SEARCH_PARAMS


@pytest.fixture
def files(tmp_path):
    x = np.random.default_rng(4).normal(size=(120, 3))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", (x[:, 0] > 0).astype(int))
    return [str(tmp_path / "x.npy"), "--labels", str(tmp_path / "y.npy"), "--quiet"]


def test_labels_in_a_npy_file(files, capsys):
    assert main(["ridge", *files, "--kernel", "rbf", "--gamma", "0.5", "--alpha", "0.1"]) == 0
    assert json.loads(capsys.readouterr().out)["alpha"] == 0.1


def test_gammas_alone_search_the_default_alphas(files, capsys):
    assert main(["ridge", *files, "--kernel", "rbf", "--gammas", "0.25", "0.5"]) == 0
    out = json.loads(capsys.readouterr().out)
    (alphas,) = [p.default for p in SEARCH_PARAMS if p.name == "alphas"]
    assert out["alpha"] in alphas
    assert out["gamma"] in (0.25, 0.5)


@pytest.mark.parametrize(
    ("option", "values", "words"),
    [
        ("--alphas", ["0.1", "-1"], "--alphas option of KernelRidgeClassifierCV"),
        ("--gammas", ["0.5", "0"], "--gammas option of KernelRidgeClassifierCV"),
        ("--alphas", ["nan"], "--alphas option of KernelRidgeClassifierCV"),
    ],
)
def test_bad_candidates_are_refused_in_the_tables_words(files, capsys, option, values, words):
    assert main(["ridge", *files, "--kernel", "rbf", option, *values]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"npt ridge: error: The {words} must be a non-empty 1-D array of ")
    assert len(err.strip().splitlines()) == 1


def test_one_dimensional_data_is_refused_in_one_line(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.arange(40.0))
    np.save(tmp_path / "y.npy", np.arange(40) % 2)
    assert main(["ridge", str(tmp_path / "x.npy"), "--labels", str(tmp_path / "y.npy")]) == 2
    err = capsys.readouterr().err
    assert "holds an array of shape (40,); the rows must be 2-D" in err
    assert "x.reshape(-1, 1)" in err
    assert len(err.strip().splitlines()) == 1


def test_images_in_an_npz_of_the_data_folder_are_flattened_and_scaled(tmp_path, capsys,
                                                                      monkeypatch):  # fmt: skip
    from sklearn.kernel_ridge import KernelRidge

    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, size=(90, 4, 5)).astype(np.uint8)
    labels = (images[:, 0, 0] > 127).astype(int)
    np.savez(tmp_path / "pixels.npz", x=images, y=labels)
    monkeypatch.setenv("NPT_DATA_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path.parent)  # not found here: found through NPT_DATA_DIR
    command = ["ridge", "pixels.npz", "--rows", "0:60", "--test-rows", "60:90", "--kernel",
               "rbf", "--gamma", "0.1", "--alpha", "0.5", "--solver", "direct", "--scale",
               "255", "--predictions", str(tmp_path / "p.npy")]  # fmt: skip
    assert main(command) == 0
    captured = capsys.readouterr()
    assert "holds images of shape (90, 4, 5); each is flattened to a row of 20 values" in (
        captured.err
    )
    x = images.reshape(90, -1) / 255.0
    targets = np.where(labels[:60, None] == np.array([0, 1]), 1.0, -1.0)
    reference = KernelRidge(alpha=0.5, kernel="rbf", gamma=0.1).fit(x[:60], targets)
    expected = np.array([0, 1])[reference.predict(x[60:]).argmax(axis=1)]
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), expected)


def test_a_missing_npz_names_where_it_was_looked_for(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NPT_DATA_DIR", str(tmp_path))
    assert main(["ridge", "absent.npz"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("npt ridge: error: DATA: No file 'absent.npz'")
    assert str(tmp_path / "absent.npz") in err


def test_an_interrupted_fit_says_how_to_resume_from_its_checkpoint(files, capsys, monkeypatch,
                                                                   tmp_path):  # fmt: skip
    import npt_dask as npt

    checkpoint = tmp_path / "cg.npz"

    def interrupted(self, X, y, sample_weight=None, *, checkpoint=None):
        np.savez(checkpoint, a=np.zeros(1))  # an iteration's state, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(npt.KernelRidgeClassifier, "fit", interrupted)
    assert main(["ridge", *files, "--checkpoint", str(checkpoint)]) == 130
    err = capsys.readouterr().err.strip()
    assert err == (
        f"npt ridge: interrupted; CG's state is kept in {checkpoint}: run the same command "
        "again to resume from it."
    )


def test_progress_of_the_command_is_labelled_npt_ridge(files, capsys):
    loud = [f for f in files if f != "--quiet"]
    args = ["ridge", *loud, "--kernel", "rbf", "--gamma", "0.5", "--landmarks", "30"]
    assert main([*args, "--solver", "direct"]) == 0
    err = capsys.readouterr().err
    assert "npt ridge: moments pass" in err
    assert "KernelRidgeClassifier:" not in err
