"""The lazy kernel matrix and the streamed symmetric operator."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from npt_dask import InputError, KernelSpec
from npt_dask.engine.kernel_matrix import kernel_diagonal, kernel_matrix
from npt_dask.engine.operator import KernelOperator
from npt_dask.engine.sums import FAN_IN
from tests.conftest import centered_gram

IRREGULAR = ((113, 300, 7, 250, 130), (9,))


@pytest.fixture
def x(rng):
    return rng.normal(size=(800, 9))


@pytest.fixture
def spec():
    return KernelSpec("rbf", gamma=0.1)


def test_kernel_matrix_is_lazy_and_exact(x, spec, task_counter):
    z = da.from_array(x[:300], chunks=(70, -1))
    xx = da.from_array(x, chunks=IRREGULAR)
    k = kernel_matrix(z, xx, spec)
    assert task_counter.tasks == 0
    assert k.chunks == ((70, 70, 70, 70, 20), IRREGULAR[0])
    np.testing.assert_allclose(k.compute(), spec(x[:300], x), atol=1e-14)
    np.testing.assert_allclose(kernel_diagonal(z, spec).compute(), 1.0)


def test_kernel_matrix_rejects_feature_chunks(x, spec):
    xx = da.from_array(x, chunks=(100, 3))
    with pytest.raises(InputError, match=r"rechunk\(\{1: -1\}\)"):
        kernel_matrix(xx, xx, spec)


@pytest.mark.parametrize("cache", ["recompute", "memory"])
@pytest.mark.parametrize("center", [True, False])
def test_operator_matches_dense(x, spec, rng, cache, center):
    op = KernelOperator(da.from_array(x, chunks=IRREGULAR), spec, center=center, cache=cache)
    full = spec(x, x)
    ref = centered_gram(full) if center else full
    for _ in range(2):
        v = rng.normal(size=(800, 6))
        np.testing.assert_allclose(op.matmat(v), ref @ v, atol=1e-11)
    np.testing.assert_allclose(op.row_means, full.mean(axis=1), atol=1e-14)
    assert op.grand_mean == pytest.approx(full.mean(), abs=1e-14)
    assert op.passes == 2  # the row means rode along with the first pass


def test_operator_float32_blocks_accumulate_in_float64(x, spec, rng):
    x32 = x.astype(np.float32)
    op = KernelOperator(da.from_array(x32, chunks=(200, -1)), spec, center=True)
    v = rng.normal(size=(800, 4))
    got = op.matmat(v)
    assert got.dtype == np.float64
    # block entries carry float32 rounding (~6e-8); the sums over 800 rows do not add more
    ref = centered_gram(spec(x32, x32).astype(np.float64)) @ v
    np.testing.assert_allclose(got, ref, atol=5e-6)


def test_each_block_evaluated_once_per_pass(x, spec, rng, monkeypatch):
    calls: list[tuple[int, int]] = []
    original = KernelSpec.__call__

    def counting(self, a, b, out=None):
        calls.append((a.shape[0], b.shape[0]))
        return original(self, a, b, out=out)

    monkeypatch.setattr(KernelSpec, "__call__", counting)
    op = KernelOperator(da.from_array(x, chunks=(200, -1)), spec, cache="recompute")
    op.matmat(rng.normal(size=(800, 3)))
    assert len(calls) == op.n_blocks == 10  # 4 row blocks: 4 * 5 / 2, not 16
    calls.clear()
    cached = KernelOperator(da.from_array(x, chunks=(200, -1)), spec, cache="memory")
    for _ in range(3):
        cached.matmat(rng.normal(size=(800, 3)))
    assert len(calls) == 10  # kept between passes


def test_auto_cache_follows_budget(x, spec, rng, monkeypatch):
    xx = da.from_array(x, chunks=(200, -1))
    need = (800 * 800 + 4 * 200 * 200) // 2 * 8  # the upper-triangle blocks, float64
    assert KernelOperator(xx, spec, cache="auto", cache_budget=need).cache == "memory"
    assert KernelOperator(xx, spec, cache="auto", cache_budget=200 * 200 * 8 - 1).cache == (
        "recompute"
    )
    block = 200 * 200 * 8
    partial = KernelOperator(xx, spec, cache="auto", cache_budget=4 * block)
    assert partial.cache == "partial"
    assert partial.cached_pairs == {(0, 0), (0, 1), (0, 2), (0, 3)}
    calls = []
    original = KernelSpec.__call__
    monkeypatch.setattr(
        KernelSpec,
        "__call__",
        lambda self, a, b, out=None: calls.append(1) or original(self, a, b, out=out),
    )
    ref = centered_gram(spec(x, x))
    calls.clear()
    for _ in range(3):
        v = rng.normal(size=(800, 3))
        np.testing.assert_allclose(partial.matmat(v), ref @ v, atol=1e-11)
    assert len(calls) == 4 + 3 * 6  # 4 kept blocks once, the other 6 every pass


def test_operator_tree_sum_many_blocks(rng, spec):
    x = rng.normal(size=(610, 4))
    monkey_split = FAN_IN  # the fan-in of every summation tree (npt_dask.engine.blocks)
    op = KernelOperator(da.from_array(x, chunks=(30, -1)), spec, center=True)  # 21 blocks
    v = rng.normal(size=(610, 2))
    np.testing.assert_allclose(op.matmat(v), centered_gram(spec(x, x)) @ v, atol=1e-11)
    assert len(op.row_chunks) > monkey_split


def test_operator_rejects_bad_v(x, spec):
    op = KernelOperator(da.from_array(x, chunks=(200, -1)), spec)
    with pytest.raises(InputError, match="shape"):
        op.matmat(np.ones((10, 2)))
    with pytest.raises(InputError, match="cache"):
        KernelOperator(da.from_array(x, chunks=(200, -1)), spec, cache="disk")
