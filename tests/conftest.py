"""Shared fixtures: data sets, a compute counter, sign-invariant comparisons."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dask.callbacks import Callback

from npt_dask.runtime.owners import is_dead, owner_tag
from npt_dask.storage.datasets import load_npz

REPO = Path(__file__).resolve().parents[1]


#: Hyperparameters for each built-in kernel that the kernel tests evaluate it with.
KERNEL_VALUES: dict[str, dict[str, float]] = {
    "rbf": {"gamma": 0.3},
    "laplacian": {"gamma": 0.2},
    "polynomial": {"gamma": 0.5, "degree": 3, "coef0": 1.0},
    "sigmoid": {"gamma": 0.1, "coef0": 0.5},
    "linear": {},
    "cosine": {},
}


def dead_owner_tag() -> str:
    """An owner tag of this host whose process has exited (a killed writer's)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    tag = owner_tag().rsplit("-", 2)[0] + f"-{child.pid}-0"
    assert is_dead(tag)
    return tag


def data_dir() -> Path:
    """``$NPT_DATA_DIR``, else ``../shared/data`` beside the checkout."""
    return Path(os.environ.get("NPT_DATA_DIR", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def mnist_small() -> tuple[np.ndarray, np.ndarray]:
    """1,500 MNIST training rows and 300 test rows, pixels in [0, 1]."""
    path = data_dir() / "mnist.npz"
    if not path.is_file():
        pytest.skip(f"{path} not present (set NPT_DATA_DIR)")
    x, _ = load_npz(path, scale=255.0)
    return x[:1500], x[60000:60300]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


class TaskCounter(Callback):
    """Counts dask tasks executed by the local schedulers."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks = 0

    def _pretask(self, key, dask, state) -> None:
        self.tasks += 1


@pytest.fixture
def task_counter() -> TaskCounter:
    with TaskCounter() as counter:
        yield counter


def align_signs(a: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Flip columns of ``a`` to best match ``ref`` (eigenvectors have no sign)."""
    signs = np.sign(np.sum(a * ref, axis=0))
    signs[signs == 0] = 1.0
    return a * signs


def centered_gram(k: np.ndarray) -> np.ndarray:
    """Explicitly centred Gram, dense reference."""
    n = k.shape[0]
    e = np.full((n, n), 1.0 / n)
    i = np.eye(n)
    return (i - e) @ k @ (i - e)
