"""Eigensolvers against scipy on matrices with known spectra."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from npt_dask import NegativeEigenvalueError, NegativeEigenvalueWarning, RankWarning
from npt_dask.eigen import (
    EigenResult,
    block_krylov_eigh,
    dense_eigh,
    flip_signs,
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
    with pytest.raises(NegativeEigenvalueError, match="not positive semi-definite"):
        select_eigenpairs(res, 2, on_negative="raise")
    with pytest.raises(NegativeEigenvalueError, match="no positive eigenvalue"):
        select_eigenpairs(_result([-1.0, -2.0]), 1)


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
    with pytest.raises(ValueError, match="start must have shape"):
        block_krylov_eigh(lambda v: k @ v, 600, 5, start=np.ones((600, 2)))
    with pytest.raises(ValueError, match="max_basis"):
        block_krylov_eigh(lambda v: k @ v, 600, 5, max_basis=20)


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
