"""Eigensolvers against scipy on matrices with known spectra."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from npt_dask import (
    DegenerateKernelError,
    InputError,
    NegativeEigenvalueError,
    NegativeEigenvalueWarning,
    RankWarning,
)
from npt_dask.npt.eigen import (
    EigenResult,
    block_krylov_eigh,
    dense_eigh,
    flip_signs,
    krylov_shape,
    select_eigenpairs,
)
from tests.conftest import align_signs


def _matrix(rng, spectrum):
    q, _ = np.linalg.qr(rng.normal(size=(spectrum.size, spectrum.size)))
    return (q * spectrum) @ q.T


@pytest.fixture
def decaying(rng):
    spectrum = 50.0 * np.exp(-np.arange(600) / 20.0)
    return _matrix(rng, spectrum), spectrum


@pytest.mark.parametrize("max_basis", [None, 95])
def test_krylov_matches_scipy(decaying, max_basis):
    k, spectrum = decaying
    res = block_krylov_eigh(
        lambda v: k @ v, 600, 25, tol=1e-10, random_state=0, max_basis=max_basis
    )
    assert res.converged
    np.testing.assert_allclose(res.eigenvalues, spectrum[:25], rtol=1e-12)
    _w, v = scipy.linalg.eigh(k)
    ref = v[:, ::-1][:, :25]
    np.testing.assert_allclose(align_signs(res.eigenvectors, ref), ref, atol=1e-8)
    # reported residuals are the true ones
    true = np.linalg.norm(k @ res.eigenvectors - res.eigenvectors * res.eigenvalues, axis=0)
    np.testing.assert_allclose(res.residuals, true / spectrum[0], atol=1e-13)
    assert res.residuals.max() <= 1e-10


def test_krylov_stops_at_max_passes(decaying):
    k, _ = decaying
    res = block_krylov_eigh(lambda v: k @ v, 600, 25, tol=1e-14, max_passes=2, random_state=0)
    assert res.passes == 2
    assert not res.converged


def test_krylov_counts_passes(decaying):
    k, _ = decaying
    calls = []
    res = block_krylov_eigh(lambda v: calls.append(v.shape) or k @ v, 600, 10, random_state=1)
    assert res.passes == len(calls)
    assert all(c == (600, 20) for c in calls)


def test_krylov_exact_on_low_rank(rng):
    """Rank 5, 8 wanted: the Krylov space is exhausted and the extra pairs are zero."""
    a = rng.normal(size=(200, 5))
    k = a @ a.T.copy()
    res = block_krylov_eigh(lambda v: k @ v, 200, 8, random_state=0)
    w = scipy.linalg.eigvalsh(k)[::-1]
    np.testing.assert_allclose(res.eigenvalues[:5], w[:5], rtol=1e-12)
    assert np.abs(res.eigenvalues[5:]).max() < 1e-10 * w[0]


def test_dense_matches_scipy(decaying):
    k, spectrum = decaying
    res = dense_eigh(k, 30)
    np.testing.assert_allclose(res.eigenvalues, spectrum[:30], rtol=1e-11)
    assert res.min_eigenvalue == pytest.approx(spectrum[-1], abs=1e-12)


def test_flip_signs_deterministic(rng):
    v = rng.normal(size=(50, 4))
    flipped = flip_signs(v * np.array([1, -1, 1, -1]))
    np.testing.assert_array_equal(flipped, flip_signs(v))
    assert np.all(flipped[np.argmax(np.abs(flipped), axis=0), range(4)] > 0)


def _result(values, min_value=None):
    n = len(values)
    return EigenResult(
        np.asarray(values, float),
        np.eye(n),
        np.zeros(n),
        1,
        True,
        "dense",
        float(min(values) if min_value is None else min_value),
    )


def test_select_truncates_below_rtol():
    with pytest.warns(RankWarning, match="Only 2 eigenvalues"):
        values, vectors, _ = select_eigenpairs(_result([4.0, 1.0, 1e-12, 0.0]), 3, rtol=1e-10)
    np.testing.assert_array_equal(values, [4.0, 1.0])
    assert vectors.shape == (4, 2)


def test_select_full_rank_none_keeps_all_significant():
    values, _, _ = select_eigenpairs(_result([4.0, 1.0, 1e-12]), None, rtol=1e-10)
    np.testing.assert_array_equal(values, [4.0, 1.0])


def test_negative_eigenvalues_are_reported():
    res = _result([4.0, 1.0, -0.5])
    with pytest.warns(NegativeEigenvalueWarning, match=r"-0\.5"):
        values, _, _ = select_eigenpairs(res, 2)
    np.testing.assert_array_equal(values, [4.0, 1.0])
    with pytest.raises(NegativeEigenvalueError, match="not positive semi-definite") as info:
        select_eigenpairs(res, 2, on_negative="raise")
    assert not isinstance(info.value, DegenerateKernelError)  # a spectrum to work on
    with pytest.raises(DegenerateKernelError, match="no positive eigenvalue"):
        select_eigenpairs(_result([-1.0, -2.0]), 1)
    with pytest.raises(DegenerateKernelError, match="above rounding"):
        select_eigenpairs(_result([1e-14, -1.0]), 1)


def test_tiny_negative_noise_is_not_reported():
    values, _, _ = select_eigenpairs(_result([4.0, 1.0], min_value=-1e-13), 2)
    assert values.size == 2


def test_restart_keeps_full_block_width(rng):
    """After a thick restart the next block is b columns wide, not what was left."""
    spectrum = np.exp(-np.arange(60) / 15.0)
    k = _matrix(rng, spectrum)
    widths = []
    res = block_krylov_eigh(
        lambda v: widths.append(v.shape[1]) or k @ v,
        60,
        5,
        block_size=10,
        max_basis=59,  # the restart comes when fewer than b columns are left
        tol=1e-13,
        random_state=0,
    )
    assert len(widths) > 6  # at least one restart happened
    assert res.converged
    assert set(widths) == {10}
    np.testing.assert_allclose(res.eigenvalues, spectrum[:5], rtol=1e-11)


def test_krylov_rejects_bad_start_and_basis(decaying):
    k, _ = decaying
    with pytest.raises(ValueError, match=r"'start' parameter must be an array of shape"):
        block_krylov_eigh(lambda v: k @ v, 600, 5, start=np.ones((600, 2)))
    with pytest.raises(ValueError, match="max_basis"):
        block_krylov_eigh(lambda v: k @ v, 600, 5, max_basis=20)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_components": 0}, "n_components"),
        ({"n_components": 61}, "n_components"),
        ({"block_size": 0}, "block_size"),
        ({"max_basis": 12}, "max_basis"),
        ({"start": np.ones((60, 1))}, "start"),
    ],
)
def test_krylov_sizes_are_refused_by_name(kwargs, name):
    """Each size outside the table is an InputError that names its parameter."""
    args = {"n_components": 5, "block_size": 4, **kwargs}
    with pytest.raises(InputError, match=f"The '{name}' parameter") as caught:
        block_krylov_eigh(lambda v: v, 60, **args)
    assert caught.value.param == name


def test_block_narrower_than_components(decaying):
    """b < r: the basis grows b columns a pass; pairs are taken once it holds r."""
    k, spectrum = decaying
    calls = []
    res = block_krylov_eigh(
        lambda v: calls.append(1) or k @ v,
        600,
        12,
        block_size=4,
        tol=1e-10,
        max_passes=2,
        random_state=0,
    )
    assert len(calls) >= 3  # max_passes is extended until 12 columns exist
    res = block_krylov_eigh(lambda v: k @ v, 600, 12, block_size=4, tol=1e-10, random_state=0)
    assert res.converged
    np.testing.assert_allclose(res.eigenvalues, spectrum[:12], rtol=1e-12)


# --- large r: the checkpointed, restarted, locking solver -----------------------------


def _check_against_dense(k, res, r, tol, value_rtol=1e-9):
    """Eigenvalues, exact residuals and (cluster-aware) eigenvectors against scipy."""
    w, v = scipy.linalg.eigh(k)
    w, v = w[::-1], v[:, ::-1]
    assert res.converged
    assert res.eigenvalues.shape == (r,)
    assert res.eigenvectors.shape == (k.shape[0], r)
    assert np.all(np.diff(res.eigenvalues) <= 0)
    np.testing.assert_allclose(res.eigenvalues, w[:r], rtol=value_rtol, atol=tol * w[0])
    u = res.eigenvectors
    np.testing.assert_allclose(u.T @ u, np.eye(r), atol=1e-10)
    true = np.linalg.norm(k @ u - u * res.eigenvalues, axis=0) / abs(w[0])
    np.testing.assert_allclose(res.residuals, true, atol=1e-13)
    assert res.residuals.max() <= tol
    # eigenvectors: per vector where the eigenvalue is isolated, per subspace in clusters
    gap = tol * abs(w[0]) * 1e3
    start = 0
    while start < r:
        stop = start + 1
        while stop < len(w) and w[stop - 1] - w[stop] < gap:
            stop += 1
        ref = v[:, start:stop]
        mine = u[:, start : min(stop, r)]
        if stop - start == 1:
            np.testing.assert_allclose(align_signs(mine, ref), ref, atol=1e-5)
        else:  # the computed columns lie in the cluster's eigenspace
            np.testing.assert_allclose(np.linalg.norm(ref.T @ mine, axis=0), 1.0, atol=1e-8)
        start = stop


def test_krylov_shape():
    assert krylov_shape(600, 10) == (20, 240)  # the historical width and cap
    assert krylov_shape(10_000, 100) == (120, 1440)
    assert krylov_shape(10_000, 1000) == (100, 4200)
    assert krylov_shape(10_000, 3000) == (300, 10_000)  # capped by n
    b, cap = krylov_shape(50, 40)
    assert b == 50
    assert cap == 50


def test_slow_decay(rng):
    """r = 150 of n = 600 with an algebraically decaying spectrum (the rule of
    :func:`test_large_r_slow_decay`, at a quarter of its size)."""
    spectrum = 1.0 / (1.0 + np.arange(600) / 30.0)
    k = _matrix(rng, spectrum)
    res = block_krylov_eigh(lambda v: k @ v, 600, 150, tol=1e-8, random_state=0, dense_fraction=1.0)
    assert "dense" not in res.info
    _check_against_dense(k, res, 150, 1e-8)


def test_clusters(rng):
    """Repeated and tightly clustered eigenvalues, r = 100 of n = 600 cutting through none
    of them (the rule of :func:`test_large_r_clusters`, at a quarter of its size)."""
    top = np.repeat(np.linspace(10.0, 1.0, 10), 10)  # 10 eigenvalues of multiplicity 10
    top = top + np.tile(np.arange(10) * 1e-12, 10)  # ... split at rounding level
    spectrum = np.concatenate([top, np.linspace(0.5, 0.0, 500)])
    k = _matrix(rng, spectrum)
    res = block_krylov_eigh(lambda v: k @ v, 600, 100, tol=1e-9, random_state=1, dense_fraction=1.0)
    _check_against_dense(k, res, 100, 1e-9)


@pytest.mark.slow  # test_slow_decay checks the same rule at r = 150 of 600
def test_large_r_slow_decay(rng):
    """r = 500 of n = 1,500 with an algebraically decaying spectrum."""
    spectrum = 1.0 / (1.0 + np.arange(1500) / 30.0)
    k = _matrix(rng, spectrum)
    res = block_krylov_eigh(
        lambda v: k @ v, 1500, 500, tol=1e-8, random_state=0, dense_fraction=1.0
    )
    assert "dense" not in res.info
    _check_against_dense(k, res, 500, 1e-8)


@pytest.mark.slow  # test_clusters checks the same rule at r = 100 of 600
def test_large_r_clusters(rng):
    """Repeated and tightly clustered eigenvalues, r = 500 cutting through none of them."""
    top = np.repeat(np.linspace(10.0, 1.0, 50), 10)  # 50 eigenvalues of multiplicity 10
    top = top + np.tile(np.arange(10) * 1e-12, 50)  # ... split at rounding level
    spectrum = np.concatenate([top, np.linspace(0.5, 0.0, 1000)])
    k = _matrix(rng, spectrum)
    res = block_krylov_eigh(
        lambda v: k @ v, 1500, 500, tol=1e-9, random_state=1, dense_fraction=1.0
    )
    _check_against_dense(k, res, 500, 1e-9)


@pytest.mark.slow
def test_large_r_restart_and_lock(rng):
    """A basis capped at r + 2 b: thick restarts lock converged pairs, results unchanged."""
    spectrum = 50.0 * np.exp(-np.arange(1500) / 150.0)
    k = _matrix(rng, spectrum)
    res = block_krylov_eigh(
        lambda v: k @ v,
        1500,
        500,
        block_size=100,
        max_basis=700,
        tol=1e-8,
        random_state=0,
        max_passes=200,
        dense_fraction=1.0,
    )
    assert res.info["restarts"] >= 1
    assert res.info["locked"] >= 1
    _check_against_dense(k, res, 500, 1e-8)


@pytest.mark.slow
def test_large_r_rbf_random_data(rng):
    """A centred RBF kernel on random points: r = 600 of n = 2,000 equal dense eigh."""
    x = rng.normal(size=(2000, 10))
    sq = (x * x).sum(1)
    k = np.exp(-(sq[:, None] + sq[None, :] - 2 * x @ x.T.copy()) / (2 * 10.0))
    k = k - k.mean(0) - k.mean(1)[:, None] + k.mean()
    k = (k + k.T) / 2
    calls = []
    res = block_krylov_eigh(
        lambda v: calls.append(v.shape[1]) or k @ v,
        2000,
        600,
        tol=1e-8,
        random_state=3,
        dense_fraction=1.0,
    )
    assert res.passes == len(calls)
    assert res.block_size == calls[0]
    _check_against_dense(k, res, 600, 1e-8)


def test_large_r_deterministic(rng):
    spectrum = 1.0 / (1.0 + np.arange(600) / 20.0)
    k = _matrix(rng, spectrum)
    runs = [
        block_krylov_eigh(lambda v: k @ v, 600, 200, random_state=7, dense_fraction=1.0)
        for _ in range(2)
    ]
    np.testing.assert_array_equal(runs[0].eigenvalues, runs[1].eigenvalues)
    np.testing.assert_array_equal(runs[0].eigenvectors, runs[1].eigenvectors)
    assert runs[0].passes == runs[1].passes


def test_large_r_min_eigenvalue_sees_negative_part(rng):
    """An indefinite operator: the smallest Ritz value reports the negative part."""
    spectrum = np.concatenate([np.linspace(5.0, 1.0, 240), np.linspace(0.5, -2.0, 360)])
    k = _matrix(rng, spectrum)
    res = block_krylov_eigh(lambda v: k @ v, 600, 150, random_state=0, dense_fraction=1.0)
    assert res.converged
    np.testing.assert_allclose(res.eigenvalues, spectrum[:150], rtol=1e-10)
    assert res.min_eigenvalue < -1.0


def test_large_r_fraction_goes_through_the_operator(rng):
    """r >= n / 4: identity blocks through the operator, then one dense eigh."""
    spectrum = 1.0 / (1.0 + np.arange(800) / 30.0)
    k = _matrix(rng, spectrum)
    calls = []
    res = block_krylov_eigh(
        lambda v: calls.append(v.shape[1]) or k @ v, 800, 200, block_size=100, random_state=0
    )
    assert res.info["dense"]
    assert len(calls) == res.passes == 8
    _check_against_dense(k, res, 200, 1e-8)
    assert res.min_eigenvalue == pytest.approx(spectrum[-1], rel=1e-8)
