"""A warm start that cannot start the solver is refused naming start=."""

from __future__ import annotations

import numpy as np
import pytest

import npt_dask as npt
from npt_dask.errors import InputError

RNG = np.random.default_rng(16)
X = RNG.normal(size=(60, 5))
KW = {"gamma": 0.3, "n_components": 3, "solver": "krylov", "random_state": 0}


class _Coordinates:
    """A duck-typed start whose transform returns the given array."""

    def __init__(self, value):
        self.value = value

    def transform(self, x):
        return self.value


def test_a_start_model_of_other_features_is_named():
    start = npt.fit(RNG.normal(size=(60, 6)), gamma=0.3, n_components=3)
    with pytest.raises(InputError, match=r"start= is a model of 6 features, but X has 5"):
        npt.fit(X, start=start, **KW)


@pytest.mark.parametrize("basis", ["driver", "chunked"])
def test_a_start_giving_nan_is_named(basis):
    start = _Coordinates(np.full((60, 3), np.nan))
    with pytest.raises(InputError, match=r"start=\.transform\(X\) returned NaN"):
        npt.fit(X, start=start, basis=basis, **KW)


@pytest.mark.parametrize("value", [np.ones((5, 3)), np.ones(60), np.array([["a"] * 3] * 60)])
def test_a_start_of_the_wrong_shape_or_type_is_named(value):
    with pytest.raises(InputError, match=r"start=\.transform\(X\) returned .* \(60, r\)"):
        npt.fit(X, start=_Coordinates(value), **KW)


def test_a_good_start_still_gives_the_cold_answer():
    start = npt.fit(X, landmarks=30, random_state=1, gamma=0.3, n_components=3)
    warm = npt.fit(X, start=start, **KW)
    cold = npt.fit(X, **KW)
    np.testing.assert_allclose(warm.eigenvalues, cold.eigenvalues, rtol=1e-8)
