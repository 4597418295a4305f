"""The landmark route: one training pass, truncated models, float32, RPCholesky at scale.

References are independent: dense numpy/scipy on the landmark kernel, the
separate steps (fit, transform, ridge on the coordinates), scikit-learn's
``RidgeClassifier`` and ``Ridge``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import dask.array as da
import numpy as np
import pytest
import scipy.linalg
import xarray as xr
from sklearn.linear_model import Ridge as SkRidge

import npt_dask as npt
from npt_dask.engine import consumers
from npt_dask.engine.centres import rpcholesky_landmarks
from npt_dask.methods import Ridge, RidgeClassifier
from tests.conftest import align_signs

GAMMA = 0.4


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(900, 5))
    labels = (x[:, 0] + 0.5 * x[:, 1] ** 2 > 0.3).astype(int) + (x[:, 2] > 1.0)
    return x, labels


def _dense_landmark_model(x, idx, r, gamma=GAMMA):
    """Independent reference: eigendecomposition of the centred landmark kernel."""

    def rbf(a, b):
        return np.exp(-gamma * ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))

    land = x[idx]
    k = rbf(land, land)
    means = k.mean(axis=0)
    g = means.mean()
    w, u = scipy.linalg.eigh(k - means[:, None] - means[None, :] + g)
    w, u = w[::-1][:r], u[:, ::-1][:, :r]
    a = u / np.sqrt(w)

    def coords(z):
        c = rbf(z, land)
        return (c - means) @ a - (c.mean(axis=1) - g)[:, None] * a.sum(axis=0)

    return w, coords


@pytest.mark.parametrize("chunks", [128, (300, 211, 389)])
def test_fused_pass_equals_the_separate_steps(data, chunks):
    x, labels = data
    xd = da.from_array(x, chunks=(chunks, -1))
    fused = npt.fit(xd, gamma=GAMMA, landmarks=120, labels=labels, random_state=3)
    plain = npt.fit(xd, gamma=GAMMA, landmarks=120, random_state=3)
    np.testing.assert_allclose(fused.eigenvalues, plain.eigenvalues, rtol=1e-12)
    # the certificate: each row's Lemma 5 residual against the separate residual()
    res = plain.residual(x)
    cert = fused.diagnostics.landmarks["certificate"]
    assert cert["mean"] == pytest.approx(float(np.mean(res)), rel=1e-10, abs=1e-12)
    assert cert["max"] == pytest.approx(float(np.max(res)), rel=1e-10, abs=1e-12)
    # the ridge solution: moments of the pass against ridge on the transformed rows
    alphas = [1e-3, 1e-1, 10.0]
    a = RidgeClassifier(alpha=alphas).fit_moments(fused.moments)
    b = RidgeClassifier(alpha=alphas).fit(plain.transform(x), labels)
    assert a.alpha_ == b.alpha_
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(a.intercept_, b.intercept_, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(a.classes_, b.classes_)


def test_fused_regression_moments_equal_sklearn_ridge(data):
    x, _ = data
    t = np.sin(x[:, 0]) + x[:, 1] * x[:, 2]
    model = npt.fit(x, gamma=GAMMA, landmarks=150, targets=t, random_state=0)
    ours = Ridge(alpha=0.05).fit_moments(model.moments)
    ref = SkRidge(alpha=0.05).fit(model.transform(x), t)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-9, atol=1e-10)
    assert ours.intercept_ == pytest.approx(ref.intercept_, rel=1e-9, abs=1e-10)


def test_exact_model_moments_from_its_coordinates(data):
    x, labels = data
    model = npt.fit(x[:300], gamma=GAMMA, n_components=40, labels=labels[:300])
    a = RidgeClassifier(alpha=0.1).fit_moments(model.moments)
    b = RidgeClassifier(alpha=0.1).fit(model.train_coordinates(), labels[:300])
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10, atol=1e-12)


def test_each_training_chunk_is_evaluated_once_per_pipeline(data, monkeypatch):
    """fit -> certificate -> ridge -> test projection -> predict: one kernel evaluation
    of each training chunk against each landmark block, and one of each test chunk."""
    x, labels = data
    train, test = x[:700], x[700:]
    calls: list[int] = []
    original = consumers.scratch_block  # the kernel operator's one evaluation of a block

    def counting(z, xj, kernel):
        calls.append(z.shape[0])
        return original(z, xj, kernel)

    monkeypatch.setattr(consumers, "scratch_block", counting)
    model = npt.fit(train, gamma=GAMMA, landmarks=100, labels=labels[:700], chunk_size=64)
    clf = RidgeClassifier(alpha=0.1).fit_moments(model.moments)
    clf.predict(model.transform(test))
    landmark_blocks = len(model.x_train.chunks[0])
    assert landmark_blocks == 2  # 100 landmarks in chunks of 64
    real = [c for c in calls if c > 1]  # dask may probe with a tiny block
    assert sum(real) == (len(train) + len(test)) * landmark_blocks


@pytest.mark.parametrize("r", [5, 40])
def test_truncated_landmark_model_equals_dense_reference(data, r):
    x, _ = data
    idx = np.arange(0, 900, 5)  # 180 landmarks
    model = npt.fit(x, gamma=GAMMA, landmarks=idx, n_components=r, solver="krylov", tol=1e-12)
    values, coords = _dense_landmark_model(x, idx, r)
    assert model.n_components == r
    np.testing.assert_allclose(model.eigenvalues, values, rtol=1e-9)
    ref = coords(x[:200])
    np.testing.assert_allclose(align_signs(model.transform(x[:200]), ref), ref, atol=1e-7)


def test_float32_route_within_its_stated_tolerance(data):
    """float32 kernel blocks and products, float64 sums: top components to 1e-4 of the
    largest coordinate, ridge decisions to 1e-3 of their scale, the same predictions."""
    x, labels = data
    f64 = npt.fit(x, gamma=GAMMA, landmarks=200, labels=labels, random_state=1)
    f32 = npt.fit(x.astype(np.float32), gamma=GAMMA, landmarks=200, labels=labels,
                  precision="float32", random_state=1)  # fmt: skip
    y64, y32 = f64.transform(x[:100]), f32.transform(x[:100].astype(np.float32))
    top = 10
    scale = np.abs(y64[:, :top]).max()
    assert np.abs(align_signs(y32[:, :top], y64[:, :top]) - y64[:, :top]).max() < 1e-4 * scale
    a = RidgeClassifier(alpha=1e-2).fit_moments(f64.moments)
    b = RidgeClassifier(alpha=1e-2).fit_moments(f32.moments)
    da_, db_ = a.decision_function(y64), b.decision_function(y32.astype(np.float64))
    assert np.abs(db_ - da_).max() < 1e-3 * np.abs(da_).max()
    assert np.mean(a.predict(y64) == b.predict(y32)) >= 0.99


def test_labels_from_xarray_and_dask(data):
    x, labels = data
    lab = xr.DataArray(labels, dims="sample")
    a = npt.fit(x, gamma=GAMMA, landmarks=60, labels=lab, random_state=0)
    b = npt.fit(x, gamma=GAMMA, landmarks=60, labels=da.from_array(labels, chunks=77),
                random_state=0)  # fmt: skip
    np.testing.assert_allclose(a.moments.cross, b.moments.cross, rtol=1e-12)
    np.testing.assert_array_equal(a.moments.t_sum, np.bincount(labels))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"landmarks": 901}, npt.InputError, "more than the 900 rows"),
        ({"landmarks": 50, "n_components": 60}, npt.InputError, "at most 49"),
        ({"landmarks": np.array([], dtype=int), "n_components": 3}, npt.InputError, "1-D"),
        ({"landmarks": np.array([3]), "n_components": 3}, npt.InputError, "at least 2"),
        ({"landmarks": 50, "labels": np.zeros(900)}, npt.InputError, "2 classes"),
        ({"landmarks": 50, "labels": np.ones(10)}, npt.InputError, "one entry"),
        ({"landmarks": 50, "labels": np.r_[np.nan, np.ones(899)]}, npt.InputError, "NaN"),
        ({"landmarks": 50, "targets": np.array(["a"] * 900)}, TypeError, "numeric"),
        ({"landmarks": 50, "labels": np.linspace(0, 1, 900)}, npt.InputError, "continuous"),
        ({"landmarks": 50, "labels": np.arange(900) % 2, "targets": np.ones(900)},
         npt.InputError, "not both"),
    ],
)  # fmt: skip
def test_bad_landmark_route_input(data, kwargs, error, match):
    x, _ = data
    with pytest.raises(error, match=match):
        npt.fit(x, gamma=GAMMA, **kwargs)


def test_fit_moments_refuses_the_wrong_kind(data):
    x, labels = data
    model = npt.fit(x, gamma=GAMMA, landmarks=40, labels=labels, random_state=0)
    with pytest.raises(npt.InputError, match="RidgeClassifier"):
        Ridge().fit_moments(model.moments)
    with pytest.raises(TypeError, match="LinearMoments"):
        RidgeClassifier().fit_moments(None)
    with pytest.raises(npt.InputError, match="gcv"):
        RidgeClassifier(alpha=[0.1, 1.0], criterion="loo").fit_moments(model.moments)


def test_rpcholesky_in_rounds_spans_like_the_reference(data):
    """Ten rounds of block RPCholesky: a small trace residual (the rows are well spanned),
    far below uniform sampling's on clustered data."""
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(30, 4)) * 4
    x = centres[rng.integers(0, 30, 3000)] + 0.01 * rng.normal(size=(3000, 4))
    kernel = npt.make_kernel("rbf", gamma=0.5)
    idx = rpcholesky_landmarks(da.from_array(x, chunks=(700, -1)), kernel, 30,
                               np.random.default_rng(0), pool=3000)  # fmt: skip
    assert len(idx) == len(np.unique(idx)) <= 30
    covered = {int(np.argmin(((centres - x[i]) ** 2).sum(1))) for i in idx}
    assert len(covered) >= 29  # one pivot per cluster (uniform: about 19 of 30 expected)


def test_rpcholesky_driver_memory_does_not_grow_with_n(tmp_path):
    """In a subprocess: the RSS growth of RPCholesky on 20k and 80k rows, m = 300."""
    script = textwrap.dedent(
        """
        import resource, sys
        import dask, dask.array as da, numpy as np
        import npt_dask as npt
        from npt_dask.engine.centres import rpcholesky_landmarks
        n = int(sys.argv[1])
        dask.config.set(scheduler="synchronous")
        x = da.random.RandomState(0).normal(size=(n, 20), chunks=(4000, -1))
        kernel = npt.make_kernel("rbf", gamma=0.05)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        idx = rpcholesky_landmarks(x, kernel, 300, np.random.default_rng(0))
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(len(idx), (after - before) / 1024)
        """
    )
    growth = {}
    for n in (20_000, 80_000):
        out = subprocess.run([sys.executable, "-c", script, str(n)], capture_output=True,
                             text=True, check=True, timeout=300)  # fmt: skip
        count, mib = out.stdout.split()
        assert int(count) == 300
        growth[n] = float(mib)
    # an n x m factor would add 8 * 60,000 * 300 bytes = 137 MiB between the two
    assert growth[80_000] - growth[20_000] < 40, growth
