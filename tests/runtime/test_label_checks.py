"""Dask labels are refused as numpy labels are: NaN and continuous values."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from npt_dask.methods.linear_ridge import RidgeClassifier

RNG = np.random.default_rng(8)
Y = RNG.normal(size=(40, 3))


def _labels_with_nan():
    y = np.tile([0.0, 1.0], 20)
    y[3] = np.nan
    return y


@pytest.mark.parametrize(
    ("labels", "match"),
    [(_labels_with_nan(), "contains NaN"), (RNG.normal(size=40), "continuous")],
)
@pytest.mark.parametrize("lazy", [False, True])
def test_nan_and_continuous_labels_are_refused_numpy_or_dask(labels, match, lazy):
    y = da.from_array(labels, chunks=10) if lazy else labels
    x = da.from_array(Y, chunks=(10, -1)) if lazy else Y
    with pytest.raises(ValueError, match=match):
        RidgeClassifier().fit(x, y)


def test_dask_labels_give_the_numpy_classes_and_coefficients():
    y = np.array(["a", "b", "c", "b"] * 10)
    lazy = RidgeClassifier().fit(da.from_array(Y, chunks=(10, -1)), da.from_array(y, chunks=10))
    eager = RidgeClassifier().fit(Y, y)
    assert lazy.classes_.tolist() == ["a", "b", "c"]
    np.testing.assert_allclose(lazy.coef_, eager.coef_, rtol=1e-10)
