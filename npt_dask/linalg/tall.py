"""Task bodies of tall row-chunked panels (the Krylov solver's, :mod:`npt_dask.npt.panels`):
seeded Gaussian rows (:func:`chunk_seeds`, :func:`gaussian_block`, :func:`gaussian_rows`),
the two halves of a tall-skinny QR (:func:`tsqr_r`, :func:`tsqr_q`) and column sums of
squares (:func:`column_squares`, :func:`residual_squares`).

Layer rule: arrays in, arrays of the same namespace out (numpy's fast paths as they are;
a device's chunks stay on their device, the small host factors they take moved there);
the graphs that use them are :mod:`npt_dask.npt.panels`'. The seeded draws are numpy's
(the same numbers for either panels).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from npt_dask.arrays.namespace import is_numpy, namespace_of, on_device_of

__all__ = [
    "chunk_seeds",
    "column_squares",
    "gaussian_block",
    "gaussian_rows",
    "residual_squares",
    "tsqr_q",
    "tsqr_r",
]


def chunk_seeds(rng: np.random.Generator, count: int) -> np.ndarray:
    """One seed per row chunk, drawn from ``rng`` (the driver's and the chunked panels')."""
    return rng.integers(0, 2**63 - 1, size=count, dtype=np.int64)


def gaussian_block(seed: int, rows: int, width: int) -> np.ndarray:
    """Row chunk of a seeded Gaussian panel."""
    return np.random.default_rng(int(seed)).standard_normal((rows, width))


def gaussian_rows(rng: np.random.Generator, row_chunks: Sequence[int], width: int) -> np.ndarray:
    """A Gaussian ``sum(row_chunks) x width`` panel, drawn chunk by chunk.

    The same numbers as the chunked panels' lazy draw for the same ``rng`` state.
    """
    seeds = chunk_seeds(rng, len(row_chunks))
    return np.concatenate(
        [gaussian_block(seed, rows, width) for seed, rows in zip(seeds, row_chunks, strict=True)]
    )


def tsqr_r(block: Any) -> Any:
    """The triangle of a row chunk's QR (the first half of a tall-skinny QR)."""
    xp = namespace_of(block)
    if is_numpy(xp):
        return np.asarray(np.linalg.qr(block, mode="r"))
    return xp.linalg.qr(block)[1]


def tsqr_q(block: Any, factor: np.ndarray) -> Any:
    """The row chunk's share of the tall-skinny Q: its own Q times its rows of the
    stacked triangles' Q (the QR is recomputed: it is deterministic, and cheaper to
    redo than to keep); ``factor`` (host) is moved to the chunk's device."""
    xp = namespace_of(block)
    if is_numpy(xp):
        return np.linalg.qr(block)[0] @ factor
    return xp.linalg.qr(block)[0] @ on_device_of(factor, block)


def column_squares(block: Any) -> Any:
    """Column sums of squares of a row chunk, ``(1, width)``."""
    xp = namespace_of(block)
    if is_numpy(xp):
        return np.einsum("ij,ij->j", block, block)[None, :]
    return xp.sum(block * block, axis=0)[None, :]


def residual_squares(kv: Any, v: Any, theta: np.ndarray) -> Any:
    """Column sums of squares of ``kv - v * theta`` over a row chunk, ``(1, width)``
    (``theta`` moved to the chunk's device)."""
    return column_squares(kv - v * on_device_of(theta, v))
