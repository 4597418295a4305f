"""The ``npt`` command line, through subprocess on real files."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

import npt_dask as npt


def _npt(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "npt_dask", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    rng = np.random.default_rng(6)
    x, z = rng.normal(size=(300, 4)), rng.normal(size=(250, 4))
    np.save(tmp / "train.npy", x)
    np.savez(tmp / "test.npz", rows=z)
    xr.Dataset({"pixels": (("sample", "f"), z)}).to_zarr(tmp / "test_ds.zarr", consolidated=False)
    return tmp, x, z


def test_fit_info_project(files):
    tmp, _x, z = files
    out = json.loads(
        _npt(
            "fit",
            str(tmp / "train.npy"),
            "--kernel",
            "rbf",
            "--gamma",
            "0.5",
            "--n-components",
            "5",
            "--out",
            str(tmp / "m.zarr"),
        ).stdout
    )
    assert out["r"] == 5
    info = json.loads(_npt("info", str(tmp / "m.zarr")).stdout)
    assert info["manifest"]["kernel"] == {"name": "rbf", "gamma": 0.5}
    assert len(info["checksum"]) == 64
    _npt(
        "project",
        str(tmp / "m.zarr"),
        str(tmp / "test.npz"),
        "--key",
        "rows",
        "--out",
        str(tmp / "p.zarr"),
        "--quiet",
    )
    ds = xr.open_zarr(tmp / "p.zarr", consolidated=False)
    model = npt.load(tmp / "m.zarr")
    np.testing.assert_allclose(ds["coordinates"].values, model.transform(z), atol=1e-12)
    _npt(
        "project",
        str(tmp / "m.zarr"),
        str(tmp / "test_ds.zarr"),
        "--var",
        "pixels",
        "--out",
        str(tmp / "p2.zarr"),
        "--quiet",
    )
    ds2 = xr.open_zarr(tmp / "p2.zarr", consolidated=False)
    np.testing.assert_array_equal(ds2["coordinates"].values, ds["coordinates"].values)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fit", "missing.npy", "--n-components", "2", "--out", "m.zarr"], "does not exist"),
        (
            ["fit", "{train}", "--kernel", "gauss", "--n-components", "2", "--out", "{tmp}/k.zarr"],
            "Unknown kernel",
        ),
        (["fit", "{train}", "--n-components", "400", "--out", "{tmp}/k.zarr"], "larger than"),
        (["info", "{tmp}"], "not a zarr store"),
        (["project", "{tmp}/nomodel", "{train}", "--out", "{tmp}/x.zarr"], "not a zarr store"),
        (["project", "{tmp}/m.zarr", "{tmp}/test_ds.zarr", "--out", "{tmp}/y.zarr"], "--var"),
        (["project", "{tmp}/m.zarr", "{tmp}/test.npz", "--out", "{tmp}/y.zarr"], "--key"),
    ],
)
def test_errors_exit_2_with_a_message(files, args, message):
    tmp, _, _ = files
    if not (tmp / "m.zarr").exists():
        _npt("fit", str(tmp / "train.npy"), "--n-components", "3", "--out", str(tmp / "m.zarr"))
    (tmp / "nomodel").mkdir(exist_ok=True)
    filled = [a.format(tmp=tmp, train=tmp / "train.npy") for a in args]
    proc = _npt(*filled, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_help_is_readable():
    proc = _npt("--help")
    assert "fit" in proc.stdout
    assert "project" in proc.stdout
    assert "info" in proc.stdout
    assert _npt(check=False).returncode == 2  # no command: argparse usage error


def test_a_bug_is_not_reported_as_bad_input(monkeypatch, tmp_path):
    """Only the library's own errors (and file errors) become exit status 2 with a
    message: a TypeError from a bug keeps its traceback."""
    from npt_dask.interface import cli
    from npt_dask.interface.cli import info

    def broken(path):
        raise TypeError("unsupported operand type(s)")  # what a bug looks like

    monkeypatch.setattr(info, "read_manifest", broken)
    with pytest.raises(TypeError, match="unsupported operand"):
        cli.main(["info", str(tmp_path)])

    def refused(path):
        raise npt.StoreError(f"{path} is not a zarr store")

    monkeypatch.setattr(info, "read_manifest", refused)
    assert cli.main(["info", str(tmp_path)]) == 2
