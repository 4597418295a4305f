"""Ridge's driver algebra in the namespace of its vectors: conjugate gradient, Cholesky,
triangular solves and the preconditioners' solves give numpy's results on
``array_api_strict`` (the standard and nothing more: a stand-in for a GPU namespace),
keep that namespace, and cross to the host only k numbers at a time.

References are independent of the code under test: scipy's and numpy's factorisations
and solves, and the normal equations built densely here from ``pairwise_kernels``.
"""

from __future__ import annotations

import array_api_compat
import numpy as np
import pytest
import scipy.linalg
from sklearn.metrics.pairwise import pairwise_kernels

from npt_dask.arrays.host import count_crossings
from npt_dask.linalg import cg, symmetric
from npt_dask.linalg import cholesky as cholesky_module
from npt_dask.linalg.cholesky import cho_solve, cholesky, solve_triangular
from npt_dask.linalg.device_preconditioners import preconditioner_like
from npt_dask.linalg.preconditioners import FalkonCholesky, low_rank_from_coordinates
from npt_dask.linalg.symmetric import normal_matrix_dtype

xs = pytest.importorskip("array_api_strict")

TOL = 1e-14  # never met in the steps compared: every column iterates


def _strict(a):
    return xs.asarray(np.asarray(a))


def _is_strict(a) -> bool:
    return array_api_compat.array_namespace(a).__name__ == "array_api_strict"


def _nystrom(n=300, m=40, k=3, seed=0):
    """Normal matrix ``K_nm^T K_nm + alpha K_mm`` of an RBF kernel, the right-hand side
    ``K_nm^T t`` and ``K_mm``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4))
    knm = pairwise_kernels(x, x[:m], metric="rbf", gamma=0.3)
    kmm = knm[:m]
    alpha = 1e-2 * n
    h = knm.T @ knm + alpha * kmm
    b = knm.T @ rng.normal(size=(n, k))
    return h, b, kmm, alpha / n


def _run(h, b, precondition, steps):
    state = cg.start(b, precondition, TOL)
    for _ in range(steps):
        act = np.flatnonzero(state.active)
        state = cg.step(state, h @ cg.gather(state, [("p", act)]), precondition, TOL, act)
    return state


def _falkon(kmm, alpha_over_weight):
    return FalkonCholesky.build(np.asfortranarray(kmm.copy()), alpha_over_weight)


def _jacobi(h):
    """Diagonal preconditioner of ``h`` in ``h``'s namespace."""
    xp = array_api_compat.array_namespace(h)
    diagonal = xp.linalg.diagonal(h)
    return lambda r: r / diagonal[:, None]


def _well_conditioned(n=200, k=3):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(n, n))
    h = a @ a.T / n + np.diag(rng.uniform(0.5, 2.0, size=n))
    return h, rng.normal(size=(n, k))


def test_cg_steps_on_array_api_strict_are_numpys():
    h, b = _well_conditioned()
    host = _run(h, b, _jacobi(h), 8)
    hs = _strict(h)
    device = _run(hs, _strict(b), _jacobi(hs), 8)
    for name in ("x", "r", "p", "best_x"):
        got = getattr(device, name)
        assert _is_strict(got), name
        want = getattr(host, name)
        assert np.max(np.abs(np.asarray(got) - want)) <= 1e-12 * np.max(np.abs(want)), name
    np.testing.assert_allclose(device.rz, host.rz, rtol=1e-12)
    np.testing.assert_allclose(device.history, host.history, rtol=1e-12)
    assert device.iteration == host.iteration == 8


def test_cg_solves_the_normal_equations_on_array_api_strict():
    h, b, kmm, aw = _nystrom(k=2)
    bs = _strict(b)
    state = _run(_strict(h), bs, preconditioner_like(_falkon(kmm, aw), bs), 60)
    want = np.linalg.solve(h, b)
    np.testing.assert_allclose(np.asarray(state.x), want, rtol=1e-7, atol=1e-9)


def test_cg_verify_restarts_on_array_api_strict_as_on_numpy():
    h, b = _well_conditioned()
    states = []
    for hh, bb in ((h, b), (_strict(h), _strict(b))):
        pre = _jacobi(hh)
        state = _run(hh, bb, pre, 3)
        state.converged[:] = True  # claimed: the true residual decides
        cols = np.arange(b.shape[1])
        cg.verify(state, hh @ cg.gather(state, [("x", cols)]), pre, 1e-3, cols)
        states.append(state)
    host, device = states
    assert not host.verified.any()  # restarted from the true residual
    np.testing.assert_array_equal(device.verified, host.verified)
    np.testing.assert_allclose(np.asarray(device.p), host.p, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(device.rz, host.rz, rtol=1e-12)
    np.testing.assert_allclose(cg.relative_residuals(device), cg.relative_residuals(host),
                               rtol=1e-12)  # fmt: skip


def _recorded_crossings(monkeypatch):
    """The sizes of what crosses through ``cg``'s host boundary, call by call."""
    seen: list[list[int]] = []
    real = cg.to_host

    def record(a):
        parts = a if isinstance(a, tuple | list) else (a,)
        seen.append([int(np.size(np.asarray(p))) for p in parts])
        return real(a)

    monkeypatch.setattr(cg, "to_host", record)
    return seen


@pytest.mark.parametrize("n", [200, 2000])
def test_a_cg_step_crosses_twice_with_k_numbers_whatever_n(monkeypatch, n):
    k = 3
    rng = np.random.default_rng(1)
    a = rng.normal(size=(n, n // 10))
    h = _strict(a @ a.T + np.eye(n))
    b = _strict(rng.normal(size=(n, k)))
    state = cg.start(b, lambda r: r, TOL)
    seen = _recorded_crossings(monkeypatch)
    with count_crossings() as crossed:
        for _ in range(4):
            act = np.flatnonzero(state.active)
            cg.step(state, h @ cg.gather(state, [("p", act)]), lambda r: r, TOL, act)
    assert crossed.count == 2 * 4  # the curvatures; then ||r||^2, r^T z and beta's numerator
    assert all(sum(sizes) <= 3 * k for sizes in seen), seen


def test_cg_state_moves_to_the_host_and_back():
    h, b, _kmm, _aw = _nystrom()
    bs = _strict(b)
    state = _run(_strict(h), bs, lambda r: r, 2)
    saved = cg.host_state(state)
    assert all(isinstance(getattr(saved, f), np.ndarray) for f in ("x", "r", "p", "b", "best_x"))
    back = cg.state_like(saved, bs)
    assert all(_is_strict(getattr(back, f)) for f in ("x", "r", "p", "b", "best_x"))
    np.testing.assert_array_equal(np.asarray(back.x), saved.x)
    host = _run(h, b, lambda r: r, 2)
    assert cg.host_state(host) is host
    assert cg.state_like(host, b) is host


def _spd(m=30, seed=2):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(m, m))
    return a @ a.T + m * np.eye(m)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_is_numpys_on_numpy_and_array_api_strict(upper):
    a = _spd()
    want = np.linalg.cholesky(a)
    want = want.T if upper else want
    np.testing.assert_allclose(cholesky(a, upper=upper), want, rtol=1e-12, atol=1e-12)
    got = cholesky(_strict(a), upper=upper)
    assert _is_strict(got)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


def test_cholesky_on_numpy_is_blocked(monkeypatch):
    """numpy's factor comes from the tiles of :func:`cholesky_module.cholesky_upper` (the guard
    against OpenBLAS's crash on large matrices), tiles narrower than the matrix here."""
    monkeypatch.setattr(cholesky_module, "CHOLESKY_TILE", 7)
    monkeypatch.setattr(symmetric, "SYRK_TILE", 7)
    a = _spd(40)
    np.testing.assert_allclose(cholesky(a), np.linalg.cholesky(a), rtol=1e-12, atol=1e-12)


def test_cholesky_of_an_indefinite_matrix_is_none_everywhere():
    a = np.array([[1.0, 2.0], [2.0, 1.0]])
    assert cholesky(a) is None
    assert cholesky(_strict(a)) is None
    assert a.tolist() == [[1.0, 2.0], [2.0, 1.0]]  # not changed


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("shape", [(30,), (30, 4)])
def test_triangular_solves_are_scipys(lower, trans, shape):
    rng = np.random.default_rng(3)
    a = _spd() + rng.normal(size=(30, 30))  # the other triangle is ignored
    b = rng.normal(size=shape)
    want = scipy.linalg.solve_triangular(a, b, lower=lower, trans=int(trans))
    np.testing.assert_allclose(solve_triangular(a, b, lower=lower, trans=trans), want,
                               rtol=1e-12)  # fmt: skip
    got = solve_triangular(_strict(a), _strict(b), lower=lower, trans=trans)
    assert _is_strict(got)
    assert got.shape == shape
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10)


@pytest.mark.parametrize("upper", [False, True])
def test_cho_solve_solves(upper):
    a = _spd()
    b = np.random.default_rng(4).normal(size=(30, 2))
    want = np.linalg.solve(a, b)
    for arr, rhs in ((a, b), (_strict(a), _strict(b))):
        got = cho_solve(cholesky(arr, upper=upper), rhs, upper=upper)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10)


def test_preconditioners_solve_alike_on_array_api_strict():
    _h, b, kmm, aw = _nystrom()
    falkon = _falkon(kmm, aw)
    rng = np.random.default_rng(5)
    y = rng.normal(size=(300, 6))
    low_rank = low_rank_from_coordinates(y.copy(), 0.1, 1e-12)
    for pc, r in ((falkon, b), (low_rank, rng.normal(size=(300, 2)))):
        rs = _strict(r)
        on_device = preconditioner_like(pc, rs)
        got = on_device(rs)
        assert _is_strict(got)
        assert got.dtype == xs.float64
        np.testing.assert_allclose(np.asarray(got), pc(r), rtol=1e-10, atol=1e-12)
        assert preconditioner_like(pc, r) is pc  # numpy: the host preconditioner itself


def test_the_normal_matrix_is_float64_on_every_namespace():
    assert normal_matrix_dtype(np) == np.float64
    assert normal_matrix_dtype(xs) == xs.float64
