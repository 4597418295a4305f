"""``partial_fit`` of landmark and exact estimators, through the call a user types.

``NonlinearProjection(landmarks=m)`` with a truncated ``partial_fit``. A landmark model
keeps only its m landmark rows, so its refit cannot be on "every row seen so far"; it
refitted exactly (no landmarks) on the landmark rows and the batch, a model that grew by
the whole batch at each call, under a warning that said it refitted on every row seen.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import npt_dask as npt

RNG = np.random.default_rng(2828)
ROWS = RNG.uniform(0, 1, size=(360, 8))


@pytest.mark.parametrize("landmarks", [40, list(range(0, 120, 3))])
def test_landmark_estimator_partial_fit_stays_a_landmark_fit_and_says_so(landmarks):
    est = npt.NonlinearProjection(gamma=0.5, n_components=5, landmarks=landmarks, random_state=0)
    est.partial_fit(ROWS[:200])
    assert est.model_.n_samples == 40
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.partial_fit(ROWS[200:300])
    said = [str(w.message) for w in caught]
    assert [w.category for w in caught] == [npt.RefitWarning], said
    assert "every row seen so far" not in said[0]
    assert (
        "refits on the model's 40 landmark rows and the 100 new rows (140 in all; a landmark "
        "model keeps only its landmark rows, not every row it has seen), choosing 40 "
        "landmarks among them"
    ) in said[0]
    assert est.model_.n_samples == 40  # a landmark fit still: its cost does not grow
    assert est.model_.diagnostics.landmarks["refit"]["rows"] == 140
    coords = est.transform(ROWS[300:])
    assert coords.shape == (60, 5)
    assert np.isfinite(coords).all()
    with pytest.warns(npt.RefitWarning, match="the model's 40 landmark rows and the 60 new"):
        est.partial_fit(ROWS[300:])  # and again: still m landmark rows
    assert est.model_.n_samples == 40


def test_exact_estimator_partial_fit_still_refits_on_every_row_seen():
    est = npt.NonlinearProjection(gamma=0.5, n_components=5)
    est.partial_fit(ROWS[:100])
    with pytest.warns(npt.RefitWarning, match=r"every row seen so far \(100 training rows"):
        est.partial_fit(ROWS[100:150])
    assert est.model_.n_samples == 150


@pytest.mark.parametrize("seed", range(6))
def test_a_shifted_negative_kernel_matrix_is_refused_whatever_rounding_gives(seed):
    """A variant of ``-K``, ``-K + c``: centred it is ``-K`` centred, its diagonal positive, and
    rounding may put its top eigenvalue just below zero; it is refused as negative
    semi-definite (as scikit-learn's KernelPCA refuses it), never fitted to all-zero
    coordinates, while constant data (a zero matrix up to rounding) still gives zeros."""
    from sklearn.metrics.pairwise import rbf_kernel

    import npt_dask as npt
    from npt_dask import NonlinearProjection
    from npt_dask.errors import NegativeDefiniteKernelError, RankWarning

    x = np.random.default_rng(seed).normal(size=(60, 4))
    k = -rbf_kernel(x, gamma=0.3) + 1.5
    with pytest.raises(NegativeDefiniteKernelError, match="negative semi-definite"):
        NonlinearProjection(kernel="precomputed", n_components=3).fit(k)
    with pytest.raises(NegativeDefiniteKernelError, match="negative semi-definite"):
        npt.fit(k, kernel="precomputed", n_components=3)
    for kernel in ("rbf", "linear"):
        with pytest.warns(RankWarning):
            y = NonlinearProjection(kernel=kernel, n_components=2).fit_transform(np.ones((50, 3)))
        assert np.abs(y).max() == 0.0
