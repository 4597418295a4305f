"""basis="chunked" with an unusable temporary directory names the fix."""

from __future__ import annotations

import dask
import numpy as np
import pytest

import npt_dask as npt
import npt_dask.npt.panels as panels_module
from npt_dask.errors import ScratchError

X = np.random.default_rng(17).normal(size=(120, 4))
KW = {"gamma": 0.3, "n_components": 3, "solver": "krylov", "basis": "chunked", "random_state": 0}
FIX = r"temporary-directory.*basis='driver'"


def test_a_temporary_directory_that_is_a_file_is_named(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with (
        dask.config.set({"temporary-directory": str(not_a_dir)}),
        pytest.raises(ScratchError, match=FIX),
    ):
        npt.fit(X, **KW)


def test_a_full_temporary_directory_is_named(tmp_path, monkeypatch):
    def full(block, path):
        raise OSError("12000 requested and 4080 written")

    monkeypatch.setattr(panels_module, "_save", full)
    full_disk = pytest.raises(ScratchError, match=r"12000 requested and 4080 written.*" + FIX)
    with dask.config.set({"temporary-directory": str(tmp_path)}), full_disk:
        npt.fit(X, **KW)
    assert list(tmp_path.iterdir()) == []  # the scratch directory is removed


def test_a_writable_temporary_directory_still_fits(tmp_path):
    with dask.config.set({"temporary-directory": str(tmp_path)}):
        got = npt.fit(X, **KW)
    ref = npt.fit(X, **{**KW, "basis": "driver"})
    np.testing.assert_allclose(got.eigenvalues, ref.eigenvalues, rtol=1e-10)
