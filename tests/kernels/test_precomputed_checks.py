"""A precomputed kernel matrix that cannot be a kernel is refused."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

import npt_dask as npt
from npt_dask.errors import InputError, NegativeEigenvalueError

RNG = np.random.default_rng(12)
X = RNG.normal(size=(40, 5))
K = X @ X.T


@pytest.mark.parametrize("solver", ["dense", "krylov"])
def test_a_negated_kernel_matrix_is_refused_not_fitted_on_rounding(solver):
    # refused before the solve: no positive diagonal entry (the spectrum's check stays for
    # a callable kernel's matrix)
    with pytest.raises(NegativeEigenvalueError, match=r"not positive semi-definite.*-K"):
        npt.fit(-K, kernel="precomputed", n_components=2, solver=solver, random_state=0)


def test_a_kernel_with_small_but_real_positive_eigenvalues_still_fits():
    k = np.diag([1e-6, -1.0, -2.0])  # indefinite; the positive eigenvalue is real, not noise
    with pytest.warns(npt.NegativeEigenvalueWarning):
        model = npt.fit(k, kernel="precomputed", n_components=1, center=False)
    np.testing.assert_allclose(model.eigenvalues, [1e-6], rtol=1e-10)


@pytest.mark.parametrize("lazy", [False, True])
def test_a_non_symmetric_matrix_is_decomposed_as_its_symmetric_part_with_a_warning(lazy):
    """scikit-learn's KernelPCA accepts it (its test_kernel_pca_precomputed_non_symmetric);
    we say so, naming the fix, and fit exactly what the symmetric part gives."""
    k = K + 0.1 * RNG.normal(size=K.shape) + 2.0 * np.eye(len(K))  # symmetric part PSD
    x = da.from_array(k, chunks=16) if lazy else k
    with pytest.warns(npt.KernelScaleWarning, match=r"should be symmetric.*\(X \+ X\.T\) / 2"):
        model = npt.fit(x, kernel="precomputed", n_components=2)
    sym = npt.fit((k + k.T) / 2, kernel="precomputed", n_components=2)
    np.testing.assert_allclose(model.eigenvalues, sym.eigenvalues, rtol=1e-10)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rounding_asymmetry_is_accepted_as_the_symmetric_part(dtype):
    k = (K + 10 * np.finfo(dtype).eps * np.abs(K).max() * RNG.normal(size=K.shape)).astype(dtype)
    model = npt.fit(k, kernel="precomputed", n_components=2)
    ref = npt.fit((k.astype(np.float64) + k.T) / 2, kernel="precomputed", n_components=2)
    np.testing.assert_allclose(model.eigenvalues, ref.eigenvalues, rtol=1e-5)


# --- residual() of a precomputed model


def _rbf(a, b, gamma=0.3):
    return np.exp(-gamma * ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))


@pytest.mark.parametrize("center", [True, False])
def test_precomputed_residual_from_the_given_diagonal(center):
    z = RNG.normal(size=(7, 5))
    model = npt.fit(_rbf(X, X), kernel="precomputed", n_components=4, center=center)
    res = model.residual(_rbf(z, X), diag=np.ones(len(z)))
    # independent reference: centred k(z, z) minus ||y||^2, by hand
    k, kz = _rbf(X, X), _rbf(z, X)
    m = k.mean(axis=0)
    g = m.mean()
    kzz = 1.0 - 2.0 * kz.mean(axis=1) + g if center else np.ones(len(z))
    y = model.transform(_rbf(z, X))
    np.testing.assert_allclose(res, np.sqrt(np.maximum(kzz - (y * y).sum(axis=1), 0)), rtol=1e-9)
    ref = npt.fit(X, gamma=0.3, n_components=4, center=center).residual(z)
    np.testing.assert_allclose(res, ref, rtol=1e-7)
    lazy = model.residual(da.from_array(_rbf(z, X), chunks=3), diag=da.ones(len(z), chunks=4))
    np.testing.assert_allclose(lazy.compute(), res, rtol=1e-12)


def test_precomputed_residual_without_the_diagonal_says_why_it_is_nan():
    model = npt.fit(K, kernel="precomputed", n_components=2)
    with pytest.warns(npt.ResidualWarning, match=r"k\(z, z\).*diag="):
        assert np.isnan(model.residual(K[:3])).all()
    with pytest.raises(InputError, match=r"diag must hold .* 3 rows"):
        model.residual(K[:3], diag=np.ones(2))
    with pytest.raises(InputError, match="precomputed' only"):
        npt.fit(X, n_components=2).residual(X[:3], diag=np.ones(3))
