"""A dask array whose chunks are another array library's under a numpy meta is refused
by the first pass with an InputTypeError naming the problem and the fix, not left to
fail inside dask ("Cannot interpret 'array_api_strict.float64' as a data type")."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr

import npt_dask as npt
from npt_dask.errors import InputTypeError

xp = pytest.importorskip("array_api_strict")


def _rows(n: int = 120, d: int = 4) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(n, d))


def _foreign(chunks: int = 50) -> da.Array:
    rows = da.from_array(_rows(), chunks=(chunks, -1))
    return rows.map_blocks(xp.asarray, dtype=np.float64, meta=np.empty((0, 0)))


def _says_so(exc: pytest.ExceptionInfo, name: str) -> None:
    text = str(exc.value)
    assert f"{name} is a dask array whose chunks are array_api_strict.Array objects" in text
    assert "its meta (the chunk type dask was told) is numpy.ndarray" in text
    assert f"{name}.map_blocks(numpy.asarray, meta=numpy.empty((0, 0), {name}.dtype))" in text


@pytest.mark.parametrize("chunk_size", [None, 70], ids=["its-chunks", "rechunked"])
def test_npt_fit_refuses_foreign_chunks_under_a_numpy_meta(chunk_size):
    with pytest.raises(InputTypeError) as exc:
        npt.fit(_foreign(), "rbf", gamma=0.2, n_components=2, chunk_size=chunk_size)
    _says_so(exc, "X")


def test_kernel_ridge_and_a_dataarray_refuse_them_too():
    with pytest.raises(InputTypeError) as exc:
        npt.KernelRidge(kernel="rbf", gamma=0.2).fit(_foreign(), np.ones(120))
    _says_so(exc, "X")
    wrapped = xr.DataArray(_foreign(), dims=("sample", "feature"))
    with pytest.raises(InputTypeError) as exc:
        npt.fit(wrapped, "rbf", gamma=0.2, n_components=2)
    _says_so(exc, "X")


def test_projecting_them_is_refused_before_a_store_is_written(tmp_path):
    model = npt.fit(_rows(), "rbf", gamma=0.2, n_components=2, random_state=0)
    with pytest.raises(InputTypeError) as exc:
        npt.project(model, _foreign(), tmp_path / "p.zarr", progress=False)
    _says_so(exc, "data")
    assert not (tmp_path / "p.zarr").exists()


def test_the_same_rows_as_numpy_chunks_fit_as_numpy_does():
    x = _foreign()
    fixed = x.map_blocks(np.asarray, meta=np.empty((0, 0), x.dtype))  # the fix the error gives
    dense = np.asarray(fixed.compute())
    a = npt.fit(fixed, "rbf", gamma=0.2, n_components=2, random_state=0)
    b = npt.fit(dense, "rbf", gamma=0.2, n_components=2, random_state=0)
    np.testing.assert_allclose(a.eigenvalues, b.eigenvalues, rtol=1e-10)
