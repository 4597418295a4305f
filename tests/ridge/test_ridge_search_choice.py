"""The search's choice: a continuous held-out score for classifiers, and ties broken
toward the middle of the grid, not toward its first value."""

from __future__ import annotations

import numpy as np
import pytest

from npt_dask import KernelRidgeClassifier, KernelRidgeClassifierCV


@pytest.fixture
def blobs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    y = rng.integers(0, 3, 300)
    return rng.normal(size=(300, 8)) + 2.5 * np.eye(3, 8)[y], y


def test_the_classifier_search_tells_alphas_apart_that_classify_alike(blobs):
    """Alphas far below the kernel's eigenvalues classify the held-out rows alike; the
    score still differs between them and alphas that change the decisions."""
    x, y = blobs
    clf = KernelRidgeClassifierCV(alphas=[1e-6, 1e-2, 1.0, 10.0], gammas=[0.05],
                                  random_state=0).fit(x, y)  # fmt: skip
    scores = clf.cv_results_["scores"][0]
    assert len(set(scores)) == len(scores)


def test_ties_go_to_the_middle_of_the_alpha_grid(blobs):
    x, y = blobs
    alphas = [1e-9, 1e-8, 1e-7, 1e-6, 1e-5]  # all far below the kernel's eigenvalues
    clf = KernelRidgeClassifierCV(alphas=alphas[::-1], gammas=[1.0], random_state=0).fit(x, y)
    assert clf.alpha_ == 1e-7
    assert clf.best_score_ == clf.cv_results_["scores"][0][2]


def test_the_chosen_alpha_predicts_as_its_own_fit(blobs):
    x, y = blobs
    clf = KernelRidgeClassifierCV(gammas=[0.05], random_state=0).fit(x, y)
    twin = KernelRidgeClassifier(alpha=clf.alpha_, kernel="rbf", gamma=0.05).fit(x, y)
    np.testing.assert_array_equal(clf.predict(x), twin.predict(x))
