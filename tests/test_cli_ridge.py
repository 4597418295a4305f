"""``npt ridge`` with labels in a ``.npy`` file, a search given only its gammas, and
candidate arrays refused by the table's entries in the
command line's words."""

from __future__ import annotations

import json

import numpy as np
import pytest

from npt_dask.interface.cli import main
from npt_dask.runtime.params import SEARCH_PARAMS


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
