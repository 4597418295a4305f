"""What a Nyström CG fit holds is what its plan counts: the kernel blocks (mapped buffers,
visible to tracemalloc), each task's shifted rows, and no copy of the caller's data."""

from __future__ import annotations

import gc
import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse

import npt_dask as npt
from npt_dask.arrays.buffers import populated_empty
from npt_dask.engine.budget import operand_bytes
from npt_dask.kernels import KernelSpec
from npt_dask.runtime.scheduler import numpy_rows

MIB = 2**20


def _traced_peak(job):
    """Peak traced bytes above those traced when ``job`` starts, and its result."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = job()
        return tracemalloc.get_traced_memory()[1] - base, result
    finally:
        tracemalloc.stop()


def test_a_mapped_buffer_is_traced_while_it_lives():
    """The kernel blocks live in mappings (``MAP_POPULATE``), not numpy's allocations: the
    memory checks below see them only because each is reported to tracemalloc."""
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        block = populated_empty((2048, 2048), np.float64)  # 32 MiB: a mapping
        held = tracemalloc.get_traced_memory()[0] - start
        view = block[:10]
        del block
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - start
        del view
        gc.collect()
        left = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert held >= 32 * MIB
    assert kept >= 32 * MIB  # a view keeps the mapping
    assert left < MIB


def test_numpy_rows_share_the_array():
    """dask's ``from_array`` copies a numpy array whole (dask >= 2024.12): an ``n x d``
    copy no plan counts. The row chunks are views of the caller's array."""
    x = np.random.default_rng(0).normal(size=(20_000, 100))  # 16 MB
    extra, rows = _traced_peak(lambda: numpy_rows(x, 4096))
    assert extra < 0.05 * x.nbytes, extra / x.nbytes
    shared = rows.map_blocks(lambda b: np.full((len(b), 1), np.shares_memory(b, x)),
                             chunks=(rows.chunks[0], (1,)), dtype=bool)  # fmt: skip
    assert shared.compute().all()
    np.testing.assert_array_equal(rows.compute(), x)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_an_rbf_block_holds_one_shifted_copy_of_its_rows(dtype):
    """Against prepared centres, an rbf block into a given buffer holds the rows shifted
    (and scaled in place) once, in float64 as they are computed: what
    :func:`~npt_dask.engine.budget.operand_bytes` counts (it held two, or three for
    float32 rows)."""
    rng = np.random.default_rng(1)
    rows, m, d = 4096, 64, 512
    a, b = rng.normal(size=(rows, d)).astype(dtype), rng.normal(size=(m, d)).astype(dtype)
    spec = KernelSpec("rbf", gamma=0.5 / d)
    prepared = spec.prepare(b)
    out = np.empty((rows, m), dtype=dtype)
    want = spec(a, b)
    extra, block = _traced_peak(lambda: spec(a, prepared, out=out))
    assert block is out
    np.testing.assert_array_equal(block, want)  # the same numbers as without the buffer
    vectors = 4 * 8 * (rows + m)  # the rows' norms and their scaled copies
    vectors += 8 * np.getbufsize()  # and a ufunc's own buffer, which numpy takes or not
    assert extra <= operand_bytes(rows, d, np.dtype(dtype).itemsize) + vectors, (
        extra / (rows * d * 8))  # fmt: skip


def test_an_rbf_block_never_scales_the_callers_rows():
    """Only rows the block shifted itself are scaled in place: rows it was given (dense
    against sparse centres, which are not shifted; the same array on both sides) are left
    as they were, and a second block equals the first."""
    rng = np.random.default_rng(2)
    a = rng.normal(size=(50, 20))
    sparse = scipy.sparse.random(30, 20, density=0.3, format="csr", random_state=3)
    spec = KernelSpec("rbf", gamma=0.1)
    for b in (sparse, spec.prepare(sparse), a):
        before = a.copy()
        first = spec(a, b)
        np.testing.assert_array_equal(a, before)
        np.testing.assert_array_equal(spec(a, b), first)
    want = np.exp(-0.1 * ((a[:, None, :] - sparse.toarray()[None]) ** 2).sum(-1))
    np.testing.assert_allclose(spec(a, sparse), want, rtol=1e-12)


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_nystrom_cg_holds_no_more_than_its_plan(precision):
    """Nyström CG on two row tasks at once: peak traced memory (numpy's allocations and
    the mapped kernel blocks) within the plan's bytes. It was 1.37x the plan in float64
    and 1.75x in float32 here (the caller's rows copied whole, each task's rows shifted
    and scaled into two copies), 1.10x at m = 1,500, d = 200."""
    n, m, d = 16_384, 600, 400  # two tasks of 8,192 rows
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(n, d)), rng.normal(size=n)
    common = {"alpha": 1e-3, "gamma": 0.5 / d, "solver": "cg", "precision": precision}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # max_iter reached: the memory is the point
        npt.KernelRidge(landmarks=50, max_iter=1, **common).fit(x[:300], y[:300])  # imports
        peak, est = _traced_peak(
            lambda: npt.KernelRidge(landmarks=m, max_iter=2, random_state=0, **common).fit(x, y)
        )
    plan = est.plan_
    assert plan["route"] == "nystrom-cg"
    assert not plan["exact"]
    assert plan["row_chunk"] == 8192
    assert peak <= sum(plan["memory"].values()), (peak / sum(plan["memory"].values()), plan)
