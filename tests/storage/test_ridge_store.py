"""Kernel ridge estimators persist as NPT models do: a zarr v3 store, checksummed, atomic,
versioned, without pickle; a loaded estimator predicts bit for bit as the fitted one."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr

import npt_dask as npt
from npt_dask.errors import (
    StoreError,
    StoreIntegrityError,
    StoreNotFoundError,
    StoreVersionError,
    StoreVersionWarning,
)
from npt_dask.interface.cli import main
from npt_dask.storage import ridge_store, store
from tests.conftest import REPO, dead_owner_tag

RBF = {"kernel": "rbf", "gamma": 0.4, "alpha": 0.1}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    x, z = rng.normal(size=(160, 4)), rng.normal(size=(37, 4))
    y = np.sin(x[:, 0]) + 0.5 * x[:, 1]
    labels = np.array(["ant", "bee", "cicada"])[(x[:, 0] > 0).astype(int) + (x[:, 1] > 0.5)]
    return x, z, y, labels


def _fitted(kind: str, data):
    x, _, y, labels = data
    landmark = {"landmarks": 30, "random_state": 0}
    cases = {
        "exact": lambda: npt.KernelRidge(**RBF, solver="direct").fit(x, y),
        "exact-cg": lambda: npt.KernelRidge(**RBF, solver="cg", tol=1e-8).fit(x, y),
        "landmark-direct": lambda: npt.KernelRidge(**RBF, **landmark, solver="direct").fit(x, y),
        "landmark-cg": lambda: npt.KernelRidge(**RBF, **landmark, solver="cg", tol=1e-8).fit(x, y),
        "float32": lambda: npt.KernelRidge(**RBF, precision="float32", **landmark).fit(
            x.astype(np.float32), y
        ),
        "classifier": lambda: npt.KernelRidgeClassifier(**RBF).fit(x, labels),
        "classifier-landmark-cg": lambda: npt.KernelRidgeClassifier(
            **RBF, **landmark, solver="cg", tol=1e-8
        ).fit(x, labels),
        "binary-int": lambda: npt.KernelRidgeClassifier(**RBF).fit(x, (y > 0).astype(int)),
        "cv": lambda: npt.KernelRidgeCV(
            alphas=[1e-2, 1.0], gammas=[0.2, 0.4], random_state=0, search_rows=120
        ).fit(x, y),
        "classifier-cv": lambda: npt.KernelRidgeClassifierCV(
            alphas=[1e-2, 1.0], random_state=0, search_rows=120
        ).fit(x, labels),
    }
    return cases[kind]()


def _outputs(est, z):
    """Every prediction the estimator gives, numpy and dask input."""
    lazy = da.from_array(z, chunks=10)
    out = [est.predict(z), est.predict(lazy).compute()]
    if hasattr(est, "decision_function"):
        out += [est.decision_function(z), est.decision_function(lazy).compute()]
    return out


def _same_bits(a, b) -> None:
    assert a.dtype == b.dtype
    assert a.shape == b.shape
    if a.dtype.kind == "f":
        assert a.tobytes() == b.tobytes()
    else:
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "kind",
    ["exact", "exact-cg", "landmark-direct", "landmark-cg", "float32", "classifier",
     "classifier-landmark-cg", "binary-int", "cv", "classifier-cv"],
)  # fmt: skip
def test_a_loaded_estimator_predicts_bit_for_bit(kind, data, tmp_path):
    est = _fitted(kind, data)
    loaded = npt.load_ridge(est.save(tmp_path / "m.zarr"))
    assert type(loaded) is type(est)
    for got, want in zip(_outputs(loaded, data[1]), _outputs(est, data[1]), strict=True):
        _same_bits(got, want)
    _same_bits(loaded.dual_coef_, est.dual_coef_)
    assert loaded.get_params() == est.get_params()
    assert loaded.kernel_ == est.kernel_
    assert (loaded.solver_, loaded.n_iter_, loaded.plan_) == (est.solver_, est.n_iter_, est.plan_)
    assert loaded.solve_details_ == est.solve_details_
    np.testing.assert_array_equal(loaded.residuals_, est.residuals_)
    assert loaded.n_features_in_ == est.n_features_in_
    if est.landmarks_ is not None:
        np.testing.assert_array_equal(loaded.landmarks_, est.landmarks_)
    if hasattr(est, "classes_"):
        _same_bits(loaded.classes_, est.classes_)
    if hasattr(est, "cv_results_"):
        assert loaded.cv_results_ == est.cv_results_
        assert (loaded.alpha_, loaded.gamma_, loaded.best_score_) == (
            est.alpha_, est.gamma_, est.best_score_,
        )  # fmt: skip


def test_multi_output_targets_round_trip(data, tmp_path):
    x, z, y, _ = data
    est = npt.KernelRidge(**RBF).fit(x, np.c_[y, y**2, -y])
    loaded = npt.load_ridge(est.save(tmp_path / "m.zarr"))
    _same_bits(loaded.predict(z), est.predict(z))
    assert loaded.predict(z).shape == (37, 3)


def test_an_exact_fit_on_dask_rows_round_trips(data, tmp_path):
    x, z, y, _ = data
    est = npt.KernelRidge(**RBF, chunk_size=50).fit(da.from_array(x, chunks=50), y)
    loaded = npt.load_ridge(est.save(tmp_path / "m.zarr"))
    for got, want in zip(_outputs(loaded, z), _outputs(est, z), strict=True):
        _same_bits(got, want)


def test_sparse_rows_and_array_hyperparameters_round_trip(data, tmp_path):
    import scipy.sparse

    x, z, y, _ = data
    sparse = scipy.sparse.csr_matrix(np.where(np.abs(x) > 0.8, x, 0.0))
    est = npt.KernelRidge(kernel="rbf", gamma=0.4, alpha=np.array([0.1, 1.0]), chunk_size=64)
    est.fit(sparse, np.c_[y, -y])
    loaded = npt.load_ridge(est.save(tmp_path / "m.zarr"))
    _same_bits(loaded.predict(scipy.sparse.csr_matrix(z)), est.predict(scipy.sparse.csr_matrix(z)))
    assert isinstance(loaded.alpha, np.ndarray)
    np.testing.assert_array_equal(loaded.alpha, est.alpha)


def test_feature_names_and_object_classes_round_trip(data, tmp_path):
    import pandas as pd

    x, z, _, labels = data
    frame = pd.DataFrame(x, columns=["a", "b", "c", "d"])
    est = npt.KernelRidgeClassifier(**RBF).fit(frame, labels.astype(object))
    loaded = npt.load_ridge(est.save(tmp_path / "m.zarr"))
    np.testing.assert_array_equal(loaded.feature_names_in_, ["a", "b", "c", "d"])
    assert loaded.classes_.dtype == est.classes_.dtype
    test = pd.DataFrame(z, columns=frame.columns)
    np.testing.assert_array_equal(loaded.predict(test), est.predict(test))
    with pytest.raises(ValueError, match="feature names"):
        loaded.predict(pd.DataFrame(z, columns=["a", "b", "c", "e"]))


def test_a_precomputed_kernel_round_trips(data, tmp_path):
    x, z, y, _ = data
    kernel = npt.make_kernel("rbf", gamma=0.4).resolve(4)
    est = npt.KernelRidge(kernel="precomputed", alpha=0.1).fit(kernel(x, x), y)
    loaded = npt.load_ridge(est.save(tmp_path / "m.zarr"))
    _same_bits(loaded.predict(kernel(z, x)), est.predict(kernel(z, x)))
    assert "centres" not in store.open_group(tmp_path / "m.zarr")


# --- refused, before anything is written ---------------------------------------------------


def test_a_callable_kernel_is_refused_before_writing(data, tmp_path):
    x, _, y, _ = data

    def my_kernel(a, b):
        return a @ b.T

    est = npt.KernelRidge(kernel=my_kernel, alpha=0.1).fit(x, y)
    with pytest.raises(StoreError, match=r"my_kernel.*no pickle.*named kernel"):
        est.save(tmp_path / "m.zarr")
    assert os.listdir(tmp_path) == []


def test_an_unfitted_estimator_is_refused(tmp_path):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        npt.KernelRidge().save(tmp_path / "m.zarr")


def test_a_saved_model_is_replaced_only_with_overwrite(data, tmp_path):
    x, z, y, _ = data
    first = npt.KernelRidge(**RBF).fit(x, y)
    second = npt.KernelRidge(kernel="laplacian", alpha=0.5).fit(x, y)
    path = first.save(tmp_path / "m.zarr")
    with pytest.raises(StoreError, match="overwrite=True"):
        second.save(path)
    _same_bits(npt.load_ridge(path).predict(z), first.predict(z))
    second.save(path, overwrite=True)
    _same_bits(npt.load_ridge(path).predict(z), second.predict(z))


# --- integrity -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(data, tmp_path_factory):
    est = npt.KernelRidgeClassifier(**RBF, landmarks=30, random_state=0).fit(data[0], data[3])
    return est, est.save(tmp_path_factory.mktemp("ridge") / "m.zarr")


def _copy(path: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(path, tmp_path / "copy.zarr"))


def _edit_manifest(path: Path, edit, *, resign: bool = False) -> None:
    meta = json.loads((path / "zarr.json").read_text())
    edit(meta["attributes"]["npt"])
    if resign:
        meta["attributes"][store.CHECKSUM] = store.checksum_of(meta["attributes"]["npt"])
    (path / "zarr.json").write_text(json.dumps(meta))


def test_a_flipped_byte_in_the_coefficients_is_refused(saved, tmp_path):
    path = _copy(saved[1], tmp_path)
    chunk = next(p for p in (path / "dual_coef" / "c").rglob("*") if p.is_file())
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    with pytest.raises(StoreIntegrityError, match="dual_coef"):
        npt.load_ridge(path)


def test_rewritten_arrays_with_valid_chunk_checksums_are_refused(saved, tmp_path):
    """A chunk rewritten through zarr (its CRC valid) fails the array's SHA-256."""
    path = _copy(saved[1], tmp_path)
    centres = zarr.open_group(str(path), mode="r+")["centres"]
    centres[0, 0] = centres[0, 0] + 1.0
    with pytest.raises(StoreIntegrityError, match="centres does not match its checksum"):
        npt.load_ridge(path)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m["kernel"].update(gamma=0.8),
        lambda m: m["params"].update(alpha=3.0),
        lambda m: m.update(target_ndim=1),
        lambda m: m["fitted"].update(n_iter_=7),
        lambda m: m.update(sklearn_version="9.9.9"),
    ],
    ids=["gamma", "alpha", "target-ndim", "fitted", "sklearn-version"],
)
def test_an_edited_manifest_is_refused(saved, tmp_path, edit):
    path = _copy(saved[1], tmp_path)
    _edit_manifest(path, edit)
    with pytest.raises(StoreIntegrityError, match="altered"):
        npt.load_ridge(path)


def test_a_removed_manifest_checksum_is_refused(saved, tmp_path):
    path = _copy(saved[1], tmp_path)
    meta = json.loads((path / "zarr.json").read_text())
    del meta["attributes"][store.CHECKSUM]
    (path / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(StoreIntegrityError, match="no checksum"):
        npt.load_ridge(path)


def test_a_resigned_manifest_with_wrong_shapes_is_refused(saved, tmp_path):
    path = _copy(saved[1], tmp_path)
    _edit_manifest(path, lambda m: m.update(n_centres=29), resign=True)
    with pytest.raises(StoreIntegrityError, match="shape"):
        npt.load_ridge(path)


def test_a_missing_chunk_is_refused(saved, tmp_path):
    path = _copy(saved[1], tmp_path)
    next(p for p in (path / "centres" / "c").rglob("*") if p.is_file()).unlink()
    with pytest.raises(StoreIntegrityError, match="chunks missing"):
        npt.load_ridge(path)


# --- versions ------------------------------------------------------------------------------


def test_another_scikit_learn_is_warned_about(saved, tmp_path, recwarn):
    path = _copy(saved[1], tmp_path)
    npt.load_ridge(path)
    assert not [w for w in recwarn if issubclass(w.category, StoreVersionWarning)]
    _edit_manifest(path, lambda m: m.update(sklearn_version="0.1.0"), resign=True)
    with pytest.warns(StoreVersionWarning, match=r"scikit-learn 0\.1\.0.*install scikit-learn"):
        loaded = npt.load_ridge(path)
    np.testing.assert_array_equal(
        loaded.predict(np.zeros((2, 4))), saved[0].predict(np.zeros((2, 4)))
    )


def test_a_newer_npt_dask_is_warned_about(saved, tmp_path):
    path = _copy(saved[1], tmp_path)
    _edit_manifest(path, lambda m: m.update(package_version="999.0.0"), resign=True)
    with pytest.warns(StoreVersionWarning, match=r"npt-dask 999\.0\.0, newer"):
        npt.load_ridge(path)


def test_a_newer_store_layout_is_refused(saved, tmp_path):
    path = _copy(saved[1], tmp_path)
    _edit_manifest(path, lambda m: m.update(format_version=ridge_store.FORMAT_VERSION + 1))
    with pytest.raises(StoreVersionError, match="Upgrade npt-dask"):
        npt.load_ridge(path)


def test_the_versions_are_recorded(saved):
    import sklearn

    manifest = json.loads((saved[1] / "zarr.json").read_text())["attributes"]["npt"]
    assert manifest["sklearn_version"] == sklearn.__version__
    assert manifest["package_version"] == npt.__version__
    assert manifest["kind"] == "npt-kernel-ridge"


def test_each_loader_names_the_other_for_the_other_kind(saved, tmp_path):
    with pytest.raises(StoreError, match=r"load_ridge"):
        npt.load(saved[1])
    model = npt.fit(np.random.default_rng(0).normal(size=(40, 3)), "rbf", gamma=0.5)
    with pytest.raises(StoreError, match=r"npt_dask\.load\(path\)"):
        npt.load_ridge(model.save(tmp_path / "npt.zarr"))
    with pytest.raises(StoreNotFoundError):
        npt.load_ridge(tmp_path / "nothing.zarr")


# --- atomic --------------------------------------------------------------------------------


def test_a_failed_save_leaves_nothing_loadable_and_keeps_the_previous_model(
    data, tmp_path, monkeypatch
):
    x, z, y, _ = data
    est = npt.KernelRidge(**RBF).fit(x, y)
    original = store.write_array

    def failing(group, name, *args, **kwargs):
        original(group, name, *args, **kwargs)
        if name == "centres":
            raise OSError("disk full (simulated)")

    monkeypatch.setattr(store, "write_array", failing)
    with pytest.raises(OSError, match="simulated"):
        est.save(tmp_path / "new.zarr")
    assert os.listdir(tmp_path) == []
    with pytest.raises(StoreNotFoundError):
        npt.load_ridge(tmp_path / "new.zarr")
    monkeypatch.undo()
    path = est.save(tmp_path / "m.zarr")
    monkeypatch.setattr(store, "write_array", failing)
    with pytest.raises(OSError, match="simulated"):
        npt.KernelRidge(kernel="laplacian").fit(x, y).save(path, overwrite=True)
    _same_bits(npt.load_ridge(path).predict(z), est.predict(z))
    assert os.listdir(tmp_path) == ["m.zarr"]


def test_a_dead_writers_half_written_store_never_loads(saved, tmp_path):
    tmp = tmp_path / f".m.zarr.tmp-{dead_owner_tag()}-0123abcd"
    import shutil

    shutil.copytree(saved[1], tmp)
    (tmp / "zarr.json").unlink()  # killed before the manifest, written last
    with pytest.raises(StoreNotFoundError):
        npt.load_ridge(tmp_path / "m.zarr")
    assert os.listdir(tmp_path) == []  # the dead writer's leftover swept


_KILLED_SAVE = """
import sys, time
from pathlib import Path
import numpy as np
import npt_dask as npt
from npt_dask.storage import store
x = np.random.default_rng(1).normal(size=(120, 3))
est = npt.KernelRidge(kernel="laplacian", alpha=0.3).fit(x, x[:, 0])
original = store.write_array
def slow(group, name, *args, **kwargs):
    original(group, name, *args, **kwargs)
    if name == "centres":
        Path(sys.argv[2]).write_text("centres written")
        time.sleep(60)
store.write_array = slow
est.save(sys.argv[1], overwrite=True)
"""


def test_a_save_killed_midway_keeps_the_previous_model(data, tmp_path):
    x, z, y, _ = data
    est = npt.KernelRidge(**RBF).fit(x, y)
    path = est.save(tmp_path / "m.zarr")
    marker = tmp_path / "marker"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_SAVE, str(path), str(marker)], env=env, cwd=REPO
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the save never reached its arrays"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    _same_bits(npt.load_ridge(path).predict(z), est.predict(z))
    assert sorted(os.listdir(tmp_path)) == ["m.zarr", "marker"]


# --- no pickle -----------------------------------------------------------------------------


def _imported(module) -> set[str]:
    tree = ast.parse(Path(module.__file__).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_pickle_is_written_or_imported(saved, data, tmp_path):
    from npt_dask.ridge import base, load

    for module in (ridge_store, store, base, load):
        assert not _imported(module) & {"pickle", "cloudpickle", "joblib", "dill"}, module
    cv = _fitted("classifier-cv", data).save(tmp_path / "cv.zarr")
    for root in (saved[1], cv):
        files = [p for p in root.rglob("*") if p.is_file()]
        assert not [p for p in files if p.suffix in (".pkl", ".pickle", ".joblib")]
        for meta in (p for p in files if p.name == "zarr.json"):
            json.loads(meta.read_text())  # plain JSON
        group = zarr.open_group(str(root), mode="r")
        kinds = {array.dtype.kind for _, array in group.arrays()}
        assert kinds <= set("biuf"), kinds  # no object arrays (pickled by numpy's codecs)
        raw = b"".join(p.read_bytes() for p in files if p.name != "zarr.json")
        assert b"sklearn" not in raw
        assert b"npt_dask.ridge" not in raw  # no class path of an estimator


# --- command line --------------------------------------------------------------------------


@pytest.fixture
def files(data, tmp_path, monkeypatch):
    x, z, _, labels = data
    monkeypatch.chdir(tmp_path)
    np.savez("train.npz", x=x, y=labels)
    np.save("test.npy", z)
    np.save("test_labels.npy", labels[:37])
    return tmp_path


def _run(argv, capsys) -> tuple[int, dict | str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else err)


def test_npt_ridge_saves_its_model_and_predicts_with_it(files, capsys):
    fit = ["ridge", "train.npz", "--kernel", "rbf", "--gamma", "0.4", "--alpha", "0.1",
           "--landmarks", "30", "--random-state", "0", "--test", "test.npy",
           "--test-labels", "test_labels.npy", "--quiet"]  # fmt: skip
    code, out = _run([*fit, "--predictions", "fitted.npy", "--out", "m.zarr"], capsys)
    assert code == 0
    assert out["model"] == "m.zarr"
    model = ["ridge", "--model", "m.zarr", "--test", "test.npy"]
    code, out = _run(
        [*model, "--test-labels", "test_labels.npy", "--predictions", "again.npy"], capsys
    )
    assert code == 0, out
    assert out["estimator"] == "KernelRidgeClassifier"
    assert out["rows"] == 37
    assert 0.0 <= out["test_score"] <= 1.0
    np.testing.assert_array_equal(np.load("again.npy"), np.load("fitted.npy"))
    before = (files / "m.zarr" / "zarr.json").read_bytes()
    code, err = _run([*fit, "--out", "m.zarr"], capsys)
    assert code == 2
    assert "already holds" in err
    assert (files / "m.zarr" / "zarr.json").read_bytes() == before


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["train.npz"], "DATA"),
        (["--alpha", "3"], "--alpha"),
        (["--landmarks", "10"], "--landmarks"),
        (["--regression"], "--regression"),
        (["--out", "other.zarr"], "--out"),
        (["--alphas", "1", "2"], "--alphas"),
    ],
)
def test_npt_ridge_model_refuses_fitting_options(files, saved, capsys, extra, named):
    argv = ["ridge", "--model", str(saved[1]), "--test", "test.npy", "--predictions", "p.npy"]
    code, err = _run([*argv, *extra], capsys)
    assert code == 2
    assert named in err
    assert "would be ignored" in err
    assert not (files / "p.npy").exists()
    assert not (files / "other.zarr").exists()


def test_npt_ridge_model_needs_test_rows_and_something_to_do(files, saved, capsys):
    code, err = _run(["ridge", "--model", str(saved[1]), "--predictions", "p.npy"], capsys)
    assert code == 2
    assert "--test" in err
    code, err = _run(["ridge", "--model", str(saved[1]), "--test", "test.npy"], capsys)
    assert code == 2
    assert "--predictions" in err
    code, err = _run(["ridge", "--model", str(saved[1]), "--test", "test.npy",
                      "--predictions", "test.npy"], capsys)  # fmt: skip
    assert code == 2
    assert "is the input --test" in err
    assert np.load("test.npy").shape == (37, 4)
    code, err = _run(["ridge", "--quiet"], capsys)
    assert code == 2
    assert "DATA" in err
