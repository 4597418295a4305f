"""Kernel ridge where the rows live: CG's iterations, the direct solves and the budgets.

``array_api_strict`` stands in for a device namespace (no GPU here): the iteration
driver, the device preconditioner and the device solves on strict arrays give numpy's
results. On numpy every route equals a dense numpy/scikit-learn reference, and a
Nyström CG iteration crosses k numbers at a time (what a GPU would copy), never a vector.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import array_api_strict as xs
import dask.array as da
import numpy as np
import pytest

from npt_dask import KernelRidge
from npt_dask.arrays.host import count_crossings
from npt_dask.errors import InputError, MemoryBudgetWarning
from npt_dask.linalg import cg
from npt_dask.linalg.device_preconditioners import preconditioner_like
from npt_dask.linalg.preconditioners import FalkonCholesky
from npt_dask.linalg.tiles import TiledUpper
from npt_dask.ridge.estimate import PROBE_ROWS
from npt_dask.ridge.iterations import Iterations, finish
from npt_dask.ridge.normal_solve import solve_moments, solve_there
from npt_dask.ridge.problem import Clock
from npt_dask.ridge.routes.cg import CG, NystromCG

K = 2


def _data(n: int = 300, seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 5))
    y = np.c_[np.sin(x[:, 0]) + 0.1 * x[:, 1], x[:, 2] ** 2]
    return x, y, rng.random(n) + 0.5


def _cg_fit(x, y, max_iter: int) -> tuple[KernelRidge, list[int]]:
    model = KernelRidge(alpha=[0.1, 0.01], kernel="rbf", gamma=0.3, random_state=0,
                        landmarks=100, solver="cg", tol=1e-14, max_iter=max_iter)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with count_crossings() as seen:
            model.fit(x, y)
    return model, seen.sizes


def test_a_nystrom_cg_iteration_crosses_k_numbers_never_a_vector():
    """Two crossings an iteration (the step's dots: k, then 3k numbers); the pass's sums
    and the centres' rows stay where the rows live; the solution (m x k) crosses once.
    (With a checkpoint a device state also crosses to be saved, once an iteration.)"""
    rng = np.random.default_rng(3)
    x = da.from_array(rng.normal(size=(2000, 5)), chunks=(256, 5))
    y = rng.normal(size=(2000, K))
    short, few = _cg_fit(x, y, 3)
    _, more = _cg_fit(x, y, 6)
    assert short.n_iter_ == 3
    assert len(more) - len(few) == 2 * 3
    vectors = [s for s in few if s > 3 * K]
    assert vectors[-1] == 100 * K
    assert few[-1] == 100 * K
    # and before any pass the kernel-scale check's sample of rows; the iteration estimate's
    # PROBE_ROWS rows are host rows gathered by Rows.take: nothing crosses for them
    assert len(vectors) == 2
    assert PROBE_ROWS * 5 not in vectors


def _system(n: int = 120, m: int = 25, alpha: float = 10.0):
    """A Nyström normal matrix ``H``, its right-hand side and Falkon's preconditioner."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 3))
    c = x[:m]
    knm = np.exp(-0.5 * ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1))
    kmm = knm[:m]
    h = knm.T @ knm + alpha * kmm
    b = knm.T @ rng.normal(size=(n, 3))
    pc = FalkonCholesky.build(np.asfortranarray(kmm.copy()), alpha / n)
    return h, b, pc


def _driven(h, b, pc, tol: float = 1e-10):
    problem = SimpleNamespace(plan=SimpleNamespace(tol=tol, max_iter=60, precision="float64"))
    loop = Iterations(NystromCG(), CG, problem, None, None, progress=False)  # type: ignore[arg-type]
    precondition = preconditioner_like(pc, b)
    state = loop.start(b, None, precondition)
    state = loop.run(state, lambda p, cols: h @ p, precondition)
    return finish(state, problem.plan, Clock(), {}, loop)


def test_the_iteration_driver_runs_in_the_vectors_namespace():
    """The driver's gather, steps, checks and device preconditioner on strict arrays give
    numpy's iterates (<= 1e-12) in as many iterations; the solution comes back numpy."""
    h, b, pc = _system()
    want = _driven(h, b, pc)
    got = _driven(xs.asarray(h), xs.asarray(b), pc)
    assert type(got.coef) is np.ndarray
    assert got.iterations == want.iterations > 2
    assert got.converged.all()
    assert want.converged.all()
    np.testing.assert_allclose(got.coef, want.coef, rtol=1e-12, atol=1e-12 * abs(want.coef).max())
    np.testing.assert_allclose(got.coef, np.linalg.solve(h, b), rtol=1e-7)


def test_a_checkpointed_state_moves_to_the_host_and_back():
    _h, b, pc = _system()
    state = cg.start(xs.asarray(b), preconditioner_like(pc, xs.asarray(b)), 1e-6)
    saved = cg.host_state(state)
    assert type(saved.x) is np.ndarray
    assert type(saved.b) is np.ndarray
    back = cg.state_like(saved, xs.asarray(b))
    assert "array_api_strict" in type(back.p).__module__
    np.testing.assert_array_equal(np.asarray(saved.p), np.from_dlpack(back.p))


def test_the_normal_equations_solved_on_the_device_agree_with_the_host_tiles():
    h, _, _ = _system()
    rng = np.random.default_rng(1)
    m = h.shape[0]
    a = rng.normal(size=(200, m))
    gram = a.T @ a
    kmm = (h + h.T) / 2  # symmetric positive definite
    alphas = np.array([0.1, 0.01, 0.1])
    cross = rng.normal(size=(m, 3))
    want, _ = solve_moments(TiledUpper(m).add_full(gram), np.asfortranarray(kmm), cross, alphas)
    with count_crossings() as seen:
        got, jitter = solve_moments(xs.asarray(gram), xs.asarray(kmm), xs.asarray(cross),
                                    alphas)  # fmt: skip
    assert type(got) is np.ndarray
    assert jitter == 0.0
    assert max(seen.sizes) == m * 3  # c crosses once; the rest are scalars
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * abs(want).max())


def test_the_million_row_nystrom_plan_fits_one_h200():
    """The 10^6-row job at m = 50,000 in float64 (MNIST's d), rows on the device: its plan's
    device bytes -- the rows, the m x m sum, K_mm, the system and its factor, the blocks
    in flight -- fit an H200's 139 GiB, and the plan says so before any pass."""
    from npt_dask.ridge.planning import plan_ridge

    h200 = 139 * 2**30
    plan = plan_ridge(n=1_000_000, m=50_000, d=784, k=10, itemsize=8, solver="direct",
                      memory_budget=64 * 2**30, threads=16, device_budget=h200)  # fmt: skip
    assert plan.route == "nystrom-direct"
    assert 4 * 8 * 50_000**2 <= plan.device_bytes <= h200
    assert plan.memory["device_rows"] == 8 * 784 * 1_000_000


def test_a_singular_device_system_takes_the_jitter_ladder_then_least_squares():
    rank_one = np.outer(np.arange(1.0, 5.0), np.arange(1.0, 5.0))
    c, jitter = solve_there(xs.asarray(rank_one + 1e-3 * np.eye(4)), xs.asarray(np.ones((4, 1))),
                            0.0)  # fmt: skip
    assert jitter == 0.0
    with pytest.warns(Warning, match="least-squares"):
        c, jitter = solve_there(xs.asarray(rank_one), xs.asarray(np.ones((4, 1))), 0.0,
                                jitter_up_to=0.0)  # fmt: skip
    assert np.isnan(jitter)
    assert type(c) is np.ndarray


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"landmarks": 20, "solver": "direct"}, "Nystrom kernel ridge with m=20 centres"),
    ({"solver": "direct"}, "Exact kernel ridge of n=300 rows"),
])  # fmt: skip
def test_a_ridge_plan_over_the_device_budget_is_refused_before_any_pass(monkeypatch, kwargs, words):
    """Rows on a device (the default budget stands in): a route whose device part is over
    ``device_memory_budget`` is refused naming both budgets and the fix."""
    monkeypatch.setattr("npt_dask.engine.budget.default_device_budget", lambda *a: 4096)
    x, y, _ = _data()
    with pytest.raises(InputError, match=r"device_memory_budget=4\.0 KiB") as caught:
        KernelRidge(alpha=0.1, kernel="rbf", gamma=0.3, random_state=0, **kwargs).fit(x, y)
    assert words in str(caught.value)
    assert "memory_budget=" in str(caught.value)
    model = KernelRidge(alpha=0.1, kernel="rbf", gamma=0.3, random_state=0,
                        device_memory_budget="1GiB", **kwargs).fit(x, y)  # fmt: skip
    assert 4096 < model.plan_["device_bytes"] <= 2**30  # the plan refused above, now in budget


def test_a_device_budget_for_host_rows_warns_and_changes_nothing():
    x, y, _ = _data()
    want = KernelRidge(alpha=0.1, kernel="rbf", gamma=0.3, landmarks=20, random_state=0).fit(x, y)
    with pytest.warns(MemoryBudgetWarning, match=r"device_memory_budget=1\.0 GiB has no effect"):
        got = KernelRidge(alpha=0.1, kernel="rbf", gamma=0.3, landmarks=20, random_state=0,
                          device_memory_budget="1GiB").fit(x, y)  # fmt: skip
    np.testing.assert_array_equal(got.dual_coef_, want.dual_coef_)


def _dense_reference(model: KernelRidge, x, y, w, alphas) -> np.ndarray:
    """The dual coefficients by dense numpy/scikit-learn: exact routes solve
    ``(K + alpha W^-1) c = y`` (scikit-learn's KernelRidge); Nystrom routes the normal
    equations ``(C^T W C + alpha K_mm) c = C^T W y`` on the model's own centres."""
    from sklearn.kernel_ridge import KernelRidge as Reference
    from sklearn.metrics.pairwise import rbf_kernel

    if model.landmarks is None:
        return Reference(alpha=alphas, kernel="rbf", gamma=0.3).fit(x, y, w).dual_coef_
    z = np.asarray(model.X_fit_)
    c, kmm = rbf_kernel(x, z, gamma=0.3), rbf_kernel(z, z, gamma=0.3)
    ww = np.ones(len(x)) if w is None else w
    return np.column_stack([np.linalg.solve(c.T @ (ww[:, None] * c) + a * kmm, c.T @ (ww * y[:, j]))
                            for j, a in enumerate(alphas)])  # fmt: skip


ROUTES = [("direct", 40, True), ("cg", 40, False), ("direct", None, True), ("cg", None, False)]


@pytest.mark.parametrize(("solver", "landmarks", "weighted"), ROUTES)
def test_numpy_ridge_routes_equal_a_dense_reference(solver, landmarks, weighted):
    """Every host route against dense numpy: direct routes to 1e-11 of the largest coefficient
    (measured 2e-13), CG at tol 1e-8 to 1e-6 (measured 8e-8); a machine's BLAS moves the
    last digits, so a portable check compares with a reference, not with stored digits."""
    x, y, w = _data()
    alphas = [0.1, 0.01]
    tol = {"tol": 1e-8, "max_iter": 300} if solver == "cg" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = KernelRidge(alpha=alphas, kernel="rbf", gamma=0.3, random_state=0,
                            chunk_size=64, landmarks=landmarks, solver=solver,
                            **tol).fit(x, y, sample_weight=w if weighted else None)  # fmt: skip
    want = _dense_reference(model, x, y, w if weighted else None, alphas)
    got = np.asarray(model.dual_coef_)
    bound = 1e-11 if solver == "direct" else 1e-6
    assert np.abs(got - want).max() <= bound * np.abs(want).max()


@pytest.mark.parametrize("name", ["KernelRidge", "KernelRidgeClassifier", "KernelRidgeCV",
                                  "KernelRidgeClassifierCV"])  # fmt: skip
def test_device_gpu_without_cupy_is_the_command_lines_refusal(monkeypatch, name):
    """``device="gpu"`` where CuPy is missing: the CLI's DeviceError naming the install,
    before any work; a device no one knows is the parameter's InputError."""
    import sys

    import npt_dask
    from npt_dask.arrays.device import check_device
    from npt_dask.errors import DeviceError

    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    x, y, _ = _data(40)
    labels = (y[:, 0] > 0).astype(int)
    target = labels if "Classifier" in name else y[:, 0]
    with pytest.raises(DeviceError) as cli:
        check_device("gpu")
    estimator = getattr(npt_dask, name)
    with pytest.raises(DeviceError, match=r"pip install 'npt-dask\[gpu\]'") as got:
        estimator(device="gpu").fit(x, target)
    assert str(got.value) == str(cli.value)
    with pytest.raises(InputError, match=rf"'device' parameter of {name} must be one of"):
        estimator(device="cuda").fit(x, target)
    assert estimator(device="cpu").fit(x, target).predict(x[:3]).shape == (3,)
