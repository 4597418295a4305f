"""Warnings from the ``npt`` command line print as one line each:
``npt project: warning: KernelScaleWarning: ...``, not Python's two-line default that
names the console script (``.../bin/npt:8: ...`` then ``  sys.exit(main())``). The
library raises the same warnings as before."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import npt_dask as npt
from npt_dask.errors import KernelScaleWarning
from npt_dask.interface import cli

WARNING = "KernelScaleWarning: The kernel sees these rows as unlike every training row"


@pytest.fixture(scope="module")
def far(tmp_path_factory):
    """A model of rows in [0, 1] and rows on 255 times their scale (the scale warning)."""
    tmp = tmp_path_factory.mktemp("warnings")
    x = np.random.default_rng(0).uniform(0, 1, size=(60, 16))
    np.save(tmp / "far.npy", x[:20] * 255)
    model = npt.fit(x, "rbf", gamma=0.1, n_components=3)
    model.save(tmp / "m.zarr")
    return tmp, model, x[:20] * 255


def _console_script() -> list[str]:
    """The installed ``npt`` script (where the default format named its line 8), else the
    module."""
    script = Path(sys.executable).parent / "npt"
    found = str(script) if script.is_file() else shutil.which("npt")
    return [found] if found else [sys.executable, "-m", "npt_dask"]


def _project(folder: Path, out: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*_console_script(), "project", str(folder / "m.zarr"), str(folder / "far.npy"),
         "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=300, check=False, env={**os.environ, **env},
    )  # fmt: skip


def test_the_npt_command_prints_a_warning_as_one_line(far, tmp_path):
    folder, _, _ = far
    proc = _project(folder, tmp_path / "p.zarr")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"npt project: warning: {WARNING}")
    assert "sys.exit(main())" not in proc.stderr
    assert "/bin/npt:" not in proc.stderr


def test_the_filters_still_decide_what_the_command_shows(far, tmp_path):
    folder, _, _ = far
    proc = _project(folder, tmp_path / "p.zarr", PYTHONWARNINGS="ignore")
    assert (proc.returncode, proc.stderr) == (0, "")


@pytest.mark.filterwarnings("default::npt_dask.errors.NPTWarning")
def test_a_caller_still_records_the_warnings_main_raises(far, tmp_path):
    """Only the printed format changes: a caller recording warnings (as pytest.warns does)
    gets the library's warning, and Python's format is back once main returns."""
    folder, model, rows = far
    before = warnings.formatwarning
    with pytest.warns(KernelScaleWarning, match="unlike every training row"):
        assert cli.main(["project", str(folder / "m.zarr"), str(folder / "far.npy"),
                         "--out", str(tmp_path / "p.zarr"), "--quiet"]) == 0  # fmt: skip
    assert warnings.formatwarning is before
    with pytest.warns(KernelScaleWarning, match="unlike every training row"):
        model.transform(rows)  # the library raises what it raised
