"""The one atomic writer: owner-tagged temporaries, the swap, recovery
and the sweep, for model stores, projection stores and generated data sets alike --
and the leftovers each of them used to strand."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage

import npt_dask as npt
from npt_dask.errors import InputError
from npt_dask.runtime.owners import OWNER_PATTERN, is_dead, owner_tag
from npt_dask.storage.datasets import open_generated, write_deformed_mnist
from tests.conftest import REPO, dead_owner_tag


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A small MNIST-like ``.npz`` (uint8 28 x 28 strokes, labels 0..9)."""
    rng = np.random.default_rng(7)
    canvas = np.zeros((20, 28, 28))
    for k in range(20):
        rows, cols = rng.integers(6, 22, size=(2, 12))
        canvas[k, rows, cols] = 1.0
    images = ndimage.gaussian_filter(canvas, (0, 1.2, 1.2))
    images = np.round(255 * images / images.max(axis=(1, 2), keepdims=True)).astype(np.uint8)
    path = tmp_path_factory.mktemp("source") / "digits.npz"
    np.savez(path, x=images, y=np.arange(20) % 10)
    return path


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- bug 4: a failed second rename strands the previous data set --------------------------


def test_failed_swap_of_a_generated_store_puts_the_previous_one_back(tmp_path, source, monkeypatch):
    path = tmp_path / "d.zarr"
    write_deformed_mnist(path, n_rows=30, source=source, chunk_size=30)
    real = {"rename": os.rename, "replace": os.replace}

    def failing(kind):
        def move(src, dst, *a, **k):
            if Path(dst) == path and Path(src).name.startswith(".d.zarr.tmp-"):
                raise OSError(5, "Input/output error (simulated)")
            return real[kind](src, dst, *a, **k)

        return move

    monkeypatch.setattr(os, "rename", failing("rename"))
    monkeypatch.setattr(os, "replace", failing("replace"))
    with pytest.raises(OSError, match="simulated"):
        write_deformed_mnist(path, n_rows=40, seed=1, source=source, overwrite=True)
    monkeypatch.undo()
    assert open_generated(path).sizes["sample"] == 30  # the previous store, in place
    assert _names(tmp_path) == ["d.zarr"]  # nothing stranded beside it


@pytest.mark.parametrize("aside", ["tagged", "untagged"])
def test_a_generated_store_stranded_aside_is_restored(tmp_path, source, aside):
    """A writer killed between the renames of a swap left the previous store aside (as
    this version names it, or as earlier versions did, with no owner)."""
    path = write_deformed_mnist(tmp_path / "d.zarr", n_rows=30, source=source, chunk_size=30)
    tag = f"{dead_owner_tag()}-" if aside == "tagged" else ""
    name = f".d.zarr.old-{tag}0123abcd"
    os.rename(path, tmp_path / name)
    assert open_generated(path).sizes["sample"] == 30
    assert _names(tmp_path) == ["d.zarr"]


# --- bug 4: the directories of discarded projections --------------------------------------


def test_leftovers_of_discarded_projections_are_removed(tmp_path):
    x = np.random.default_rng(0).normal(size=(60, 3))
    model = npt.fit(x, "rbf", gamma=0.5, n_components=2, chunk_size=30)
    out = tmp_path / "p.zarr"
    npt.project(model, x, out, chunk_size=30, progress=False)
    old = tmp_path / ".p.zarr.npt-old-0123abcd"  # an earlier version's discard, killed
    gone = tmp_path / f".p.zarr.gone-{dead_owner_tag()}-0123abce"  # this version's, killed
    live = tmp_path / f".p.zarr.gone-{owner_tag()}-0123abcf"  # a discard in progress
    for d in (old, gone, live):
        (d / "coordinates").mkdir(parents=True)
    npt.project(model, x, out, chunk_size=30, progress=False, resume=False)  # discards
    assert _names(tmp_path) == [live.name, "p.zarr"]


# --- a killed write_deformed_mnist --------------------------------------------------------

_WRITER = """
import sys
from npt_dask.storage.datasets import write_deformed_mnist
write_deformed_mnist(sys.argv[1], n_rows=2_000_000, source=sys.argv[2], chunk_size=500)
"""


def test_killed_generator_leaves_an_owned_temporary_that_is_swept(tmp_path, source):
    path = tmp_path / "d.zarr"
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), str(source)], cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not any((p / "x").is_dir() for p in tmp_path.glob(".d.zarr.tmp-*")):
            assert child.poll() is None, child.stderr.read().decode() if child.stderr else ""
            assert time.monotonic() < deadline, "the writer never started writing"
            time.sleep(0.05)  # polling: the child signals nothing
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    (left,) = tmp_path.glob(".d.zarr.tmp-*")
    tag = re.fullmatch(rf"\.d\.zarr\.tmp-({OWNER_PATTERN})-[0-9a-f]{{8}}", left.name)
    assert tag is not None
    assert f"-{child.pid}-" in tag.group(1)  # named by its writer
    assert is_dead(tag.group(1))
    with pytest.raises(InputError, match="not a zarr store"):
        open_generated(path)  # nothing that loads; the dead writer's temporary is swept
    assert _names(tmp_path) == []
    write_deformed_mnist(path, n_rows=30, source=source, chunk_size=30)
    assert _names(tmp_path) == ["d.zarr"]
