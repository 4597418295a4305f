"""The device seam: one namespace decision for both pass engines, and one host boundary.

Every device-to-host crossing goes through :func:`npt_dask.arrays.host.to_host`; numpy
moves nothing there but still counts, so these CPU tests see where a GPU run would copy:
a pass crosses once per sum (never once per chunk), a Krylov product once per pass.
``array_api_strict`` stands in for a device library: the task bodies keep its namespace
until the boundary and give numpy's results.
"""

from __future__ import annotations

import array_api_compat
import dask.array as da
import numpy as np
import pytest

from npt_dask.arrays.host import count_crossings, to_host
from npt_dask.arrays.namespace import namespace_and_device, on_device_of
from npt_dask.engine.consumers import (
    Apply,
    CentreRows,
    Certificate,
    Cross,
    Gram,
    Moments,
    Normal,
    Projection,
    RowBlock,
    add_into,
)
from npt_dask.engine.kernel_matrix import kernel_diagonal, kernel_matrix
from npt_dask.engine.operator import KernelOperator
from npt_dask.engine.passes import Centres, chunk_tasks, map_rows, row_pass
from npt_dask.engine.projection import projection_terms
from npt_dask.engine.sums import host_rows
from npt_dask.errors import InputError
from npt_dask.kernels import make_kernel
from npt_dask.linalg.tiles import TiledUpper

CHUNKS = 12
ROWS = 25


def _case(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    n = CHUNKS * ROWS
    x = rng.normal(size=(n, 4))
    slot = np.full(n, -1)
    slot[[2, 60, 61, 250]] = [0, 1, 2, 3]
    return {
        "x": x,
        "rows": da.from_array(x, chunks=(ROWS, 4)),
        "centres": rng.normal(size=(9, 4)),
        "weights": rng.normal(size=(9, 3)),
        "p": rng.normal(size=(9, 2)),
        "aux": {"targets": rng.normal(size=(n, 2)), "weights": rng.random(n), "slot": slot},
        "terms": projection_terms(rng.normal(size=(9, 2)), rng.normal(size=9), 0.3, True),
        "spec": make_kernel("rbf", gamma=0.4).resolve(4),
    }


def _sums(case: dict) -> dict:
    return {
        "gram": Gram(),
        "cross": Cross(),
        "cross32": Cross(block_precision=True),
        "normal": Normal(case["p"]),
        "moments": Moments(case["terms"], None, "float64"),
    }


def test_to_host_counts_one_crossing_a_call_and_moves_numpy_nothing():
    a = np.arange(3.0)
    with count_crossings() as seen:
        out = to_host((a, [a, 2.0], b"x"))
    assert seen.count == 1
    assert out[0] is a
    assert out[1][0] is a
    assert out[1][1] == 2.0
    assert out[2] == b"x"


@pytest.mark.parametrize("chains", [1, 3])
def test_a_row_pass_crosses_once_per_sum_never_per_chunk(chains):
    """Five sum consumers over twelve row chunks: five crossings, whatever the chains."""
    case = _case()
    assert len(case["rows"].chunks[0]) == CHUNKS
    centres = Centres.of(case["centres"], case["weights"])
    with count_crossings() as seen:
        row_pass(case["rows"], centres, case["spec"], _sums(case), aux=case["aux"], chains=chains)
    assert seen.count == len(_sums(case))


def test_a_row_pass_crosses_rows_outputs_once_per_chunk_and_centre_rows_where_held():
    """The driver keeps a ``rows`` consumer's outputs: one crossing a chunk (Apply); the
    centres' own rows cross only from the chunks that hold centres (3 of 12)."""
    case = _case()
    centres = Centres.of(case["centres"], case["weights"])
    with count_crossings() as seen:
        row_pass(case["rows"], centres, case["spec"], {"apply": Apply()})
    assert seen.count == CHUNKS
    with count_crossings() as seen:
        out = row_pass(case["rows"], Centres.of(case["centres"]), case["spec"],
                       {"k": CentreRows()}, aux={"slot": case["aux"]["slot"]})  # fmt: skip
    assert seen.count == 3
    assert sorted(np.concatenate([s for s, _ in out.rows["k"]]).tolist()) == [0, 1, 2, 3]


def test_a_lazy_per_row_result_never_crosses_and_keeps_the_rows_array_type():
    case = _case()
    centres = Centres.of(case["centres"], case["weights"])
    with count_crossings() as seen:
        lazy = map_rows(case["rows"], centres, case["spec"], Apply(), width=3)
        got = lazy.compute()
    assert seen.count == 0
    assert type(lazy._meta) is np.ndarray
    want = case["spec"](case["x"], case["centres"]) @ case["weights"]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    with count_crossings() as seen:  # what the driver writes (a zarr store): per chunk
        da.compute(*chunk_tasks(case["rows"], centres, case["spec"], Apply()))
    assert seen.count == CHUNKS


@pytest.mark.parametrize("cache", ["recompute", "memory"])
def test_a_krylov_product_crosses_once_per_pass(cache):
    """``K V`` over the 78 block pairs of twelve row chunks: one crossing a pass (the
    first pass's row sums ride along), the dense matrix one."""
    case = _case()
    op = KernelOperator(case["rows"], case["spec"], cache=cache)
    v = np.random.default_rng(1).normal(size=(op.n, 3))
    for _ in range(2):
        with count_crossings() as seen:
            got = op.matmat(v)
        assert seen.count == 1
    k = case["spec"](case["x"], case["x"])
    c = np.eye(op.n) - 1.0 / op.n
    np.testing.assert_allclose(got, c @ k @ c @ v, rtol=1e-10, atol=1e-10)
    with count_crossings() as seen:
        op.explicit()
    assert seen.count == 1


def test_the_lazy_kernel_matrix_and_diagonal_carry_the_rows_array_type():
    case = _case()
    assert type(kernel_matrix(case["rows"], case["rows"], case["spec"])._meta) is np.ndarray
    assert type(kernel_diagonal(case["rows"], case["spec"])._meta) is np.ndarray


def _by_hand(case: dict, consumers: dict, chains: int) -> dict:
    """The pass's sums as the per-chunk host path made them: each chunk's share added
    into its chain on host, the chains added in order."""
    running: list = [dict.fromkeys(consumers) for _ in range(chains)]
    x, aux = case["x"], case["aux"]
    for i in range(CHUNKS):
        s = slice(i * ROWS, (i + 1) * ROWS)
        rows = RowBlock(x[s, ...], ([case["centres"]], [case["weights"]]), case["spec"],
                        {k: v[s] for k, v in aux.items()})  # fmt: skip
        chain = running[i % chains]
        for name, consumer in consumers.items():
            chain[name] = consumer(rows, chain[name])
    total = running[0]
    for other in running[1:]:
        for name in total:
            total[name] = add_into(total[name], other[name])
    return total


def _flat(value) -> list[np.ndarray]:
    if isinstance(value, TiledUpper):
        return [value.to_full()]
    return [np.asarray(v) for v in (value if isinstance(value, tuple) else (value,))]


@pytest.mark.parametrize("chains", [1, 3])
def test_numpy_row_pass_sums_are_bit_for_bit_the_per_chunk_host_sums(chains):
    """On numpy the sums kept through the chains and taken to host at the end are exactly
    (bit for bit) the sums of the per-chunk path: TiledUpper tiles, ``add_into``."""
    case = _case()
    consumers = _sums(case)
    got = row_pass(case["rows"], Centres.of(case["centres"], case["weights"]), case["spec"],
                   consumers, aux=case["aux"], chains=chains).sums  # fmt: skip
    want = _by_hand(case, consumers, chains)
    assert type(got["gram"]) is TiledUpper
    for name in consumers:
        for g, w in zip(_flat(got[name]), _flat(want[name]), strict=True):
            assert g.dtype == w.dtype, name
            assert np.array_equal(g, w), name


def test_numpy_row_pass_sums_match_recorded_values():
    """A fixed case's sums, recorded from the per-chunk host path (to 1e-13)."""
    case = _case(seed=5)
    out = row_pass(case["rows"], Centres.of(case["centres"], case["weights"]), case["spec"],
                   {"cross": Cross(), "gram": Gram()}, aux=case["aux"]).sums  # fmt: skip
    np.testing.assert_allclose(out["cross"][:2].ravel(), RECORDED_CROSS, rtol=1e-13)
    np.testing.assert_allclose(np.trace(out["gram"].to_full()), RECORDED_GRAM_TRACE, rtol=1e-13)


RECORDED_CROSS = [0.44761130215141626, -0.6636576617996826, -0.010263748123778005,
                  1.2002421017736615]  # fmt: skip
RECORDED_GRAM_TRACE = 91.94968742571483


# --- array_api_strict: a stand-in device namespace -----------------------------------------


def _strict(a: np.ndarray):
    import array_api_strict

    return array_api_strict.asarray(a)


def _is_strict(a) -> bool:
    return "array_api_strict" in array_api_compat.array_namespace(a).__name__


def test_the_sums_stay_in_the_rows_namespace_until_the_boundary():
    """On ``array_api_strict`` rows every sum consumer's running sum stays a strict array
    along its chains (added there) and crosses once, at ``finish``; the results are
    numpy's (<= 1e-12, float64)."""
    case = _case()
    consumers = {**_sums(case), "moments": Moments(case["terms"], None, "float64")}
    want = _by_hand(case, consumers, 3)
    strict_case = {**case, "x": _strict(case["x"])}
    running = _by_hand(strict_case, consumers, 3)
    for name, consumer in consumers.items():
        parts = running[name] if isinstance(running[name], tuple) else (running[name],)
        assert all(_is_strict(p) for p in parts), name
        with count_crossings() as seen:
            got = consumer.finish(running[name])
        assert seen.count == 1, name
        if name == "gram":
            assert type(got) is TiledUpper
        for g, w in zip(_flat(got), _flat(want[name]), strict=True):
            assert type(g) is np.ndarray, name
            if name == "gram":
                g, w = np.triu(g), np.triu(w)
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=name)


def test_rows_consumers_keep_the_namespace_and_centre_rows_cross_only_where_held():
    case = _case()
    s = slice(0, 2 * ROWS)
    aux = {k: v[s] for k, v in case["aux"].items()}
    panels = ([case["centres"]], [case["weights"]])
    for consumer in (Apply(), Projection(case["terms"]), Certificate(case["terms"])):
        got = consumer(RowBlock(_strict(case["x"][s]), panels, case["spec"], aux), None)
        want = consumer(RowBlock(case["x"][s], panels, case["spec"], aux), None)
        assert _is_strict(got)
        np.testing.assert_allclose(consumer.finish(got), want, rtol=1e-12, atol=1e-12)
    none_here = {**aux, "slot": np.full(2 * ROWS, -1)}
    rows = RowBlock(_strict(case["x"][s]), ([case["centres"]], [None]), case["spec"], none_here)
    with count_crossings() as seen:
        slots, values = CentreRows().finish(CentreRows()(rows, None))
    assert seen.count == 0
    assert len(slots) == 0
    assert values.shape == (0, 9)


def test_a_pass_result_and_v_move_through_the_one_decision():
    """``on_device_of`` takes V to the rows' namespace; ``host_rows`` stacks row sums there and
    crosses once; a lazy result's ``meta`` is of the rows' array type."""
    rng = np.random.default_rng(3)
    like = _strict(rng.normal(size=(4, 2)))
    v = rng.normal(size=(4, 3))
    moved = on_device_of(v, like)
    assert _is_strict(moved)
    assert on_device_of(v, v) is v
    with count_crossings() as seen:
        out = host_rows([moved, moved])
    assert seen.count == 1
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, np.vstack([v, v]))


def test_mixed_devices_are_refused_with_the_fix():
    """Rows of one library and the other side of a kernel matrix of another: an
    InputError naming the fix, before any pass; targets of another library are moved to
    the rows' (one crossing)."""
    case = _case()
    with pytest.raises(InputError, match=r"cupy\.asarray"):
        namespace_and_device(case["rows"], _strict(case["x"]))
    # targets in another namespace than the rows are moved to the rows' once, not refused
    strict_targets = {"targets": _strict(case["aux"]["targets"])}
    with count_crossings() as seen:
        got = row_pass(case["rows"], Centres.of(case["centres"]), case["spec"], {"c": Cross()},
                       aux=strict_targets).sums["c"]  # fmt: skip
    assert seen.sizes == [case["x"].shape[0] * 2, 9 * 2]  # the targets once, the sum once
    want = row_pass(case["rows"], Centres.of(case["centres"]), case["spec"], {"c": Cross()},
                    aux={"targets": case["aux"]["targets"]}).sums["c"]  # fmt: skip
    np.testing.assert_array_equal(got, want)
    xp, device = namespace_and_device(case["rows"], case["x"], None)
    assert array_api_compat.is_numpy_namespace(xp)
    assert device is None
