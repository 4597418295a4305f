"""A device budget beside the host budget: the fit plan keeps its kernel blocks within
``device_memory_budget`` and its driver within ``memory_budget`` when the rows live on a
device, counts both against ``memory_budget`` when they do not (numpy), and refuses a
plan whose device part does not fit before any pass, naming both budgets and the fix."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from npt_dask.engine.budget import check_budgets, default_device_budget
from npt_dask.errors import InputError
from npt_dask.npt.planning import plan_fit

MIB = 2**20
PLAN = {
    "n": 60_000, "d": 784, "n_components": 100, "row_chunks": [4096] * 14 + [2656],
    "itemsize": 8, "threads": 2,
}  # fmt: skip


def test_a_device_part_over_its_budget_is_refused_naming_both_budgets_and_the_fix():
    with pytest.raises(InputError) as caught:
        plan_fit(memory_budget=4096 * MIB, device_memory_budget=100 * MIB, **PLAN)
    message = str(caught.value)
    # 2 threads x 3 blocks of 4096^2 float64 in flight (the array API works out of place),
    # and the pass's four 60,000 x (b + 1) panels on the device beside them
    for words in ("device_memory_budget=100.0 MiB", "memory_budget=4.0 GiB", "chunk_size",
                  "768.0 MiB of kernel blocks", "806.5 MiB of device memory"):  # fmt: skip
        assert words in message, message


def test_the_device_part_is_planned_against_the_device_budget_alone():
    """600 MiB cannot hold the driver's basis and 512 MiB of blocks in flight together,
    but holds the driver's part once the blocks live on a device of their own."""
    with pytest.raises(InputError, match="memory_budget"):
        plan_fit(memory_budget=600 * MIB, **PLAN)
    plan = plan_fit(memory_budget=600 * MIB, device_memory_budget=1024 * MIB, **PLAN)
    assert plan.host_bytes <= 600 * MIB
    assert plan.device_bytes <= 1024 * MIB
    assert plan.to_dict()["device_memory_budget"] == 1024 * MIB


def test_kept_blocks_fill_the_device_budget_not_the_host_budget():
    host_only = plan_fit(memory_budget=4096 * MIB, **PLAN)
    on_device = plan_fit(memory_budget=4096 * MIB, device_memory_budget=8192 * MIB, **PLAN)
    assert on_device.kept_bytes > host_only.kept_bytes
    assert on_device.device_bytes <= 8192 * MIB < on_device.driver_bytes + on_device.worker_bytes
    assert host_only.device_memory_budget is None
    assert host_only.driver_bytes + host_only.worker_bytes <= 4096 * MIB


def test_cache_memory_on_a_device_too_small_for_every_block_is_refused():
    with pytest.raises(InputError, match="device_memory_budget"):
        plan_fit(memory_budget=4096 * MIB, device_memory_budget=1024 * MIB, cache="memory",
                 **PLAN)  # fmt: skip


def test_rows_in_host_memory_have_no_device_budget():
    x = da.from_array(np.ones((10, 3)), chunks=(5, 3))
    assert default_device_budget(x) is None
    assert default_device_budget(np.ones((4, 2)), None) is None


def test_check_budgets_counts_host_and_device_together_without_a_device():
    check_budgets(600 * MIB, 400 * MIB, 1024 * MIB, None, "this plan")
    with pytest.raises(InputError) as caught:
        check_budgets(600 * MIB, 500 * MIB, 1024 * MIB, None, "this plan")
    message = str(caught.value)
    assert "this plan needs 1.1 GiB" in message
    assert "memory_budget=1.0 GiB" in message
    assert "device_memory_budget=None" in message


def test_check_budgets_checks_each_part_against_its_own_budget():
    check_budgets(900 * MIB, 900 * MIB, 1024 * MIB, 1024 * MIB, "this plan")
    with pytest.raises(InputError) as device:
        check_budgets(10 * MIB, 2048 * MIB, 1024 * MIB, 1024 * MIB, "Nystrom ridge, m=20000")
    assert str(device.value).startswith("Nystrom ridge, m=20000 needs 2.0 GiB of device memory")
    for words in ("landmarks", "chunk_size", "raise device_memory_budget=..."):
        assert words in str(device.value)
    with pytest.raises(InputError, match=r"of host memory, above memory_budget=1\.0 GiB"):
        check_budgets(2048 * MIB, 10 * MIB, 1024 * MIB, 1024 * MIB, "this plan")
