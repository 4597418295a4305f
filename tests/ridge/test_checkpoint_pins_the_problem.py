"""A CG checkpoint is pinned to the problem itself, not to a sample of it: on resume the
operator of the data, kernel and alpha at hand is applied to the saved iterate, and a
residual that is not ``b - H x`` of that problem (within CG's rounding) is refused.

The kernels changed here are changed where the checkpoint's probe of the data and
(on the Nyström route) its right-hand side do not see it, so only the state check can
refuse them. Genuine resumes (exact and Nyström, float32 and float64, weights, a
column stopped at its best iterate) are compared bit for bit with fits never stopped.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.metrics.pairwise import rbf_kernel

from npt_dask import KernelRidge
from npt_dask.errors import CheckpointError, ConvergenceWarning, RidgeWarning
from npt_dask.linalg import cg
from npt_dask.ridge.iterations import Iterations
from npt_dask.ridge.resume import check_resumed
from npt_dask.ridge.routes.cg import CG, NystromCG

REFUSED = r"not of this problem.*(kernel|data|alpha).*delete the checkpoint"


def _kernel(w: float):
    """rbf plus ``w`` times a term only rows with ``x_0 > 2.3`` (about 1 in 100) see."""

    def kernel(a, b):
        fa, fb = np.maximum(a[:, 0] - 2.3, 0.0), np.maximum(b[:, 0] - 2.3, 0.0)
        return rbf_kernel(a, b, gamma=0.1) + w * np.outer(fa, fb)

    return kernel


def _rows(n=1200, d=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    return x, np.sin(x[:, 0]) + x[:, 1]


def _fit(path, kernel, max_iter, x, y, **params):
    common = {"alpha": 1e-3, "solver": "cg", "tol": 1e-8, "random_state": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = KernelRidge(kernel=kernel, max_iter=max_iter, **{**common, **params})
        return est.fit(x, y, checkpoint=path)


def test_a_kernel_changed_where_the_probe_does_not_look_is_refused_on_the_exact_route(tmp_path):
    """The issue's example: four iterations with w = 1, then w = 50. The probe's kernel
    values and the right-hand side (the targets) are the same; the state is not."""
    x, y = _rows()
    path = tmp_path / "cg.npz"
    _fit(path, _kernel(1.0), 4, x, y, landmarks=None)
    before = path.read_bytes()
    with pytest.raises(CheckpointError, match=REFUSED):
        _fit(path, _kernel(50.0), 200, x, y, landmarks=None)
    assert path.read_bytes() == before  # refused, and left as it was
    # the original kernel resumes
    resumed = _fit(path, _kernel(1.0), 6, x, y, landmarks=None)
    straight = _fit(None, _kernel(1.0), 6, x, y, landmarks=None)
    np.testing.assert_array_equal(resumed.dual_coef_, straight.dual_coef_)


def test_a_kernel_change_the_right_hand_side_does_not_see_is_refused_on_the_nystrom_route(
    tmp_path,
):
    """The rows the added term sees (x_0 > 2.3) are centres, placed right after the
    first row (between the probe's evenly spread rows and centres); the targets are
    orthogonal to the term on the rows (``K_nm^T y`` is the same to rounding): only the
    state shows the change."""
    x, y = _rows(n=800)
    seen = x[:, 0] > 2.3
    x = np.concatenate([x[:1], x[seen], x[1:][~seen[1:]]])
    f = np.maximum(x[:, 0] - 2.3, 0.0)
    assert 3 <= np.count_nonzero(f) < 20
    assert f[0] == 0
    y = np.sin(x[:, 0]) + x[:, 1]
    y = y - f * (f @ y) / (f @ f)
    path = tmp_path / "cg.npz"
    centres = np.arange(200)
    _fit(path, _kernel(1.0), 4, x, y, landmarks=centres)
    before = path.read_bytes()
    with pytest.raises(CheckpointError, match=REFUSED):
        _fit(path, _kernel(50.0), 200, x, y, landmarks=centres)
    assert path.read_bytes() == before


@pytest.mark.parametrize("landmarks", [None, 150])
@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_a_genuine_resume_passes_the_check_and_gives_the_same_bits(tmp_path, landmarks, precision):
    """Small alpha, sample weights, a target a hundred times the others: a resume is not
    refused by its rounding, and ends where a fit never stopped ends."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((600, 4))
    t = np.column_stack([np.sin(x[:, 0]), 100 * rng.standard_normal(600)])
    w = rng.uniform(0.2, 4.0, 600)
    params = {"kernel": "rbf", "gamma": 0.2, "alpha": 1e-5, "landmarks": landmarks,
              "solver": "cg", "tol": 1e-12, "precision": precision, "random_state": 0}  # fmt: skip
    path = tmp_path / "cg.npz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", RidgeWarning)
        KernelRidge(max_iter=7, **params).fit(x, t, w, checkpoint=path)
        resumed = KernelRidge(max_iter=15, **params).fit(x, t, w, checkpoint=path)
        straight = KernelRidge(max_iter=15, **params).fit(x, t, w)
    np.testing.assert_array_equal(resumed.dual_coef_, straight.dual_coef_)
    assert resumed.n_iter_ == straight.n_iter_


def test_columns_stopped_at_their_best_iterates_resume(tmp_path):
    """float32 blocks at tol 1e-12: the columns diverge and stop at their best iterates
    (``x`` put back, ``r`` not); the finished state, resumed, is not refused."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5))
    t = np.column_stack([np.sin(x.sum(axis=1)), np.cos(x[:, 0]) * x[:, 1]])
    params = {"alpha": 1e-3, "kernel": "rbf", "gamma": 0.3, "landmarks": 80, "solver": "cg",
              "tol": 1e-12, "max_iter": 1000, "precision": "float32",
              "random_state": 0}  # fmt: skip
    path = tmp_path / "cg.npz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RidgeWarning)
        first = KernelRidge(**params).fit(x, t, checkpoint=path)
        again = KernelRidge(**params).fit(x, t, checkpoint=path)
    np.testing.assert_array_equal(again.dual_coef_, first.dual_coef_)


def test_a_measured_column_put_back_to_its_best_iterate_holds_that_iterates_residual():
    """A column thrown off by a wrong product diverges and is put back to its best
    iterate; once measured, its saved residual is ``b - H x`` of that iterate (and its
    ``best`` the true one), so the state a resume checks is consistent."""
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.normal(size=(30, 30)))
    h = q @ np.diag(np.logspace(0, 4, 30)) @ q.T
    b = rng.normal(size=(30, 2))
    calls = []

    def product(p, cols):
        out = h @ p
        calls.append(1)
        if len(calls) == 3 and 0 in cols:  # column 0's direction, thrown far off
            j = int(np.flatnonzero(cols == 0)[0])
            wrong = rng.normal(size=30)
            wrong -= p[:, j] * (p[:, j] @ wrong) / (p[:, j] @ p[:, j])
            out[:, j] += 1e9 * wrong
        return out

    plan = SimpleNamespace(tol=1e-10, max_iter=200, precision="float64")
    loop = Iterations(NystromCG(), CG, SimpleNamespace(plan=plan), None, None, False)
    state = loop.run(cg.start(b, lambda r: r.copy(), plan.tol), product, lambda r: r.copy())
    assert state.breakdown[0]
    assert 0 in loop.measured
    true = b - h @ state.x
    np.testing.assert_allclose(state.r[:, 0], true[:, 0], rtol=0, atol=1e-9)
    assert state.best[0] == pytest.approx(np.linalg.norm(true[:, 0]) / np.linalg.norm(b[:, 0]))
    check_resumed(state, lambda p, cols: h @ p, precision="float64", path=Path("cg.npz"))


def test_the_check_is_one_pass_at_resume(tmp_path):
    """The resume costs one operator product more than the iterations and checks."""
    x, y = _rows(n=400)
    path = tmp_path / "cg.npz"
    _fit(path, "rbf", 3, x, y, landmarks=60, gamma=0.1)
    resumed = _fit(path, "rbf", 6, x, y, landmarks=60, gamma=0.1)
    straight = _fit(None, "rbf", 6, x, y, landmarks=60, gamma=0.1)
    # the stopped fit's 3 iterations are not done again; the check is one pass
    assert resumed.solve_details_["passes"] == straight.solve_details_["passes"] - 3 + 1
