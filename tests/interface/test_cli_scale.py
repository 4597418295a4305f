"""``npt ridge``'s scale: raw 8-bit pixels divided by 255 when ``--scale`` is not given
(the data layer's one rule), the transform recorded in the saved model and applied again
by ``--model``; test rows in another form refused; stores without a record used as before."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import npt_dask as npt
from npt_dask.errors import InputScaleWarning, KernelScaleWarning
from npt_dask.interface.cli import main
from npt_dask.storage import ridge_store
from npt_dask.storage.datasets import pixel_scale, raw_pixels
from tests.conftest import data_dir

FIT = ["--kernel", "rbf", "--gamma", "0.05", "--alpha", "0.5", "--solver", "direct"]


@pytest.fixture
def pixels(tmp_path):
    """Images of 4 x 5 uint8 pixels whose class a [0, 1]-scale kernel sees (raw: identity)."""
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 2, size=120)
    images = rng.integers(0, 100, size=(120, 4, 5)) + 150 * labels[:, None, None]
    np.savez(tmp_path / "pixels.npz", x=images.astype(np.uint8), y=labels)
    np.savez(tmp_path / "scaled.npz", x=images / 255.0, y=labels)
    return tmp_path


def _run(argv, capsys):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if code == 0 else None), captured.err


def _reference(images, labels, train, test):
    from sklearn.kernel_ridge import KernelRidge

    x = images.reshape(len(images), -1) / 255.0
    targets = np.where(labels[train, None] == np.unique(labels), 1.0, -1.0)
    ref = KernelRidge(alpha=0.5, kernel="rbf", gamma=0.05).fit(x[train], targets)
    return np.unique(labels)[ref.predict(x[test]).argmax(axis=1)]


def test_raw_pixels_are_divided_by_255_recorded_and_applied_again_by_model(pixels, capsys):
    data = pixels / "pixels.npz"
    fit = ["ridge", data, "--rows", "0:80", "--test-rows", "80:120", *FIT, "--out",
           pixels / "m.zarr", "--predictions", pixels / "p.npy"]  # fmt: skip
    code, out, err = _run(fit, capsys)
    assert code == 0, err
    assert out["scale"] == 255.0
    assert "holds raw 8-bit pixels (uint8, 0 to 255)" in err
    assert "--scale 1" in err
    with np.load(data) as d:
        images, labels = d["x"], d["y"]
    fitted = np.load(pixels / "p.npy")
    np.testing.assert_array_equal(fitted, _reference(images, labels, slice(0, 80), slice(80, 120)))
    assert out["test_score"] > 0.9  # raw pixels with gamma 0.05: a chance score
    assert ridge_store.read_input_transform(pixels / "m.zarr") == {
        "scale": 255.0, "image_shape": [4, 5],
    }  # fmt: skip

    use = ["ridge", "--model", pixels / "m.zarr", "--test", data, "--test-rows", "80:120",
           "--predictions", pixels / "q.npy"]  # fmt: skip
    code, out, err = _run(use, capsys)
    assert code == 0, err
    assert out["scale"] == 255.0
    assert out["test_score"] > 0.9
    assert "divided by 255, as the rows the model" in err
    np.testing.assert_array_equal(np.load(pixels / "q.npy"), fitted)


def test_an_explicit_scale_is_recorded_and_scale_1_keeps_raw_values(pixels, capsys):
    data = pixels / "pixels.npz"
    base = ["ridge", data, "--rows", "0:80", "--test-rows", "80:120", *FIT, "--quiet"]
    with pytest.warns(KernelScaleWarning):  # raw pixels with gamma for [0, 1], as asked
        code, raw, err = _run([*base, "--scale", "1", "--out", pixels / "raw.zarr"], capsys)
    assert code == 0, err
    assert raw["scale"] == 1.0
    assert raw["test_score"] < 0.8
    assert ridge_store.read_input_transform(pixels / "raw.zarr")["scale"] == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelScaleWarning)
        code, out, err = _run(["ridge", "--model", pixels / "raw.zarr", "--test", data,
                               "--test-rows", "80:120", "--quiet"], capsys)  # fmt: skip
    assert code == 0, err
    assert out["scale"] == 1.0
    assert out["test_score"] == raw["test_score"]


def test_test_rows_in_another_form_than_data_are_refused_before_the_fit(pixels, capsys,
                                                                     monkeypatch):  # fmt: skip
    monkeypatch.setattr(npt.KernelRidgeClassifier, "fit", _no_fit)
    code, _, err = _run(["ridge", pixels / "pixels.npz", "--rows", "0:80", "--test",
                         pixels / "scaled.npz", "--test-rows", "80:120", *FIT], capsys)  # fmt: skip
    assert code == 2
    assert "DATA" in err
    assert "--test" in err
    assert "one scale cannot suit both" in err
    code, _, err = _run(["ridge", pixels / "scaled.npz", "--rows", "0:80", "--test",
                         pixels / "pixels.npz", "--test-rows", "80:120", *FIT], capsys)  # fmt: skip
    assert code == 2
    assert f"--test {pixels / 'pixels.npz'} holds raw 8-bit pixels and DATA" in err


def _no_fit(*args, **kwargs):
    raise AssertionError("the fit ran before the refusal")


def test_model_refuses_rows_unlike_its_recorded_form(pixels, capsys):
    data = pixels / "pixels.npz"
    assert main(["ridge", str(data), "--rows", "0:80", *FIT, "--quiet", "--out",
                 str(pixels / "m.zarr")]) == 0  # fmt: skip
    capsys.readouterr()
    use = ["ridge", "--model", pixels / "m.zarr", "--test", pixels / "scaled.npz", "--quiet"]
    code, _, err = _run(use, capsys)
    assert code == 2
    assert "does not hold raw 8-bit pixels" in err
    assert "--scale 1" in err
    code, out, err = _run([*use, "--scale", "1"], capsys)  # divided already: no warning
    assert code == 0
    assert out["scale"] == 1.0
    assert out["test_score"] > 0.9
    with np.load(data) as d:
        np.savez(pixels / "tall.npz", x=d["x"].reshape(120, 5, 4), y=d["y"])
    code, _, err = _run(["ridge", "--model", pixels / "m.zarr", "--test",
                         pixels / "tall.npz", "--quiet"], capsys)  # fmt: skip
    assert code == 2
    assert "images of shape (5, 4)" in err
    assert "images of shape (4, 5)" in err


def test_a_store_without_a_record_is_used_as_before(pixels, capsys):
    """A model saved from Python (as by an earlier npt-dask): format 1, rows as given,
    ``--scale`` applied when given, a warning when they are raw pixels."""
    with np.load(pixels / "pixels.npz") as d:
        x, y = d["x"].reshape(120, -1) / 255.0, d["y"]
    est = npt.KernelRidgeClassifier(kernel="rbf", gamma=0.05, alpha=0.5).fit(x[:80], y[:80])
    est.save(pixels / "py.zarr")
    manifest = json.loads((pixels / "py.zarr" / "zarr.json").read_text())["attributes"]["npt"]
    assert manifest["format_version"] == 1
    assert "input_transform" not in manifest
    assert ridge_store.read_input_transform(pixels / "py.zarr") is None
    use = ["ridge", "--model", pixels / "py.zarr", "--test", pixels / "pixels.npz",
           "--test-rows", "80:120", "--quiet"]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelScaleWarning)
        with pytest.warns(InputScaleWarning, match=r"records no scale .* pass --scale 255"):
            code, raw, _ = _run(use, capsys)
    assert code == 0
    assert raw["scale"] is None
    code, scaled, _ = _run([*use, "--scale", "255"], capsys)  # warnings are errors here
    assert code == 0
    assert scaled["test_score"] == est.score(x[80:], y[80:]) > raw["test_score"]


def test_load_ridge_warns_of_a_recorded_scale(pixels, capsys):
    assert main(["ridge", str(pixels / "pixels.npz"), *FIT, "--quiet", "--out",
                 str(pixels / "m.zarr")]) == 0  # fmt: skip
    with pytest.warns(InputScaleWarning, match=r"divide the rows you predict by 255"):
        npt.load_ridge(pixels / "m.zarr")
    manifest = json.loads((pixels / "m.zarr" / "zarr.json").read_text())["attributes"]["npt"]
    assert manifest["format_version"] == 2  # an npt-dask that would ignore it refuses it


def test_save_refuses_a_malformed_transform(pixels):
    est = npt.KernelRidge(kernel="rbf", gamma=0.5).fit(np.eye(4), np.arange(4.0))
    with pytest.raises(npt.InputError, match="scale must be a positive number"):
        est.save(pixels / "m.zarr", input_transform={"scale": -1, "image_shape": None})
    assert not (pixels / "m.zarr").exists()


@pytest.mark.parametrize(
    ("values", "scale"),
    [
        (np.array([[[0, 255], [3, 9]]], np.uint8), 255.0),  # uint8 images
        (np.array([[0, 200, 7]], np.uint8), 255.0),  # uint8 rows (flattened images)
        (np.array([[[0.0, 255.0], [3.0, 9.0]]]), 255.0),  # float images of whole numbers
        (np.array([[[0, 1], [1, 0]]], np.uint8), None),  # a binary mask
        (np.array([[[0.0, 16.0], [3.0, 9.0]]]), None),  # scikit-learn's digits: 0 to 16
        (np.array([[[0.0, 1.0], [0.5, 0.2]]]), None),  # divided by 255 already
        (np.array([[0.0, 255.0, 3.0]]), None),  # tabular floats: the user's units
        (np.array([[-173, 7173]], np.int16), None),  # covertype's columns
        (np.array([[[0, 300], [3, 9]]], np.int32), None),  # past 8 bits
    ],
)
def test_the_pixel_rule(values, scale):
    assert pixel_scale(values) == scale


def test_raw_pixels_read_a_lazy_array_s_first_rows_only():
    import dask.array as da

    head = np.full((4096, 3), 200.0)
    tail = np.full((10, 3), 0.5)  # past the rows a lazy array's check reads
    lazy = da.from_array(np.vstack([head, tail]), chunks=(1000, 3))
    assert raw_pixels(lazy)
    assert not raw_pixels(np.vstack([head, tail]))  # an array in memory: read whole


@pytest.mark.slow
def test_mnist_as_the_readme_shows_it_without_scale(tmp_path, capsys):
    """The README's command with no ``--scale``: 0.098 before the rule; the model's
    ``--model`` use gives the same predictions (0.104 before the record)."""
    path = data_dir() / "mnist.npz"
    if not path.is_file():
        pytest.skip(f"{path} not present (set NPT_DATA_DIR)")
    fit = ["ridge", path, "--rows", "0:6000", "--test-rows", "60000:62000", "--kernel", "rbf",
           "--gamma", "0.02", "--alpha", "1e-3", "--landmarks", "1500", "--quiet",
           "--out", tmp_path / "m.zarr", "--predictions", tmp_path / "p.npy"]  # fmt: skip
    code, out, err = _run(fit, capsys)
    assert code == 0, err
    assert out["scale"] == 255.0
    assert out["test_score"] > 0.9
    use = ["ridge", "--model", tmp_path / "m.zarr", "--test", path, "--test-rows",
           "60000:62000", "--quiet", "--predictions", tmp_path / "q.npy"]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputScaleWarning)
        code, again, err = _run(use, capsys)
    assert code == 0, err
    assert again["test_score"] == out["test_score"]
    np.testing.assert_array_equal(np.load(tmp_path / "q.npy"), np.load(tmp_path / "p.npy"))
