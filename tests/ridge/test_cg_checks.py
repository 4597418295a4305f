"""Conjugate gradient reports what it reached: the true residual, a checkpoint resumed
under another tol, a diverged or broken-down column's best iterate, weights checked
whatever their kind (from a second reading of the solvers against Falkon and Frangella,
Tropp & Udell).

References are independent of the code under test: the residual of the stated normal
equations built densely here from ``pairwise_kernels``.
"""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.metrics.pairwise import pairwise_kernels

from npt_dask import KernelRidge
from npt_dask.errors import ConvergenceWarning, InputError, RidgeWarning
from npt_dask.linalg import cg
from tests.ridge.conftest import ridge_data

GAMMA = 0.3


def _true_residuals(est, x, t, dtype=np.float64):
    """``||b - H c|| / ||b||`` per target of the Nyström normal equations, densely, in
    float64 on the kernel rounded to the fit's precision."""
    idx = est.landmarks_
    xs = x.astype(dtype)
    knm = pairwise_kernels(xs, xs[idx], metric="rbf", gamma=GAMMA).astype(dtype).astype(float)
    kmm = knm[idx]
    h = knm.T @ knm + est.alpha * kmm
    b = knm.T @ t
    r = b - h @ est.dual_coef_.reshape(len(idx), -1)
    return np.linalg.norm(r, axis=0) / np.linalg.norm(b, axis=0)


def _float32_floor(est, x, t):
    """Where a float32 kernel's rounding leaves a residual undetermined, per target:
    ``u32 || (|K_nm|^T |K_nm| + alpha |K_mm|) |c| || / ||b||`` (two kernels that differ in
    their last bit, ours and scikit-learn's, give residuals this far apart)."""
    idx = est.landmarks_
    xs = x.astype(np.float32)
    knm = np.abs(pairwise_kernels(xs, xs[idx], metric="rbf", gamma=GAMMA).astype(float))
    c = np.abs(est.dual_coef_.reshape(len(idx), -1))
    spread = (knm.T @ knm + est.alpha * knm[idx]) @ c
    return (
        np.finfo(np.float32).eps
        * np.linalg.norm(spread, axis=0)
        / np.linalg.norm(knm.T @ t, axis=0)
    )


@pytest.mark.parametrize("tol", [1e-3, 1e-6])
def test_the_reported_residual_is_the_true_one_and_meets_tol(tol):
    x, t = ridge_data(n=400, test=0)[:2]
    est = KernelRidge(alpha=1e-2, kernel="rbf", gamma=GAMMA, landmarks=80, solver="cg",
                      tol=tol, max_iter=500, random_state=0).fit(x, t)  # fmt: skip
    true = _true_residuals(est, x, t)
    reported = np.asarray(est.solve_details_["relative_residuals"])
    np.testing.assert_allclose(reported, true, rtol=1e-3, atol=1e-12)
    assert (true <= tol).all()
    assert est.solve_details_["passes"] >= est.n_iter_ + 1  # the check is a pass of its own


def test_float32_blocks_below_their_resolution_are_never_claimed_and_say_the_fix():
    x, t = ridge_data(n=400, test=0)[:2]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = KernelRidge(alpha=1e-3, kernel="rbf", gamma=GAMMA, landmarks=80, solver="cg",
                          tol=1e-8, max_iter=60, precision="float32",
                          random_state=0).fit(x, t)  # fmt: skip
    kinds = {type(w.message) for w in caught}
    true = _true_residuals(est, x, t, np.float32)
    reported = np.asarray(est.solve_details_["relative_residuals"])
    np.testing.assert_allclose(reported, true, atol=2e-6)  # float32 products' own rounding
    assert (true > 1e-8).all()  # not reached,
    assert (reported > 1e-8).all()  # and not claimed
    assert ConvergenceWarning in kinds
    said = next(str(w.message) for w in caught if w.category is ConvergenceWarning)
    assert "precision='float64'" in said  # the fix for a tol float32 cannot resolve
    assert f"true relative residual of {reported.max():.3g}" in said


def test_a_column_stopped_by_divergence_reports_its_true_residual():
    """float32 blocks at tol 1e-12: the updated residual drifts far below the true one
    and the columns stop at their best iterates; what the warning and solve_details_
    report is the true residual of those iterates (measured in one pass more), not the
    drifted one."""
    x, t = ridge_data(n=400, test=0)[:2]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = KernelRidge(alpha=1e-3, kernel="rbf", gamma=GAMMA, landmarks=80, solver="cg",
                          tol=1e-12, max_iter=1000, precision="float32",
                          random_state=0).fit(x, t)  # fmt: skip
    said = [str(w.message) for w in caught if w.category is RidgeWarning]
    assert len(said) == 1
    assert "stopped early" in said[0]
    true = _true_residuals(est, x, t, np.float32)
    reported = np.asarray(est.solve_details_["relative_residuals"])
    np.testing.assert_allclose(reported, true, atol=_float32_floor(est, x, t).max())
    assert (reported > 1e-7).all()  # not the drifted 1e-12
    assert f"true relative residual up to {reported.max():.3g}" in said[0]
    assert est.solve_details_["passes"] > est.n_iter_  # the measure: a pass of its own


def test_resuming_under_a_tighter_tol_iterates_on(tmp_path):
    x, t = ridge_data(n=400, test=0)[:2]
    kw = {"alpha": 1e-3, "kernel": "rbf", "gamma": GAMMA, "landmarks": 80, "random_state": 0,
          "solver": "cg", "max_iter": 5000}  # fmt: skip
    path = tmp_path / "cg.npz"
    loose = KernelRidge(tol=1e-2, **kw).fit(x, t, checkpoint=path)
    tight = KernelRidge(tol=1e-8, **kw).fit(x, t, checkpoint=path)
    fresh = KernelRidge(tol=1e-8, **kw).fit(x, t)
    assert tight.n_iter_ > loose.n_iter_
    assert (_true_residuals(tight, x, t) <= 1e-8).all()
    scale = np.abs(fresh.dual_coef_).max()
    assert np.abs(tight.dual_coef_ - fresh.dual_coef_).max() <= 1e-4 * scale


def test_a_broken_down_column_keeps_its_best_iterate_and_its_last_residual():
    h = np.diag([1.0, -0.5, 2.0])
    b = np.ones((3, 1))
    state = cg.start(b, lambda r: r.copy(), 1e-12)
    for _ in range(5):
        if state.done:
            break
        cols = np.flatnonzero(state.active)
        cg.step(state, h @ state.p[:, cols], lambda r: r.copy(), 1e-12)
    assert state.breakdown.all()
    np.testing.assert_array_equal(state.x, state.best_x)
    assert state.history[-1] > 0.0  # the residual it stopped at, not 0


def test_a_diverging_column_stops_at_its_best_iterate():
    """Three exact products, then one wrong by a large part orthogonal to ``p`` (the
    curvature ``p^T q`` unchanged, the updated residual thrown far past ``DIVERGENCE``
    times its best): the column stops, at the iterate of its smallest residual."""
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.normal(size=(30, 30)))
    h = q @ np.diag(np.logspace(0, 6, 30)) @ q.T
    b = rng.normal(size=(30, 1))
    state = cg.start(b, lambda r: r.copy(), 1e-14)
    for _ in range(3):
        cg.step(state, h @ state.p, lambda r: r.copy(), 1e-14)
    assert not state.breakdown.any()
    best_x = state.best_x.copy()  # where its residual was smallest so far
    p = state.p
    wrong = rng.normal(size=p.shape)
    wrong -= p * (p.T @ wrong) / (p.T @ p)  # orthogonal to p: the curvature unchanged
    hp = h @ p
    blow = cg.DIVERGENCE * 10 * np.linalg.norm(b) / abs(float(state.rz[0] / (p.T @ hp)[0, 0]))
    cg.step(state, hp + blow * wrong / np.linalg.norm(wrong), lambda r: r.copy(), 1e-14)
    assert state.breakdown.all()
    assert not state.active.any()
    np.testing.assert_array_equal(state.x, best_x)


@pytest.mark.parametrize(
    ("weight", "match"),
    [(0.0, "non-zero"), (-1.0, ">= 0"), ("dask-negative", ">= 0"), ("dask-nan", "finite")],
)
def test_weights_of_every_kind_are_checked_before_any_pass(weight, match):
    x, t = ridge_data(n=200, test=0)[:2]
    if weight == "dask-negative":
        weight = da.from_array(np.where(np.arange(200) % 40 == 0, -2.0, 1.0), chunks=50)
    elif weight == "dask-nan":
        weight = da.from_array(np.where(np.arange(200) == 7, np.nan, 1.0), chunks=50)
    for solver in ("direct", "cg"):
        with pytest.raises(InputError, match=match):
            KernelRidge(alpha=0.1, gamma=GAMMA, kernel="rbf", landmarks=40, solver=solver,
                        random_state=0).fit(x, t, sample_weight=weight)  # fmt: skip


def test_a_scalar_weight_is_every_rows_weight():
    x, t = ridge_data(n=200, test=0)[:2]
    kw = {"alpha": 0.1, "gamma": GAMMA, "kernel": "rbf", "landmarks": 40, "random_state": 0}
    a = KernelRidge(**kw).fit(x, t, sample_weight=2.0)
    b = KernelRidge(**kw).fit(x, t, sample_weight=np.full(200, 2.0))
    np.testing.assert_array_equal(a.dual_coef_, b.dual_coef_)
