"""Centres prepared once per process (:meth:`KernelSpec.prepare`, ``blocks._PREPARED``):
the same blocks bit for bit, nothing kept past the rows it was made of, and a preparation
for one kernel never used by another."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import scipy.sparse
from sklearn.metrics.pairwise import rbf_kernel

from npt_dask.engine.blocks import _PREPARED, PREPARED_BYTES, scratch_block
from npt_dask.kernels import KERNELS, Prepared, make_kernel

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(KERNELS))
def test_prepared_centres_give_the_same_block_bit_for_bit(name, dtype):
    z = (RNG.random((70, 9)) + 3.0).astype(dtype)  # far from the origin: the shift matters
    c = (RNG.random((130, 9)) + 3.0).astype(dtype)
    spec = make_kernel(name, gamma=0.4)
    want = spec(z, c)
    prepared = spec.prepare(c)
    assert isinstance(prepared, Prepared) == (name == "rbf")
    assert np.array_equal(spec(z, prepared), want)
    for _ in range(2):  # the first call prepares, the second reuses
        assert np.array_equal(scratch_block(z, c, spec), want)


def test_prepared_rbf_matches_scikit_learn_and_falls_back_for_sparse_rows():
    z, c = RNG.random((40, 6)), RNG.random((50, 6))
    spec = make_kernel("rbf", gamma=0.7)
    prepared = spec.prepare(c)
    np.testing.assert_allclose(spec(z, prepared), rbf_kernel(z, c, gamma=0.7), rtol=1e-12)
    sparse = scipy.sparse.csr_matrix(np.where(z > 0.5, z, 0.0))
    np.testing.assert_array_equal(spec(sparse, prepared), spec(sparse, c))


def test_a_preparation_for_another_kernel_is_not_used():
    z, c = RNG.random((30, 5)), RNG.random((20, 5))
    prepared = make_kernel("rbf", gamma=0.5).prepare(c)
    for name in ("linear", "polynomial", "laplacian"):
        spec = make_kernel(name, gamma=0.5)
        np.testing.assert_array_equal(spec(z, prepared), spec(z, c))


def test_the_memo_holds_no_rows_past_their_life_and_stays_within_its_bound():
    spec = make_kernel("rbf", gamma=0.1)
    z = RNG.random((10, 8))
    c = RNG.random((200, 8))
    scratch_block(z, c, spec)
    key = (id(c), "rbf")
    assert key in _PREPARED.entries
    del c
    gc.collect()
    assert key not in _PREPARED.entries  # gone with its rows
    held = [RNG.random((64, 8)) for _ in range(5)]
    for c in held:
        scratch_block(z, c, spec)
    assert sum(p.nbytes for _, p in _PREPARED.entries.values()) <= PREPARED_BYTES


def test_centres_too_big_for_the_memo_are_prepared_and_not_kept(monkeypatch):
    spec = make_kernel("rbf", gamma=0.1)
    monkeypatch.setattr(_PREPARED, "limit", 1000)
    z, c = RNG.random((10, 8)), RNG.random((300, 8))
    np.testing.assert_array_equal(scratch_block(z, c, spec), spec(z, c))
    assert (id(c), "rbf") not in _PREPARED.entries
