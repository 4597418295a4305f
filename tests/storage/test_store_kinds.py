"""Data given where a model store is expected (``npt.load``, ``load_ridge``, ``npt info``):
said as what it is and what to pass instead, never called a damaged model."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr

import npt_dask as npt
from npt_dask.errors import StoreError, StoreIntegrityError
from npt_dask.interface.cli.program import main


def _stores(root):
    rng = np.random.default_rng(0)
    array = zarr.create_array(root / "a.zarr", shape=(40, 3), chunks=(10, 3), dtype="f8")
    array[:] = rng.normal(size=(40, 3))
    xr.Dataset({"pixels": (("sample", "f"), rng.normal(size=(40, 3)))}).to_zarr(
        root / "d.zarr", mode="w", consolidated=False
    )
    model = npt.fit(array[:], "rbf", gamma=0.3, n_components=2, random_state=0)
    npt.project(model, array[:], root / "p.zarr", progress=False)
    return {
        "a.zarr": ("a plain zarr array (data: 40x3 float64)", "npt fit PATH"),
        "d.zarr": ("an xarray dataset in zarr (data: variables pixels)", "--var NAME"),
        "p.zarr": (
            "an npt projection store (coordinates written by npt project)",
            "xarray.open_zarr(path)",
        ),
    }


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("kinds")
    return root, _stores(root)


@pytest.mark.parametrize("name", ["a.zarr", "d.zarr", "p.zarr"])
@pytest.mark.parametrize(
    ("loader", "wanted"),
    [(npt.load, "an npt model"), (npt.load_ridge, "a kernel ridge model")],
    ids=["load", "load_ridge"],
)
def test_data_given_to_a_loader_is_said_as_data_with_what_to_pass(stores, name, loader, wanted):
    root, expected = stores
    what, instead = expected[name]
    with pytest.raises(StoreError) as info:
        loader(root / name)
    assert not isinstance(info.value, StoreIntegrityError)  # not "damaged"
    text = str(info.value)
    assert "damaged" not in text
    assert f"{root / name} is {what}, not {wanted}" in text
    assert instead in text
    assert "npt_dask.load_ridge" in text
    assert "model.save(path)" in text


@pytest.mark.parametrize("name", ["a.zarr", "d.zarr"])
def test_npt_info_on_data_says_it_is_data(stores, name, capsys):
    root, expected = stores
    assert main(["info", str(root / name)]) == 2
    err = capsys.readouterr().err
    assert "damaged" not in err
    assert f"is {expected[name][0]}, not an npt model" in err
