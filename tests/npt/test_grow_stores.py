"""A grown model can replace a store and never lands outside the
pipeline's output folder."""

from __future__ import annotations

import json

import numpy as np
import pytest

import npt_dask as npt
from npt_dask.errors import InputError, StoreError
from npt_dask.interface.cli import main
from npt_dask.interface.pipeline import PipelineConfig, run


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A full-rank model store and two batch files of new rows."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(120, 3))
    folder = tmp_path_factory.mktemp("grow")
    path = npt.fit(x[:40], "rbf", gamma=0.4, n_components=None).save(folder / "m0.zarr")
    for k, rows in enumerate((x[40:80], x[80:])):
        np.save(folder / f"day{k + 1}.npy", rows)
    return folder, path


def _no_growth(monkeypatch):
    """Growing is the work: it must not start when the target is refused."""

    def refuse(*args, **kwargs):
        raise AssertionError("grew before checking the target")

    monkeypatch.setattr("npt_dask.npt.model.NPTModel.partial_fit", refuse)


def test_npt_grow_overwrite_replaces_the_store(stored, tmp_path, monkeypatch, capsys):
    folder, m0 = stored
    out = tmp_path / "grown.zarr"
    grow = ["grow", str(m0), str(folder / "day1.npy"), "--out", str(out)]
    assert main(grow) == 0
    capsys.readouterr()
    assert main([*grow[:2], str(folder / "day2.npy"), "--out", str(out), "--overwrite"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == str(out)
    want = npt.load(m0).partial_fit(np.load(folder / "day2.npy"))  # the second batch's model
    got = npt.load(out)
    assert got.n_samples == want.n_samples
    np.testing.assert_allclose(got.eigenvalues, want.eigenvalues, rtol=1e-10)
    with monkeypatch.context() as mp:  # no --overwrite: refused before the work
        _no_growth(mp)
        assert main(grow) == 2
    assert "pass --overwrite to replace it" in capsys.readouterr().err


def test_growing_model_save_takes_overwrite(stored, tmp_path):
    folder, m0 = stored
    grown = npt.load(m0).partial_fit(np.load(folder / "day1.npy"))
    path = grown.save(tmp_path / "g.zarr")
    with pytest.raises(StoreError, match="pass overwrite=True"):
        grown.save(path)
    assert grown.save(path, overwrite=True) == path
    assert npt.load(path).n_samples == grown.n_samples


def _pipeline(stored, tmp_path, **grow) -> PipelineConfig:
    folder, m0 = stored
    return PipelineConfig.from_dict(
        {
            "name": "grow",
            "data": {"source": "moons", "n_samples": 80},
            "model": {"kernel": "rbf", "gamma": 2.0, "n_components": 4, "chunk_size": 64},
            "methods": [{"name": "kpca"}],
            "output": {"dir": str(tmp_path / "out"), "plots": False},
            "grow": {"model": str(m0), "files": [str(folder / "day1.npy")], **grow},
        }
    )


def test_pipeline_with_grow_reruns_with_overwrite(stored, tmp_path, monkeypatch):
    from distributed import Client, LocalCluster

    config = _pipeline(stored, tmp_path)
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                     dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        first = run(config, client=client, progress=False)
        assert first["grow"]["rows_added"] > 0
        again = config.with_overrides(output={"overwrite": True})
        assert run(again, client=client, progress=False)["grow"]["n"] == first["grow"]["n"]
        monkeypatch.setattr("npt_dask.interface.pipeline.runner.fit_or_reuse", _refused)
        with pytest.raises(InputError, match="overwrite = true"):
            run(config, client=client, progress=False)  # no overwrite: before the fit


def _refused(*args, **kwargs):
    raise AssertionError("fitted before checking the [grow] target")


@pytest.mark.parametrize("out", ["../../escape.zarr", "sub/../../escape.zarr", "/tmp/abs.zarr"])
def test_grow_out_outside_the_output_folder_is_refused(stored, tmp_path, out):
    with pytest.raises(InputError, match=r"\[grow\] out = .* inside the pipeline's output"):
        _pipeline(stored, tmp_path, out=out)
    assert not (tmp_path / "out").exists()


def test_grow_out_through_a_link_outside_the_output_folder_is_refused(stored, tmp_path):
    config = _pipeline(stored, tmp_path, out="link/grown.zarr")
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out" / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InputError, match="outside the output folder"):
        run(config, client=None, progress=False)
    assert list((tmp_path / "elsewhere").iterdir()) == []
