"""Command-line edges: ``--out`` through a link to a store not yet
created, and pickled data files refused in one line, never loaded."""

from __future__ import annotations

import pathlib
import pickle

import numpy as np
import pytest

import npt_dask as npt
from npt_dask.interface.cli import main


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rows")
    np.save(folder / "x.npy", np.random.default_rng(0).normal(size=(60, 3)))
    return folder / "x.npy"


def test_out_as_a_link_to_a_store_not_yet_created(rows, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "m.zarr").symlink_to(target / "m.zarr")  # the stores do not exist yet
    (tmp_path / "p.zarr").symlink_to(target / "p.zarr")
    fit = ["fit", str(rows), "--out", str(tmp_path / "m.zarr"), "--n-components", "2"]
    assert main([*fit, "--quiet"]) == 0
    project = ["project", str(tmp_path / "m.zarr"), str(rows), "--out", str(tmp_path / "p.zarr")]
    assert main([*project, "--quiet"]) == 0  # was: [Errno 20] Not a directory
    assert (tmp_path / "m.zarr").is_symlink()  # the links kept, the stores where they point
    assert (tmp_path / "p.zarr").is_symlink()
    assert sorted(p.name for p in target.iterdir()) == ["m.zarr", "p.zarr"]
    model = npt.load(tmp_path / "m.zarr")
    import xarray as xr

    coords = xr.open_zarr(tmp_path / "p.zarr")["coordinates"].values
    np.testing.assert_allclose(coords, model.transform(np.load(rows)), atol=1e-12)


class _Payload:
    """Unpickling this creates a file: proof that a pickle was loaded."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def _pickled_files(folder: pathlib.Path, marker: pathlib.Path) -> list[pathlib.Path]:
    raw = folder / "raw.npy"  # a pickle named .npy
    raw.write_bytes(pickle.dumps(_Payload(marker)))
    objects = folder / "objects.npy"  # numpy's own format around pickled objects
    np.save(objects, np.array([_Payload(marker), 2], dtype=object), allow_pickle=True)
    archive = folder / "objects.npz"
    np.savez(archive, x=np.array([_Payload(marker), 2], dtype=object))
    return [raw, objects, archive]


@pytest.mark.parametrize("command", ["fit", "project", "grow"])
def test_pickled_data_is_refused_in_one_line_and_never_loaded(rows, tmp_path, capsys, command):
    marker = tmp_path / "unpickled"
    model = npt.fit(np.load(rows), n_components=None).save(tmp_path / "m.zarr")
    for path in _pickled_files(tmp_path, marker):
        args = {
            "fit": ["fit", str(path), "--out", str(tmp_path / "new.zarr")],
            "project": ["project", str(model), str(path), "--out", str(tmp_path / "p.zarr")],
            "grow": ["grow", str(model), str(path), "--out", str(tmp_path / "g.zarr")],
        }[command]
        assert main([*args, "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0, err  # one line, no traceback
        assert f"{path} holds Python objects" in err
        assert "never loads" in err
    assert not marker.exists()  # no pickle was ever loaded
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".zarr") == ["m.zarr"]
