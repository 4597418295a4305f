"""The kernel-scale rule for kernel ridge: a kernel blind to the data's scale is said in
the words of predictions, with the fix (gamma='scale' or a search); NPT keeps its own."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import npt_dask as npt
from npt_dask import KernelRidge, KernelRidgeClassifier
from npt_dask.errors import KernelScaleWarning


@pytest.fixture
def pixels() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.uniform(size=(200, 30))
    return x, (x[:, :15].sum(axis=1) > x[:, 15:].sum(axis=1)).astype(int)


def _messages(record: list[warnings.WarningMessage]) -> str:
    return " ".join(str(w.message) for w in record if w.category is KernelScaleWarning)


def test_a_nearly_constant_kernel_is_said_to_ridge_in_its_words(pixels):
    x, y = pixels
    with pytest.warns(KernelScaleWarning) as record:
        KernelRidgeClassifier(alpha=1e-3, kernel="rbf", gamma=1e-7).fit(x, y)
    said = _messages(record)
    assert "nearly constant" in said
    assert "no richer than a linear model" in said
    assert "predictions" in said
    assert "gamma='scale'" in said
    assert "KernelRidgeClassifierCV" in said
    assert "coordinates" not in said
    assert "residual" not in said


def test_a_nearly_identity_kernel_is_said_to_ridge_in_its_words(pixels):
    x, y = pixels
    with pytest.warns(KernelScaleWarning) as record:
        KernelRidge(kernel="rbf", gamma=1e4).fit(x, y.astype(float))
    said = _messages(record)
    assert "nearly the identity" in said
    assert "predicts about 0" in said
    assert "gamma='scale'" in said
    assert "coordinates" not in said


def test_rows_on_another_scale_at_predict_are_said_in_ridge_words(pixels):
    x, y = pixels
    est = KernelRidge(kernel="rbf", gamma="scale").fit(x, y.astype(float))
    with pytest.warns(KernelScaleWarning, match="their predictions are all about the same"):
        est.predict(x[:10] * 255)


def test_a_kernel_on_the_data_scale_is_quiet_for_ridge(pixels):
    x, y = pixels
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelScaleWarning)
        KernelRidgeClassifier(alpha=1e-3, kernel="rbf", gamma="scale").fit(x, y)


def test_npt_keeps_its_own_words_and_its_tolerance(pixels):
    x, _ = pixels
    with pytest.warns(KernelScaleWarning, match="coordinates carry no structure"):
        npt.fit(x, kernel="rbf", gamma=1e4, n_components=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelScaleWarning)
        npt.fit(x, kernel="rbf", gamma=1e-7, n_components=3)  # linear structure: found
