"""Landmark models, their residual certificate, and warm starts of exact fits."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.linalg
import xarray as xr
from sklearn.metrics.pairwise import rbf_kernel

import npt_dask as npt
from npt_dask.engine.centres import certificate, rpcholesky_landmarks, uniform_landmarks
from tests.conftest import align_signs


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(3).normal(size=(700, 4))


def test_all_rows_as_landmarks_is_the_ordinary_model(data):
    full = npt.fit(data, gamma=0.3, n_components=20, chunk_size=128)
    lm = npt.fit(data, gamma=0.3, n_components=20, chunk_size=128, landmarks=np.arange(700))
    np.testing.assert_allclose(lm.eigenvalues, full.eigenvalues, rtol=1e-12)
    np.testing.assert_allclose(lm.eigenvectors, full.eigenvectors, atol=1e-12)
    z = data[:50] + 0.1
    np.testing.assert_allclose(lm.transform(z), full.transform(z), atol=1e-10)
    cert = lm.diagnostics.landmarks["certificate"]
    assert cert["n_rows"] == 700
    # every row is a landmark; what r = 20 misses of it is the rest of the spectrum
    np.testing.assert_allclose(cert["mean"], np.mean(full.residual(data)), rtol=1e-8)


def _dense_reference(x, idx, gamma, r):
    """Landmark NPT and Lemma 5 residuals built from scratch with numpy/scipy."""
    xl = x[idx]
    k = rbf_kernel(xl, xl, gamma=gamma)
    m = k.mean(axis=1)
    g = m.mean()
    kc = k - m[:, None] - m[None, :] + g
    lam, u = scipy.linalg.eigh(kc)
    lam, u = lam[::-1][:r], u[:, ::-1][:, :r]
    kx = rbf_kernel(x, xl, gamma=gamma)
    kt = kx - m[None, :] - kx.mean(axis=1, keepdims=True) + g
    y = kt @ u / np.sqrt(lam)
    self_sim = 1.0 - 2.0 * kx.mean(axis=1) + g
    res = np.sqrt(np.maximum(self_sim - (y**2).sum(axis=1), 0.0))
    return lam, y, res, self_sim


@pytest.mark.parametrize("chunks", [100, (90, 250, 160, 200)])
def test_certificate_equals_independent_computation(data, chunks):
    idx = np.random.default_rng(0).choice(700, 150, replace=False)
    x = da.from_array(data, chunks=(chunks, -1))
    model = npt.fit(x, gamma=0.3, n_components=40, landmarks=idx, chunk_size=None)
    lam, y, res, self_sim = _dense_reference(data, np.sort(idx), 0.3, 40)
    np.testing.assert_allclose(model.eigenvalues, lam, rtol=1e-9)
    np.testing.assert_allclose(align_signs(np.asarray(model.transform(data)), y), y, atol=1e-7)
    want = certificate(res, self_sim)
    got = model.diagnostics.landmarks["certificate"]
    for key in ("mean", "max", "relative_mean", "relative_max"):
        assert got[key] == pytest.approx(want[key], rel=1e-7, abs=1e-9), key
    assert got["histogram"]["counts"] == want["histogram"]["counts"]
    assert model.diagnostics.landmarks["method"] == "given"
    assert model.n_samples == 150


def test_rpcholesky_never_picks_a_row_already_spanned():
    base = np.random.default_rng(1).normal(size=(40, 3))
    x = np.repeat(base, 25, axis=0)  # 1,000 rows, 40 distinct
    idx = rpcholesky_landmarks(da.from_array(x, chunks=(300, -1)),
                               npt.make_kernel("rbf", gamma=0.5), 40,
                               np.random.default_rng(0), rounds=3)  # fmt: skip
    assert len(np.unique(x[idx], axis=0)) == len(idx) == 40
    model = npt.fit(x, gamma=0.5, landmarks=40, landmark_method="rpcholesky", random_state=0)
    assert model.diagnostics.landmarks["certificate"]["max"] < 1e-6
    uniform = npt.fit(x, gamma=0.5, landmarks=40, random_state=0)
    assert uniform.diagnostics.landmarks["certificate"]["max"] > 0.1  # duplicates picked


def test_selection_is_seeded_and_distinct(data):
    a = uniform_landmarks(700, 50, np.random.default_rng(5))
    b = uniform_landmarks(700, 50, np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    assert len(np.unique(a)) == 50
    m1 = npt.fit(data, gamma=0.3, landmarks=60, landmark_method="rpcholesky", random_state=2)
    m2 = npt.fit(data, gamma=0.3, landmarks=60, landmark_method="rpcholesky", random_state=2)
    np.testing.assert_array_equal(m1.eigenvalues, m2.eigenvalues)


def test_landmark_model_saves_loads_and_projects(data, tmp_path):
    model = npt.fit(data, gamma=0.3, landmarks=80, random_state=0)
    loaded = npt.load(model.save(tmp_path / "lm.zarr"))
    assert loaded.diagnostics.landmarks == model.diagnostics.landmarks
    np.testing.assert_allclose(loaded.transform(data[:9]), model.transform(data[:9]))
    ds = npt.project(loaded, data, tmp_path / "p.zarr", progress=False)
    assert ds.coordinates.shape == (700, model.n_components)


def test_xarray_landmarks_keep_their_sample_labels(data):
    arr = xr.DataArray(data, dims=("sample", "f"), coords={"sample": np.arange(700) * 10})
    model = npt.fit(arr, gamma=0.3, landmarks=np.array([5, 1, 9]), n_components=2)
    assert list(model.train_coordinates()["sample"].values) == [10, 50, 90]


@pytest.mark.parametrize(
    ("landmarks", "match"),
    [(701, "more than the 700 rows"), (np.array([1, 1, 2]), "distinct"),
     (np.array([0, 700]), r"\[0, 700\)"), (np.array([0.5, 1.5]), "integer row indices"),
     (1, "'landmarks'")],
)  # fmt: skip
def test_bad_landmarks(data, landmarks, match):
    with pytest.raises(npt.InputError, match=match):
        npt.fit(data, gamma=0.3, landmarks=landmarks)


def test_warm_start_needs_fewer_passes_and_gives_the_same_model():
    x = np.random.default_rng(4).normal(size=(1500, 6))
    cold = npt.fit(x, gamma=0.1, n_components=30, solver="krylov", random_state=0)
    guide = npt.fit(x, gamma=0.1, landmarks=300, n_components=None, random_state=0)
    warm = npt.fit(x, gamma=0.1, n_components=30, solver="krylov", start=guide, random_state=0)
    assert warm.diagnostics.converged
    assert warm.diagnostics.passes <= cold.diagnostics.passes // 2
    np.testing.assert_allclose(warm.eigenvalues, cold.eigenvalues, rtol=1e-9)
    np.testing.assert_allclose(
        align_signs(warm.eigenvectors, cold.eigenvectors), cold.eigenvectors, atol=1e-6
    )
