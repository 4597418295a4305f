"""methods.Ridge / RidgeClassifier: kernel ridge as ridge on NPT coordinates, in one pass.

References are independent of the code under test: scikit-learn's
``KernelRidge``, ``Ridge``, ``RidgeClassifier`` and ``RidgeCV``, and dense
formulas built here from ``pairwise_kernels`` (explicit centring, explicit hat
matrix).
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from sklearn.datasets import make_blobs
from sklearn.exceptions import NotFittedError
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import Ridge as SkRidge
from sklearn.linear_model import RidgeClassifier as SkRidgeClassifier
from sklearn.linear_model import RidgeCV
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.utils.estimator_checks import parametrize_with_checks

import npt_dask as npt
import npt_dask.engine.sums as graph_module
import npt_dask.methods._passes as passes_module
import npt_dask.methods.linear_ridge as ridge_module
import npt_dask.runtime.labels as labels_module
from npt_dask.engine.moments import LinearMoments
from npt_dask.errors import InputError, InputTypeError
from npt_dask.methods import Ridge, RidgeClassifier, ridge_moments
from tests.conftest import centered_gram

ALPHAS = [1e-3, 1e-2, 0.1, 1.0, 10.0]


def _regression_data(n=150, m=60, d=4, seed=0):
    """Gaussian rows in d = 4: the rbf Gram (gamma 0.5) has full numerical rank."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n + m, d))
    t = np.column_stack([np.sin(x.sum(axis=1)), np.cos(x[:, 0]) * x[:, 1]])
    t += 0.1 * rng.normal(size=t.shape)
    return x[:n], t[:n], x[n:]


def _rel(got, ref):
    return np.abs(np.asarray(got) - ref).max() / np.abs(ref).max()


@pytest.fixture(scope="module")
def data():
    return _regression_data()


@pytest.fixture(scope="module")
def uncentred(data):
    x, _, z = data
    model = npt.fit(x, "rbf", gamma=0.5, n_components=None, center=False, solver="dense")
    assert model.n_components == len(x)  # full rank: <y_i, y(z)> = kappa(x_i, z) exactly
    return model, model.train_coordinates(), model.transform(z)


@pytest.fixture(scope="module")
def centred(data):
    x, _, z = data
    model = npt.fit(x, "rbf", gamma=0.5, n_components=None, solver="dense")
    assert model.n_components == len(x) - 1  # full rank of the centred Gram
    return model, model.train_coordinates(), model.transform(z)


# ------------------------------------------------------------- kernel ridge identities


@pytest.mark.parametrize("alpha", [1e-2, 1.0])
@pytest.mark.parametrize("targets", ["1d", "2d"])
def test_uncentred_full_rank_ridge_without_intercept_is_kernel_ridge(
    data, uncentred, alpha, targets
):
    x, t, z = data
    t = t[:, 0] if targets == "1d" else t
    _, coords, coords_z = uncentred
    ref = KernelRidge(alpha=alpha, kernel="rbf", gamma=0.5).fit(x, t).predict(z)
    reg = Ridge(alpha, fit_intercept=False).fit(coords, t)
    got = reg.predict(coords_z)
    assert got.shape == ref.shape
    assert _rel(got, ref) < 1e-8  # observed ~1e-14
    assert reg.intercept_ == 0.0 if targets == "1d" else np.all(reg.intercept_ == 0.0)
    # and on the training rows: the fitted values of kernel ridge
    np.testing.assert_allclose(
        reg.predict(coords), KernelRidge(alpha=alpha, kernel="rbf", gamma=0.5).fit(x, t).predict(x),
        rtol=0, atol=1e-8 * np.abs(t).max(),
    )  # fmt: skip


def _centred_krr_with_intercept(x, t, z, alpha, gamma):
    """min ||T - 1 b - K~ c||^2 + alpha c^T K~ c with the centred kernel K~.

    Since K~ 1 = 0, b = mean(T) and c = (K~ + alpha I)^{-1} (T - mean T); the
    prediction is k~(z)^T c + b with k~(x_i, z) = k(x_i, z) - m_i - mean_j k(x_j, z) + g.
    """
    k = pairwise_kernels(x, x, metric="rbf", gamma=gamma)
    kz = pairwise_kernels(z, x, metric="rbf", gamma=gamma)
    kz_centred = kz - k.mean(axis=0)[None, :] - kz.mean(axis=1)[:, None] + k.mean()
    mean = t.mean(axis=0)
    c = np.linalg.solve(centered_gram(k) + alpha * np.eye(len(x)), t - mean)
    return kz_centred @ c + mean


@pytest.mark.parametrize("alpha", [1e-2, 1.0])
def test_centred_ridge_with_intercept_is_centred_kernel_ridge_plus_mean(
    data, centred, uncentred, alpha
):
    x, t, z = data
    ref = _centred_krr_with_intercept(x, t, z, alpha, gamma=0.5)
    _, coords, coords_z = centred
    reg = Ridge(alpha).fit(coords, t)
    assert _rel(reg.predict(coords_z), ref) < 1e-8
    # training coordinates sum to zero (Lemma 4): the intercept is the target mean
    np.testing.assert_allclose(reg.intercept_, t.mean(axis=0), rtol=1e-10)
    # an unpenalised intercept is blind to a shift of the features: the uncentred
    # coordinates give the same machine
    _, u_coords, u_coords_z = uncentred
    assert _rel(Ridge(alpha).fit(u_coords, t).predict(u_coords_z), ref) < 1e-8


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_linear_kernel_is_sklearn_ridge_on_the_inputs(fit_intercept):
    """phi = identity: the coordinates are a rotation of X (centred or not), and the
    ridge penalty is rotation invariant, so the predictions are sklearn's Ridge on X."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(120, 5)) + 2.0
    t = x @ rng.normal(size=5) + rng.normal(size=120)
    z = rng.normal(size=(30, 5)) + 2.0
    model = npt.fit(x, "linear", n_components=None, center=fit_intercept)
    assert model.n_components == 5
    ref = SkRidge(alpha=3.0, fit_intercept=fit_intercept).fit(x, t).predict(z)
    got = Ridge(3.0, fit_intercept=fit_intercept).fit(model.train_coordinates(), t)
    assert _rel(got.predict(model.transform(z)), ref) < 1e-10


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_ridge_equals_sklearn_ridge_on_the_same_coordinates(data, centred, fit_intercept):
    _, t, _ = data
    _, coords, coords_z = centred
    # shifted columns (and target offsets) exercise the centring by sums
    shift = np.linspace(-2.0, 3.0, coords.shape[1])
    coords, coords_z, t = coords + shift, coords_z + shift, t + np.array([5.0, -1.0])
    sk = SkRidge(alpha=0.3, fit_intercept=fit_intercept, solver="cholesky").fit(coords, t)
    reg = Ridge(0.3, fit_intercept=fit_intercept, chunk_size=37).fit(coords, t)
    np.testing.assert_allclose(reg.coef_, sk.coef_, rtol=0, atol=1e-10 * np.abs(sk.coef_).max())
    np.testing.assert_allclose(reg.intercept_, sk.intercept_, rtol=1e-9)  # observed 1e-10
    assert _rel(reg.predict(coords_z), sk.predict(coords_z)) < 1e-10


# ------------------------------------------------------------------- classifier


@pytest.fixture(scope="module")
def blobs():
    x, y = make_blobs(230, n_features=4, centers=3, cluster_std=2.0, random_state=0)
    return x[:170], y[:170], x[170:], y[170:]


@pytest.mark.parametrize("n_classes", [2, 3])
def test_classifier_equals_sklearn_ridge_classifier_on_coordinates(blobs, n_classes):
    x, y, z, _ = blobs
    keep, keep_z = y < n_classes, slice(None)
    x, y = x[keep], np.array(["a", "b", "c"])[y[keep]]
    model = npt.fit(x, "rbf", gamma=0.2, n_components=40)
    coords, coords_z = model.train_coordinates(), model.transform(z[keep_z])
    sk = SkRidgeClassifier(alpha=0.5, solver="cholesky").fit(coords, y)
    clf = RidgeClassifier(alpha=0.5, chunk_size=29).fit(coords, y)
    np.testing.assert_array_equal(clf.classes_, sk.classes_)
    # (1, r) for two classes, as documented by scikit-learn (1.9 returns (r,) there)
    assert clf.coef_.shape == np.atleast_2d(sk.coef_).shape
    assert clf.intercept_.shape == sk.intercept_.shape
    ref = sk.decision_function(coords_z)
    got = clf.decision_function(coords_z)
    assert got.shape == ref.shape
    assert _rel(got, ref) < 1e-10
    np.testing.assert_array_equal(clf.predict(coords_z), sk.predict(coords_z))


def test_classifier_is_one_vs_all_kernel_ridge_at_full_rank(blobs):
    x, y, z, _ = blobs
    model = npt.fit(x, "rbf", gamma=0.2, n_components=None, center=False, solver="dense")
    assert model.n_components == len(x)
    clf = RidgeClassifier(alpha=0.1, fit_intercept=False).fit(model.train_coordinates(), y)
    targets = np.where(y[:, None] == np.arange(3), 1.0, -1.0)
    ref = KernelRidge(alpha=0.1, kernel="rbf", gamma=0.2).fit(x, targets).predict(z)
    got = clf.decision_function(model.transform(z))
    assert _rel(got, ref) < 1e-8
    np.testing.assert_array_equal(clf.predict(model.transform(z)), ref.argmax(axis=1))


# ------------------------------------------------------------------ choosing alpha


def _dense_gcv(coords, t, alphas, fit_intercept):
    """GCV from the explicit hat matrix: (RSS/n) / (1 - tr(H)/n)^2, mean over outputs."""
    n = len(coords)
    c = coords - coords.mean(axis=0) if fit_intercept else coords
    out = []
    for alpha in alphas:
        h = c @ np.linalg.solve(c.T @ c + alpha * np.eye(c.shape[1]), c.T)
        if fit_intercept:
            h += 1.0 / n
        rss = ((t - h @ t) ** 2).sum(axis=0)
        out.append(np.mean(rss) / n / (1 - np.trace(h) / n) ** 2)
    return np.array(out)


FEW_ALPHAS = ALPHAS[1 : 1 + ridge_module.CHOLESKY_MAX_ALPHAS]
MANY_ALPHAS = list(np.logspace(-4, 2, ridge_module.CHOLESKY_MAX_ALPHAS + 3))


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("targets", ["1d", "2d"])
@pytest.mark.parametrize("alphas", [FEW_ALPHAS, MANY_ALPHAS], ids=["cholesky", "eigen"])
def test_gcv_scores_match_the_dense_hat_matrix(data, centred, fit_intercept, targets, alphas):
    """Few alphas are solved by a Cholesky factorisation each, many by one eigh: both
    give the dense hat matrix's GCV scores."""
    _, t, _ = data
    t = t[:, 0] if targets == "1d" else t
    _, coords, _ = centred
    coords = coords + np.linspace(-1.0, 2.0, coords.shape[1])  # not centred
    reg = Ridge(alphas, fit_intercept=fit_intercept, chunk_size=50).fit(coords, t + 1.0)
    ref = _dense_gcv(coords, (t if t.ndim == 2 else t[:, None]) + 1.0, alphas, fit_intercept)
    np.testing.assert_allclose(reg.alpha_scores_, ref, rtol=1e-8)
    assert reg.alpha_ == alphas[int(np.argmin(ref))]
    single = Ridge(reg.alpha_, fit_intercept=fit_intercept, chunk_size=50).fit(coords, t + 1.0)
    # one alpha is one Cholesky solve: the same arithmetic as the Cholesky path; the
    # eigen path differs by rounding times the condition number (~1e7 at alpha = 1e-4)
    atol = 1e-12 if alphas is FEW_ALPHAS else 1e-8
    np.testing.assert_allclose(reg.coef_, single.coef_, rtol=0, atol=atol)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_loo_scores_and_alpha_match_sklearn_ridgecv(data, centred, fit_intercept):
    """scikit-learn's RidgeCV (cv=None, "gcv_mode") computes exact leave-one-out errors."""
    _, t, _ = data
    _, coords, coords_z = centred
    sk = RidgeCV(alphas=ALPHAS, fit_intercept=fit_intercept, store_cv_results=True)
    sk.fit(coords, t)
    reg = Ridge(ALPHAS, fit_intercept=fit_intercept, criterion="loo", chunk_size=40)
    reg.fit(coords, t)
    np.testing.assert_allclose(reg.alpha_scores_, sk.cv_results_.mean(axis=(0, 1)), rtol=1e-8)
    assert reg.alpha_ == sk.alpha_
    assert _rel(reg.predict(coords_z), sk.predict(coords_z)) < 1e-8


def test_gcv_picks_the_same_alpha_as_sklearn_ridgecv_when_n_much_larger_than_r(data):
    """GCV replaces every leverage by the mean one. With n >> r the leverages are even
    and GCV tracks scikit-learn's leave-one-out errors; near full rank (r ~ n) they can
    part (on these data, first target, r = n - 1: GCV 0.1, LOO 0.01)."""
    x, t, _ = data
    coords = npt.fit(x, "rbf", gamma=0.5, n_components=20).train_coordinates()
    for k in range(2):
        sk = RidgeCV(alphas=ALPHAS, store_cv_results=True).fit(coords, t[:, k])
        reg = Ridge(ALPHAS).fit(coords, t[:, k])
        assert reg.alpha_ == sk.alpha_
        np.testing.assert_allclose(reg.alpha_scores_, sk.cv_results_.mean(axis=0), rtol=0.05)


def test_classifier_alpha_choice_matches_sklearn_loo(blobs):
    from sklearn.linear_model import RidgeClassifierCV

    x, y, _, _ = blobs
    model = npt.fit(x, "rbf", gamma=0.2, n_components=40)
    coords = model.train_coordinates()
    sk = RidgeClassifierCV(alphas=ALPHAS, store_cv_results=True).fit(coords, y)
    clf = RidgeClassifier(ALPHAS, criterion="loo").fit(coords, y)
    assert clf.alpha_ == sk.alpha_
    np.testing.assert_allclose(clf.alpha_scores_, sk.cv_results_.mean(axis=(0, 1)), rtol=1e-8)
    gcv = RidgeClassifier(ALPHAS).fit(coords, y)
    assert np.all(np.isfinite(gcv.alpha_scores_))


# ------------------------------------------------------------------ containers


def test_dask_irregular_chunks_fit_equals_numpy_and_predict_is_lazy(data, centred, task_counter):
    _, t, _ = data
    _, coords, coords_z = centred
    ref = Ridge(ALPHAS).fit(coords, t)
    lazy = da.from_array(coords, chunks=((17, 60, 3, 70), (coords.shape[1],)))
    reg = Ridge(ALPHAS).fit(lazy, da.from_array(t, chunks=(45, 2)))
    assert reg.alpha_ == ref.alpha_
    np.testing.assert_allclose(reg.coef_, ref.coef_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(reg.intercept_, ref.intercept_, rtol=0, atol=1e-12)
    lazy_z = da.from_array(coords_z, chunks=((13, 40, 7), (coords_z.shape[1],)))
    before = task_counter.tasks
    out = reg.predict(lazy_z)
    assert isinstance(out, da.Array)
    assert task_counter.tasks == before  # building the graph computes nothing
    assert out.chunks[0] == (13, 40, 7)
    np.testing.assert_allclose(out.compute(), ref.predict(coords_z), rtol=0, atol=1e-10)
    np.testing.assert_allclose(  # 1-D dask targets too
        Ridge(0.1).fit(lazy, da.from_array(t[:, 0], chunks=33)).coef_,
        Ridge(0.1).fit(coords, t[:, 0]).coef_, rtol=0, atol=1e-10,
    )  # fmt: skip


def test_dataarray_in_dataarray_out(blobs):
    x, y, z, _ = blobs
    model = npt.fit(x, "rbf", gamma=0.2, n_components=20)
    coords, coords_z = model.train_coordinates(), model.transform(z)
    ref = RidgeClassifier(0.5).fit(coords, y)
    sample = np.arange(len(x)) * 10
    arr = xr.DataArray(coords, dims=("sample", "component"), coords={"sample": sample})
    labels = xr.DataArray(y, dims=("sample",), coords={"sample": sample})
    clf = RidgeClassifier(0.5).fit(arr.chunk({"sample": 50}), labels.chunk({"sample": 50}))
    np.testing.assert_allclose(clf.coef_, ref.coef_, rtol=0, atol=1e-10)
    test = xr.DataArray(coords_z, dims=("sample", "component"),
                        coords={"sample": np.arange(len(z)) + 1000})  # fmt: skip
    scores = clf.decision_function(test)
    assert isinstance(scores, xr.DataArray)
    assert scores.dims == ("sample", "class")
    np.testing.assert_array_equal(scores["sample"].values, np.arange(len(z)) + 1000)
    np.testing.assert_allclose(scores.values, ref.decision_function(coords_z), atol=1e-10)
    lazy = clf.predict(test.chunk({"sample": 25}))
    assert isinstance(lazy, xr.DataArray)
    assert isinstance(lazy.data, da.Array)
    np.testing.assert_array_equal(lazy.values, ref.predict(coords_z))
    reg = Ridge(0.5).fit(arr, labels.astype(float))  # numpy-backed DataArray
    assert isinstance(reg.predict(test), xr.DataArray)


def test_float32_coordinates(data, centred):
    _, t, _ = data
    _, coords, coords_z = centred
    ref = Ridge(0.1).fit(coords.astype(np.float32).astype(np.float64), t)
    reg = Ridge(0.1).fit(coords.astype(np.float32), t.astype(np.float32))
    assert reg.coef_.dtype == np.float64  # accumulated in float64
    np.testing.assert_allclose(reg.coef_, ref.coef_, rtol=0, atol=1e-5 * np.abs(ref.coef_).max())
    lazy32 = da.from_array(coords_z.astype(np.float32), chunks=20)
    got = reg.predict(lazy32).compute()
    assert _rel(got, ref.predict(coords_z)) < 1e-5


def test_zarr_backed_coordinates(tmp_path, data):
    x, t, z = data
    model = npt.fit(x, "rbf", gamma=0.5, n_components=30, chunk_size=64)
    train = npt.project(model, x, tmp_path / "train.zarr", chunk_size=41, progress=False)
    test = npt.project(model, z, tmp_path / "test.zarr", chunk_size=25, progress=False)
    ref = Ridge(ALPHAS).fit(model.train_coordinates(), t)
    opened = xr.open_zarr(tmp_path / "train.zarr", consolidated=False)["coordinates"]
    reg = Ridge(ALPHAS).fit(opened, t)
    assert reg.alpha_ == ref.alpha_
    np.testing.assert_allclose(reg.coef_, ref.coef_, rtol=0, atol=1e-8)
    out = reg.predict(test["coordinates"])
    assert isinstance(out, xr.DataArray)
    assert isinstance(out.data, da.Array)
    np.testing.assert_allclose(out.values, ref.predict(model.transform(z)), atol=1e-8)
    # a plain zarr array read with dask
    da.from_array(model.train_coordinates(), chunks=(50, -1)).to_zarr(tmp_path / "y.zarr")
    reg2 = Ridge(0.1).fit(da.from_zarr(tmp_path / "y.zarr"), t)
    np.testing.assert_allclose(reg2.coef_, Ridge(0.1).fit(model.train_coordinates(), t).coef_,
                               rtol=0, atol=1e-10)  # fmt: skip
    assert train["coordinates"].shape == (len(x), 30)


# ------------------------------------------------------------- one pass, small results


def test_fit_reads_each_chunk_once_and_gathers_only_small_sums(data, centred, monkeypatch):
    _, t, _ = data
    _, coords, _ = centred
    r = coords.shape[1]
    reads: list[int] = []

    def read(block, block_info=None):
        reads.append(block_info[0]["chunk-location"][0])
        return block

    chunks = ((40, 40, 40, 30), (r,))
    lazy = da.from_array(coords, chunks=chunks).map_blocks(read, dtype=coords.dtype)
    gathered: list = []

    def spy(*collections, **kw):
        out = ridge_module_compute(*collections, **kw)
        gathered.append(out)
        return out

    ridge_module_compute = graph_module.compute  # chunk_sums' one compute
    monkeypatch.setattr(graph_module, "compute", spy)
    monkeypatch.setattr(passes_module, "compute", spy)  # pass_sums' one compute
    monkeypatch.setattr(labels_module, "compute", spy)  # the one label check reads labels
    if hasattr(ridge_module, "compute"):
        monkeypatch.setattr(ridge_module, "compute", spy)

    Ridge(ALPHAS).fit(lazy, t)  # GCV: one pass
    assert sorted(reads) == [0, 1, 2, 3]
    assert len(gathered) == 1
    sizes = [np.size(a) for a in gathered[0][0]]
    assert max(sizes) <= r * r  # (n, r) is never gathered: at most r x r, r x k, r, k
    assert sum(sizes) < r * r + 4 * r + 10

    reads.clear()
    gathered.clear()
    Ridge(ALPHAS, criterion="loo").fit(lazy, t)  # exact LOO: a second pass
    assert sorted(reads) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert len(gathered) == 2
    assert np.size(gathered[1][0][0]) == len(ALPHAS) * t.shape[1]

    reads.clear()
    gathered.clear()
    labels = da.from_array((t[:, 0] > 0).astype(int), chunks=70)
    RidgeClassifier(0.1).fit(lazy, labels)  # classes from the labels, then one pass over Y
    assert sorted(reads) == [0, 1, 2, 3]
    assert len(gathered) == 2
    assert max(np.size(a) for a in gathered[1][0]) <= r * r


def test_ridge_moments_match_numpy(rng):
    y = rng.normal(size=(91, 4)) + 3.0
    t = rng.normal(size=(91, 2))
    m = ridge_moments(da.from_array(y, chunks=((10, 50, 31), (4,))), t)
    assert m["n"] == 91
    np.testing.assert_allclose(m["gram"], y.T @ y, rtol=1e-12)
    np.testing.assert_allclose(m["cross"], y.T @ t, rtol=1e-12)
    np.testing.assert_allclose(m["y_sum"], y.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(m["t_sum"], t.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(m["t_norm2"], (t**2).sum(axis=0), rtol=1e-12)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("alpha", "error", "match"),
    [
        (
            0.0,
            InputError,
            r"'alpha' parameter of Ridge must be a finite real number in the "
            r"range \(0, inf\) or a 1-D array of candidate alphas > 0",
        ),
        (-1.0, InputError, "'alpha' parameter"),
        ([0.1, -1.0], InputError, "Got \\[0.1, -1.0\\] instead"),
        (np.nan, InputError, "'alpha' parameter"),
        ("1.0", InputError, "'alpha' parameter"),  # a word: the table's value error
        ([], InputTypeError, "'alpha' parameter"),
        ([[0.1, 1.0]], InputTypeError, "1-D array"),
        (True, InputTypeError, "'alpha' parameter"),
    ],
)
def test_bad_alpha(alpha, error, match):
    with pytest.raises(error, match=match):
        Ridge(alpha).fit(np.ones((5, 2)), np.arange(5.0))


def test_bad_parameters():
    y, t = np.eye(5), np.arange(5.0)
    with pytest.raises(InputError, match="'fit_intercept' parameter of Ridge"):  # a word
        Ridge(fit_intercept="yes").fit(y, t)
    with pytest.raises(InputError, match="'criterion' parameter of RidgeClassifier"):
        RidgeClassifier(criterion="kfold").fit(y, t > 2)
    with pytest.raises(InputError, match="'chunk_size' parameter of Ridge"):
        Ridge(chunk_size=0).fit(y, t)


def test_bad_inputs(data, centred):
    _, t, _ = data
    _, coords, _ = centred
    lazy = da.from_array(coords, chunks=50)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        Ridge().fit(coords, t[:-1])
    with pytest.raises(InputError, match="y has 149 rows but the data have 150 samples"):
        Ridge().fit(lazy, t[:-1])
    with pytest.raises(InputError, match="y has 149 labels"):
        RidgeClassifier().fit(lazy, t[:-1, 0] > 0)
    bad = coords.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        Ridge().fit(bad, t)
    with pytest.raises(InputError, match="NaN or infinity"):  # lazy: raised by the pass
        Ridge().fit(da.from_array(bad, chunks=50), t)
    bad_t = t.copy()
    bad_t[0, 0] = np.inf
    with pytest.raises(InputError, match="NaN or infinity"):
        Ridge().fit(lazy, bad_t)
    with pytest.raises(InputTypeError, match="X must be numeric"):
        Ridge().fit(np.full((4, 2), "a"), np.arange(4.0))
    with pytest.raises(InputTypeError, match="Data must be numeric"):
        Ridge().fit(da.from_array(np.full((4, 2), "a")), np.arange(4.0))
    with pytest.raises(InputTypeError, match=r"y must be numeric for Ridge.*RidgeClassifier"):
        Ridge().fit(lazy, np.array(["a", "b"] * 75))
    with pytest.raises(InputTypeError, match="y must be numeric for Ridge"):
        Ridge().fit(coords, np.array(["a", "b"] * 75))
    with pytest.raises(InputError, match="at least 2 classes"):
        RidgeClassifier().fit(lazy, np.zeros(150))
    with pytest.raises(InputError, match="requires y"):
        Ridge().fit(lazy, None)
    with pytest.raises(NotFittedError):
        Ridge().predict(coords)
    reg = Ridge().fit(lazy, t)
    with pytest.raises(InputError, match="X has 3 features, but Ridge is expecting 149"):
        reg.predict(da.ones((5, 3)))
    with pytest.raises(ValueError, match="X has 3 features"):
        reg.predict(np.ones((5, 3)))


# ------------------------------------------------------------------ scikit-learn API


@parametrize_with_checks(
    [
        Ridge(),
        RidgeClassifier(),
        Ridge(alpha=[0.1, 1.0]),
        RidgeClassifier([0.1, 1.0], criterion="loo"),
    ]
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


def test_an_indefinite_gram_falls_back_to_the_clipped_eigen_solution(rng):
    """Moments whose Gram has a negative eigenvalue beyond the smallest alpha (rounding
    in a sum gone wrong) cannot be Cholesky-factored: the eigen path clips it at 0."""
    r = 6
    q = np.linalg.qr(rng.normal(size=(r, r)))[0]
    values = np.array([50.0, 20.0, 5.0, 1.0, 0.5, -1e-3])
    gram = (q * values) @ q.T
    cross = rng.normal(size=(r, 1))
    moments = LinearMoments(100.0, np.zeros(r), np.zeros(1), gram, cross, np.array([500.0]))
    reg = Ridge([1e-6, 1e-4, 1.0], fit_intercept=False).fit_moments(moments)
    clipped = (q * np.maximum(values, 0.0)) @ q.T
    ref = Ridge([*np.logspace(-6, 0, 20), 1e-4], fit_intercept=False).fit_moments(
        LinearMoments(100.0, np.zeros(r), np.zeros(1), clipped, cross, np.array([500.0]))
    )
    assert np.all(np.isfinite(reg.coef_))
    expected = np.linalg.solve(clipped + reg.alpha_ * np.eye(r), cross)[:, 0]
    np.testing.assert_allclose(reg.coef_, expected, rtol=1e-7)  # condition number ~5e7
    assert ref.alpha_scores_[-1] == pytest.approx(reg.alpha_scores_[1], rel=1e-10)
