"""``benchmarks/gpu.py`` without a GPU: its job table, arguments, targets, stored JSON.

The jobs themselves need CuPy and a CUDA device (``benchmarks/README.md`` says how a lent
machine runs them); here the parts a reader of their JSON relies on are checked.
"""

from __future__ import annotations

import json
import sys
import types

import pytest

from benchmarks import gpu
from npt_dask.arrays.device import check_device


def _args(*argv: str):
    return gpu._parser().parse_args(list(argv))


def test_the_table_holds_the_issue_sizes_and_a_quick_run_that_fits(capsys):
    gpu.main(["--list"])
    table = json.loads(capsys.readouterr().out)
    jobs = table["jobs"]
    assert list(jobs) == ["exact_ridge", "nystrom_ridge", "kpca60k", "kpca250k", "pass"]
    assert jobs["exact_ridge"]["full"]["n"] == 60_000
    assert (jobs["nystrom_ridge"]["full"]["n"], jobs["nystrom_ridge"]["full"]["m"]) == (
        1_000_000, 50_000)  # fmt: skip
    assert (jobs["kpca250k"]["full"]["n"], jobs["kpca250k"]["full"]["r"]) == (250_000, 100)
    assert jobs["exact_ridge"]["targets"] == {"accuracy_min": 0.988, "seconds_max": 10.0}
    assert jobs["nystrom_ridge"]["targets"] == {"accuracy_min": 0.99, "seconds_max": 150.0}
    assert jobs["kpca250k"]["targets"] == {"seconds_max": 180.0}
    for entry in jobs.values():
        assert entry["ratio_to_floor_max"] == 1.5
        assert entry["quick"]["n"] < entry["full"]["n"]
        assert entry["quick"].get("r") == entry["full"].get("r")  # the same parameters
    # the quick floors leave most of the 4 minutes to npt's routes, data and CuPy's compiles
    assert table["quick_floors_seconds_h100"] <= 30


def test_jobs_are_picked_by_name_and_unknown_ones_refused_before_cupy(monkeypatch, capsys):
    assert gpu.selected_jobs(_args()) == list(gpu.JOBS)
    picked = _args("--job", "pass", "--jobs", "kpca60k,pass")
    assert gpu.selected_jobs(picked) == ["pass", "kpca60k"]
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(SystemExit, match=r"unknown jobs \['nope'\]; pick from \['exact_ridge'"):
        gpu.main(["--jobs", "pass,nope"])
    with pytest.raises(SystemExit) as refused:
        gpu.main(["--job", "nope"])
    assert refused.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_without_cupy_a_stored_job_exits_2_writing_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(SystemExit) as stopped:
        gpu.main(["--job", "exact_ridge", "--store", str(tmp_path / "gpu")])
    assert stopped.value.code == 2
    assert "needs CuPy" in capsys.readouterr().err
    assert not (tmp_path / "gpu").exists()


def test_sizes_follow_quick_and_overrides():
    nystrom = gpu.JOBS["nystrom_ridge"]
    assert gpu.job_sizes(nystrom, _args()) == {"n": 1_000_000, "m": 50_000}
    assert gpu.job_sizes(nystrom, _args("--quick")) == {"n": 100_000, "m": 10_000}
    assert gpu.job_sizes(nystrom, _args("--n", "30000")) == {"n": 30_000, "m": 15_000}
    assert gpu.full_size(nystrom, {"n": 1_000_000, "m": 50_000})
    assert not gpu.full_size(nystrom, {"n": 1_000_000, "m": 20_000})


def _ridge(n=60_000, floor=4.0, ours=9.0, accuracy=0.9885):
    return {"n": n, "floor": {"seconds": floor, "accuracy": 0.9884},
            "npt": {"seconds": ours, "accuracy": accuracy}}  # fmt: skip


def test_targets_are_judged_at_full_size_only():
    judged = gpu.judge("exact_ridge", _ridge())
    targets = judged["targets"]
    assert judged["npt"]["ratio_to_floor"] == 2.25
    assert targets["applies"] is True
    assert targets["accuracy_min"] == {"limit": 0.988, "value": 0.9885, "met": True}
    assert targets["seconds_max"] == {"limit": 10.0, "value": 9.0, "met": True}
    assert targets["ratio_to_floor_max"] == {"limit": 1.5, "value": 2.25, "met": False}
    small = gpu.judge("exact_ridge", _ridge(n=20_000, ours=5.0, accuracy=0.97))
    assert small["targets"]["applies"] is False
    assert small["targets"]["accuracy_min"]["met"] is False
    failed = gpu.judge("exact_ridge", {"n": 60_000, "floor": {"seconds": 3.0},
                                       "npt": {"error": "TypeError: ..."}})  # fmt: skip
    assert failed["targets"]["seconds_max"]["met"] is None  # not measured, not met


def test_one_side_per_call_completes_the_stored_job(tmp_path):
    store = tmp_path / "gpu"
    first = {"device": "NVIDIA H100 80GB HBM3", "when": "first"}
    floor_only = _ridge()
    del floor_only["npt"]
    gpu.store_job(store, "exact_ridge", floor_only, first)
    npt_only = _ridge()
    del npt_only["floor"]
    path = gpu.store_job(store, "exact_ridge", npt_only, {**first, "when": "second"})
    stored = json.loads(path.read_text())
    assert stored["header"]["when"] == "second"
    assert stored["job"]["floor"]["call"]["when"] == "first"  # the side's own call
    assert stored["job"]["npt"]["ratio_to_floor"] == 2.25
    assert stored["job"]["targets"]["ratio_to_floor_max"]["met"] is False
    other = _ridge(n=20_000)
    del other["floor"]
    stored = json.loads(gpu.store_job(store, "exact_ridge", other, first).read_text())
    assert "floor" not in stored["job"]  # a side of other sizes is not merged
    assert [p.name for p in store.iterdir()] == ["exact_ridge.json"]


def test_summary_reads_the_stored_jobs_against_the_targets(tmp_path, capsys):
    header = {"device": "NVIDIA H200"}
    gpu.store_job(tmp_path, "exact_ridge", _ridge(), header)
    broken = {"n": 250_000, "r": 100, "passes": 9, "floor": {"seconds": 40.0},
              "npt": {"error": "TypeError: Implicit conversion to a NumPy array",
                      "where": "npt_dask/ridge/solvers.py:132 centre_rows"}}  # fmt: skip
    gpu.store_job(tmp_path, "kpca250k", broken, header)
    gpu.main(["--summary", str(tmp_path)])
    ridge, kpca = capsys.readouterr().out.splitlines()
    assert ridge.startswith("exact_ridge n=60000; floor 4.0s 98.84%; npt 9.0s 98.85% | targets:")
    assert "ratio_to_floor_max 2.25 vs 1.5: MISSED" in ridge
    assert "seconds_max 9.0 vs 10.0: met" in ridge
    assert "npt: TypeError: Implicit conversion" in kpca
    assert "at npt_dask/ridge/solvers.py:132 centre_rows" in kpca
    assert "seconds_max None vs 180.0: not measured" in kpca


class _Pool:
    def __init__(self):
        self.held = 3 * 2**30

    def free_all_blocks(self):
        self.held = 0

    def total_bytes(self):
        return self.held


def _fake_cp(pool):
    device = types.SimpleNamespace(synchronize=lambda: None)
    return types.SimpleNamespace(get_default_memory_pool=lambda: pool,
                                 cuda=types.SimpleNamespace(Device=lambda: device))  # fmt: skip


def test_a_route_that_fails_says_why_and_where_in_npt_dask():
    pool = _Pool()

    def fails():
        pool.held = 2**30  # what the route held when it failed
        check_device("cuda")

    out, entry = gpu._route(_fake_cp(pool), fails)
    assert out is None
    assert entry["error"].startswith("InputError: The 'device' parameter must be one of")
    assert entry["where"].startswith("npt_dask/arrays/device.py:")
    assert entry["where"].endswith(" check_device")
    assert entry["device_pool_gib"] == 1.0
    out, entry = gpu._route(_fake_cp(pool), lambda: 42)
    assert out == 42
    assert set(entry) == {"seconds", "device_pool_gib"}
