"""``npt info`` on a kernel ridge store: what ``npt ridge --out`` (or ``save``) wrote, from
its manifest, agreeing with the estimator ``load_ridge`` gives back."""

from __future__ import annotations

import json

import numpy as np
import pytest

import npt_dask as npt
from npt_dask.interface.cli.program import main


def _info(capsys, path) -> dict:
    code = main(["info", str(path)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_npt_info_shows_a_kernel_ridge_store_written_by_npt_ridge(tmp_path, capsys):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 5))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", (x[:, 0] + x[:, 1] > 0).astype(int))
    out = tmp_path / "r.zarr"
    code = main(["ridge", str(tmp_path / "x.npy"), "--labels", str(tmp_path / "y.npy"),
                 "--kernel", "rbf", "--gamma", "0.1", "--alpha", "0.01", "--solver", "cg",
                 "--landmarks", "60", "--quiet", "--out", str(out)])  # fmt: skip
    fitted = json.loads(capsys.readouterr().out)
    assert code == 0
    shown = _info(capsys, out)
    est = npt.load_ridge(out)
    assert shown["kind"] == "kernel ridge model"
    assert shown["estimator"] == type(est).__name__ == "KernelRidgeClassifier"
    assert shown["route"] == fitted["route"] == est.solver_ == "cg"
    assert shown["n_iter"] == fitted["n_iter"] == est.n_iter_ > 0
    assert shown["kernel"] == {"name": "rbf", "gamma": 0.1}
    assert shown["alpha"] == 0.01
    assert shown["exact"] is False
    assert shown["shapes"] == {"n_train": 300, "n_centres": 60, "n_features": 5, "n_targets": 1}
    assert est.dual_coef_.shape[0] == 60
    assert shown["n_classes"] == len(est.classes_) == 2
    assert shown["reason"] == est.plan_["reason"]
    assert shown["scale"] is None  # standard-normal rows: npt ridge divided them by nothing
    scaled = tmp_path / "s.zarr"
    assert main(["ridge", str(tmp_path / "x.npy"), "--labels", str(tmp_path / "y.npy"),
                 "--kernel", "rbf", "--gamma", "0.1", "--landmarks", "60", "--scale", "4",
                 "--quiet", "--out", str(scaled)]) == 0  # fmt: skip
    capsys.readouterr()
    assert _info(capsys, scaled)["scale"] == 4.0  # what --model will divide rows by


def test_npt_info_shows_a_saved_search_and_refuses_an_altered_ridge_store(tmp_path, capsys):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(150, 3))
    est = npt.KernelRidgeCV(kernel="rbf", alphas=[1e-3, 1e-1], gammas=[0.2, 0.5])
    path = est.fit(x, np.sin(x[:, 0])).save(tmp_path / "cv.zarr")
    shown = _info(capsys, path)
    assert shown["estimator"] == "KernelRidgeCV"
    assert shown["exact"] is True
    assert shown["search"]["gamma"] == est.gamma_
    assert shown["search"]["alpha"] == shown["alpha"] == est.alpha_
    assert shown["search"]["best_score"] == pytest.approx(est.best_score_)
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"]["npt"]["n_train"] = 151  # altered after the save
    (path / "zarr.json").write_text(json.dumps(meta))
    assert main(["info", str(path)]) == 2
    assert "does not match its checksum" in capsys.readouterr().err
