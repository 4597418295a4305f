"""Kernel resolution happens in one function.

``gamma="scale"`` and the other fit parameters of the kernel resolve through
:func:`npt_dask.kernels.resolve_kernel` in the fit (so the estimator), in
kernel-target alignment and in the pipeline's "same model?" check.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics.pairwise import rbf_kernel

from npt_dask import NonlinearProjection
from npt_dask.interface.pipeline.runner import fit_or_reuse
from npt_dask.methods import kernel_target_alignment
from npt_dask.npt.params import FitParams


@pytest.fixture
def data():
    rng = np.random.default_rng(7)
    x = rng.normal(scale=3.0, size=(60, 4))
    y = (x[:, 0] + 0.3 * rng.normal(size=60) > 0).astype(int)
    return x, y


def _dense_alignment(k: np.ndarray, y: np.ndarray) -> float:
    t = np.where(y[:, None] == y[None, :], 1.0, -1.0)
    return float(np.sum(k * t) / (np.linalg.norm(k) * np.linalg.norm(t)))


def test_alignment_takes_gamma_scale_as_fit_does(data):
    """Raised "gamma='scale' needs the variance of the data" before."""
    x, y = data
    gamma = 1.0 / (x.shape[1] * x.var())  # scikit-learn's SVC(gamma="scale")
    got = kernel_target_alignment(x, y, "rbf", gamma="scale", chunk_size=25)
    reference = _dense_alignment(rbf_kernel(x, gamma=gamma), y)
    np.testing.assert_allclose(got, reference, rtol=1e-10)
    fitted = NonlinearProjection(n_components=3, gamma="scale").fit(x)
    np.testing.assert_allclose(fitted.gamma_, gamma, rtol=1e-12)


def test_alignment_takes_kernel_params(data):
    x, y = data
    got = kernel_target_alignment(x, y, "rbf", kernel_params={"gamma": 0.05}, chunk_size=25)
    np.testing.assert_allclose(got, _dense_alignment(rbf_kernel(x, gamma=0.05), y), rtol=1e-10)


def test_pipeline_reuses_a_model_only_for_the_same_kernel_precision_and_tol(data, tmp_path):
    """``kernel_params``, ``precision`` and ``tol`` were ignored: a model fitted with
    gamma = 1/d was reused for a config asking gamma = 5 through kernel_params."""
    x, _ = data
    cfg = FitParams(n_components=3, gamma="scale")
    path = tmp_path / "model.zarr"
    _, reused = fit_or_reuse(cfg, x, path)
    assert not reused
    assert fit_or_reuse(cfg, x, path)[1]  # the same config: the stored model
    other_path = tmp_path / "other.zarr"
    fit_or_reuse(FitParams(n_components=3), x, other_path)
    for changed in (
        FitParams(n_components=3, kernel_params={"gamma": 5.0}),
        FitParams(n_components=3, precision="float32"),
        FitParams(n_components=3, tol=1e-5),
    ):
        reused = fit_or_reuse(changed, x, other_path)[1]
        assert not reused, changed
        fit_or_reuse(FitParams(n_components=3), x, other_path)  # back to the default
    assert fit_or_reuse(FitParams(n_components=3, kernel_params={"gamma": 0.25}), x,
                        other_path)[1]  # fmt: skip  # gamma = 1 / d, given explicitly
