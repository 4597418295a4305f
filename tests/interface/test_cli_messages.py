"""The command line's messages: what a user trips on after the quickstart, as they type it.

The command line runs in this process (``npt_dask.interface.cli.main``), so each case is
fast; the messages checked are the ones a user reads.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import npt_dask as npt
from npt_dask.errors import KernelScaleWarning, NPTWarning, StoreError
from npt_dask.interface.cli import main
from npt_dask.params.parsing import parse_bytes


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    tmp = tmp_path_factory.mktemp("ux")
    rng = np.random.default_rng(22)
    x = rng.random((120, 6))
    np.save(tmp / "train.npy", x)
    np.savez(tmp / "images.npz", x=(rng.random((40, 3, 2)) * 255).astype(np.uint8))
    return tmp, x


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _fit_model(files: tuple[Path, np.ndarray], capsys: pytest.CaptureFixture[str]) -> Path:
    tmp, _ = files
    out = tmp / "model.zarr"
    if not out.exists():
        code, _, err = _run(capsys, "fit", tmp / "train.npy", "--gamma", "0.5",
                            "--n-components", "4", "--out", out, "--quiet")  # fmt: skip
        assert code == 0, err
    return out


# --- 3-D input and rows on another scale --------------------------------------------------


def test_project_refuses_3d_npz(files, capsys) -> None:
    tmp, _ = files
    model = _fit_model(files, capsys)
    code, _, err = _run(capsys, "project", model, tmp / "images.npz", "--out", tmp / "p3.zarr")
    assert code == 2
    assert "has shape (40, 3, 2); rows must be 2-D" in err
    assert not (tmp / "p3.zarr").exists()
    with pytest.raises(ValueError, match="rows must be 2-D"):
        npt.project(npt.load(model), tmp / "images.npz", tmp / "p4.zarr", progress=False)


def test_project_warns_when_rows_are_on_another_scale(files, capsys, tmp_path) -> None:
    _, x = files
    model = npt.load(_fit_model(files, capsys))
    with pytest.warns(KernelScaleWarning, match="every residual sits at the kernel's maximum"):
        ds = npt.project(model, x[:30] * 255, tmp_path / "raw.zarr", progress=False)
    y = ds["coordinates"].values
    np.testing.assert_allclose(y, np.broadcast_to(y[0], y.shape), atol=1e-12)  # all alike
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        npt.project(model, x[:30], tmp_path / "scaled.zarr", progress=False)


# --- save(path, overwrite=False) ----------------------------------------------------------


def test_save_refuses_to_replace_a_model_without_overwrite(files, tmp_path) -> None:
    _, x = files
    first = npt.fit(x, gamma=0.5, n_components=3)
    other = npt.fit(x, gamma=0.1, n_components=3)
    path = first.save(tmp_path / "m.zarr")
    with pytest.raises(StoreError, match="already holds a model; pass overwrite=True"):
        other.save(path)
    assert npt.load(path).kernel.gamma == 0.5
    other.save(path, overwrite=True)
    assert npt.load(path).kernel.gamma == 0.1


# --- --n-components default, did you mean -------------------------------------------------


def test_fit_without_n_components_uses_the_table_default(files, capsys) -> None:
    tmp, x = files
    code, out, err = _run(capsys, "fit", tmp / "train.npy", "--gamma", "0.5",
                          "--out", tmp / "full.zarr", "--quiet")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["r"] == npt.fit(x, gamma=0.5).n_components  # the full rank


def test_misspelled_option_gets_did_you_mean(files, capsys) -> None:
    tmp, _ = files
    with pytest.raises(SystemExit) as exit_:
        main(["fit", str(tmp / "train.npy"), "--out", str(tmp / "x.zarr"), "--n-compnents", "3"])
    assert exit_.value.code == 2
    assert "did you mean --n-components?" in capsys.readouterr().err


# --- --rows -------------------------------------------------------------------------------


def test_rows_select_the_training_and_projected_rows(files, capsys) -> None:
    tmp, x = files
    code, _, err = _run(capsys, "fit", tmp / "train.npy", "--rows", "0:80", "--gamma", "0.5",
                        "--n-components", "4", "--out", tmp / "rows.zarr", "--quiet")  # fmt: skip
    assert code == 0, err
    model = npt.load(tmp / "rows.zarr")
    assert model.n_samples == 80
    reference = npt.fit(x[:80], gamma=0.5, n_components=4)
    np.testing.assert_allclose(model.eigenvalues, reference.eigenvalues, rtol=1e-10)
    code, _, err = _run(capsys, "project", tmp / "rows.zarr", tmp / "train.npy",
                        "--rows", "80:120", "--out", tmp / "rows_p.zarr", "--quiet")  # fmt: skip
    assert code == 0, err
    ds = xr.open_zarr(tmp / "rows_p.zarr")
    np.testing.assert_array_equal(ds["sample"].values, np.arange(80, 120))
    np.testing.assert_allclose(ds["coordinates"].values, model.transform(x[80:]), atol=1e-10)


@pytest.mark.parametrize(("rows", "says"), [("5", "not a row range"), ("9:3", "selects no rows")])
def test_bad_rows_named(files, capsys, rows: str, says: str) -> None:
    tmp, _ = files
    with pytest.raises(SystemExit):
        main(["fit", str(tmp / "train.npy"), "--rows", rows, "--out", str(tmp / "r.zarr")])
    assert says in capsys.readouterr().err


# --- parse errors -------------------------------------------------------------------------


def test_invalid_json_is_named(files, capsys) -> None:
    tmp, _ = files
    with pytest.raises(SystemExit):
        main(["fit", str(tmp / "train.npy"), "--kernel-params", "{gamma: 0.1}",
              "--out", str(tmp / "j.zarr")])  # fmt: skip
    err = capsys.readouterr().err
    assert "argument --kernel-params: '{gamma: 0.1}' is not valid JSON" in err
    assert "must be a dict" not in err


def test_memory_budget_with_units(files, capsys) -> None:
    tmp, _ = files
    code, _, err = _run(capsys, "fit", tmp / "train.npy", "--memory-budget", "2GB",
                        "--n-components", "3", "--out", tmp / "mb.zarr", "--quiet")  # fmt: skip
    assert code == 0, err
    assert parse_bytes("1.5GiB") == 3 * 2**29


def test_tiny_memory_budget_message_shows_bytes(files) -> None:
    _, x = files
    with pytest.raises(ValueError, match=r"memory_budget=1000 bytes") as info:
        npt.fit(x, solver="dense", memory_budget=1000)
    assert "0.0 GiB" not in str(info.value)


# --- one word for overwrite; paths --------------------------------------------------------


def test_project_overwrite_and_deprecated_no_resume(files, capsys) -> None:
    tmp, _ = files
    model = _fit_model(files, capsys)
    out = tmp / "again.zarr"
    args = ("project", model, tmp / "train.npy", "--out", out, "--quiet")
    assert _run(capsys, *args)[0] == 0
    code, _, err = _run(capsys, *args, "--overwrite")
    assert code == 0, err
    code, _, err = _run(capsys, *args, "--no-resume")
    assert code == 0, err
    assert "--no-resume is deprecated; use --overwrite" in err


@pytest.mark.parametrize("command", ["fit", "project"])
def test_out_under_a_missing_folder_is_refused(files, capsys, command) -> None:
    tmp, _ = files
    target = tmp / "no" / "such" / "m.zarr"
    first = ["fit", tmp / "train.npy"] if command == "fit" else [
        "project", _fit_model(files, capsys), tmp / "train.npy"]  # fmt: skip
    code, _, err = _run(capsys, *first, "--n-components", "2", "--out", target) if (
        command == "fit") else _run(capsys, *first, "--out", target)  # fmt: skip
    assert code == 2
    assert "does not exist; create it first" in err
    assert not (tmp / "no").exists()


def test_project_to_a_non_zarr_path_warns(files, capsys, tmp_path) -> None:
    _, x = files
    model = npt.load(_fit_model(files, capsys))
    with pytest.warns(NPTWarning, match=r"out.npy will be a zarr store"):
        npt.project(model, x[:10], tmp_path / "out.npy", progress=False)


def test_fit_docstring_lists_precomputed_and_callables() -> None:
    doc = npt.fit.__doc__ or ""
    assert '"precomputed"' in doc
    assert "callable" in doc.split("kernel_params")[0]


# --- progress wording ---------------------------------------------------------------------


def test_resumed_bar_counts_on_from_the_chunks_done(files, capsys, tmp_path, monkeypatch) -> None:
    import dask

    from npt_dask.npt import projection_store as projection

    _, x = files
    model = npt.load(_fit_model(files, capsys))
    step = projection.ProgressBar.step

    def stop_after_three(bar: projection.ProgressBar) -> None:
        step(bar)
        if bar.done == 3:
            raise KeyboardInterrupt

    out = tmp_path / "p.zarr"
    with dask.config.set(scheduler="synchronous"), monkeypatch.context() as mp:
        mp.setattr(projection.ProgressBar, "step", stop_after_three)
        with pytest.raises(KeyboardInterrupt):
            npt.project(model, x, out, chunk_size=10, progress=False)
    capsys.readouterr()
    npt.project(model, x, out, chunk_size=10, progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("npt project: resuming: 3 of 12 chunks already done")
    assert " 4/12 chunks" in lines[1]  # not 1/12
    assert " 12/12 chunks" in lines[-1]


def test_one_pass_one_feature_singular(files, capsys) -> None:
    _, x = files
    with pytest.warns(npt.ConvergenceWarning, match="stopped after 1 pass with"):
        npt.fit(x, gamma=0.5, n_components=3, solver="krylov", max_passes=1, tol=1e-14)
    model = npt.fit(x[:, :1], gamma=0.5, n_components=2)
    with pytest.raises(ValueError, match="has 2 features, but the model was fitted on 1 feature:"):
        model.transform(x[:, :2])
    from npt_dask.interface.pipeline.report import summary_text

    report = {"name": "t", "seconds": {}, "methods": {}, "outputs": {"dir": "d"},
              "memory": {"driver_peak_gib": 0.0, "worker_peak_gib": 0.0},
              "data": {"description": "x", "n_train": 1, "n_test": 1, "n_features": 1,
                       "classes": [0, 1]},
              "model": {"kernel": {"name": "rbf", "gamma": 0.5}, "n_components": 2,
                        "solver": "dense", "passes": 1, "max_residual": 0.0,
                        "reused": False}}  # fmt: skip
    assert "dense, 1 pass," in summary_text(report)


def test_a_fit_reports_at_once(files, capsys) -> None:
    _, x = files
    npt.fit(x, gamma=0.5, n_components=3, solver="krylov", progress=True)
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("npt fit: Krylov solver, n = 120, r = 3")


# --- a landmark pipeline's report ---------------------------------------------------------


def test_landmark_pipeline_report(tmp_path, capsys, monkeypatch) -> None:
    import contextlib

    from distributed import Client, LocalCluster

    from npt_dask.interface.pipeline import PipelineConfig, run
    from npt_dask.interface.pipeline.report import summary_text
    from npt_dask.runtime import cluster

    @contextlib.contextmanager
    def in_process(*args, **kwargs):  # the run's own cluster, without spawning processes
        with (
            LocalCluster(n_workers=1, threads_per_worker=1, processes=False) as lc,
            Client(lc) as c,
        ):
            assert c.dashboard_link
            yield c

    monkeypatch.setattr(cluster, "connect", in_process)

    config = PipelineConfig.from_dict({
        "name": "lm",
        "data": {"source": "moons", "n_samples": 200, "noise": 0.2, "test_fraction": 0.25},
        "model": {"gamma": 2.0, "n_components": 10, "landmarks": 40, "chunk_size": 64},
        "methods": [{"name": "ksvm", "solver": "liblinear", "C": 100.0, "max_iter": 2}],
        "cluster": {"n_workers": 1, "threads_per_worker": 1},
        "output": {"dir": str(tmp_path / "out"), "plots": False},
    })  # fmt: skip
    with pytest.warns(npt.ConvergenceWarning, match="not standardised"):
        report = run(config, progress=False)
    stored = json.loads((tmp_path / "out" / "report.json").read_text())
    assert "dashboard" not in stored  # the run's own cluster is gone
    lm = stored["model"]["landmarks"]
    assert (lm["m"], lm["method"]) == (40, "uniform")
    assert set(lm["certificate"]) >= {"mean", "max", "quantiles"}
    assert "indices" not in lm
    model = npt.load(tmp_path / "out" / "model.zarr")
    assert lm["certificate"]["max"] == model.diagnostics.landmarks["certificate"]["max"]
    text = summary_text(report)
    assert "m = 40 landmarks (uniform); certificate (Lemma 5 residual) over 150 rows" in text
    svm = stored["methods"]["ksvm"]["convergence"]
    assert svm["converged"] is False
    assert "Liblinear failed to converge" in svm["message"]
    assert "Lower C, or use solver = 'chunked'" in svm["hint"]


def test_npt_info_summarises_landmarks(files, capsys, tmp_path) -> None:
    _, x = files
    npt.fit(x, gamma=0.5, n_components=3, landmarks=60).save(tmp_path / "lm.zarr")
    code, out, _ = _run(capsys, "info", tmp_path / "lm.zarr")
    assert code == 0
    info = json.loads(out)
    assert info["landmarks"]["m"] == 60
    assert "indices" not in json.dumps(info)
    assert "plan" not in info["manifest"]["diagnostics"]  # shown once, at the top
    assert len(out.splitlines()) < 120


def test_config_errors_use_the_config_keys(tmp_path, capsys) -> None:
    config = tmp_path / "c.toml"
    config.write_text('name = "c"\n[data]\nsource = "moons"\n[model]\ngamma = -1\n')
    code, _, err = _run(capsys, "run", config)
    assert code == 2
    assert "[model] table: The 'gamma' parameter must be" in err
    assert "--gamma" not in err
    config.write_text('name = "c"\n[data]\nsource = "moons"\n[model]\nn_component = 5\n')
    code, _, err = _run(capsys, "run", config)
    assert "Unknown key 'n_component' (did you mean 'n_components'?) in [model]" in err


# --- plots --------------------------------------------------------------------------------


def test_scatter_names_the_wrong_argument() -> None:
    pytest.importorskip("matplotlib")
    from npt_dask.interface import plot

    y = np.random.default_rng(0).normal(size=(50, 4))
    with pytest.raises(ValueError, match=r"labels has 49 entries but there are 50 samples"):
        plot.coordinate_scatter(y, np.zeros(49))
    with pytest.raises(ValueError, match=r"components=\(0, 200\) is outside the 4 coordinate"):
        plot.coordinate_scatter(y, components=(0, 200))


def test_legends_beside_the_points_titled_by_what_colours_them() -> None:
    pytest.importorskip("matplotlib")
    from npt_dask.interface import plot

    rng = np.random.default_rng(0)
    ds = xr.Dataset(
        {"coordinates": (("sample", "component"), rng.normal(size=(60, 3))),
         "residual": (("sample",), rng.random(60))},
        coords={"digit": ("sample", np.arange(60) % 3), "label": ("sample", np.arange(60) % 10)},
    )  # fmt: skip
    fig = plot.coordinate_scatter(ds, "digit")
    assert fig.axes[0].get_legend() is None  # not drawn over the points
    (legend,) = fig.legends
    assert legend.get_title().get_text() == "digit"
    fig = plot.residual_histogram(ds, "label")  # 10 labels: one panel each
    panels = [ax for ax in fig.axes if ax.axison]
    assert len(panels) == 10
    assert [ax.get_title() for ax in panels[:2]] == ["label 0", "label 1"]


# --- numpy inputs are shipped once, never inside a task graph -----------------------------


def test_numpy_input_on_a_cluster_sends_no_large_graph() -> None:
    from distributed import Client, LocalCluster

    x = np.random.default_rng(0).random((3000, 500))  # 11.4 MiB: above distributed's 10 MB
    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                     dashboard_address=None) as cluster,
        Client(cluster),
        warnings.catch_warnings(record=True) as caught,
    ):  # fmt: skip
        warnings.simplefilter("always")
        model = npt.fit(x, gamma="scale", n_components=5, landmarks=100, random_state=0)
        y = model.transform(x[:1000])
    large = [str(w.message) for w in caught if "Sending large graph" in str(w.message)]
    assert not large
    local = npt.fit(x, gamma="scale", n_components=5, landmarks=100, random_state=0)
    np.testing.assert_allclose(np.abs(y), np.abs(local.transform(x[:1000])), atol=1e-10)
