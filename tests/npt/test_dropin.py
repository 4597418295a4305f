"""NonlinearProjection as a drop-in for scikit-learn's KernelPCA.

Each test goes through the call a scikit-learn user types and compares with
``sklearn.decomposition.KernelPCA`` where there is a number to compare.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.decomposition import KernelPCA

import npt_dask as npt
from npt_dask import NonlinearProjection
from npt_dask.errors import KernelScaleWarning

KPCA_ONLY = {"n_jobs": 2, "copy_X": False, "max_iter": 50, "iterated_power": 3}


def _close_up_to_sign(a: np.ndarray, b: np.ndarray) -> None:
    signs = np.sign(np.sum(a * b, axis=0))
    np.testing.assert_allclose(a * signs, b, atol=1e-8)


@pytest.fixture
def x() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(60, 5))


@pytest.mark.parametrize("alias", ["randomized", "arpack", "dense"])
def test_eigen_solver_alias_matches_kernel_pca(x: np.ndarray, alias: str) -> None:
    ours = NonlinearProjection(gamma=0.2, n_components=4, eigen_solver=alias, random_state=0)
    ref = KernelPCA(4, kernel="rbf", gamma=0.2, eigen_solver="dense")
    _close_up_to_sign(ours.fit_transform(x), ref.fit_transform(x))


def test_kernel_pca_names_accepted_and_cloned(x: np.ndarray) -> None:
    est = NonlinearProjection(gamma=0.2, n_components=3, eigen_solver="arpack", **KPCA_ONLY)
    twin = clone(est)
    assert twin.get_params() == est.get_params()
    assert {k: twin.get_params()[k] for k in KPCA_ONLY} == KPCA_ONLY
    ref = KernelPCA(3, kernel="rbf", gamma=0.2)
    _close_up_to_sign(twin.fit_transform(x), ref.fit_transform(x))


def test_max_iter_caps_the_krylov_passes(x: np.ndarray) -> None:
    est = NonlinearProjection(gamma=0.2, n_components=3, solver="krylov", max_iter=1, tol=1e-14)
    with pytest.warns(npt.errors.ConvergenceWarning, match="after 1 pass with"):
        est.fit(x)


def test_copy_x_keeps_the_model_independent_of_later_changes(x: np.ndarray) -> None:
    data = x.copy()
    est = NonlinearProjection(gamma=0.2, n_components=3).fit(data)
    before = est.transform(x[:5])
    data[:] = 0.0
    np.testing.assert_array_equal(est.transform(x[:5]), before)


def test_conflicting_solver_and_eigen_solver_refused() -> None:
    with pytest.raises(ValueError, match="eigen_solver is KernelPCA's name of solver"):
        NonlinearProjection(solver="dense", eigen_solver="arpack").fit(np.eye(4))


@pytest.mark.parametrize(
    "seed", [np.random.RandomState(0), np.random.default_rng(0)], ids=["RandomState", "Generator"]
)
def test_random_state_instances_accepted(x: np.ndarray, seed: object) -> None:
    est = NonlinearProjection(gamma=0.2, n_components=3, solver="krylov", random_state=seed)
    ref = KernelPCA(3, kernel="rbf", gamma=0.2)
    _close_up_to_sign(est.fit_transform(x), ref.fit_transform(x))
    model = npt.fit(x, gamma=0.2, n_components=3, landmarks=20, random_state=seed)
    assert model.n_components == 3


def test_linear_kernel_on_two_rows_does_not_crash_the_scale_check() -> None:
    # scikit-learn's test_leave_zero_eig: a linear kernel (gamma None) on 2 rows
    X = np.array([[1.0, 1.0], [0.0, 0.0]])
    est = NonlinearProjection(kernel="linear", n_components=2, eigen_solver="dense")
    with pytest.warns(KernelScaleWarning, match=r"nearly the identity on these data \(linear:"):
        est.fit(X)
    with pytest.warns(KernelScaleWarning, match="unlike every training row"):  # the same rule
        a = est.transform(X)
    with pytest.warns(KernelScaleWarning):
        b = est.fit_transform(X)
    assert a.shape == b.shape == (2, 2)  # the zero-eigenvalue column is kept (arbitrary)
    np.testing.assert_allclose(np.abs(a[:, 0]), np.abs(b[:, 0]))
    np.testing.assert_allclose(np.abs(a[:, 0]), np.sqrt(2) / 2 * np.ones(2))


NON_PSD = np.array(
    [
        [4.48, -1.0, 8.07, 2.33, 2.33, 2.33, -5.76, -12.78],
        [-1.0, -6.48, 4.5, -1.24, -1.24, -1.24, -0.81, 7.49],
        [8.07, 4.5, 15.48, 2.09, 2.09, 2.09, -11.1, -23.23],
        [2.33, -1.24, 2.09, 4.0, -3.65, -3.65, 1.02, -0.9],
        [2.33, -1.24, 2.09, -3.65, 4.0, -3.65, 1.02, -0.9],
        [2.33, -1.24, 2.09, -3.65, -3.65, 4.0, 1.02, -0.9],
        [-5.76, -0.81, -11.1, 1.02, 1.02, 1.02, 4.86, 9.75],
        [-12.78, 7.49, -23.23, -0.9, -0.9, -0.9, 9.75, 21.46],
    ]
)


@pytest.mark.parametrize("alias", ["auto", "dense", "arpack", "randomized"])
def test_precomputed_not_psd_refused_like_kernel_pca(alias: str) -> None:
    for est in (NonlinearProjection, KernelPCA):
        with pytest.raises(ValueError, match="There are significant negative eigenvalues"):
            est(kernel="precomputed", eigen_solver=alias, n_components=7).fit(NON_PSD)
    small = {"kernel": "precomputed", "eigen_solver": alias, "n_components": 2}
    if alias == "randomized":  # the largest two in modulus include -15.1
        with pytest.raises(ValueError, match="There are significant negative eigenvalues"):
            NonlinearProjection(**small).fit(NON_PSD)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = NonlinearProjection(**small).fit_transform(NON_PSD)
            ref = KernelPCA(**small).fit_transform(NON_PSD)
            _close_up_to_sign(ours[:, :1], ref[:, :1])  # λ2 = λ3: the second is arbitrary


class _WithExtra(NonlinearProjection):
    def __init__(self, n_components: int | None = None, *, gamma: float | None = None,
                 note: str = "mine") -> None:  # fmt: skip
        super().__init__(n_components=n_components, gamma=gamma)
        self.note = note


def test_subclass_with_its_own_init_parameter_fits(x: np.ndarray) -> None:
    est = _WithExtra(3, gamma=0.2, note="extra")
    ref = KernelPCA(3, kernel="rbf", gamma=0.2)
    _close_up_to_sign(est.fit_transform(x), ref.fit_transform(x))


def test_start_carries_its_kernel_over(x: np.ndarray) -> None:
    landmark = npt.fit(x, gamma=0.3, n_components=4, landmarks=30, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelScaleWarning)
        exact = npt.fit(x, n_components=4, start=landmark)
    assert exact.kernel == landmark.kernel
    ref = KernelPCA(4, kernel="rbf", gamma=0.3).fit_transform(x)
    _close_up_to_sign(exact.train_coordinates(), ref)


def test_start_from_another_kernel_warns(x: np.ndarray) -> None:
    landmark = npt.fit(x, gamma=0.3, n_components=4, landmarks=30, random_state=0)
    with pytest.warns(KernelScaleWarning, match="start= was fitted with another kernel"):
        exact = npt.fit(x, gamma=0.1, n_components=4, start=landmark)
    assert exact.kernel.gamma == 0.1
