"""npt.fit / transform / residual against scikit-learn, scipy and the paper's identities."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.linalg
import xarray as xr
from sklearn.datasets import load_digits, load_iris, make_moons
from sklearn.decomposition import KernelPCA
from sklearn.metrics.pairwise import laplacian_kernel

import npt_dask as npt
from tests.conftest import align_signs, centered_gram


def _datasets():
    iris = load_iris().data
    digits = load_digits().data[:400] / 16.0
    moons = make_moons(300, noise=0.1, random_state=0)[0]
    return {"iris": iris, "digits": digits, "moons": moons}


DATA = _datasets()
CASES = [
    ("iris", "rbf", {"gamma": 0.5}),
    ("iris", "polynomial", {"gamma": 0.1, "degree": 3, "coef0": 1.0}),
    ("digits", "rbf", {}),
    ("digits", "laplacian", {"gamma": 0.02}),
    ("moons", "cosine", {}),
    ("moons", "linear", {}),
    ("digits", "polynomial", {"degree": 2}),
]


def _split(name):
    x = DATA[name]
    return x[: int(0.8 * len(x))], x[int(0.8 * len(x)) :]


@pytest.mark.parametrize(("data", "kernel", "params"), CASES)
def test_dense_matches_sklearn_kernel_pca(data, kernel, params):
    x, z = _split(data)
    r = min(10, x.shape[1] - 1) if kernel in ("linear", "cosine") else 10
    model = npt.fit(x, kernel, n_components=r, solver="dense", chunk_size=97, **params)
    if kernel == "laplacian":  # not a KernelPCA kernel name: give it the Gram
        kpca = KernelPCA(r, kernel="precomputed", eigen_solver="dense")
        kpca.fit(laplacian_kernel(x, **params))
        ref = kpca.transform(laplacian_kernel(z, x, **params))
    else:
        sk_name = {"polynomial": "poly"}.get(kernel, kernel)
        kpca = KernelPCA(r, kernel=sk_name, eigen_solver="dense", **params).fit(x)
        ref = kpca.transform(z)
    np.testing.assert_allclose(model.eigenvalues, kpca.eigenvalues_, rtol=1e-9)
    ref_train = kpca.eigenvectors_ * np.sqrt(kpca.eigenvalues_)
    train = model.train_coordinates()
    np.testing.assert_allclose(align_signs(train, ref_train), ref_train, atol=1e-8)
    got = model.transform(z)
    np.testing.assert_allclose(align_signs(got, ref), ref, atol=1e-8)


@pytest.mark.parametrize(("data", "kernel", "params"), CASES[:4])
def test_krylov_matches_dense_scipy(data, kernel, params):
    x, _z = _split(data)
    model = npt.fit(
        x,
        kernel,
        n_components=8,
        solver="krylov",
        chunk_size=64,
        tol=1e-10,
        random_state=0,
        **params,
    )
    spec = model.kernel
    w, v = scipy.linalg.eigh(centered_gram(spec(x, x)))
    w, v = w[::-1][:8], v[:, ::-1][:, :8]
    np.testing.assert_allclose(model.eigenvalues, w, rtol=1e-10)
    np.testing.assert_allclose(align_signs(model.eigenvectors, v), v, atol=1e-7)
    assert model.diagnostics.converged
    assert model.diagnostics.residuals.max() <= 1e-10


@pytest.fixture(scope="module")
def full_rank():
    """Full-rank centred fit on generated data, plus held-out rows."""
    rng = np.random.default_rng(3)
    x, z = rng.normal(size=(120, 4)), rng.normal(size=(40, 4))
    model = npt.fit(x, "rbf", gamma=2.0, n_components=None, rtol=1e-12, chunk_size=50)
    return model, x, z


def test_full_rank_keeps_n_minus_one(full_rank):
    model, _x, _ = full_rank
    assert model.n_components == 119  # centring removes one dimension


def test_corollary3_coordinates_reproduce_centred_gram(full_rank):
    model, x, _ = full_rank
    y = model.train_coordinates()
    k = centered_gram(model.kernel(x, x))
    np.testing.assert_allclose(y @ y.T, k, atol=1e-10)


def test_lemma4_coordinates_sum_to_zero(full_rank):
    model, _, _ = full_rank
    np.testing.assert_allclose(model.train_coordinates().sum(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(model.eigenvectors.sum(axis=0), 0.0, atol=1e-10)


def test_theorem2_transform_of_training_rows(full_rank):
    model, x, _ = full_rank
    np.testing.assert_allclose(model.transform(x), model.train_coordinates(), atol=1e-6)
    np.testing.assert_allclose(model.residual(x), 0.0, atol=1e-5)


def test_lemma5_residual_of_new_points(full_rank):
    model, x, z = full_rank
    spec = model.kernel
    kxx, kzx = spec(x, x), spec(z, x)
    m, g = kxx.mean(axis=1), kxx.mean()
    kc = kzx - m[None, :] - kzx.mean(axis=1, keepdims=True) + g  # centred kernel vectors
    kzz = spec.diag(z) - 2 * kzx.mean(axis=1) + g
    # independent: squared distance to span = k(z,z) - k^T K^+ k
    proj = np.einsum("ij,jk,ik->i", kc, np.linalg.pinv(centered_gram(kxx), rcond=1e-12), kc)
    y, res = model.transform_with_residual(z)
    np.testing.assert_allclose(res**2, kzz - proj, atol=1e-7)
    np.testing.assert_allclose(np.sum(y**2, axis=1) + res**2, kzz, atol=1e-10)
    assert res.min() > 1e-3  # new points are off the subspace: the check is not vacuous


def test_truncated_residual_grows(full_rank):
    _, x, _z = full_rank
    small = npt.fit(x, "rbf", gamma=2.0, n_components=5)
    assert small.residual(x).min() > 1e-3


def test_uncentred_map_reproduces_kernel():
    rng = np.random.default_rng(4)
    x, z = rng.normal(size=(90, 3)), rng.normal(size=(30, 3))
    model = npt.fit(x, "rbf", gamma=1.5, n_components=None, center=False, rtol=1e-13)
    assert model.n_components == 90
    np.testing.assert_allclose(
        model.train_coordinates() @ model.transform(z).T, model.kernel(x, z), atol=1e-7
    )
    np.testing.assert_allclose(model.row_means, 0.0)


def test_krylov_uncentred_matches_dense():
    x = DATA["digits"]
    dense = npt.fit(x, "rbf", n_components=12, center=False, solver="dense")
    kry = npt.fit(
        x, "rbf", n_components=12, center=False, solver="krylov", chunk_size=128, random_state=1
    )
    np.testing.assert_allclose(kry.eigenvalues, dense.eigenvalues, rtol=1e-10)
    z = _split("digits")[1]
    ref = dense.transform(z)
    np.testing.assert_allclose(align_signs(kry.transform(z), ref), ref, atol=1e-6)


# --- input and output types ---------------------------------------------------


@pytest.fixture(scope="module")
def digits_model():
    x, z = _split("digits")
    return npt.fit(x, "rbf", n_components=6, solver="krylov", chunk_size=100, random_state=0), z


def test_dask_in_lazy_dask_out(digits_model, task_counter):
    model, z = digits_model
    zd = da.from_array(z, chunks=((20, 33, 27), (64,)), asarray=True).rechunk({1: -1})
    y = model.transform(zd)
    res = model.residual(zd)
    assert isinstance(y, da.Array)
    assert isinstance(res, da.Array)
    assert task_counter.tasks == 0  # building the graph computed nothing
    assert y.chunks == ((20, 33, 27), (6,))
    np.testing.assert_allclose(y.compute(), model.transform(z), atol=1e-12)
    assert task_counter.tasks > 0


def test_xarray_in_dataarray_out(digits_model):
    model, z = digits_model
    labels = np.arange(len(z)) * 10
    arr = xr.DataArray(z, dims=("sample", "pixel"), coords={"sample": labels})
    y = model.transform(arr)
    assert isinstance(y, xr.DataArray)
    assert y.dims == ("sample", "component")
    np.testing.assert_array_equal(y["sample"], labels)
    np.testing.assert_allclose(y.values, model.transform(z), atol=1e-12)
    res = model.residual(arr.transpose("pixel", "sample"))
    assert res.dims == ("sample",)
    np.testing.assert_allclose(res.values, model.residual(z), atol=1e-12)


def test_lazy_xarray_stays_lazy(digits_model, task_counter):
    model, z = digits_model
    arr = xr.DataArray(z, dims=("sample", "pixel")).chunk({"sample": 25})
    y = model.transform(arr)
    assert task_counter.tasks == 0
    assert isinstance(y.data, da.Array)
    assert y.chunks == ((25, 25, 25, 5), (6,))  # the caller's chunking is kept
    np.testing.assert_allclose(y.values, model.transform(z), atol=1e-12)


def test_fit_on_xarray_and_dask_irregular_chunks():
    x = _split("digits")[0]
    ref = npt.fit(x, "rbf", n_components=6, solver="krylov", chunk_size=100, random_state=0)
    xd = da.from_array(x, chunks=((41, 150, 9, 120), (64,)), asarray=True).rechunk({1: -1})
    irregular = npt.fit(xd, "rbf", n_components=6, solver="krylov", chunk_size=None, random_state=0)
    assert irregular.x_train.chunks[0] == (41, 150, 9, 120)
    np.testing.assert_allclose(irregular.eigenvalues, ref.eigenvalues, rtol=1e-11)
    arr = xr.DataArray(x, dims=("sample", "pixel"), coords={"sample": np.arange(len(x)) + 7})
    via_xr = npt.fit(arr, "rbf", n_components=6, solver="krylov", chunk_size=77, random_state=0)
    coords = via_xr.train_coordinates()
    assert coords.dims == ("sample", "component")
    assert coords["sample"].values[0] == 7
    np.testing.assert_allclose(
        align_signs(coords.values, ref.train_coordinates()), ref.train_coordinates(), atol=1e-7
    )


def test_float32_input():
    x, z = _split("digits")
    ref = npt.fit(x, "rbf", n_components=6, solver="krylov", chunk_size=100, random_state=0)
    f32 = npt.fit(
        x.astype(np.float32), "rbf", n_components=6, solver="krylov", chunk_size=100, random_state=0
    )
    assert f32.precision == np.float32
    np.testing.assert_allclose(f32.eigenvalues, ref.eigenvalues, rtol=1e-5)
    y = f32.transform(z.astype(np.float32))
    assert y.dtype == np.float32
    np.testing.assert_allclose(align_signs(y, ref.transform(z)), ref.transform(z), atol=1e-4)
    forced = npt.fit(x, "rbf", n_components=6, precision="float32", chunk_size=100)
    assert forced.precision == np.float32


def test_deterministic_signs_and_seed():
    x = _split("digits")[0]
    a = npt.fit(x, "rbf", n_components=5, solver="krylov", chunk_size=90, random_state=0)
    b = npt.fit(x, "rbf", n_components=5, solver="krylov", chunk_size=90, random_state=7)
    np.testing.assert_allclose(a.eigenvectors, b.eigenvectors, atol=1e-7)


def test_sigmoid_negative_eigenvalues_reported():
    x = _split("digits")[0]
    with pytest.warns(npt.NegativeEigenvalueWarning, match="not positive semi-definite"):
        model = npt.fit(x, "sigmoid", gamma=0.05, coef0=1.0, n_components=5, solver="dense")
    assert model.diagnostics.min_eigenvalue < 0
    assert np.all(model.eigenvalues > 0)
    with pytest.raises(npt.NegativeEigenvalueError):
        npt.fit(x, "sigmoid", gamma=0.05, coef0=1.0, n_components=5, on_negative="raise")


def test_convergence_warning():
    x = _split("digits")[0]
    with pytest.warns(npt.ConvergenceWarning, match="stopped after 1 pass with"):
        model = npt.fit(x, n_components=5, solver="krylov", max_passes=1, random_state=0)
    assert not model.diagnostics.converged


def test_rank_warning_linear_kernel():
    x = np.random.default_rng(0).normal(size=(50, 3))
    with pytest.warns(npt.RankWarning, match="keeping 3 of the 6"):
        model = npt.fit(x, "linear", n_components=6)
    assert model.n_components == 3


def test_repr_and_diagnostics(digits_model):
    model, _ = digits_model
    text = repr(model)
    assert "rbf" in text
    assert "r = 6" in text
    assert "krylov" in text
    assert "converged" in text
    assert "in memory (not saved)" in text
    d = model.diagnostics.to_dict()
    assert d["passes"] == model.diagnostics.passes
    assert len(d["residuals"]) == 6


def test_mnist_krylov_matches_sklearn(mnist_small):
    x, z = mnist_small
    gamma = 1.0 / (784 * x.var())
    model = npt.fit(
        x, "rbf", gamma=gamma, n_components=30, solver="krylov", chunk_size=512, random_state=0
    )
    kpca = KernelPCA(30, kernel="rbf", gamma=gamma, eigen_solver="dense").fit(x)
    np.testing.assert_allclose(model.eigenvalues, kpca.eigenvalues_, rtol=1e-9)
    ref = kpca.transform(z)
    np.testing.assert_allclose(align_signs(model.transform(z), ref), ref, atol=1e-6)


def test_transform_with_residual_is_one_projection(digits_model, monkeypatch):
    """numpy-backed xarray: coordinates and residuals from a single computation."""
    from npt_dask.engine import consumers

    model, z = digits_model
    calls = []
    original = consumers.scratch_block  # the kernel operator's one evaluation of a block

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(consumers, "scratch_block", counting)
    model.transform_with_residual(xr.DataArray(z, dims=("sample", "pixel")))
    real = [c for c in calls if c[0] > 1]  # dask may probe with a tiny block
    assert len(real) == len(model.x_train.chunks[0])


def test_float32_rbf_far_from_origin():
    """Cancellation in ||a||^2 + ||b||^2 - 2ab must not break float32 fits."""
    rng = np.random.default_rng(8)
    x = rng.normal(size=(300, 10)) + 50.0
    f64 = npt.fit(x, "rbf", gamma=0.05, n_components=8)
    f32 = npt.fit(x.astype(np.float32), "rbf", gamma=0.05, n_components=8)
    np.testing.assert_allclose(f32.eigenvalues, f64.eigenvalues, rtol=1e-5)
    block = f32.kernel(x[:50].astype(np.float32), x[:50].astype(np.float32))
    np.testing.assert_allclose(np.diag(block), 1.0, atol=1e-6)


def test_projection_exact_with_large_constant_kernel_part():
    """Off-centre polynomial data: ``y = Lambda^{-1/2} U^T k(z)`` holds for the model's U.

    ``mean(kappa(z)) - g`` is ~1e3 here, so any rounding left in ``U^T 1`` would
    be amplified into y (6e-8 relative before both guards were added).
    """
    rng = np.random.default_rng(0)
    x, z = rng.normal(size=(1000, 6)) + 3.0, rng.normal(size=(50, 6)) + 3.0
    model = npt.fit(
        x,
        "polynomial",
        degree=3,
        gamma=0.5,
        n_components=30,
        solver="krylov",
        tol=1e-6,
        chunk_size=300,
        random_state=0,
    )
    kzx = model.kernel(z, x)
    kc = kzx - model.row_means[None, :] - kzx.mean(axis=1, keepdims=True) + model.grand_mean
    ref = kc @ model.projection_matrix
    err = np.abs(model.transform(z) - ref).max(axis=0) / np.abs(ref).max(axis=0)
    assert err.max() < 1e-10


@pytest.mark.parametrize("kernel", ["rbf", "laplacian", "polynomial", "cosine"])
def test_blank_training_columns_are_skipped_exactly(kernel):
    """Columns zero in every training row are dropped from the fit's operator only."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=(300, 6))
    x[:, [1, 4]] = 0.0
    z = rng.normal(size=(40, 6))  # non-zero where the training rows are blank
    model = npt.fit(
        x, kernel, n_components=3, solver="krylov", chunk_size=70, tol=1e-10, random_state=0
    )
    assert model.n_features == 6
    dense = npt.fit(x, kernel, n_components=3, solver="dense")
    np.testing.assert_allclose(model.eigenvalues, dense.eigenvalues, rtol=1e-10)
    ref = dense.transform(z)
    np.testing.assert_allclose(align_signs(model.transform(z), ref), ref, atol=1e-7)
    np.testing.assert_allclose(model.residual(z), dense.residual(z), atol=1e-7)
