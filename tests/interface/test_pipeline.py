"""Pipelines: config validation, an end-to-end run, resuming, the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from distributed import Client, LocalCluster

import npt_dask as npt
from npt_dask.errors import InputError
from npt_dask.interface.pipeline import PipelineConfig, load_config, run
from npt_dask.interface.pipeline.config import MethodConfig
from tests.conftest import REPO

CONFIGS = sorted((REPO / "pipelines").glob("*.toml"))

MOONS = {
    "name": "moons",
    "data": {"source": "moons", "n_samples": 240, "noise": 0.2, "test_fraction": 0.25},
    "model": {"kernel": "rbf", "gamma": 2.0, "n_components": None, "chunk_size": 64},
    "methods": [
        {"name": "ksvm", "solver": "svc", "C": 5.0},
        {"name": "kernel_svm_reference", "C": 5.0},
        {"name": "kfd"},
        {"name": "kpcal1", "n_components": 2, "n_init": 2},
        {"name": "kpca"},
        {"name": "alignment"},
    ],
}


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c


def _config(tmp_path: Path, **changes) -> PipelineConfig:
    values = {**MOONS, "output": {"dir": str(tmp_path / "out"), "plots": True}}
    for section, update in changes.items():
        values[section] = {**values[section], **update}
    return PipelineConfig.from_dict(values)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_validate_and_round_trip(path):
    config = load_config(path)
    assert PipelineConfig.from_dict(config.to_dict()) == config
    assert config.methods


def test_config_rejects_bad_values(tmp_path):
    cases = [
        ({**MOONS, "colour": 1}, "Unknown key 'colour' at the top level"),
        ({**MOONS, "data": {"source": "csv"}}, "source must be one of"),
        ({**MOONS, "data": {"source": "npz"}}, "needs path"),
        (
            {**MOONS, "model": {"gammma": 1.0}},
            "Unknown key 'gammma' (did you mean 'gamma'?) in [model]",
        ),
        ({**MOONS, "model": {"gamma": "auto"}}, "The 'gamma' parameter must be"),  # one wording
        ({**MOONS, "methods": [{"name": "svm"}]}, "name must be one of"),
        ({**MOONS, "methods": [{"name": "kfd"}, {"name": "kfd"}]}, "names repeat"),
        ({**MOONS, "version": 7}, "version 7 is not supported"),
        ({k: v for k, v in MOONS.items() if k != "name"}, "needs a top-level name"),
    ]
    for values, message in cases:
        with pytest.raises(InputError, match=__import__("re").escape(message)):
            PipelineConfig.from_dict(values)
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [unclosed")
    with pytest.raises(InputError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(InputError, match="Cannot read config"):
        load_config(tmp_path / "missing.toml")


def test_config_does_not_modify_the_callers_mapping():
    values = {"name": "x", "methods": [{"name": "kfd", "label": "a", "reg": 1e-3}]}
    snapshot = json.dumps(values, sort_keys=True)
    config = PipelineConfig.from_dict(values)
    assert json.dumps(values, sort_keys=True) == snapshot
    assert config.methods[0] == MethodConfig("kfd", {"reg": 1e-3}, label="a")


def test_unknown_method_parameter_fails_before_anything_is_written(tmp_path, client):
    config = _config(tmp_path)
    bad = PipelineConfig.from_dict(
        {**config.to_dict(), "methods": [{"name": "kpcal1", "n_componentz": 2}]}
    )
    with pytest.raises(InputError, match="n_componentz"):
        run(bad, client=client, progress=False)
    assert not (tmp_path / "out").exists()


def test_moons_pipeline_end_to_end_and_resume(tmp_path, client):
    config = _config(tmp_path)
    report = run(config, client=client, progress=False)
    out = tmp_path / "out"
    methods = report["methods"]
    # Full rank: a linear SVM on NPT coordinates is the kernel SVM (same C), so the
    # two classifiers agree on every test point.
    assert methods["ksvm"]["test_accuracy"] == methods["kernel_svm_reference"]["test_accuracy"]
    assert methods["ksvm"]["test_accuracy"] > 0.9
    assert methods["kfd"]["test_accuracy_nearest_mean"] > 0.8
    d = methods["kpcal1"]
    # PCA-L1 maximises the L1 dispersion; the KPCA axes are feasible directions
    assert np.all(np.array(d["l1_dispersion"]) >= np.array(d["kpca_l1_dispersion"]) - 1e-9)
    assert methods["kpca"]["explained_variance_ratio_sum"] == pytest.approx(1.0, abs=1e-8)
    assert 0 < methods["alignment"]["centered_alignment"] < 1
    assert not report["model"]["reused"]
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["methods"]["ksvm"]["test_accuracy"] == methods["ksvm"]["test_accuracy"]
    assert "moons" in (out / "summary.txt").read_text()
    for name in ("spectrum.png", "coordinates_test.png", "residual_test.png", "kfd_test.png"):
        pytest.importorskip("matplotlib")
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import xarray as xr

    test = xr.open_zarr(out / "test.zarr", consolidated=False)
    assert test["coordinates"].shape == (60, report["model"]["n_components"])
    assert set(np.unique(test["label"].values)) == {0, 1}

    stamps = {p: p.stat().st_mtime_ns for p in (out / "test.zarr").rglob("*") if p.is_file()}
    again = run(config, client=client, progress=False)
    assert again["model"]["reused"]
    assert again["methods"]["ksvm"]["test_accuracy"] == methods["ksvm"]["test_accuracy"]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # nothing re-projected

    changed = run(_config(tmp_path, model={"gamma": 1.0}), client=client, progress=False)
    assert not changed["model"]["reused"]
    assert changed["model"]["kernel"]["gamma"] == 1.0
    other_rows = _config(tmp_path, model={"gamma": 1.0}, data={"seed": 1})
    assert not run(other_rows, client=client, progress=False)["model"]["reused"]


def test_npt_run_command_line(tmp_path):
    """``npt run`` end to end in a fresh process, on its embedded LocalCluster."""
    import subprocess
    import sys

    config = tmp_path / "moons.toml"
    config.write_text(
        'name = "moons-cli"\n[data]\nsource = "moons"\nn_samples = 120\n'
        '[model]\nkernel = "rbf"\ngamma = 2.0\nn_components = 20\n'
        '[[methods]]\nname = "ksvm"\nsolver = "svc"\n'
        "[cluster]\nn_workers = 1\nthreads_per_worker = 1\n"
        "[output]\nplots = false\n"
    )
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "npt_dask", "run", str(config), "--output", str(out)]
    done = subprocess.run([*cmd, "--quiet"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["methods"]["ksvm"]["test_accuracy"] > 0.9
    assert json.loads(done.stdout)["report"].endswith("report.json")

    config.write_text('name = "bad"\n[model]\nkernel = "rbf"\ngama = 1\n')
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "Unknown key 'gama' (did you mean 'gamma'?) in [model]" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_staging_never_replaces_a_foreign_directory(tmp_path, client):
    config = _config(tmp_path)
    foreign = tmp_path / "out" / "input_train.zarr"
    foreign.mkdir(parents=True)
    (foreign / "mine.txt").write_text("user data")
    with pytest.raises(InputError, match="not rows staged by npt run"):
        run(config, client=client, progress=False)
    assert (foreign / "mine.txt").read_text() == "user data"
    assert not (tmp_path / "out" / "model.zarr").exists()


def test_landmark_ridge_pipeline_reads_the_training_rows_once(tmp_path, client):
    """Landmarks + ridge only: the fit's training pass gives the ridge moments, no
    train.zarr is written, and the classifier equals ridge on the projected rows."""
    from npt_dask.methods import RidgeClassifier

    config = PipelineConfig.from_dict(
        {
            **MOONS,
            "model": {
                "kernel": "rbf",
                "gamma": 2.0,
                "landmarks": 40,
                "n_components": None,
                "chunk_size": 64,
            },
            "methods": [{"name": "ridge", "alpha": [1e-3, 1e-1]}],
            "output": {"dir": str(tmp_path / "out"), "plots": False},
        }
    )
    report = run(config, client=client, progress=False)
    out = tmp_path / "out"
    ridge = report["methods"]["ridge"]
    assert ridge["fitted_from"] == "training pass moments"
    assert not (out / "train.zarr").exists()
    assert (out / "test.zarr").exists()
    import xarray as xr

    model = npt.load(out / "model.zarr")
    train = xr.open_zarr(out / "input_train.zarr", consolidated=False)
    test = xr.open_zarr(out / "test.zarr", consolidated=False)
    ref = RidgeClassifier(alpha=[1e-3, 1e-1]).fit(
        model.transform(train["x"].values), train["label"].values
    )
    acc = float(np.mean(ref.predict(test["coordinates"].values) == test["label"].values))
    assert ridge["alpha"] == ref.alpha_
    assert ridge["test_accuracy"] == acc


def _grow_config(tmp_path: Path, out: str) -> dict:
    return {
        "name": "g",
        "model": {"kernel": "rbf", "gamma": 1.0},
        "grow": {"model": str(tmp_path / "full.zarr"), "files": ["day1.npy"], "out": out},
        "output": {"dir": str(tmp_path / "out")},
    }


@pytest.mark.parametrize(
    ("out", "owner"),
    [
        ("model.zarr", "the pipeline's fitted model (model.zarr)"),
        ("./train.zarr", "the projected training rows (train.zarr)"),
        ("test.zarr/grown.zarr", "the projected test rows (test.zarr)"),
        ("input_train.zarr", "the staged training rows (input_train.zarr)"),
        ("report.json", "the run's report (report.json)"),
        ("spectrum.png", "a figure of the report (spectrum.png)"),
    ],
)
def test_grow_out_over_a_pipeline_store_is_refused_by_the_config(tmp_path, out, owner):
    with pytest.raises(InputError) as info:
        PipelineConfig.from_dict(_grow_config(tmp_path, out))
    assert str(info.value).startswith(f"[grow] out = {out!r} is {owner} in the output folder")
    assert "would replace each other" in str(info.value)
    assert "out = 'grown.zarr'" in str(info.value)
    assert not (tmp_path / "out").exists()  # nothing written


def test_grow_out_through_a_link_to_the_model_is_refused_before_any_work(tmp_path, client):
    config = PipelineConfig.from_dict(_grow_config(tmp_path, "grown.zarr"))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "grown.zarr").symlink_to(tmp_path / "out" / "model.zarr")
    with pytest.raises(InputError, match=r"is the pipeline's fitted model \(model.zarr\)"):
        run(config, client=client, progress=False)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["grown.zarr"]


def test_a_zarr_data_path_that_is_a_pipeline_store_is_refused(tmp_path):
    values = {"name": "z", "data": {"source": "zarr", "path": str(tmp_path / "out/train.zarr")},
              "methods": [{"name": "kpca"}], "output": {"dir": str(tmp_path / "out")}}  # fmt: skip
    with pytest.raises(InputError, match=r"\[data\] path = .* is the projected training rows"):
        PipelineConfig.from_dict(values)


RIDGE_STAGES = {
    "name": "kr",
    "data": {"source": "moons", "n_samples": 160, "noise": 0.2, "test_fraction": 0.25},
    "methods": [
        {"name": "kernel_ridge", "label": "first", "kernel": "rbf", "gamma": 2.0,
         "alpha": 0.1, "solver": "cg", "tol": 1e-8},
        {"name": "kernel_ridge", "label": "second", "kernel": "rbf", "gamma": 2.0,
         "alpha": 0.05, "solver": "cg", "tol": 1e-8},
    ],
}  # fmt: skip


def _ridge_run(tmp_path, client, alpha=0.05, overwrite=False, progress=False):
    values = {**RIDGE_STAGES, "output": {"dir": str(tmp_path / "out"), "plots": False,
                                         "overwrite": overwrite}}  # fmt: skip
    values["methods"] = [RIDGE_STAGES["methods"][0], {**RIDGE_STAGES["methods"][1],
                                                      "alpha": alpha}]  # fmt: skip
    return run(PipelineConfig.from_dict(values), client=client, progress=progress)


def test_two_kernel_ridge_stages_and_a_changed_alpha_each_solve_their_own_problem(tmp_path, client):
    from sklearn.kernel_ridge import KernelRidge

    report = _ridge_run(tmp_path, client)
    assert not list((tmp_path / "out").glob("*.cg.npz"))  # removed once each stage is done
    rerun = _ridge_run(tmp_path, client, alpha=0.02)  # changed settings: no stale state
    assert not list((tmp_path / "out").glob("*.cg.npz"))
    from npt_dask.interface.pipeline.data import load_split

    split = load_split(PipelineConfig.from_dict(RIDGE_STAGES).data, needs_labels=True)
    for result, alpha in [(report["methods"]["first"], 0.1), (report["methods"]["second"],
                          0.05), (rerun["methods"]["second"], 0.02)]:  # fmt: skip
        targets = np.where(split.y_train[:, None] == np.unique(split.y_train), 1.0, -1.0)
        ref = KernelRidge(alpha=alpha, kernel="rbf", gamma=2.0).fit(split.x_train, targets)
        expected = np.mean(ref.predict(split.x_test).argmax(axis=1) == split.y_test)
        assert result["route"] == "cg"
        assert result["test_accuracy"] == pytest.approx(expected)


def test_each_kernel_ridge_stage_has_its_own_checkpoint_and_overwrite_clears_stale_ones(
    tmp_path, client
):
    from npt_dask.interface.pipeline.methods import run_stage_params

    out = tmp_path / "out"
    stage = RIDGE_STAGES["methods"][0]
    params = {k: v for k, v in stage.items() if k not in ("name", "label")}
    names = {
        Path(run_stage_params("kernel_ridge", p, out, key=k, problem=d)["checkpoint"]).name
        for k, p, d in [("first", params, "a"), ("second", params, "a"),
                        ("first", {**params, "alpha": 1.0}, "a"), ("first", params, "b")]
    }  # fmt: skip
    assert len(names) == 4  # stage, settings and data each change the name
    out.mkdir()
    stale = [out / "kernel_ridge.cg.npz", out / f"first.{'0' * 12}.cg.npz"]
    for path in stale:
        path.write_bytes(b"a killed run's state of another problem")
    _ridge_run(tmp_path, client, overwrite=True)
    assert not list(out.glob("*.cg.npz"))


def test_npt_run_shows_the_kernel_ridge_stages_progress(tmp_path, client, capsys):
    _ridge_run(tmp_path, client, progress=True)
    err = capsys.readouterr().err
    assert "iteration" in err.lower(), err


def test_an_interrupted_kernel_ridge_stage_resumes_from_its_checkpoint(
    tmp_path, client, monkeypatch, capsys
):
    """Ctrl-C after the stage's third iteration, then the same run: the stage resumes from
    its checkpoint (its centres drawn with the stage's fixed seed) and agrees with a run
    that was never stopped."""
    from npt_dask.ridge.checkpoint import Checkpoint

    values = {**RIDGE_STAGES, "methods": [{**RIDGE_STAGES["methods"][0], "landmarks": 40}],
              "output": {"dir": str(tmp_path / "out"), "plots": False}}  # fmt: skip
    config = PipelineConfig.from_dict(values)
    whole = run(config, client=client, progress=False)["methods"]["first"]
    saved = Checkpoint.save

    def save_then_stop(self, state, *args, **kwargs):
        saved(self, state, *args, **kwargs)
        if state.iteration >= 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(Checkpoint, "save", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run(config, client=client, progress=False)
    (checkpoint,) = (tmp_path / "out").glob("first.*.cg.npz")
    monkeypatch.undo()
    capsys.readouterr()
    again = run(config, client=client, progress=True)["methods"]["first"]
    assert f"cg: resuming at iteration 3 from {checkpoint}" in capsys.readouterr().err
    assert again["test_accuracy"] == whole["test_accuracy"]
    assert again["n_iter"] == whole["n_iter"]
    assert not checkpoint.exists()
