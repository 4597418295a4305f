"""A pipeline checks everything its config refers to before its first stage: the ``[grow]``
model, parameters and files, the data files, the output folder; a refusal names the
config's key and nothing is written (no fit, no projection, no folder)."""

from __future__ import annotations

import numpy as np
import pytest

import npt_dask as npt
from npt_dask.errors import InputError, OutputPathError
from npt_dask.interface.cli import main
from npt_dask.interface.pipeline import PipelineConfig, run


def _no_stage(*args, **kwargs):
    raise AssertionError("a stage ran before the refusal")


@pytest.fixture
def grown(tmp_path, monkeypatch):
    """A full-rank stored model and a batch file; the fit stage made to fail if reached."""
    from npt_dask.interface.pipeline import runner

    monkeypatch.setattr(runner, "load_split", _no_stage)
    x = np.random.default_rng(0).normal(size=(30, 2))
    npt.fit(x, kernel="rbf", gamma=1.0, n_components=None).save(tmp_path / "full.zarr")
    np.save(tmp_path / "day1.npy", x[:5] + 0.1)
    return tmp_path


def _config(tmp_path, **grow):
    return PipelineConfig.from_dict({
        "name": "g",
        "data": {"source": "moons", "n_samples": 60},
        "model": {"kernel": "rbf", "gamma": 1.0, "n_components": 5},
        "methods": [{"name": "kpca"}],
        "grow": {"model": str(tmp_path / "full.zarr"), "files": [str(tmp_path / "day1.npy")]}
        | grow,
        "output": {"dir": str(tmp_path / "out")},
    })  # fmt: skip


@pytest.mark.parametrize(
    ("grow", "words"),
    [
        ({"model": "missing.zarr"}, "[grow] model = 'missing.zarr': "),
        ({"files": ["DAY1", "missing.npy"]}, "[grow] files: 'missing.npy': "),
        ({"files": ["wide.npy"]}, "[grow] files: 'wide.npy' holds an array of shape (4, 3)"),
        ({"max_landmarks": 10}, "[grow] max_landmarks=10 is below the model's 30 basis rows"),
        ({"residual_tol": -1.0}, "'residual_tol'"),
        ({"model": "truncated.zarr"}, "grows full-rank models only"),
    ],
)
def test_grow_inputs_are_checked_before_the_first_stage(grown, monkeypatch, grow, words):
    monkeypatch.chdir(grown)
    np.save(grown / "wide.npy", np.zeros((4, 3)))
    x = np.random.default_rng(1).normal(size=(20, 2))
    npt.fit(x, kernel="rbf", gamma=1.0, n_components=3).save(grown / "truncated.zarr")
    if grow.get("files", [None])[0] == "DAY1":
        grow = {"files": [str(grown / "day1.npy"), "missing.npy"]}
    with pytest.raises(InputError) as info:
        run(_config(grown, **grow), progress=False)
    assert words in str(info.value)
    assert not (grown / "out").exists()


def test_an_output_dir_that_is_a_file_is_refused_clearly(grown, capsys):
    (grown / "results").write_text("a file")
    config = _config(grown, out="g.zarr").with_overrides(output={"dir": str(grown / "results")})
    with pytest.raises(OutputPathError, match=r"\[output\] dir = .* is a file, and it names a"):
        run(config, progress=False)
    toml = grown / "run.toml"
    toml.write_text(f'name = "m"\n[data]\nsource = "moons"\n[output]\ndir = "{grown}/results"\n')
    assert main(["run", str(toml), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("npt run: error: [output] dir = ")
    assert "Errno" not in err
    assert (grown / "results").read_text() == "a file"


def test_an_output_dir_inside_a_store_is_refused(grown):
    config = _config(grown).with_overrides(output={"dir": str(grown / "full.zarr" / "out")})
    with pytest.raises(OutputPathError, match="lies inside the zarr store"):
        run(config, progress=False)
    assert not (grown / "full.zarr" / "out").exists()


def test_a_missing_data_file_is_refused_before_the_first_stage(grown):
    config = PipelineConfig.from_dict({
        "name": "n", "data": {"source": "npz", "path": str(grown / "none.npz")},
        "output": {"dir": str(grown / "out")},
    })  # fmt: skip
    with pytest.raises(InputError, match=r"\[data\] path = '.*none\.npz': "):
        run(config, progress=False)
    assert not (grown / "out").exists()
