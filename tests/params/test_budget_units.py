"""``memory_budget`` in every entry point: sizes with units as the command line takes
them, and a budget above the machine's memory said, with its fix."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import npt_dask as npt
from npt_dask import KernelRidge, NonlinearProjection
from npt_dask.engine import budget as budget_module
from npt_dask.errors import InputError, MemoryBudgetWarning


@pytest.fixture
def rows() -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(0).normal(size=(120, 4))
    return x, x[:, 0]


def test_kernel_ridge_takes_a_budget_with_units(rows):
    x, y = rows
    model = KernelRidge(kernel="rbf", memory_budget="40MB").fit(x, y)
    assert model.plan_["memory_budget"] == 40_000_000
    gib = KernelRidge(kernel="rbf", memory_budget="1.5GiB").fit(x, y)
    assert gib.plan_["memory_budget"] == int(1.5 * 2**30)


def test_projection_and_fit_take_a_budget_with_units(rows):
    x, _ = rows
    est = NonlinearProjection(n_components=3, memory_budget="1GiB").fit(x)
    assert est.n_components_ == 3
    assert npt.fit(x, n_components=3, memory_budget="512MB").n_components == 3


@pytest.mark.parametrize("text", ["40XB", "GB", "0GB", "-1GB"])
def test_a_budget_in_unknown_units_is_refused_naming_the_units(rows, text):
    x, y = rows
    with pytest.raises(InputError, match=r"'40GB', '1\.5GiB'"):
        KernelRidge(kernel="rbf", memory_budget=text).fit(x, y)
    with pytest.raises(InputError, match=r"'40GB', '1\.5GiB'"):
        npt.fit(x, n_components=3, memory_budget=text)


def test_a_budget_above_the_machine_memory_warns_with_its_fix(rows, monkeypatch):
    x, y = rows
    monkeypatch.setattr(budget_module, "machine_memory", lambda: 2**30)
    with pytest.warns(MemoryBudgetWarning, match=r"physical memory \(1.0 GiB\).*None"):
        KernelRidge(kernel="rbf", memory_budget="2GB").fit(x, y)
    with pytest.warns(MemoryBudgetWarning, match=r"physical memory \(1.0 GiB\)"):
        npt.fit(x, n_components=3, memory_budget=2 * 2**30)


def test_a_budget_within_the_machine_memory_is_quiet(rows):
    x, y = rows
    with warnings.catch_warnings():
        warnings.simplefilter("error", MemoryBudgetWarning)
        KernelRidge(kernel="rbf", memory_budget="64MB").fit(x, y)
