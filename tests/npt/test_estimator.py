"""NonlinearProjection as a scikit-learn transformer: API contract and equivalences."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.linalg
import xarray as xr
from sklearn.base import clone
from sklearn.datasets import load_iris, make_moons
from sklearn.decomposition import KernelPCA
from sklearn.exceptions import NotFittedError
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import Pipeline
from sklearn.svm import SVC
from sklearn.utils.estimator_checks import parametrize_with_checks

from npt_dask import NonlinearProjection
from tests.conftest import align_signs, centered_gram

IRIS = load_iris().data


@parametrize_with_checks(
    [NonlinearProjection(), NonlinearProjection(n_components=3, random_state=0)]
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


@pytest.fixture(scope="module")
def fitted():
    return NonlinearProjection(kernel="rbf", gamma=0.5, n_components=6).fit(IRIS)


# ------------------------------------------------------------ containers in/out


def test_numpy_in_numpy_out(fitted):
    out = fitted.transform(IRIS[:10])
    assert type(out) is np.ndarray
    assert out.shape == (10, 6)
    assert out.dtype == np.float64
    assert type(fitted.fit_transform(IRIS)) is np.ndarray


def test_dask_in_dask_out_and_lazy(fitted, task_counter):
    z = da.from_array(IRIS, chunks=((40, 7, 103), (4,)))
    before = task_counter.tasks
    out = fitted.transform(z)
    assert isinstance(out, da.Array)
    assert task_counter.tasks == before  # building the graph computes nothing
    assert out.chunks == ((40, 7, 103), (6,))
    np.testing.assert_allclose(out.compute(), fitted.transform(IRIS), atol=1e-12)
    assert task_counter.tasks > before


def test_dataarray_in_dataarray_out(fitted):
    sample = np.arange(150) * 10
    z = xr.DataArray(IRIS, dims=("sample", "feature"), coords={"sample": sample})
    out = fitted.transform(z)
    assert isinstance(out, xr.DataArray)
    assert out.dims == ("sample", "component")
    np.testing.assert_array_equal(out["sample"].values, sample)
    np.testing.assert_allclose(out.values, fitted.transform(IRIS), atol=1e-12)
    lazy = fitted.transform(z.chunk({"sample": 60}))
    assert isinstance(lazy, xr.DataArray)
    assert isinstance(lazy.data, da.Array)
    np.testing.assert_allclose(lazy.values, fitted.transform(IRIS), atol=1e-12)


def test_fit_on_dask_and_dataarray_equals_numpy(fitted):
    est = NonlinearProjection(kernel="rbf", gamma=0.5, n_components=6)
    for data in (
        da.from_array(IRIS, chunks=((70, 80), (4,))),
        xr.DataArray(IRIS, dims=("sample", "feature")),
    ):
        est.fit(data)
        assert est.n_features_in_ == 4
        np.testing.assert_allclose(est.eigenvalues_, fitted.eigenvalues_, rtol=1e-10)
        got = np.asarray(est.transform(IRIS[:20]))
        ref = fitted.transform(IRIS[:20])
        np.testing.assert_allclose(align_signs(got, ref), ref, atol=1e-8)


@pytest.mark.parametrize("kind", ["dask", "chunked DataArray"])
def test_fit_transform_on_lazy_input_stays_lazy(kind):
    if kind == "dask":
        data = da.from_array(IRIS, chunks=((70, 80), (4,)))
    else:
        data = xr.DataArray(IRIS, dims=("sample", "feature")).chunk({"sample": 70})
    est = NonlinearProjection(kernel="rbf", gamma=0.5, n_components=4)
    out = est.fit_transform(data)
    ref = est.transform(data)
    assert type(out) is type(ref)
    assert isinstance(getattr(out, "data", out), da.Array)
    # Theorem 2: the training coordinates are the projections of the training rows
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-8)


def test_float32_preserved():
    x32 = IRIS.astype(np.float32)
    est = NonlinearProjection(kernel="rbf", gamma=0.5, n_components=4)
    assert est.fit_transform(x32).dtype == np.float32
    assert est.transform(x32).dtype == np.float32
    assert est.transform(da.from_array(x32)).dtype == np.float32
    ref = NonlinearProjection(kernel="rbf", gamma=0.5, n_components=4).fit(IRIS)
    # float32 kernel blocks: ~1e-7 relative rounding, amplified at most by
    # sqrt(lambda_1 / lambda_4) ~ 10 on the smallest kept component
    got = est.transform(x32).astype(np.float64)
    want = ref.transform(IRIS)
    np.testing.assert_allclose(align_signs(got, want), want, atol=1e-4 * np.abs(want).max())


# ------------------------------------------------------------------ sklearn API


def test_pipeline_in_grid_search_matches_kernel_svc():
    x, y = make_moons(150, noise=0.25, random_state=3)
    grid = [0.3, 1.0, 3.0]
    cv = KFold(3, shuffle=True, random_state=0)
    pipe = Pipeline(
        [("npt", NonlinearProjection(kernel="rbf")), ("svm", SVC(kernel="linear", tol=1e-10))]
    )
    search = GridSearchCV(pipe, {"npt__gamma": grid}, cv=cv).fit(x, y)
    ref = GridSearchCV(SVC(kernel="rbf", tol=1e-10), {"gamma": grid}, cv=cv).fit(x, y)
    # full rank (n_components=None): the linear SVM on the coordinates is the kernel
    # SVM (000 eq. 20), so every fold predicts the same labels
    np.testing.assert_allclose(
        search.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], atol=1e-12
    )
    assert search.best_params_["npt__gamma"] == ref.best_params_["gamma"]
    np.testing.assert_array_equal(search.predict(x), ref.predict(x))


def test_get_set_params_clone_round_trip():
    est = NonlinearProjection(kernel="polynomial", gamma=0.2, degree=2, n_components=3)
    params = est.get_params()
    assert params["kernel"] == "polynomial"
    assert params["degree"] == 2
    assert params["n_components"] == 3
    assert set(params) == {
        "kernel", "gamma", "degree", "coef0", "n_components", "center", "solver", "tol",
        "rtol", "chunk_size", "cache", "memory_budget", "device_memory_budget", "precision",
        "random_state",
        "kernel_params", "alpha", "fit_inverse_transform", "remove_zero_eig",
        "eigen_solver", "max_iter", "iterated_power", "copy_X", "n_jobs",
        "landmarks", "landmark_method", "device",
    }  # fmt: skip
    assert est.set_params(gamma=0.7, center=False) is est
    assert est.gamma == 0.7
    assert est.center is False
    copy = clone(est)
    assert copy is not est
    assert copy.get_params() == est.get_params()
    copy.fit(IRIS)
    assert not hasattr(est, "model_")  # clone is unfitted and independent
    assert NonlinearProjection(**copy.get_params()).get_params() == copy.get_params()
    with pytest.raises(ValueError, match="nope"):
        est.set_params(nope=1)


@pytest.mark.parametrize("n_components", [10, None])
def test_fit_transform_equals_transform_of_training_rows(n_components):
    """Theorem 2: the training coordinates are the projections of the training rows."""
    est = NonlinearProjection(kernel="rbf", gamma=0.5, n_components=n_components)
    train = est.fit_transform(IRIS)
    again = est.transform(IRIS)
    lam = est.eigenvalues_
    # y_i = Lambda^{-1/2} U^T k(x_i) = Lambda^{1/2} U^T e_i exactly when K U = U Lambda.
    # The dense eigensolver's residual and the kernel vector's rounding are sums of n
    # terms of size eps lambda_1 (rounding adds like a random walk: sqrt(n)), divided
    # by sqrt(lambda_j) in column j. Observed: below 0.1 of this atol, full rank too.
    atol = np.sqrt(len(IRIS)) * np.finfo(float).eps * lam[0] / np.sqrt(lam)
    assert np.all(np.abs(train - again) <= atol)


def test_transform_matches_kernel_pca_up_to_signs():
    x, z = IRIS[:120], IRIS[120:]
    est = NonlinearProjection(kernel="rbf", gamma=0.5, n_components=6).fit(x)
    kpca = KernelPCA(6, kernel="rbf", gamma=0.5, eigen_solver="dense").fit(x)
    np.testing.assert_allclose(est.eigenvalues_, kpca.eigenvalues_, rtol=1e-10)
    ref = kpca.transform(z)
    np.testing.assert_allclose(align_signs(est.transform(z), ref), ref, atol=1e-8)


def test_fitted_attributes_match_dense_spectrum():
    est = NonlinearProjection(kernel="rbf", gamma=0.5, n_components=5).fit(IRIS)
    kc = centered_gram(rbf_kernel(IRIS, gamma=0.5))
    lam, vec = scipy.linalg.eigh(kc)
    lam, vec = lam[::-1][:5], vec[:, ::-1][:, :5]
    assert est.n_components_ == 5
    assert est.n_features_in_ == 4
    np.testing.assert_allclose(est.eigenvalues_, lam, rtol=1e-10)
    np.testing.assert_allclose(align_signs(est.eigenvectors_, vec), vec, atol=1e-8)
    np.testing.assert_allclose(est.explained_variance_, lam / 149, rtol=1e-10)
    np.testing.assert_allclose(est.explained_variance_ratio_, lam / np.trace(kc), rtol=1e-10)
    assert list(est.get_feature_names_out()) == [f"nonlinearprojection{i}" for i in range(5)]


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("params", "error", "name"),
    [
        ({"gamma": -1.0}, ValueError, "gamma"),
        ({"gamma": 0.0}, ValueError, "gamma"),
        ({"gamma": "auto"}, ValueError, "gamma"),  # "scale" is valid
        ({"kernel": "nope"}, ValueError, "kernel"),
        ({"n_components": 0}, ValueError, "n_components"),
        ({"n_components": 2.5}, TypeError, "n_components"),
        ({"degree": 0}, ValueError, "degree"),
        ({"solver": "magic"}, ValueError, "solver"),
        ({"chunk_size": 0}, ValueError, "chunk_size"),
    ],
)
def test_bad_parameters_raise_naming_the_parameter(params, error, name):
    est = NonlinearProjection(**params)  # __init__ stores, fit validates (sklearn's rule)
    with pytest.raises(error, match=name):
        est.fit(IRIS)


def test_transform_before_fit_raises_not_fitted():
    with pytest.raises(NotFittedError):
        NonlinearProjection().transform(IRIS)


@pytest.mark.parametrize("lazy", [False, True])
def test_feature_count_mismatch_names_both_counts(fitted, lazy):
    z = IRIS[:, :3]
    if lazy:
        z = da.from_array(z)
    with pytest.raises(ValueError, match=r"(?=.*\b3\b)(?=.*\b4\b)"):
        fitted.transform(z)
