"""scikit-learn parity: NonlinearProjection against KernelPCA on the same data.

Precomputed and callable kernels, pre-images (inverse_transform, Mika's fixed
point), remove_zero_eig and degenerate kernels, sparse input, dtype tags.
Every comparison is sign-invariant (eigenvectors have no sign).
"""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
import xarray as xr
import zarr
from sklearn.datasets import load_digits
from sklearn.decomposition import KernelPCA
from sklearn.exceptions import NotFittedError
from sklearn.metrics.pairwise import polynomial_kernel, rbf_kernel
from sklearn.utils.estimator_checks import parametrize_with_checks

import npt_dask as npt
from npt_dask import NonlinearProjection
from npt_dask.errors import RankWarning, StoreError
from npt_dask.kernels import KernelSpec, make_kernel
from npt_dask.npt.preimage import rbf_preimage
from npt_dask.storage.store import read_manifest
from tests.conftest import align_signs

RNG = np.random.default_rng(7)
X = RNG.normal(size=(160, 5))
Z = RNG.normal(size=(23, 5))
GAMMA = 0.2


def _close(got, want, atol=1e-8):
    got = np.asarray(got, dtype=np.float64)
    np.testing.assert_allclose(align_signs(got, want), want, atol=atol)


# ------------------------------------------------------------ kernel="precomputed"


@pytest.fixture(scope="module")
def gram():
    return rbf_kernel(X, gamma=GAMMA), rbf_kernel(Z, X, gamma=GAMMA)


@pytest.fixture(scope="module")
def kpca_pre(gram):
    return KernelPCA(6, kernel="precomputed", eigen_solver="dense").fit(gram[0])


@pytest.mark.parametrize("solver", ["dense", "krylov"])
@pytest.mark.parametrize("kind", ["numpy", "dask", "zarr", "DataArray"])
def test_precomputed_matches_kernel_pca(gram, kpca_pre, solver, kind, tmp_path):
    k, kz = gram
    if kind == "dask":
        k = da.from_array(k, chunks=((50, 37, 73), (80, 80)))  # irregular, any chunking
    elif kind == "zarr":
        store = zarr.open_array(tmp_path / "k.zarr", mode="w", shape=k.shape, chunks=(40, 40))
        store[...] = k
        k = da.from_zarr(tmp_path / "k.zarr")
    elif kind == "DataArray":
        k = xr.DataArray(k, dims=("sample", "train"))
    est = NonlinearProjection(
        kernel="precomputed", n_components=6, solver=solver, chunk_size=48, random_state=0
    ).fit(k)
    assert est.n_features_in_ == len(X)
    assert est.model_.x_train.shape == (len(X), 0)  # no training rows held
    np.testing.assert_allclose(est.eigenvalues_, kpca_pre.eigenvalues_, rtol=1e-9)
    _close(est.transform(kz), kpca_pre.transform(kz))
    _close(est.fit_transform(k), kpca_pre.transform(gram[0]))
    lazy = est.transform(da.from_array(kz, chunks=(10, 160)))
    assert isinstance(lazy, da.Array)
    _close(lazy.compute(), kpca_pre.transform(kz))


def test_precomputed_model_saves_without_training_rows(gram, tmp_path):
    k, kz = gram
    model = npt.fit(k, kernel=make_kernel("precomputed"), n_components=4, chunk_size=64)
    path = model.save(tmp_path / "m.zarr")
    assert "x_train" not in zarr.open_group(str(path), mode="r")
    manifest = read_manifest(path)
    assert manifest.training_rows.startswith("none: a precomputed kernel")
    loaded = npt.load(path)
    np.testing.assert_array_equal(loaded.transform(kz), model.transform(kz))
    with pytest.warns(npt.ResidualWarning):  # k(z, z) is not part of a test x train matrix
        assert np.isnan(loaded.residual(kz)).all()
    assert loaded.total_variance() == pytest.approx(model.total_variance())
    assert loaded.identity == model.identity


def test_precomputed_bad_shapes_name_the_fix(gram):
    k, kz = gram
    with pytest.raises(ValueError, match=r"square kernel matrix.*kernel\(X_train, X_train\)"):
        NonlinearProjection(kernel="precomputed", n_components=2).fit(k[:, :100])
    est = NonlinearProjection(kernel="precomputed", n_components=2).fit(k)
    with pytest.raises(ValueError, match="160"):
        est.transform(kz[:, :100])
    with pytest.raises(ValueError, match="Cannot fit_inverse_transform with a precomputed"):
        NonlinearProjection(kernel="precomputed", fit_inverse_transform=True).fit(k)


def test_precomputed_non_symmetric_is_its_symmetric_part_with_a_warning():
    """scikit-learn's test_kernel_pca_precomputed_non_symmetric: the centred symmetric
    part of [[1, 2], [3, 40]] is [[9, -9], [-9, 9]] (eigenvalue 18)."""
    k = np.array([[1.0, 2.0], [3.0, 40.0]])
    for solver in ("dense", "krylov"):
        est = NonlinearProjection(kernel="precomputed", n_components=1, solver=solver)
        with pytest.warns(UserWarning, match="should be symmetric"):
            est.fit(k)
        np.testing.assert_allclose(est.eigenvalues_, [18.0], rtol=1e-12)
        np.testing.assert_allclose(est.fit((k + k.T) / 2).eigenvalues_, [18.0], rtol=1e-12)


def test_precomputed_negative_eigenvalues_reached_is_an_error():
    b = RNG.normal(size=(8, 8))
    k = b @ np.diag([9.0, 5.0, 3.0, 2.0, 0.0, 0.0, -4.0, -6.0]) @ b.T
    with pytest.raises(ValueError, match="significant negative eigenvalues"):
        NonlinearProjection(kernel="precomputed", n_components=7).fit(k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert NonlinearProjection(kernel="precomputed", n_components=2).fit(k).n_components_ == 2


# ------------------------------------------------------------------- callable kernels


def poly2(a, b, c=1.0):
    """Works on blocks and on single rows (scikit-learn calls it per pair)."""
    return (0.1 * (a @ b.T) + c) ** 2


def histogram(x, y):
    return np.minimum(x, y).sum()  # a number for two rows: scikit-learn's convention


@pytest.mark.parametrize("solver", ["dense", "krylov"])
def test_callable_kernel_matches_kernel_pca(solver):
    kpca = KernelPCA(5, kernel=poly2, kernel_params={"c": 2.0}, eigen_solver="dense").fit(X)
    est = NonlinearProjection(
        kernel=poly2, kernel_params={"c": 2.0}, n_components=5, solver=solver, chunk_size=64,
        random_state=0,
    ).fit(X)  # fmt: skip
    np.testing.assert_allclose(est.eigenvalues_, kpca.eigenvalues_, rtol=1e-9)
    _close(est.transform(Z), kpca.transform(Z))
    _close(est.transform(da.from_array(Z, chunks=7)).compute(), kpca.transform(Z))


def test_per_pair_callable_as_in_scikit_learn():
    x = np.abs(X[:40])
    kpca = KernelPCA(3, kernel=histogram, eigen_solver="dense").fit(x)
    est = NonlinearProjection(kernel=histogram, n_components=3, chunk_size=16).fit(x)
    _close(est.transform(np.abs(Z)), kpca.transform(np.abs(Z)))


def test_callable_model_refuses_save_naming_why(tmp_path):
    model = npt.fit(X, kernel=make_kernel(poly2), n_components=3)
    with pytest.raises(StoreError, match=r"poly2.*no pickle"):
        model.save(tmp_path / "m.zarr")
    assert not (tmp_path / "m.zarr").exists()
    with pytest.raises(ValueError, match="cannot be rebuilt"):
        KernelSpec.from_dict(model.kernel.to_dict())


def test_kernel_params_for_named_kernels():
    est = NonlinearProjection(kernel="rbf", kernel_params={"gamma": GAMMA}, n_components=3)
    ref = NonlinearProjection(kernel="rbf", gamma=GAMMA, n_components=3)
    np.testing.assert_allclose(est.fit(X).eigenvalues_, ref.fit(X).eigenvalues_, rtol=1e-12)
    with pytest.raises(ValueError, match=r"'degree'.*rbf"):
        NonlinearProjection(kernel="rbf", kernel_params={"degree": 2}).fit(X)
    with pytest.raises(TypeError, match="kernel_params"):  # the table: wrong type
        NonlinearProjection(kernel_params=[1]).fit(X)


# ------------------------------------------------------------------- pre-images


DIGITS = load_digits().data / 16.0


@pytest.mark.parametrize(
    ("kernel", "params"),
    [("rbf", {"gamma": 0.05}), ("polynomial", {"gamma": 0.05, "degree": 2}), ("linear", {})],
)
def test_inverse_transform_matches_kernel_pca(kernel, params):
    x, z = DIGITS[:200], DIGITS[200:230]
    sk_kernel = "poly" if kernel == "polynomial" else kernel
    kpca = KernelPCA(
        8, kernel=sk_kernel, fit_inverse_transform=True, alpha=0.1, eigen_solver="dense",
        **params,
    ).fit(x)  # fmt: skip
    est = NonlinearProjection(
        kernel=kernel, n_components=8, fit_inverse_transform=True, alpha=0.1, **params
    ).fit(x)
    y = kpca.transform(z)
    signs = np.sign(np.sum(y * est.transform(z), axis=0))
    want = kpca.inverse_transform(y)
    np.testing.assert_allclose(est.inverse_transform(y * signs), want, atol=1e-8)
    lazy = est.inverse_transform(da.from_array(y * signs, chunks=7))
    assert isinstance(lazy, da.Array)
    np.testing.assert_allclose(lazy.compute(), want, atol=1e-8)


MIB = 2**20


def test_inverse_transform_streamed_conjugate_gradients():
    """When the n x n matrix does not fit memory_budget, exact KernelRidge solves the
    pre-image map by conjugate gradients over kernel blocks, to KernelPCA's numbers."""
    x, z = DIGITS[:200], DIGITS[200:230]
    kpca = KernelPCA(
        8, kernel="rbf", gamma=0.05, fit_inverse_transform=True, alpha=0.1,
        eigen_solver="dense",
    ).fit(x)  # fmt: skip
    est = NonlinearProjection(
        kernel="rbf", gamma=0.05, n_components=8, fit_inverse_transform=True, alpha=0.1,
        chunk_size=64, memory_budget=MIB, eigen_solver="arpack",
    ).fit(x)  # fmt: skip
    assert est.inverse_map_.solver == "cg"
    y = kpca.transform(z)
    signs = np.sign(np.sum(y * est.transform(z), axis=0))
    want = kpca.inverse_transform(y)
    np.testing.assert_allclose(est.inverse_transform(y * signs), want, atol=1e-8)


def test_inverse_map_follows_the_fit_memory_budget():
    """The pre-image map's kernel ridge plan (route, kept blocks) is held within the
    fit's memory_budget: solved directly when the n x n matrix fits it, by conjugate
    gradients otherwise."""
    x = np.random.default_rng(0).normal(size=(800, 5))
    est = NonlinearProjection(
        n_components=8, gamma=0.5, chunk_size=200, memory_budget=4 * MIB,
        eigen_solver="arpack", fit_inverse_transform=True, alpha=1.0,
    ).fit(x)  # fmt: skip
    plan = est.inverse_map_.plan
    assert plan["memory_budget"] == 4 * MIB
    assert plan["route"] == "exact-cg"  # the 800^2 matrix: 4.9 MiB
    assert est.inverse_map_.solver == "cg"
    assert plan["exact"]
    assert plan["precision"] == "float64"
    assert plan["host_bytes"] + plan["device_bytes"] <= 4 * MIB
    assert 0 < plan["kept_blocks"] < 10  # of the pass's 10 block pairs
    roomy = NonlinearProjection(
        n_components=8, gamma=0.5, chunk_size=200, eigen_solver="arpack",
        fit_inverse_transform=True, alpha=1.0,
    ).fit(x)  # fmt: skip
    assert roomy.inverse_map_.solver == "direct"


def test_inverse_map_holds_no_more_than_its_plan():
    """Traced allocations of the conjugate-gradient solve stay within its plan."""
    import tracemalloc

    from npt_dask.errors import ConvergenceWarning
    from npt_dask.npt.preimage import fit_inverse_map

    x = np.random.default_rng(0).normal(size=(1500, 5))
    model = npt.fit(x, n_components=8, gamma=0.5, chunk_size=300, solver="krylov")
    y = model.eigenvectors * np.sqrt(model.eigenvalues)
    fit_inverse_map(y[:300], model.x_train[:300], model.kernel, 0.1)  # imports, warm-up
    tracemalloc.start()
    try:
        with pytest.warns(ConvergenceWarning):
            found = fit_inverse_map(
                y, model.x_train, model.kernel, 0.1, memory_budget=5 * MIB, max_passes=3
            )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    plan = found.plan
    assert found.solver == "cg"
    assert plan["route"] == "exact-cg"
    assert found.passes == 3
    assert plan["tol"] == 1e-10
    assert plan["memory_budget"] == 5 * MIB
    assert peak <= plan["host_bytes"] + plan["device_bytes"] <= 5 * MIB, (peak, plan)


def test_inverse_map_is_kernel_ridge():
    """fit_inverse_map is exact float64 KernelRidge on the coordinates, with the model's
    kernel and alpha; for the linear kernel, its primal form."""
    from npt_dask import KernelRidge
    from npt_dask.npt.preimage import fit_inverse_map

    x = DIGITS[:300]
    model = npt.fit(x, n_components=8, gamma=0.02, chunk_size=100)
    y = model.eigenvectors * np.sqrt(model.eigenvalues)
    found = fit_inverse_map(y, model.x_train, model.kernel, 0.1)
    ridge = KernelRidge(0.1, kernel="rbf", gamma=0.02).fit(y, x)
    z = y[:5] + 0.01
    np.testing.assert_allclose(found.predict(z), ridge.predict(z), atol=1e-10)
    np.testing.assert_allclose(found.dual_coef, ridge.dual_coef_, atol=1e-10)
    linear = npt.fit(x, kernel="linear", n_components=8)
    y = linear.eigenvectors * np.sqrt(linear.eigenvalues)
    primal = fit_inverse_map(y, linear.x_train, linear.kernel, 0.1)
    assert primal.solver == "primal"
    assert primal.dual_coef is None
    dual = KernelRidge(0.1, kernel="linear").fit(y, x)
    np.testing.assert_allclose(primal.predict(z[:, :8]), dual.predict(z[:, :8]), atol=1e-8)


def test_inverse_transform_needs_the_flag():
    est = NonlinearProjection(n_components=2).fit(X)
    with pytest.raises(NotFittedError, match="fit_inverse_transform"):
        est.inverse_transform(np.zeros((1, 2)))
    with pytest.raises(ValueError, match=r"sparse.*toarray"):  # KernelPCA: not implemented
        NonlinearProjection(n_components=2, fit_inverse_transform=True).fit(sp.csr_matrix(X))


def test_mika_fixed_point_denoises():
    x, z = DIGITS[:400], DIGITS[400:440]
    model = npt.fit(x, kernel="rbf", gamma=0.03, n_components=20)
    noisy = z + np.random.default_rng(0).normal(scale=0.25, size=z.shape)
    y = model.transform(noisy)
    for init in (None, noisy):
        clean = rbf_preimage(model, y, init=init)
        assert clean.shape == z.shape
        assert np.abs(clean - z).mean() < 0.8 * np.abs(noisy - z).mean()
    with pytest.raises(ValueError, match="rbf kernel"):
        rbf_preimage(npt.fit(x, kernel="linear", n_components=3), np.zeros((1, 3)))


# ------------------------------------------------------------- zero eigenvalues


def test_leave_zero_eig_keeps_zero_columns_as_kernel_pca():
    x = np.array([[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]])  # linear kernel: rank 1
    kpca = KernelPCA(3, kernel="linear", eigen_solver="dense").fit(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RankWarning)
        est = NonlinearProjection(kernel="linear", n_components=3).fit(x)
    assert est.n_components_ == 3 == kpca.eigenvalues_.shape[0]
    np.testing.assert_allclose(est.eigenvalues_, kpca.eigenvalues_, atol=1e-10)
    _close(est.transform(x), kpca.transform(x))
    _close(est.fit_transform(x), kpca.fit_transform(x))
    lazy = est.transform(da.from_array(x, chunks=2))
    assert lazy.shape == (3, 3)
    est = NonlinearProjection(kernel="linear", n_components=3, remove_zero_eig=True)
    with pytest.warns(RankWarning):
        assert est.fit(x).transform(x).shape == (3, 1)


def test_more_components_than_samples_gives_n_columns():
    est = NonlinearProjection(kernel="rbf", n_components=30).fit(X[:12])
    assert est.fit_transform(X[:12]).shape == (12, 12)


def test_constant_kernel_gives_zero_coordinates_with_a_warning():
    x = np.ones((10, 3))
    with pytest.warns(RankWarning, match="Every coordinate is 0"):
        est = NonlinearProjection(kernel="rbf", n_components=2).fit(x)
    assert np.array_equal(est.transform(X[:4, :3]), np.zeros((4, 2)))
    with pytest.warns(RankWarning):
        assert est.fit_transform(x).shape == (10, 2)
    out = est.transform(da.from_array(X[:4, :3], chunks=2))
    assert isinstance(out, da.Array)
    assert out.shape == (4, 2)


@pytest.mark.filterwarnings("ignore::npt_dask.errors.NPTWarning")  # saturated, not PSD
@parametrize_with_checks([NonlinearProjection(kernel="sigmoid", n_components=2)])
def test_sklearn_compatible_with_a_saturated_kernel(estimator, check):
    check(estimator)


# ------------------------------------------------------------------- dtypes


def test_precision_float32_tags_are_truthful():
    est = NonlinearProjection(kernel="rbf", n_components=3, precision="float32")
    assert est.__sklearn_tags__().transformer_tags.preserves_dtype == ["float32"]
    assert est.fit_transform(X).dtype == np.float32
    assert est.transform(X).dtype == np.float32
    est = NonlinearProjection(precision="float64")
    assert est.__sklearn_tags__().transformer_tags.preserves_dtype == ["float64"]
    assert NonlinearProjection().__sklearn_tags__().transformer_tags.preserves_dtype == [
        "float64",
        "float32",
    ]


# ------------------------------------------------------------------- sparse input

TFIDF = sp.random(220, 300, density=0.03, format="csr", random_state=3, dtype=np.float64)
TFIDF_TEST = sp.random(30, 300, density=0.03, format="csr", random_state=4)


@pytest.mark.parametrize(("kernel", "gamma"), [("cosine", None), ("linear", None), ("rbf", 2.0)])
@pytest.mark.parametrize("solver", ["dense", "krylov"])
def test_sparse_tfidf_matches_kernel_pca(kernel, gamma, solver):
    kpca = KernelPCA(5, kernel=kernel, gamma=gamma, eigen_solver="dense").fit(TFIDF)
    est = NonlinearProjection(
        kernel=kernel, gamma=gamma, n_components=5, solver=solver, chunk_size=64, random_state=0
    ).fit(TFIDF.tocsc())
    assert sp.issparse(est.model_.x_train._meta)  # row chunks stay sparse
    np.testing.assert_allclose(est.eigenvalues_, kpca.eigenvalues_, rtol=1e-8)
    want = kpca.transform(TFIDF_TEST)
    _close(est.transform(TFIDF_TEST), want)
    _close(est.transform(TFIDF_TEST.toarray()), want)


def test_sparse_dask_chunks_float32_and_save(tmp_path):
    lazy = da.from_array(TFIDF.astype(np.float32), chunks=(50, -1), asarray=False)
    model = npt.fit(lazy, kernel="rbf", gamma="scale", n_components=4)
    dense = npt.fit(TFIDF.toarray().astype(np.float32), kernel="rbf", gamma="scale", n_components=4)
    assert model.precision == np.float32
    assert model.kernel.gamma == pytest.approx(dense.kernel.gamma, rel=1e-6)
    _close(model.transform(TFIDF_TEST), dense.transform(TFIDF_TEST.toarray()), atol=1e-4)
    loaded = npt.load(model.save(tmp_path / "m.zarr"))  # stored dense, chunk by chunk
    np.testing.assert_allclose(loaded.transform(TFIDF_TEST), model.transform(TFIDF_TEST), atol=1e-6)


def test_sparse_nan_is_refused():
    bad = TFIDF.copy()
    bad.data[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        npt.fit(bad, n_components=2)


def test_polynomial_on_sparse_matches_dense():
    k_sparse = make_kernel("polynomial", gamma=0.5, degree=2).resolve(300)(TFIDF[:20], TFIDF[:30])
    np.testing.assert_allclose(
        k_sparse, polynomial_kernel(TFIDF[:20], TFIDF[:30], degree=2, gamma=0.5), atol=1e-12
    )


# ------------------------------------------------------------ float32 and containers


def test_precomputed_float32_and_dataarray_out(gram, kpca_pre):
    k, kz = gram
    est = NonlinearProjection(kernel="precomputed", n_components=4, chunk_size=50).fit(
        k.astype(np.float32)
    )
    assert est.transform(kz.astype(np.float32)).dtype == np.float32
    want = kpca_pre.transform(kz)[:, :4]
    _close(est.transform(kz.astype(np.float32)), want, atol=1e-4 * np.abs(want).max())
    out = est.transform(
        xr.DataArray(kz, dims=("sample", "train"), coords={"sample": 10 + np.arange(23)})
    )
    assert out.dims == ("sample", "component")
    np.testing.assert_array_equal(out["sample"].values, 10 + np.arange(23))


def test_callable_kernel_on_dataarray_and_float32():
    kpca = KernelPCA(4, kernel=poly2, eigen_solver="dense").fit(X)
    data = xr.DataArray(X, dims=("sample", "feature")).chunk({"sample": 45})
    est = NonlinearProjection(kernel=poly2, n_components=4, chunk_size=None).fit(data)
    out = est.transform(xr.DataArray(Z, dims=("sample", "feature")))
    _close(out.values, kpca.transform(Z))
    est32 = NonlinearProjection(kernel=poly2, n_components=4).fit(X.astype(np.float32))
    got = est32.transform(Z.astype(np.float32))
    assert got.dtype == np.float32
    _close(got, kpca.transform(Z), atol=1e-4 * np.abs(kpca.transform(Z)).max())


def test_inverse_transform_float32_and_dask_training_rows():
    x, z = DIGITS[:150], DIGITS[150:170]
    ref = NonlinearProjection(kernel="rbf", gamma=0.05, n_components=6, fit_inverse_transform=True)
    ref.fit(x)
    lazy = NonlinearProjection(kernel="rbf", gamma=0.05, n_components=6, fit_inverse_transform=True)
    lazy.fit(da.from_array(x, chunks=((40, 70, 40), 64)))
    y = ref.transform(z)
    signs = np.sign(np.sum(y * lazy.transform(z), axis=0))
    np.testing.assert_allclose(
        lazy.inverse_transform(y * signs), ref.inverse_transform(y), atol=1e-8
    )
    est32 = NonlinearProjection(
        kernel="rbf", gamma=0.05, n_components=6, fit_inverse_transform=True
    )
    est32.fit(x.astype(np.float32))
    y32 = est32.transform(z.astype(np.float32))
    signs = np.sign(np.sum(y * y32, axis=0))
    np.testing.assert_allclose(
        est32.inverse_transform(y32 * signs), ref.inverse_transform(y), atol=1e-3
    )


def test_sparse_estimator_float32():
    est = NonlinearProjection(kernel="cosine", n_components=3).fit(TFIDF.astype(np.float32))
    assert est.transform(TFIDF_TEST.astype(np.float32)).dtype == np.float32
    ref = KernelPCA(3, kernel="cosine", eigen_solver="dense").fit(TFIDF)
    want = ref.transform(TFIDF_TEST)
    _close(est.transform(TFIDF_TEST.astype(np.float32)), want, atol=1e-4 * np.abs(want).max())


# ------------------------------------------------------------------- on a cluster


def test_precomputed_callable_and_sparse_on_a_cluster(gram, kpca_pre):
    """The kernel blocks (read, called or sparse) are evaluated on the workers."""
    from distributed import Client, LocalCluster

    def block(a, b, c=1.0):  # defined here: shipped to the workers by value
        return (0.1 * (a @ b.T) + c) ** 2

    k, kz = gram
    kpca_f = KernelPCA(4, kernel=block, kernel_params={"c": 2.0}, eigen_solver="dense").fit(X)
    kpca_s = KernelPCA(4, kernel="rbf", gamma=2.0, eigen_solver="dense").fit(TFIDF)
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
        as cluster,
        Client(cluster),
    ):  # fmt: skip
        pre = NonlinearProjection(
            kernel="precomputed", n_components=4, solver="krylov", cache="recompute",
            chunk_size=48, random_state=0,
        ).fit(da.from_array(k, chunks=60))  # fmt: skip
        _close(pre.transform(kz), kpca_pre.transform(kz)[:, :4])
        fun = NonlinearProjection(
            kernel=block, kernel_params={"c": 2.0}, n_components=4, solver="krylov",
            chunk_size=48, random_state=0,
        ).fit(X)  # fmt: skip
        _close(fun.transform(Z), kpca_f.transform(Z))
        sparse = NonlinearProjection(
            kernel="rbf", gamma=2.0, n_components=4, solver="krylov", chunk_size=64,
            random_state=0,
        ).fit(TFIDF)  # fmt: skip
        _close(sparse.transform(TFIDF_TEST), kpca_s.transform(TFIDF_TEST))


def test_inverse_map_without_its_registered_fitter_says_so(monkeypatch):
    """npt/ cannot import kernel ridge (a layer above): a hook that its default module leaves
    unfilled is a clear error."""
    import npt_dask.npt.preimage as preimage
    from npt_dask.errors import NPTError

    monkeypatch.setattr(preimage, "_FITTERS", {})
    monkeypatch.setattr(preimage, "DEFAULT_INVERSE_MAP", "npt_dask.errors")  # registers none
    with pytest.raises(NPTError, match=r"npt_dask\.ridge\.inverse_map"):
        NonlinearProjection(n_components=2, fit_inverse_transform=True).fit(X)


def test_the_default_inverse_map_is_loaded_on_first_use():
    """A fresh interpreter that never imports kernel ridge fits an inverse map: the hook's
    default module is loaded by name on the first fit."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from npt_dask.npt.estimator import NonlinearProjection\n"
        "assert 'npt_dask.ridge.inverse_map' not in sys.modules\n"
        "x = np.random.default_rng(0).normal(size=(40, 3))\n"
        "est = NonlinearProjection(n_components=2, fit_inverse_transform=True).fit(x)\n"
        "assert est.inverse_transform(est.transform(x)).shape == (40, 3)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
