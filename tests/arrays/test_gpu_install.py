"""The GPU extras, and what ``device="gpu"`` says when CuPy is missing, mixed or broken.

The extras are read from ``pyproject.toml``; the messages are forced on any machine: the
installed distributions are faked through ``importlib.metadata.version`` and ``import
cupy`` fails through a finder placed first on ``sys.meta_path``.
"""

from __future__ import annotations

import importlib.metadata
import sys
import tomllib
import types

import pytest
from packaging.requirements import Requirement

import npt_dask as npt
from npt_dask.arrays.device import GPU_INSTALL, check_device, installed_cupy_packages
from tests.conftest import REPO

EXTRAS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _extra(name: str) -> dict[str, Requirement]:
    return {r.name: r for r in map(Requirement, EXTRAS[name])}


@pytest.mark.parametrize("cuda", ["12", "13"])
def test_each_cuda_extra_installs_one_matching_stack(cuda):
    stack = _extra(f"gpu-cu{cuda}")
    assert set(stack) == {f"cupy-cuda{cuda}x", "dask-cuda", f"rmm-cu{cuda}"}
    assert stack[f"cupy-cuda{cuda}x"].extras == {"ctk"}  # the CUDA libraries as wheels
    assert stack["dask-cuda"].extras == {f"cu{cuda}"}
    assert stack["dask-cuda"].specifier.contains("26.10.0")
    assert not stack["dask-cuda"].specifier.contains("25.8.0")  # no [cu12]/[cu13] extras
    assert stack[f"rmm-cu{cuda}"].specifier.contains("26.10.0")


def test_gpu_names_the_cuda_13_stack_and_never_two_cupys():
    (only,) = map(Requirement, EXTRAS["gpu"])
    assert (only.name, only.extras) == ("npt-dask", {"gpu-cu13"})
    for name in ("gpu-cu12", "gpu-cu13"):
        assert sum(n.startswith("cupy") for n in _extra(name)) == 1


def test_the_install_hint_names_both_stacks_and_the_uninstall():
    assert "\n" not in GPU_INSTALL
    for needed in ("pip install 'npt-dask[gpu]'", "[gpu-cu13]", "'npt-dask[gpu-cu12]'",
                   "cupy-cuda13x/cupy-cuda12x", "uninstalling the other"):  # fmt: skip
        assert needed in GPU_INSTALL, needed


# --- the messages -----------------------------------------------------------------------------


@pytest.fixture
def installed(monkeypatch):
    """``installed["cupy-cuda13x"] = "14.2.0"`` makes that distribution look installed."""
    found: dict[str, str] = {}
    real = importlib.metadata.version

    def version(name):
        if name.startswith("cupy"):
            if name in found:
                return found[name]
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    return found


class _BrokenCupy:
    """A meta path finder whose ``import cupy`` fails as a CuPy missing its CUDA libraries."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "cupy":
            raise ImportError("libnvrtc.so.13: cannot open shared object file")
        return None


@pytest.fixture
def cupy_fails(monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_BrokenCupy, *sys.meta_path])


def _refusal(*, install: bool = True) -> str:
    with pytest.raises(npt.DeviceError) as refused:
        check_device("gpu")
    text = str(refused.value)
    assert "\n" not in text
    assert ("pip install 'npt-dask[gpu]'" in text) is install
    assert "'npt-dask[gpu-cu12]'" in text
    return text


def test_no_cupy_names_both_installs(installed, cupy_fails):
    assert installed_cupy_packages() == []
    assert "needs CuPy, which is not installed here: pip install" in _refusal()


def test_two_cupys_are_named_with_the_uninstall(installed, cupy_fails):
    installed.update({"cupy-cuda12x": "13.6.0", "cupy-cuda13x": "14.2.0"})
    assert installed_cupy_packages() == ["cupy-cuda13x 14.2.0", "cupy-cuda12x 13.6.0"]
    text = _refusal()
    assert "cupy-cuda13x 14.2.0 and cupy-cuda12x 13.6.0 are all installed" in text
    assert "pip uninstall -y cupy-cuda13x cupy-cuda12x, then install one" in text


def test_a_cupy_that_does_not_import_says_why(installed, cupy_fails):
    installed["cupy-cuda13x"] = "14.2.0"
    text = _refusal()
    assert "cupy-cuda13x 14.2.0 is installed but does not import" in text
    assert "(ImportError: libnvrtc.so.13: cannot open shared object file)" in text


def test_no_device_names_the_driver_each_cupy_needs(installed, monkeypatch):
    installed["cupy-cuda13x"] = "14.2.0"
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(is_available=lambda: False))
    text = _refusal(install=False)  # CuPy is there: the driver is the question
    assert "found no CUDA device: cupy-cuda13x 14.2.0 is installed" in text
    assert "cupy-cuda13x needs a CUDA 13 driver, R580 or newer" in text
    installed["cupy-cuda12x"] = "14.2.0"  # a device hidden by two CuPys in one folder
    assert "are all installed" in _refusal()


# --- device= of npt.fit and NonlinearProjection: the command line's refusal -----------------


def _rows():
    import numpy as np

    return np.random.default_rng(0).normal(size=(20, 3))


@pytest.mark.parametrize(
    "call",
    [
        lambda x: npt.fit(x, "rbf", gamma=0.5, n_components=2, device="gpu"),
        lambda x: npt.NonlinearProjection(n_components=2, device="gpu").fit(x),
    ],
    ids=["fit", "NonlinearProjection"],
)
def test_device_gpu_without_cupy_is_the_command_lines_refusal(installed, cupy_fails, call):
    with pytest.raises(npt.DeviceError) as refused:
        call(_rows())
    assert str(refused.value) == _refusal()  # the same words as --device gpu gets
    assert refused.value.param == "device"


@pytest.mark.parametrize("call", [
    lambda x: npt.fit(x, "rbf", gamma=0.5, n_components=2, device="cuda"),
    lambda x: npt.NonlinearProjection(n_components=2, device="cuda").fit(x),
], ids=["fit", "NonlinearProjection"])  # fmt: skip
def test_an_unknown_device_names_the_choices(call):
    with pytest.raises(ValueError, match="device") as refused:
        call(_rows())
    assert "'cpu'" in str(refused.value)
    assert "'gpu'" in str(refused.value)


def test_device_cpu_is_the_default_fit():
    x = _rows()
    want = npt.fit(x, "rbf", gamma=0.5, n_components=2)
    got = npt.fit(x, "rbf", gamma=0.5, n_components=2, device="cpu")
    assert (got.eigenvalues == want.eigenvalues).all()


def test_a_pipelines_device_lives_at_its_top_level():
    from npt_dask.interface.pipeline.config import PipelineConfig

    with pytest.raises(npt.InputError, match="top level") as refused:
        PipelineConfig.from_dict({"name": "p", "model": {"device": "gpu"}})
    assert refused.value.param == "device"
