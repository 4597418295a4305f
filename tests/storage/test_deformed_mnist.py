"""The deformed-MNIST generator: seeded, chunking-free, close to its originals, written once.

Small synthetic 28 x 28 "digits" (smoothed strokes) for everything but one
check on the real MNIST rows (skipped when ``mnist.npz`` is absent).
"""

from __future__ import annotations

import dask
import numpy as np
import pytest
from scipy import ndimage

from npt_dask.errors import InputError, InputTypeError
from npt_dask.storage import datasets
from npt_dask.storage.datasets import (
    DEFORMATION_PARAMS,
    GENERATE_PARAMS,
    Deformation,
    deformed_mnist,
    generator_params,
    open_generated,
    write_deformed_mnist,
)
from tests.conftest import data_dir

N0 = 40


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    """``N0`` uint8 28 x 28 images of smoothed random strokes, with labels 0..9."""
    rng = np.random.default_rng(7)
    canvas = np.zeros((N0, 28, 28))
    for k in range(N0):
        rows, cols = rng.integers(6, 22, size=(2, 12))
        canvas[k, rows, cols] = 1.0
    images = ndimage.gaussian_filter(canvas, (0, 1.2, 1.2))
    images = np.round(255 * images / images.max(axis=(1, 2), keepdims=True)).astype(np.uint8)
    return images, np.arange(N0) % 10


def _rows(digits, n_rows=200, seed=3, chunk_size=64, scheduler="sync", **kw) -> tuple:
    x, y = deformed_mnist(*digits, n_rows, seed, chunk_size, **kw)
    return dask.compute(x, y, scheduler=scheduler)


def _corr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a - a.mean(1, keepdims=True), b - b.mean(1, keepdims=True)
    return (a * b).sum(1) / np.sqrt((a * a).sum(1) * (b * b).sum(1))


def test_same_seed_same_rows_other_seed_other_rows(digits):
    x1, y1 = _rows(digits, seed=3)
    x2, y2 = _rows(digits, seed=3)
    x3, _ = _rows(digits, seed=4)
    assert x1.shape == (200, 784)
    assert x1.dtype == np.float32
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    assert not np.array_equal(x1[N0:], x3[N0:])
    np.testing.assert_array_equal(x1[:N0], x3[:N0])  # the originals do not depend on the seed


@pytest.mark.parametrize("chunk_size", [1, 7, 200, 1000])
def test_rows_do_not_depend_on_chunk_size(digits, chunk_size):
    reference, labels = _rows(digits, chunk_size=64)
    x, y = _rows(digits, chunk_size=chunk_size)
    np.testing.assert_array_equal(x, reference)
    np.testing.assert_array_equal(y, labels)


def test_rows_do_not_depend_on_scheduler_or_order(digits):
    reference, _ = _rows(digits, chunk_size=16)
    threaded, _ = _rows(digits, chunk_size=16, scheduler="threads")
    np.testing.assert_array_equal(threaded, reference)
    x, _ = deformed_mnist(*digits, 200, 3, 16)
    backwards = [x[s : s + 16].compute(scheduler="sync") for s in range(192, -1, -16)]
    np.testing.assert_array_equal(np.concatenate(backwards[::-1]), reference)


def test_first_rows_are_the_originals_and_labels_are_carried(digits):
    x, y = _rows(digits)
    images, labels = digits
    np.testing.assert_array_equal(x[:N0], (images / np.float32(255)).reshape(N0, -1))
    np.testing.assert_array_equal(y, labels[np.arange(200) % N0])


def test_deformed_rows_stay_in_range_differ_and_stay_close(digits):
    x, _ = _rows(digits)
    originals = x[np.arange(N0, 200) % N0]
    deformed = x[N0:]
    assert deformed.min() >= 0.0
    assert deformed.max() <= 1.0
    assert (np.abs(deformed - originals).max(axis=1) > 0.05).all()  # each one changed
    corr = _corr(deformed, originals)
    assert corr.mean() > 0.5
    assert corr.min() > 0.1
    # a deformation is nearer its own original than another digit
    others = x[(np.arange(N0, 200) + 1) % N0]
    assert corr.mean() > _corr(deformed, others).mean() + 0.2


def test_no_deformation_reproduces_the_originals(digits):
    still = Deformation(rotation=0, scale=0, shear=0, shift=0, alpha=0)
    x, _ = _rows(digits, n_rows=2 * N0, deformation=still, originals=False)
    expected = (digits[0] / np.float32(255)).reshape(N0, -1)
    np.testing.assert_allclose(x[:N0], expected, atol=1e-6)
    np.testing.assert_allclose(x[N0:], expected, atol=1e-6)


def test_without_originals_every_row_is_deformed(digits):
    x, y = _rows(digits, n_rows=10, originals=False)
    expected = (digits[0][:10] / np.float32(255)).reshape(10, -1)
    assert (np.abs(x - expected).max(axis=1) > 0.05).all()
    np.testing.assert_array_equal(y, digits[1][:10])


def test_real_mnist_deformations_stay_close():
    path = data_dir() / "mnist.npz"
    if not path.is_file():
        pytest.skip(f"{path} not present (set NPT_DATA_DIR)")
    with np.load(path) as data:
        images, labels = data["x"][:60000], data["y"][:60000]
    x, y = deformed_mnist(images, labels, 60200, seed=0, chunk_size=100)
    deformed = x[60000:].compute(scheduler="sync")
    originals = (images[:200] / np.float32(255)).reshape(200, -1)
    assert deformed.min() >= 0.0
    assert deformed.max() <= 1.0
    assert _corr(deformed, originals).mean() > 0.5
    np.testing.assert_array_equal(y[60000:].compute(), labels[:200])


@pytest.mark.parametrize(
    ("kwargs", "error", "fix"),
    [
        (
            {"n_rows": 0},
            InputError,
            r"'n_rows' parameter of deformed_mnist must be an int in the range \[1, inf\)",
        ),
        ({"n_rows": -5}, InputError, r"'n_rows' .* must be an int in the range \[1, inf\)"),
        ({"n_rows": 100.0}, InputTypeError, "'n_rows' .* must be an int"),
        ({"seed": 1.5}, InputTypeError, "'seed' .* must be an int"),
        ({"seed": "0"}, InputError, "'seed' .* must be an int"),  # a word: as every table
        ({"seed": -1}, InputError, r"'seed' .* must be an int in the range \[0, inf\)"),
        ({"chunk_size": 0}, InputError, r"'chunk_size' .* in the range \[1, inf\)"),
        ({"n_rows": N0 - 1}, InputError, "originals=False"),
    ],
)
def test_bad_arguments_are_refused_with_the_fix(digits, kwargs, error, fix):
    args = {"n_rows": 200, "seed": 0, "chunk_size": 64, **kwargs}
    with pytest.raises(error, match=fix):
        deformed_mnist(*digits, **args)


def test_bad_sources_and_ranges_are_refused(digits):
    images, labels = digits
    with pytest.raises(InputError, match=r"divide 0\.\.255 pixels by 255"):
        deformed_mnist(images.astype(float), labels, 100)
    with pytest.raises(InputError, match="one label per image"):
        deformed_mnist(images, labels[:-1], 100)
    with pytest.raises(InputError, match="not a square image"):
        deformed_mnist(images.reshape(N0, -1)[:, :-1], labels, 100)
    with pytest.raises(InputError, match=r"'rotation' parameter of Deformation must be a "
                       r"finite real number in the range \[0, inf\)"):  # fmt: skip
        Deformation(rotation=-1)
    with pytest.raises(InputError, match=r"'scale' .* range \[0, 1\)\. Got 1\.0 .* 1 ± scale"):
        Deformation(scale=1.0)
    with pytest.raises(InputTypeError, match=r"'shift' .* must be a finite real number"):
        Deformation(shift=None)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"'alpha' .* must be a finite real number"):
        Deformation(alpha="big")  # type: ignore[arg-type]  # a word: as every table


@pytest.mark.parametrize("param", DEFORMATION_PARAMS, ids=lambda p: p.name)
def test_every_deformation_range_refuses_its_bad_values_by_name(param):
    for value in param.invalid_values():
        with pytest.raises((InputError, InputTypeError)) as caught:
            Deformation(**{param.name: value})
        assert caught.value.param == param.name
        assert f"'{param.name}' parameter of Deformation" in str(caught.value)


@pytest.mark.parametrize("param", GENERATE_PARAMS, ids=lambda p: p.name)
def test_every_generator_count_refuses_its_bad_values_by_name(param):
    for value in param.invalid_values():
        with pytest.raises((InputError, InputTypeError)) as caught:
            generator_params({"name": "deformed_mnist", param.name: value})
        assert caught.value.param == param.name
        assert f"'{param.name}' parameter of [data] generate" in str(caught.value)


@pytest.fixture
def source(tmp_path, digits):
    path = tmp_path / "digits.npz"
    np.savez(path, x=digits[0], y=digits[1])
    return path


def test_written_store_round_trips(tmp_path, source, digits):
    path = tmp_path / "out" / "deformed.zarr"
    with dask.config.set(scheduler="threads"):
        write_deformed_mnist(path, n_rows=150, seed=5, source=source, chunk_size=32)
    ds = open_generated(path)
    assert ds["x"].dtype == np.float32
    assert ds["x"].dims == ("sample", "feature")
    assert ds["x"].data.chunks[0][0] == 32  # read lazily, chunk by chunk
    x, y = _rows(digits, n_rows=150, seed=5, chunk_size=50)
    np.testing.assert_array_equal(ds["x"].values, x)
    np.testing.assert_array_equal(ds["y"].values, y)
    attrs = ds.attrs
    assert (attrs["seed"], attrs["source"], attrs["n_originals"], attrs["n_rows"]) == (
        5, "digits.npz", N0, 150,
    )  # fmt: skip
    assert attrs["originals"] is True
    assert attrs["deformation"]["alpha"] == Deformation().alpha
    assert [p.name for p in path.parent.iterdir()] == ["deformed.zarr"]  # no temporaries


def test_a_store_of_deformations_only(tmp_path, source, digits):
    path = write_deformed_mnist(tmp_path / "d.zarr", 10, 1, source=source, originals=False)
    ds = open_generated(path)
    assert ds.attrs["originals"] is False
    x, _ = _rows(digits, n_rows=10, seed=1, originals=False)
    np.testing.assert_array_equal(ds["x"].values, x)
    with pytest.raises(InputError, match="originals=False"):
        write_deformed_mnist(tmp_path / "e.zarr", 10, source=source)
    assert not (tmp_path / "e.zarr").exists()


def test_interrupted_write_leaves_nothing_that_loads(tmp_path, source, monkeypatch):
    path = tmp_path / "deformed.zarr"

    def broken(images, rows, seed, deformation):
        raise RuntimeError("worker died")

    monkeypatch.setattr(datasets, "_deform", broken)
    with pytest.raises(RuntimeError, match="worker died"):
        write_deformed_mnist(path, n_rows=150, source=source, chunk_size=32)
    assert list(tmp_path.iterdir()) == [source]
    with pytest.raises(InputError, match="not a zarr store"):
        open_generated(path)


def test_half_written_store_is_refused(tmp_path, digits):
    import xarray as xr

    path = tmp_path / "half.zarr"
    x, y = deformed_mnist(*digits, 100, 0, 50)
    xr.Dataset({"x": (("sample", "feature"), x), "y": (("sample",), y)}).to_zarr(
        path, zarr_format=3, consolidated=False, compute=False
    )
    with pytest.raises(InputError, match="interrupted"):
        open_generated(path)


def test_existing_paths_are_not_replaced_silently(tmp_path, source):
    path = tmp_path / "deformed.zarr"
    write_deformed_mnist(path, n_rows=50, source=source, chunk_size=50)
    with pytest.raises(InputError, match="overwrite=True"):
        write_deformed_mnist(path, n_rows=50, source=source)
    write_deformed_mnist(path, n_rows=60, seed=1, source=source, overwrite=True)
    assert open_generated(path).sizes["sample"] == 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deformed.zarr", "digits.npz"]
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="refusing to replace"):
        write_deformed_mnist(foreign, n_rows=50, source=source, overwrite=True)
    assert (foreign / "notes.txt").read_text() == "keep me"
