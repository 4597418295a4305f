"""Shared fixtures of the store tests."""

from __future__ import annotations

import numpy as np
import pytest

import npt_dask as npt


@pytest.fixture(scope="module")
def fitted():
    """A small RBF model (200 rows, r = 4) and 30 rows to project onto it."""
    rng = np.random.default_rng(5)
    x, z = rng.normal(size=(200, 5)), rng.normal(size=(30, 5))
    model = npt.fit(x, "rbf", gamma=0.3, n_components=4, chunk_size=64, random_state=0)
    return model, z
