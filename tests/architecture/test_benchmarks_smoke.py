"""The benchmark scripts still run: each imports, and the cheap ones run at a tiny size.

A script opts into the tiny run by defining ``SMOKE_ARGS`` (its command-line
arguments for a run of well under a second: the code paths, not the figures).
Scripts that need real data, child processes or a cluster only import here; every
``npt_dask`` name they import anywhere (also inside functions) is checked to
exist by ``tests/architecture/test_architecture.py``.
"""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from tests.conftest import REPO, data_dir

BENCHMARKS = sorted(p.stem for p in (REPO / "benchmarks").glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_imports(name):
    module = importlib.import_module(f"benchmarks.{name}")
    assert name.startswith("_") or callable(getattr(module, "main", None)), name


SMOKED = [
    name
    for name in BENCHMARKS
    if getattr(importlib.import_module(f"benchmarks.{name}"), "SMOKE_ARGS", None) is not None
]


def test_some_benchmarks_run_tiny():
    assert {"blas", "scaling"} <= set(SMOKED)


@pytest.mark.parametrize("name", SMOKED)
def test_benchmark_runs_tiny(name, monkeypatch, capsys):
    module = importlib.import_module(f"benchmarks.{name}")
    monkeypatch.setenv("NPT_DATA_DIR", str(data_dir()))
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *module.SMOKE_ARGS])
    module.main()
    report = json.loads(capsys.readouterr().out)
    assert isinstance(report, dict)
    assert report


def test_gpu_benchmark_without_cupy_says_so_and_exits_2(monkeypatch, capsys):
    module = importlib.import_module("benchmarks.gpu")
    monkeypatch.setitem(sys.modules, "cupy", None)  # as on a machine without the gpu extra
    monkeypatch.setattr(sys, "argv", ["gpu.py", "--quick"])
    with pytest.raises(SystemExit) as stopped:
        module.main()
    assert stopped.value.code == 2
    captured = capsys.readouterr()
    assert "needs CuPy" in captured.err
    assert "pip install 'npt-dask[gpu]'" in captured.err
    assert captured.out == ""


def test_classify_runs_onedal_svc_where_installed_and_says_why_not_elsewhere(monkeypatch):
    """``classify.py``'s oneDAL SVC child: stock SVC's parameters and figures where
    scikit-learn-intelex is installed, else a JSON note naming the ``bench`` extra."""
    import importlib.util

    import numpy as np

    module = importlib.import_module("benchmarks.classify")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 3))
    y = (x[:, 0] > 0).astype(int)
    out = module._svc_onedal(x[:60], y[:60], x[60:], y[60:])
    if importlib.util.find_spec("sklearnex") is None:
        assert out == {"skipped": module.ONEDAL_MISSING}
        assert "pip install 'npt-dask[bench]'" in out["skipped"]
    else:
        assert 0.8 <= out["accuracy"] <= 1.0
        assert out["seconds"] >= out["fit_seconds"] > 0
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)  # not installed
    assert module._svc_onedal(x[:60], y[:60], x[60:], y[60:]) == {"skipped": module.ONEDAL_MISSING}
    assert "scikit-learn-intelex" in module.ONEDAL_MISSING
