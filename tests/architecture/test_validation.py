"""Bad input gets a clear ValueError/TypeError before any work is done."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr

import npt_dask as npt


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(0).normal(size=(60, 4))


@pytest.fixture(scope="module")
def model(x):
    return npt.fit(x, "rbf", n_components=3)


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (np.ones(10), npt.InputError, "2-D"),
        (np.ones((5, 4, 4)), npt.InputError, r"reshape\(len\(X\), -1\)"),
        (np.ones((1, 4)), npt.InputError, "at least 2 samples"),
        (np.ones((0, 4)), npt.InputError, "at least 2 samples"),
        (np.ones((5, 0)), npt.InputError, "0 features"),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), npt.InputError, "NaN or infinity"),
        (np.array([[1.0, np.inf], [0.0, 1.0]]), npt.InputError, "NaN or infinity"),
        (np.array([["a", "b"], ["c", "d"]]), npt.InputTypeError, "numeric"),
        (np.ones((3, 2), dtype=complex), npt.InputTypeError, "Complex"),
        ("data.npz", npt.InputTypeError, "array-like"),
        (xr.Dataset({"x": (("s", "f"), np.ones((3, 2)))}), npt.InputTypeError, "Dataset"),
    ],
)
def test_bad_training_data(data, error, match):
    with pytest.raises(error, match=match):
        npt.fit(data, n_components=1)


def test_nan_in_dask_training_data_detected_before_solving(task_counter):
    bad = np.ones((50, 3))
    bad[37, 1] = np.nan
    with pytest.raises(npt.InputError, match="NaN"):
        npt.fit(da.from_array(bad, chunks=(10, 3)), n_components=2)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_components": 60}, npt.InputError, "rank at most 59"),
        ({"n_components": 61, "center": False}, npt.InputError, "rank at most 60"),
        ({"n_components": 0}, npt.InputError, "n_components"),
        ({"n_components": 2.5}, npt.InputTypeError, "n_components"),
        ({"n_components": None, "solver": "krylov"}, npt.InputError, "solver='dense'"),
        ({"solver": "lobpcg"}, npt.InputError, "solver"),  # arpack/randomized: aliases
        ({"tol": 0.0}, npt.InputError, "tol"),
        ({"tol": 2.0}, npt.InputError, "tol"),
        ({"rtol": -1.0}, npt.InputError, "rtol"),
        ({"chunk_size": 0}, npt.InputError, "chunk_size"),
        ({"cache": "disk"}, npt.InputError, "cache"),
        ({"precision": "float16"}, npt.InputError, "precision"),
        ({"on_negative": "ignore"}, npt.InputError, "on_negative"),
        ({"gamma": -0.1}, npt.KernelParameterError, "gamma"),
        ({"kernel": "gauss"}, npt.KernelParameterError, "Unknown kernel"),
        ({"memory_budget": 1000, "solver": "dense"}, npt.InputError, "memory_budget"),
    ],
)
def test_bad_parameters(x, kwargs, error, match):
    kwargs = {"n_components": 2, **kwargs}
    with pytest.raises(error, match=match):
        npt.fit(x, **kwargs)


def test_errors_are_value_or_type_errors():
    assert issubclass(npt.InputError, ValueError)
    assert issubclass(npt.InputTypeError, TypeError)
    assert issubclass(npt.KernelParameterError, ValueError)
    assert issubclass(npt.NegativeEigenvalueError, ValueError)


def test_transform_feature_mismatch(model):
    with pytest.raises(npt.InputError, match="has 5 features, but the model was fitted on 4"):
        model.transform(np.ones((3, 5)))
    with pytest.raises(npt.InputError, match="features"):
        model.residual(da.ones((3, 2)))


def test_transform_nan_numpy_eager(model):
    with pytest.raises(npt.InputError, match="NaN"):
        model.transform(np.array([[np.nan, 0, 0, 0]]))


def test_transform_nan_dask_raises_on_compute(model, task_counter):
    z = da.from_array(np.array([[np.nan, 0, 0, 0]] * 4), chunks=(2, 4))
    lazy = model.transform(z)
    assert task_counter.tasks == 0
    with pytest.raises(npt.InputError, match="NaN"):
        lazy.compute()


def test_transform_unknown_chunks(model):
    z = da.ones((10, 4), chunks=(5, 4))
    z = z[z[:, 0] > 0]
    with pytest.raises(npt.InputError, match="compute_chunk_sizes"):
        model.transform(z)


def test_integer_input_is_accepted(x):
    ints = (x * 10).astype(np.int16)
    model = npt.fit(ints, n_components=2)
    assert model.precision == np.float64
    np.testing.assert_allclose(model.transform(ints[:5]), model.train_coordinates()[:5], atol=1e-8)


def test_transform_refuses_complex_and_strings(model):
    with pytest.raises(npt.InputTypeError, match="Complex"):
        model.transform(np.ones((2, 4)) + 1j)
    with pytest.raises(npt.InputTypeError, match="numeric"):
        model.residual(np.array([["a"] * 4]))
    with pytest.raises(npt.InputTypeError, match="Complex"):
        npt.fit(np.ones((5, 4)) + 1j, precision="float64")


def test_krylov_memory_and_block_checks(x):
    with pytest.raises(npt.InputError, match="Krylov basis"):
        npt.fit(x, n_components=5, solver="krylov", memory_budget=10_000)
    with pytest.raises(npt.InputError, match="Krylov basis"):
        npt.fit(x, n_components=5, solver="krylov", max_basis=8)
