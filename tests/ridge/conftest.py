"""Shared data of the kernel ridge tests."""

from __future__ import annotations

import numpy as np


def ridge_data(
    n: int = 300, d: int = 5, seed: int = 0, k: int = 2, test: int = 40
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` training rows, their ``k`` targets (``sin`` of the row sum, ``cos(x_0) x_1``,
    plus 5 % noise) and ``test`` rows more, seeded."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n + test, d))
    t = np.column_stack([np.sin(x.sum(axis=1)), np.cos(x[:, 0]) * x[:, 1]])[:, :k]
    t = t + 0.05 * rng.normal(size=t.shape)
    return x[:n], t[:n], x[n:]
