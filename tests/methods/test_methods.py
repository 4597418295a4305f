"""npt_dask.methods against independent dense references (000 Section IV, 004 eqs. 51-52).

Every reference is built here from scratch with scikit-learn's kernels and
numpy/scipy: the Gram matrix from ``pairwise_kernels``, explicit centring, our
own ``scipy.linalg.eigh``. No reference reuses the eigenvectors of the model
under test.
"""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest
import scipy.linalg
from sklearn.datasets import (
    load_breast_cancer,
    load_digits,
    load_iris,
    make_blobs,
    make_circles,
    make_moons,
)
from sklearn.decomposition import PCA
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

import npt_dask as npt
from npt_dask.methods import (
    PCAL1,
    ChunkedLinearSVM,
    FisherDiscriminant,
    class_scatter,
    explained_variance,
    explained_variance_ratio,
    kernel_svm,
    kernel_target_alignment,
    l1_dispersion,
    total_variance,
)
from tests.conftest import align_signs, centered_gram

RTOL_EIG = 1e-10  # npt's default rtol for float64: eigenvalues below 1e-10 * lambda_1 are dropped


# ---------------------------------------------------------------- references


def _gram(a, b, kernel, params):
    """Uncentred kernel matrix with scikit-learn's definition of the kernel."""
    return pairwise_kernels(a, b, metric={"polynomial": "poly"}.get(kernel, kernel), **params)


def _centred_test_gram(kz, k):
    """``k~(x_i, z) = kappa(x_i, z) - m_i - mean_j kappa(x_j, z) + g``; kz is (m, n)."""
    return kz - k.mean(axis=0)[None, :] - kz.mean(axis=1)[:, None] + k.mean()


def _split(x, y, n_train, seed=0):
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def _iris_unique():
    """Iris without its duplicated rows (duplicates make the SVM dual non-unique)."""
    x, y = load_iris(return_X_y=True)
    _, keep = np.unique(x, axis=0, return_index=True)
    return x[np.sort(keep)], y[np.sort(keep)]


def _scattered_dual(svc, n):
    """``dual_coef_`` scattered to one column per training row: (n_class - 1, n)."""
    out = np.zeros((svc.dual_coef_.shape[0], n))
    out[:, svc.support_] = svc.dual_coef_
    return out


def _pairwise_alpha(svc, y):
    """One dual vector ``alpha_i c_i`` per one-vs-one machine, shape (n_pairs, n).

    libsvm's layout: for the pair (i, j) the coefficients of class i's rows are
    in row j - 1 of ``dual_coef_`` and those of class j's rows in row i.
    """
    full = _scattered_dual(svc, len(y))
    classes = svc.classes_
    pairs = [(i, j) for i in range(len(classes)) for j in range(i + 1, len(classes))]
    alpha = np.zeros((len(pairs), len(y)))
    for p, (i, j) in enumerate(pairs):
        alpha[p, y == classes[i]] = full[j - 1, y == classes[i]]
        alpha[p, y == classes[j]] = full[i, y == classes[j]]
    return alpha


def _abs_corr(a, b):
    return abs(np.corrcoef(a, b)[0, 1])


def _angle(u, v):
    cos = abs(u @ v) / (np.linalg.norm(u) * np.linalg.norm(v))
    return np.degrees(np.arccos(min(1.0, cos)))


def _l2_direction(x):
    xc = x - x.mean(axis=0)
    return np.linalg.eigh(xc.T @ xc)[1][:, -1]


# ------------------------------------------------------------------ data sets


def _svm_data():
    moons = make_moons(240, noise=0.2, random_state=0)
    blobs_x, blobs_y = make_blobs(240, centers=2, cluster_std=3.0, random_state=1)
    cancer = load_breast_cancer()
    cancer_x = StandardScaler().fit_transform(cancer.data)[:250]
    return {
        "moons": _split(*moons, 200),
        "blobs": _split(StandardScaler().fit_transform(blobs_x), blobs_y, 200),
        "cancer": _split(cancer_x, cancer.target[:250], 200),
        "iris": _split(*_iris_unique(), 120),
    }


SVM_DATA = _svm_data()
SVM_CASES = [
    ("moons", "rbf", {"gamma": 1.0}, 1.0),
    ("blobs", "polynomial", {"gamma": 0.5, "degree": 3, "coef0": 1.0}, 1.0),
    ("cancer", "rbf", {"gamma": 0.05}, 1.0),
    ("iris", "rbf", {"gamma": 0.5}, 2.0),
]


# ---------------------------------------------------------------- kernel SVM


@pytest.mark.parametrize("center", [True, False])
@pytest.mark.parametrize(("data", "kernel", "params", "C"), SVM_CASES)
def test_linear_svm_on_coordinates_is_the_kernel_svm(data, kernel, params, C, center):
    """000 eqs. 17-20: same C -> same dual (beta = alpha), same decision values."""
    x, y, z, _ = SVM_DATA[data]
    model = npt.fit(x, kernel, center=center, **params)  # n_components=None: full rank
    svc_args = {"C": C, "tol": 1e-10, "decision_function_shape": "ovo"}
    ksvm = SVC(kernel={"polynomial": "poly"}.get(kernel, kernel), **params, **svc_args).fit(x, y)
    lsvm = SVC(kernel="linear", **svc_args).fit(model.train_coordinates(), y)

    ref = ksvm.decision_function(z)
    got = lsvm.decision_function(model.transform(z))
    # The coordinates omit eigen-directions with lambda < 1e-10 lambda_1, whose
    # share of any kernel value is at most sqrt(1e-10) ~ 1e-5 of its size; the
    # solver's tol=1e-10 adds much less. (Observed: < 3e-7 relative.)
    scale = np.abs(ref).max()
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * scale)
    assert np.array_equal(np.sign(got), np.sign(ref)) or np.abs(ref).min() < 1e-5 * scale

    # beta = alpha: the same multipliers on the same rows (C bounds them; same 1e-5 argument)
    n = len(y)
    np.testing.assert_allclose(
        _scattered_dual(lsvm, n), _scattered_dual(ksvm, n), rtol=0, atol=1e-5 * C
    )
    # Bias: d = b uncentred. Centred, k~(x_i, x) = kappa(x_i, x) - m_i - (per-x terms
    # that sum_i alpha_i c_i = 0 cancels), so d = b + sum_i alpha_i c_i m_i.
    m = _gram(x, x, kernel, params).mean(axis=1)
    shift = _pairwise_alpha(ksvm, y) @ m if center else 0.0
    np.testing.assert_allclose(lsvm.intercept_, ksvm.intercept_ + shift, rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize(("data", "kernel", "params", "C"), [SVM_CASES[0], SVM_CASES[3]])
def test_kernel_svm_pipeline_equals_kernel_svc(data, kernel, params, C):
    x, y, z, _ = SVM_DATA[data]
    pipe = kernel_svm(
        C, kernel=kernel, **params, svm_params={"tol": 1e-10, "decision_function_shape": "ovo"}
    ).fit(x, y)
    ksvm = SVC(kernel=kernel, C=C, tol=1e-10, decision_function_shape="ovo", **params).fit(x, y)
    ref = ksvm.decision_function(z)
    np.testing.assert_allclose(
        pipe.decision_function(z), ref, rtol=0, atol=1e-5 * np.abs(ref).max()
    )  # same truncation argument as above
    np.testing.assert_array_equal(pipe.predict(z), ksvm.predict(z))
    # n_components=None: the effective rank, eigenvalues above 1e-10 lambda_1 (own eigh)
    lam = scipy.linalg.eigvalsh(centered_gram(_gram(x, x, kernel, params)))
    assert pipe.named_steps["npt"].n_components_ == np.sum(lam > RTOL_EIG * lam[-1])


# ------------------------------------------------------- Lemma 6, Corollary 7


@pytest.fixture(scope="module")
def moons_model():
    x, y, z, _ = SVM_DATA["moons"]
    params = {"gamma": 1.0}
    model = npt.fit(x, "rbf", **params)
    k = _gram(x, x, "rbf", params)
    kz_raw = _gram(z, x, "rbf", params)
    kz = _centred_test_gram(kz_raw, k)
    kzz = 1.0 - 2.0 * kz_raw.mean(axis=1) + k.mean()  # k~(z, z); rbf kappa(z, z) = 1
    return model, x, y, z, centered_gram(k), kz, kzz


def _lemma6_bound(alpha, kc, kzz):
    """|sum_i alpha_i k~(x_i, z) - beta^T y(z)| <= ||P_perp Phi~ alpha|| ||P_perp phi~(z)||.

    P_perp projects off the fitted subspace. The dropped eigenvalues are at most
    rtol * lambda_1, so the first factor is at most sqrt(rtol lambda_1) ||alpha||;
    the second at most sqrt(k~(z, z)). Plus 1e-9 for rounding.
    """
    lam1 = scipy.linalg.eigvalsh(kc)[-1]
    first = np.sqrt(RTOL_EIG * lam1) * np.linalg.norm(alpha, axis=0)
    return np.multiply.outer(np.sqrt(kzz), first) + 1e-9


@pytest.mark.parametrize("kind", ["svm", "random"])
def test_coordinates_of_dual_direction_reproduce_the_kernel_trick(moons_model, kind):
    """Lemma 6: w = Phi~ alpha has coordinates beta, and w^T phi~(z) = beta^T y(z)."""
    model, x, y, z, kc, kz, kzz = moons_model
    if kind == "svm":
        svc = SVC(kernel="rbf", gamma=1.0, C=1.0, tol=1e-10).fit(x, y)
        alpha = _scattered_dual(svc, len(x))[0]
    else:  # a direction whose coefficients do not sum to zero: centring matters
        alpha = np.random.default_rng(3).normal(size=len(x))
    beta = model.coordinates_of(alpha)
    assert beta.shape == (model.n_components,)
    got = model.transform(z) @ beta
    ref = kz @ alpha
    assert np.all(np.abs(got - ref) <= _lemma6_bound(alpha, kc, kzz))
    # ||beta||^2 = alpha^T K~ alpha (the direction's length in feature space)
    np.testing.assert_allclose(beta @ beta, alpha @ kc @ alpha, rtol=1e-8)
    if kind == "svm":  # and with the bias, the kernel SVM's decision value
        m = _gram(x, x, "rbf", {"gamma": 1.0}).mean(axis=1)
        np.testing.assert_allclose(
            got + svc.intercept_[0] + alpha @ m, svc.decision_function(z), rtol=0, atol=1e-6
        )


def test_coordinates_of_several_directions_at_once(moons_model):
    model, x, _, z, kc, kz, kzz = moons_model
    alpha = np.random.default_rng(4).normal(size=(len(x), 3))
    beta = model.coordinates_of(alpha)
    assert beta.shape == (model.n_components, 3)
    for j in range(3):
        np.testing.assert_allclose(beta[:, j], model.coordinates_of(alpha[:, j]), rtol=1e-12)
    got = model.transform(z) @ beta
    assert np.all(np.abs(got - kz @ alpha) <= _lemma6_bound(alpha, kc, kzz))
    with pytest.raises(ValueError, match="alpha"):
        model.coordinates_of(alpha[:-1])


def test_coordinates_of_in_the_uncentred_model():
    """Uncentred (002): <y_i, y(z)> = kappa(x_i, z), so beta^T y(z) = alpha^T kappa(z)."""
    x, _ = _iris_unique()
    z = x[::7] + 0.05
    model = npt.fit(x, "rbf", gamma=0.5, center=False)
    alpha = np.random.default_rng(5).normal(size=len(x))
    got = model.transform(z) @ model.coordinates_of(alpha)
    ref = _gram(z, x, "rbf", {"gamma": 0.5}) @ alpha
    # same bound as the centred case with kappa(z, z) = 1 (observed ~1e-13)
    lam1 = scipy.linalg.eigvalsh(_gram(x, x, "rbf", {"gamma": 0.5}))[-1]
    bound = np.sqrt(RTOL_EIG * lam1) * np.linalg.norm(alpha) + 1e-9
    assert np.all(np.abs(got - ref) <= bound)


def test_project_onto_is_parallel_to_beta_with_the_kernel_trick_length(moons_model):
    """Corollary 7: gamma = beta beta^T y / beta^T beta; length w^T phi~(z) / ||w||."""
    model, x, y, z, kc, kz, _ = moons_model
    svc = SVC(kernel="rbf", gamma=1.0, C=1.0, tol=1e-10).fit(x, y)
    alpha = _scattered_dual(svc, len(x))[0]
    beta = model.coordinates_of(alpha)
    gamma = model.project_onto(z, beta)
    assert gamma.shape == (len(z), model.n_components)
    unit = beta / np.linalg.norm(beta)
    along = gamma @ unit
    # parallel: nothing left after removing the component along beta
    np.testing.assert_allclose(gamma - np.outer(along, unit), 0.0, atol=1e-10)
    # signed length from the kernel trick alone: alpha^T k~(z) / sqrt(alpha^T K~ alpha)
    ref = (kz @ alpha) / np.sqrt(alpha @ kc @ alpha)
    np.testing.assert_allclose(along, ref, rtol=0, atol=1e-6 * np.abs(ref).max())
    # idempotent on the coordinates: projecting the projection changes nothing
    y_z = model.transform(z)
    np.testing.assert_allclose(np.outer(y_z @ unit, unit), gamma, atol=1e-12)


# ------------------------------------------------------------ Fisher (KFD)


def _dual_kfd(kc, y, mu, k):
    """Dual KFD from scratch: M alpha = l (N + mu K) alpha in the range of K.

    M = sum_c n_c (k_c - k_bar)(k_c - k_bar)^T, N = sum_i (k_i - k_{c_i})(k_i - k_{c_i})^T
    with k_i the columns of the centred Gram. Restricted to K's own eigenvectors
    with lambda > 1e-10 lambda_1 (our eigh, not the model's), where N + mu K > 0.
    """
    n = len(kc)
    kbar = kc.mean(axis=1)
    between, within = np.zeros((n, n)), np.zeros((n, n))
    for c in np.unique(y):
        cols = kc[:, y == c]
        kc_mean = cols.mean(axis=1)
        between += cols.shape[1] * np.outer(kc_mean - kbar, kc_mean - kbar)
        dev = cols - kc_mean[:, None]
        within += dev @ dev.T
    lam, vec = scipy.linalg.eigh(kc)
    v = vec[:, lam > RTOL_EIG * lam[-1]]
    values, coef = scipy.linalg.eigh(v.T @ between @ v, v.T @ (within + mu * kc) @ v)
    order = np.argsort(values)[::-1][:k]
    return values[order], v @ coef[:, order]


@pytest.fixture(scope="module")
def wine_split():
    from sklearn.datasets import load_wine

    data = load_wine()
    x = StandardScaler().fit_transform(data.data)
    return _split(x, data.target, 120)


@pytest.mark.parametrize(
    ("kernel", "params", "reg"),
    [
        ("rbf", {"gamma": 0.05}, 1e-3),
        ("polynomial", {"gamma": 0.1, "degree": 2, "coef0": 1.0}, 1e-6),
    ],
)
def test_fisher_on_coordinates_is_the_dual_kfd(wine_split, kernel, params, reg):
    """000 eqs. 21-32: LDA on Y with ridge mu I == dual KFD with mu K, at full rank."""
    x, y, z, _ = wine_split
    model = npt.fit(x, kernel, **params)
    fd = FisherDiscriminant(reg=reg).fit(model.train_coordinates(), y)
    got = fd.transform(model.transform(z))
    k = _gram(x, x, kernel, params)
    values, alpha = _dual_kfd(centered_gram(k), y, fd.ridge_, 2)
    ref = _centred_test_gram(_gram(z, x, kernel, params), k) @ alpha
    # same generalised eigenvalues; alpha^T (N + mu K) alpha = 1 <-> beta^T (S_W + mu I) beta = 1,
    # so the projections agree in scale too, up to the sign of each direction. The ridge
    # keeps the problem well conditioned (condition ~ 1/reg), hence rtol 1e-6.
    np.testing.assert_allclose(fd.eigenvalues_, values, rtol=1e-6)
    np.testing.assert_allclose(align_signs(got, ref), ref, rtol=0, atol=1e-6 * np.abs(ref).max())


def test_fisher_default_ridge_matches_dual_kfd_up_to_scale(wine_split):
    """With the tiny default ridge (1e-8) the problem is ill conditioned: compare directions."""
    x, y, z, _ = wine_split
    model = npt.fit(x, "rbf", gamma=0.05)
    fd = FisherDiscriminant().fit(model.train_coordinates(), y)
    k = _gram(x, x, "rbf", {"gamma": 0.05})
    _, alpha = _dual_kfd(centered_gram(k), y, fd.ridge_, 2)
    ref = _centred_test_gram(_gram(z, x, "rbf", {"gamma": 0.05}), k) @ alpha
    got = fd.transform(model.transform(z))
    for j in range(2):  # observed 1 - |corr| < 1e-13
        assert _abs_corr(got[:, j], ref[:, j]) > 1 - 1e-8


def test_fisher_ridge_is_relative_to_within_trace(wine_split):
    x, y, _, _ = wine_split
    coords = npt.fit(x, "rbf", gamma=0.05, n_components=10).train_coordinates()
    fd = FisherDiscriminant(reg=1e-2).fit(coords, y)
    within = sum(
        (coords[y == c] - coords[y == c].mean(axis=0)).T
        @ (coords[y == c] - coords[y == c].mean(axis=0))
        for c in np.unique(y)
    )
    assert fd.ridge_ == pytest.approx(1e-2 * np.trace(within) / 10, rel=1e-12)


def test_fisher_dask_irregular_chunks_equals_numpy(wine_split):
    x, y, z, _ = wine_split
    model = npt.fit(x, "rbf", gamma=0.05, n_components=12)
    coords = model.train_coordinates()
    ref = FisherDiscriminant().fit(coords, y)
    lazy = da.from_array(coords, chunks=((17, 40, 3, 60), (12,)))
    fd = FisherDiscriminant().fit(lazy, da.from_array(y, chunks=50))
    np.testing.assert_allclose(fd.scalings_, ref.scalings_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fd.means_, ref.means_, atol=1e-12)
    yz = model.transform(z)
    out = fd.transform(da.from_array(yz, chunks=((20, 38), (12,))))
    assert isinstance(out, da.Array)
    np.testing.assert_allclose(out.compute(), ref.transform(yz), atol=1e-10)
    np.testing.assert_array_equal(
        fd.predict(da.from_array(yz, chunks=25)).compute(), ref.predict(yz)
    )


def test_fisher_matches_sklearn_lda_at_truncated_rank():
    x, y = load_iris(return_X_y=True)
    x_train, y_train, z, _ = _split(x, y, 110)
    model = npt.fit(x_train, "rbf", gamma=0.5, n_components=5)
    coords, yz = model.train_coordinates(), model.transform(z)
    fd = FisherDiscriminant(reg=0.0).fit(coords, y_train)
    lda = LinearDiscriminantAnalysis(solver="eigen").fit(coords, y_train)
    got, ref = fd.transform(yz), lda.transform(yz)
    for j in range(2):  # LDA scales S_W by 1/n and its own normalisation: compare lines
        assert _abs_corr(got[:, j], ref[:, j]) > 1 - 1e-9
        ratio = got[:, j] / ref[:, j]
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-6)
    np.testing.assert_allclose(
        fd.explained_variance_ratio_, lda.explained_variance_ratio_, rtol=1e-8
    )


def test_class_scatter_matches_numpy(rng):
    y_rows = rng.normal(size=(91, 4)) + np.repeat(rng.normal(size=(3, 4)) * 3, [30, 40, 21], 0)
    labels = np.repeat(["b", "a", "c"], [30, 40, 21])
    s = class_scatter(y_rows, labels, chunk_size=13)
    mean = y_rows.mean(axis=0)
    total = (y_rows - mean).T @ (y_rows - mean)
    within = np.zeros((4, 4))
    between = np.zeros((4, 4))
    for c in ["a", "b", "c"]:
        rows = y_rows[labels == c]
        within += (rows - rows.mean(axis=0)).T @ (rows - rows.mean(axis=0))
        between += len(rows) * np.outer(rows.mean(axis=0) - mean, rows.mean(axis=0) - mean)
    np.testing.assert_array_equal(s["classes"], ["a", "b", "c"])
    np.testing.assert_array_equal(s["counts"], [40, 30, 21])
    np.testing.assert_allclose(s["means"][0], y_rows[labels == "a"].mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(s["mean"], mean, atol=1e-12)
    for name, ref in [("total", total), ("within", within), ("between", between)]:
        np.testing.assert_allclose(s[name], ref, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(s["total"], s["within"] + s["between"], rtol=1e-10, atol=1e-9)


# ---------------------------------------------------------------------- KPCA


@pytest.fixture(scope="module")
def digits_x():
    return load_digits().data[:200] / 16.0


@pytest.mark.parametrize("center", [True, False])
def test_explained_variance_ratio_matches_dense_spectrum(digits_x, center):
    params = {"gamma": 0.02}
    model = npt.fit(digits_x, "rbf", n_components=8, center=center, chunk_size=64, **params)
    k = _gram(digits_x, digits_x, "rbf", params)
    if center:
        k = centered_gram(k)
    lam = scipy.linalg.eigvalsh(k)[::-1]
    np.testing.assert_allclose(explained_variance_ratio(model), lam[:8] / np.trace(k), rtol=1e-9)
    np.testing.assert_allclose(total_variance(model), np.trace(k), rtol=1e-12)
    assert explained_variance_ratio(model).sum() < 1.0  # truncated: variance left out


def test_total_variance_polynomial_centred_and_uncentred():
    x = load_iris().data
    params = {"gamma": 0.2, "degree": 2, "coef0": 1.0}
    k = _gram(x, x, "polynomial", params)
    centred = npt.fit(x, "polynomial", n_components=3, chunk_size=40, **params)
    plain = npt.fit(x, "polynomial", n_components=3, center=False, chunk_size=40, **params)
    np.testing.assert_allclose(total_variance(centred), np.trace(centered_gram(k)), rtol=1e-12)
    np.testing.assert_allclose(total_variance(plain), np.trace(k), rtol=1e-12)
    assert total_variance(centred) < total_variance(plain)


def test_explained_variance_matches_sklearn_pca_of_coordinates():
    x = load_iris().data
    params = {"gamma": 0.3, "degree": 2, "coef0": 1.0}  # rank <= 14 centred: clean full rank
    model = npt.fit(x, "polynomial", **params)
    coords = model.train_coordinates()
    pca = PCA().fit(coords)
    # PCA of Y is diagonal (Y^T Y = Lambda): variances lambda / (n - 1), and at full
    # rank the total is trace(K), so the ratios agree. Dropped eigenvalues are below
    # 1e-10 lambda_1 (a polynomial Gram has exact finite rank), hence rtol 1e-8.
    np.testing.assert_allclose(explained_variance(model), pca.explained_variance_, rtol=1e-8)
    np.testing.assert_allclose(
        explained_variance_ratio(model), pca.explained_variance_ratio_, rtol=1e-8
    )
    np.testing.assert_allclose(explained_variance_ratio(model).sum(), 1.0, rtol=1e-8)
    # the principal axes of Y are the coordinate axes
    np.testing.assert_allclose(np.abs(pca.components_), np.eye(model.n_components), atol=1e-6)


# ----------------------------------------------------------------------- PCA-L1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pcal1_dispersion_never_decreases(seed):
    rng = np.random.default_rng(seed)
    data = rng.standard_t(df=3, size=(150, 5)) * rng.uniform(0.5, 4, 5) + rng.normal(size=5)
    pca = PCAL1(n_components=3, random_state=seed, chunk_size=40).fit(data)
    for history in pca.dispersion_history_:
        steps = np.diff(history)
        # Kwak 2008 Theorem 1: monotone; continuous data never trigger the step-4b nudge.
        assert np.all(steps >= -1e-10 * history[-1]), steps
    assert pca.n_iter_.shape == (3,)
    np.testing.assert_allclose(pca.dispersion_, [h[-1] for h in pca.dispersion_history_])


@pytest.mark.parametrize("center", [True, False])
def test_pcal1_a_row_at_the_mean_does_not_stall_it(center):
    """A row that is zero after centring projects to zero on every direction;
    it must not count as a zero projection (step 4b would nudge forever)."""
    a = np.random.default_rng(5).integers(-9, 10, size=(20, 4)).astype(float)
    shift = 3.0 if center else 0.0
    data = np.vstack([a, -a]) + shift  # integers: the mean is exactly ``shift``
    with_zero = np.vstack([data, np.full((1, 4), shift)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", npt.ConvergenceWarning)
        plain = PCAL1(n_components=2, center=center, random_state=0, max_iter=50).fit(data)
        zero = PCAL1(n_components=2, center=center, random_state=0, max_iter=50).fit(with_zero)
    assert np.all(zero.n_iter_ < 50)
    np.testing.assert_array_equal(zero.n_iter_, plain.n_iter_)
    np.testing.assert_allclose(zero.components_, plain.components_, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_pcal1_components_orthonormal_and_dispersion_consistent(seed):
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(120, 6)) @ rng.normal(size=(6, 6))
    pca = PCAL1(n_components=4, random_state=seed).fit(data)
    w = pca.components_
    np.testing.assert_allclose(w @ w.T, np.eye(4), atol=1e-12)
    np.testing.assert_allclose(pca.mean_, data.mean(axis=0), atol=1e-12)
    # the first direction's dispersion is measured on the undeflated, centred data
    centred = data - data.mean(axis=0)
    np.testing.assert_allclose(pca.dispersion_[0], np.abs(centred @ w[0]).sum(), rtol=1e-10)
    # each later one on the data with the earlier directions projected out
    deflated = centred - (centred @ w[:1].T) @ w[:1]
    np.testing.assert_allclose(pca.dispersion_[1], np.abs(deflated @ w[1]).sum(), rtol=1e-10)
    np.testing.assert_allclose(
        pca.transform(data[:7]), (data[:7] - data.mean(axis=0)) @ w.T, atol=1e-12
    )


def test_pcal1_beats_random_and_l2_directions(rng):
    data = rng.standard_t(df=2, size=(200, 4)) * [4.0, 2.0, 1.0, 0.5]
    pca = PCAL1(random_state=0).fit(data)
    centred = data - data.mean(axis=0)
    dirs = rng.normal(size=(2000, 4))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    best_random = np.abs(centred @ dirs.T).sum(axis=0).max()
    l2 = np.abs(centred @ _l2_direction(data)).sum()
    # PCA-L1 is a local ascent started from the L2 direction among others
    assert pca.dispersion_[0] >= l2 - 1e-9 * l2
    assert pca.dispersion_[0] >= best_random - 1e-9 * best_random


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pcal1_resists_outliers_better_than_l2_pca(dim, seed):
    """Kwak 2008 style toy: a few gross outliers pull the L2 direction much further."""
    rng = np.random.default_rng(seed)
    rot = np.linalg.qr(rng.normal(size=(dim, dim)))[0]
    clean = (rng.normal(size=(200, dim)) * np.array([3.0, 1.0, 0.5])[:dim]) @ rot.T
    toward = rot[:, 1] + 0.5 * rot[:, 0]  # off-axis, on both sides: the mean barely moves
    outliers = rng.normal(size=(10, dim)) * 0.3 + 15 * np.outer(np.repeat([1, -1], 5), toward)
    dirty = np.vstack([clean, outliers])
    truth = _l2_direction(clean)
    l2_move = _angle(_l2_direction(dirty), truth)
    l1_move = _angle(PCAL1(random_state=0).fit(dirty).components_[0], truth)
    # observed over seeds: L2 moves 44-53 degrees, L1 14-20 degrees
    assert l2_move > 35
    assert l1_move < 0.5 * l2_move


def _contaminated(seed, distance):
    rng = np.random.default_rng(seed)
    rot = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    scale = np.array([3.0, 1.0, 0.5])
    clean = (rng.normal(size=(200, 3)) * scale) @ rot.T
    toward = rot[:, 1] + 0.5 * rot[:, 0]
    outliers = rng.normal(size=(10, 3)) * 0.3 + distance * np.outer(np.repeat([1, -1], 5), toward)
    evaluation = (rng.normal(size=(100, 3)) * scale) @ rot.T
    return clean, np.vstack([clean, outliers]), evaluation


@pytest.mark.parametrize(
    ("kernel", "params", "distance"),
    [("linear", {}, 15.0), ("polynomial", {"gamma": 0.1, "degree": 2, "coef0": 0.0}, 8.0)],
)
def test_kernel_pcal1_is_more_stable_than_kpca(kernel, params, distance):
    """KPCA-L1 = PCA-L1 on NPT coordinates (000 Section IV-D).

    The first-component score function on clean evaluation points, fitted on clean
    and on contaminated data, changes less for KPCA-L1 than for KPCA. (With RBF
    kernels distant outliers are near-orthogonal to everything in feature space and
    neither method moves: there is nothing to show. With an inhomogeneous
    polynomial at this outlier distance both are swamped.)
    """
    l2_stab, l1_stab = [], []
    for seed in range(3):
        clean, dirty, evaluation = _contaminated(seed, distance)
        m_clean = npt.fit(clean, kernel, **params)
        m_dirty = npt.fit(dirty, kernel, **params)
        e_clean, e_dirty = m_clean.transform(evaluation), m_dirty.transform(evaluation)
        l2_stab.append(_abs_corr(e_clean[:, 0], e_dirty[:, 0]))
        l1_clean = PCAL1(random_state=0).fit(m_clean.train_coordinates()).transform(e_clean)
        l1_dirty = PCAL1(random_state=0).fit(m_dirty.train_coordinates()).transform(e_dirty)
        l1_stab.append(_abs_corr(l1_clean[:, 0], l1_dirty[:, 0]))
    # observed: KPCA 0.63-0.96, KPCA-L1 0.98-0.996
    assert min(l1_stab) > 0.97
    assert np.mean(l1_stab) > np.mean(l2_stab) + 0.03
    assert all(a > b for a, b in zip(l1_stab, l2_stab, strict=True))


def test_pcal1_dask_irregular_chunks_equals_numpy(rng):
    data = rng.normal(size=(130, 4)) * [3.0, 2.0, 1.0, 0.3] + 1.0
    ref = PCAL1(n_components=2, random_state=5).fit(data)
    lazy = PCAL1(n_components=2, random_state=5).fit(
        da.from_array(data, chunks=((7, 50, 1, 72), (4,)))
    )
    # same starts (same seed), sums in a different order: rounding only
    np.testing.assert_allclose(lazy.components_, ref.components_, atol=1e-10)
    np.testing.assert_allclose(lazy.dispersion_, ref.dispersion_, rtol=1e-12)
    np.testing.assert_allclose(lazy.mean_, ref.mean_, atol=1e-13)
    out = lazy.transform(da.from_array(data, chunks=33))
    assert isinstance(out, da.Array)
    np.testing.assert_allclose(out.compute(), ref.transform(data), atol=1e-10)


def test_pcal1_is_reproducible_with_a_seed(rng):
    data = rng.standard_t(df=3, size=(100, 5))
    a = PCAL1(n_components=3, n_init=3, random_state=11).fit(data)
    b = PCAL1(n_components=3, n_init=3, random_state=11).fit(data)
    np.testing.assert_array_equal(a.components_, b.components_)
    np.testing.assert_array_equal(a.n_iter_, b.n_iter_)
    for h_a, h_b in zip(a.dispersion_history_, b.dispersion_history_, strict=True):
        np.testing.assert_array_equal(h_a, h_b)


def test_l1_dispersion_matches_numpy(rng):
    data = rng.normal(size=(77, 3))
    dirs = rng.normal(size=(5, 3))
    mean = rng.normal(size=3)
    np.testing.assert_allclose(
        l1_dispersion(data, dirs, mean), np.abs((data - mean) @ dirs.T).sum(axis=0), rtol=1e-12
    )
    np.testing.assert_allclose(
        l1_dispersion(da.from_array(data, chunks=((10, 60, 7), (3,))), dirs[0]),
        [np.abs(data @ dirs[0]).sum()],
        rtol=1e-12,
    )


# ---------------------------------------------------------------- alignment


def _dense_alignment(k, labels, centered):
    same = labels[:, None] == labels[None, :]
    target = np.where(same, 1.0, -1.0)
    if centered:  # Cortes, Mohri & Rostamizadeh 2012
        k, target = centered_gram(k), centered_gram(target)
    return np.sum(k * target) / (np.linalg.norm(k) * np.linalg.norm(target))


ALIGN_KERNELS = [
    ("rbf", {"gamma": 0.5}),
    ("polynomial", {"gamma": 0.2, "degree": 2, "coef0": 1.0}),
    ("linear", {}),
    ("laplacian", {"gamma": 0.3}),
    ("sigmoid", {"gamma": 0.05, "coef0": 0.0}),
]


@pytest.mark.parametrize("centered", [False, True])
@pytest.mark.parametrize(("kernel", "params"), ALIGN_KERNELS)
def test_alignment_matches_dense(kernel, params, centered):
    x, labels = load_iris(return_X_y=True)  # n = 150, chunk_size 37 -> 5 row blocks
    k = _gram(x, x, kernel, params)
    multi = kernel_target_alignment(x, labels, kernel, centered=centered, chunk_size=37, **params)
    np.testing.assert_allclose(multi, _dense_alignment(k, labels, centered), rtol=1e-10)
    binary = np.where(labels == 2, 1, -1)
    got = kernel_target_alignment(x, binary, kernel, centered=centered, chunk_size=37, **params)
    if not centered:  # 004 eq. 52 literally
        ref = binary @ k @ binary / (len(x) * np.linalg.norm(k))
    else:
        ref = _dense_alignment(k, binary, True)
    np.testing.assert_allclose(got, ref, rtol=1e-10)


def test_alignment_dask_input_and_labels():
    x, labels = load_iris(return_X_y=True)
    params = {"gamma": 0.5}
    ref = _dense_alignment(_gram(x, x, "rbf", params), labels, True)
    lazy = da.from_array(x, chunks=((50, 3, 60, 37), (4,)))
    got = kernel_target_alignment(
        lazy, da.from_array(labels, chunks=75), "rbf", centered=True, chunk_size=None, **params
    )
    np.testing.assert_allclose(got, ref, rtol=1e-10)
    got = kernel_target_alignment(lazy, labels, "rbf", chunk_size=29, **params)
    np.testing.assert_allclose(
        got, _dense_alignment(_gram(x, x, "rbf", params), labels, False), rtol=1e-10
    )


@pytest.mark.parametrize("centered", [False, True])
def test_alignment_ranks_a_good_kernel_above_bad_ones(centered):
    x, labels = make_circles(200, noise=0.05, factor=0.4, random_state=0)
    good = kernel_target_alignment(x, labels, "rbf", gamma=2.0, centered=centered, chunk_size=64)
    linear = kernel_target_alignment(x, labels, "linear", centered=centered, chunk_size=64)
    diagonal = kernel_target_alignment(
        x, labels, "rbf", gamma=1e4, centered=centered, chunk_size=64
    )
    # concentric circles: no linear structure; gamma=1e4 makes K ~ I (alignment ~ 1/sqrt(n))
    assert good > 0.2
    assert abs(linear) < 0.01
    assert diagonal == pytest.approx(1 / np.sqrt(200), abs=0.01)
    assert good > 2 * diagonal


# ----------------------------------------------------------- ChunkedLinearSVM


@pytest.fixture(scope="module")
def moons_coordinates():
    x, y = make_moons(500, noise=0.15, random_state=2)
    model = npt.fit(x[:300], "rbf", gamma=1.0, n_components=20, chunk_size=100, random_state=0)
    return model.train_coordinates(), y[:300], model.transform(x[300:]), y[300:]


def test_chunked_svm_close_to_svc(moons_coordinates):
    coords, y, test, y_test = moons_coordinates
    svc = SVC(kernel="linear", C=1.0).fit(coords, y)
    sgd = ChunkedLinearSVM(C=1.0, epochs=20, chunk_size=64, random_state=0).fit(coords, y)
    assert sgd.n_iter_ == 20
    np.testing.assert_array_equal(sgd.classes_, [0, 1])
    # SGD on the same objective: not the exact optimum, but close in accuracy
    assert abs(sgd.score(test, y_test) - svc.score(test, y_test)) <= 0.03
    assert _abs_corr(sgd.decision_function(test), svc.decision_function(test)) > 0.95
    assert np.mean(sgd.predict(test) == svc.predict(test)) > 0.95


def test_chunked_svm_dask_irregular_chunks_stays_lazy(moons_coordinates, task_counter):
    coords, y, test, y_test = moons_coordinates
    ref = ChunkedLinearSVM(C=1.0, epochs=5, random_state=1).fit(coords, y)
    svm = ChunkedLinearSVM(C=1.0, epochs=5, random_state=1).fit(
        da.from_array(coords, chunks=((31, 100, 9, 160), (20,))), da.from_array(y, chunks=150)
    )
    assert svm.score(test, y_test) > 0.9
    assert abs(svm.score(test, y_test) - ref.score(test, y_test)) <= 0.05
    lazy_test = da.from_array(test, chunks=((13, 100, 87), (20,)))
    before = task_counter.tasks
    labels = svm.predict(lazy_test)
    scores = svm.decision_function(lazy_test)
    assert isinstance(labels, da.Array)
    assert isinstance(scores, da.Array)
    assert task_counter.tasks == before  # nothing computed while building the graph
    assert labels.chunks[0] == (13, 100, 87)
    np.testing.assert_array_equal(labels.compute(), svm.predict(test))
    np.testing.assert_allclose(scores.compute(), svm.decision_function(test), atol=1e-12)
    assert task_counter.tasks > before
