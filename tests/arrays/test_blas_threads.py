"""BLAS threads per step, decided in one place (:mod:`npt_dask.arrays.threads`): one thread
inside dask's tasks, one in the driver's latency-bound LAPACK steps (eigensolvers,
few-column triangular solves), the process's own count elsewhere -- and it holds inside
the kernel ridge routes' stages."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg
from threadpoolctl import threadpool_info, threadpool_limits

import npt_dask as npt
from npt_dask.arrays.threads import blas_limit, blas_threads
from npt_dask.errors import InputError
from npt_dask.linalg import preconditioners
from npt_dask.linalg.preconditioners import FalkonCholesky


def _blas_counts() -> list[int]:
    """Threads of every loaded BLAS library (numpy's and scipy's OpenBLAS)."""
    return [int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]


@pytest.fixture
def two_threads():
    """Every BLAS library at two threads, as on the 2-core machines (restored after)."""
    with threadpool_limits(limits=2, user_api="blas"):
        assert set(_blas_counts()) == {2}
        yield


def test_the_decision_per_step(two_threads):
    assert (blas_threads("task"), blas_threads("latency"), blas_threads("product")) == (1, 1, None)
    with blas_limit("latency"):
        assert set(_blas_counts()) == {1}
    assert set(_blas_counts()) == {2}  # restored
    with blas_limit("product"):
        assert set(_blas_counts()) == {2}  # left as the process has it
    with blas_limit(2):
        assert set(_blas_counts()) == {2}
    with pytest.raises(InputError, match="step must be one of"):
        blas_threads("driver")  # type: ignore[arg-type]


def _recording(monkeypatch, owner, name, seen):
    """``owner.name`` wrapped to record the BLAS threads in force at each call."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        seen.append(tuple(_blas_counts()))
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)


def test_exact_cg_stages_run_with_the_decided_threads(monkeypatch, two_threads):
    """Exact CG's landmark preconditioner: its eigendecompositions (the landmark model's
    and the factor's) on one BLAS thread, the tasks of every pass on one, the driver's
    wide products (and its one probe block of the iteration estimate) on the process's
    two; nothing left changed after the fit."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(1200, 8)), rng.normal(size=1200)
    in_tasks, in_eigh = [], []

    def kernel(a, b):  # a callable rbf: called inside the passes' tasks
        in_tasks.append(tuple(_blas_counts()))
        d2 = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
        return np.exp(-0.1 * np.maximum(d2, 0.0))

    _recording(monkeypatch, scipy.linalg, "eigh", in_eigh)
    in_products = []
    _recording(monkeypatch, preconditioners, "syrk_update", in_products)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = npt.KernelRidge(alpha=1e-2, kernel=kernel, landmarks=None, solver="cg",
                              chunk_size=300, max_iter=3, memory_budget="4MiB")  # fmt: skip
        est.fit(x, y)
    assert est.plan_["route"] == "exact-cg"
    assert est.solve_details_["preconditioner"] == "landmark"
    assert len(in_eigh) >= 2  # the landmark model's and the factor's
    assert set(in_eigh) == {(1, 1)}
    assert in_tasks
    assert in_tasks.count((2, 2)) <= 3  # the iteration estimate's probe blocks, on the driver
    assert set(in_tasks) - {(2, 2)} == {(1, 1)}  # every pass's tasks
    assert in_products
    assert set(in_products) == {(2, 2)}
    assert set(_blas_counts()) == {2}


def test_falkon_solves_run_on_one_thread(monkeypatch, two_threads):
    """Nyström CG's preconditioner solves (four triangular solves with k columns, each
    iteration) run on one BLAS thread; its factorisation (wide products) on two."""
    seen_solves = []
    _recording(monkeypatch, FalkonCholesky, "_solve", seen_solves)
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(600, 5)), rng.normal(size=(600, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = npt.KernelRidge(alpha=1e-3, gamma=0.2, landmarks=100, solver="cg",
                              max_iter=3).fit(x, y)  # fmt: skip
    assert est.plan_["route"] == "nystrom-cg"
    assert seen_solves
    assert set(seen_solves) == {(1, 1)}
    assert set(_blas_counts()) == {2}
