"""Targets and sample weights beyond what kernel ridge's sums can hold are refused on every
route, before any pass; within the range, a solve is exact under scaling.

A finite target of 1e308 (or -1e308 among small ones) made the Nyström direct route's
predictions inf or NaN and the CG routes' model zero. The reference for the range is
independent of the code under test: targets times ``2**k`` must give the coefficients
times ``2**k``, bit for bit (a power of two scales every sum, product and square
exactly until something overflows).
"""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest

from npt_dask import KernelRidge, KernelRidgeClassifier
from npt_dask.errors import InputError

N = 240
ROUTES = {
    "exact direct": {"landmarks": None, "solver": "direct"},
    "exact cg": {"landmarks": None, "solver": "cg"},
    "nystrom direct": {"landmarks": 50, "solver": "direct"},
    "nystrom cg": {"landmarks": 50, "solver": "cg"},
}
PRECISIONS = ["float64", "float32"]


def _rows():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, 4))
    return x, np.sin(x[:, 0]) + 0.3 * x[:, 1]


def _never_called(a, b):
    raise AssertionError("a kernel pass ran before the targets were checked")


def _params(route, precision, **more):
    return {"alpha": 0.1, "kernel": _never_called, "random_state": 0, "tol": 1e-10,
            "max_iter": 300, "precision": precision, **ROUTES[route], **more}  # fmt: skip


def _huge():
    _, y = _rows()
    one = y.copy()
    one[5] = 1e308
    mixed = np.where(np.arange(N) % 40 == 0, -1e308, y)
    return {"one 1e308": one, "-1e308 among small": mixed}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("case", list(_huge()))
def test_an_overflowing_target_is_refused_on_every_route_before_any_pass(
    tmp_path, route, precision, case
):
    x, _ = _rows()
    y = _huge()[case]
    path = tmp_path / "cg.npz"
    with pytest.raises(InputError, match=r"y holds a target of magnitude 1e\+308.*power of two"):
        KernelRidge(**_params(route, precision)).fit(x, y, checkpoint=path)
    assert not path.exists()
    assert not list(tmp_path.iterdir())  # no checkpoint, no lock


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("route", list(ROUTES))
def test_an_overflowing_weight_is_refused_by_the_same_rule(route, precision):
    x, y = _rows()
    w = np.ones(N)
    w[7] = 1e308
    with pytest.raises(InputError, match=r"sample_weight holds a weight of 1e\+308.*alpha"):
        KernelRidge(**_params(route, precision)).fit(x, y, sample_weight=w)
    labels = (y > 0).astype(int)
    with pytest.raises(InputError, match=r"sample_weight holds a weight of 1e\+308"):
        KernelRidgeClassifier(**_params(route, precision)).fit(x, labels, sample_weight=w)


def test_targets_times_weights_beyond_the_float32_range_are_refused_with_the_fix():
    """Each within the float32 limit, their product not: the targets times the weights
    are what the float32 blocks multiply."""
    x, y = _rows()
    w = np.full(N, 2.0**40)
    with pytest.raises(InputError, match=r"times the largest sample weight.*float64"):
        KernelRidge(**_params("nystrom cg", "float32")).fit(x, y * 2.0**30, sample_weight=w)


def test_lazy_targets_and_weights_are_refused_as_numpy_ones_are():
    x, _ = _rows()
    y = da.from_array(_huge()["-1e308 among small"], chunks=60)
    with pytest.raises(InputError, match=r"target of magnitude 1e\+308"):
        KernelRidge(**_params("nystrom direct", "float64")).fit(x, y)
    w = da.from_array(np.where(np.arange(N) == 3, 1e308, 1.0), chunks=60)
    with pytest.raises(InputError, match=r"weight of 1e\+308"):
        KernelRidge(**_params("exact cg", "float64")).fit(x, _rows()[1], sample_weight=w)


def test_a_search_refuses_before_it_searches():
    from npt_dask import KernelRidgeCV

    x, _ = _rows()
    with pytest.raises(InputError, match=r"target of magnitude 1e\+308"):
        KernelRidgeCV(kernel="rbf", landmarks=50, random_state=0).fit(x, _huge()["one 1e308"])


@pytest.mark.parametrize(("precision", "power"), [("float64", 200), ("float32", 50)])
@pytest.mark.parametrize("route", list(ROUTES))
def test_within_the_range_a_solve_is_exact_under_scaling(route, precision, power):
    """Targets times ``2**power`` (a column with large and small values mixed, and
    weights) give the coefficients times ``2**power``, bit for bit, and finite
    predictions: the range the rule admits is solved as ordinary targets are."""
    x, y = _rows()
    t = np.column_stack([y, np.where(np.arange(N) % 40 == 0, -1e3, np.cos(x[:, 1]))])
    w = np.random.default_rng(1).uniform(0.5, 2.0, N)
    params = {**_params(route, precision), "kernel": "rbf", "gamma": 0.3, "alpha": 1e-3,
              "max_iter": 30}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = KernelRidge(**params).fit(x, t, sample_weight=w)
        scaled = KernelRidge(**params).fit(x, t * 2.0**power, sample_weight=w)
    np.testing.assert_array_equal(scaled.dual_coef_, plain.dual_coef_ * 2.0**power)
    assert np.isfinite(scaled.predict(x[:10])).all()
