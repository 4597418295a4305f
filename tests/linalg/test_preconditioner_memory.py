"""Falkon's preconditioner is built in the m x m array it is given: what the ridge plan
counts for it (one m x m matrix in the kernel precision) is what it holds."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from npt_dask.linalg.preconditioners import FalkonCholesky


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_falkon_build_holds_no_second_matrix(dtype):
    m = 1200
    x = np.random.default_rng(0).normal(size=(m, 6))
    sq = (x * x).sum(axis=1)
    kmm = np.asfortranarray(np.exp(-0.1 * (sq[:, None] + sq[None, :] - 2 * x @ x.T)), dtype)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        pc = FalkonCholesky.build(kmm, 1e-4)
        extra = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert pc.factors is kmm
    assert extra < 0.05 * kmm.nbytes, extra / kmm.nbytes
