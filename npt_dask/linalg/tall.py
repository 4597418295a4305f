"""Task bodies of tall row-chunked panels (the Krylov solver's, :mod:`npt_dask.npt.panels`):
seeded Gaussian rows (:func:`chunk_seeds`, :func:`gaussian_block`, :func:`gaussian_rows`),
the two halves of a tall-skinny QR (:func:`tsqr_r`, :func:`tsqr_q`) and column sums of
squares (:func:`column_squares`, :func:`residual_squares`).

Layer rule: numpy arrays in, numpy arrays out; the graphs that use them are
:mod:`npt_dask.npt.panels`'.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

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


def tsqr_r(block: np.ndarray) -> np.ndarray:
    """The triangle of a row chunk's QR (the first half of a tall-skinny QR)."""
    return np.asarray(np.linalg.qr(block, mode="r"))


def tsqr_q(block: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """The row chunk's share of the tall-skinny Q: its own Q times its rows of the
    stacked triangles' Q (the QR is recomputed: it is deterministic, and cheaper to
    redo than to keep)."""
    return np.linalg.qr(block)[0] @ factor


def column_squares(block: np.ndarray) -> np.ndarray:
    """Column sums of squares of a row chunk, ``(1, width)``."""
    return np.einsum("ij,ij->j", block, block)[None, :]


def residual_squares(kv: np.ndarray, v: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Column sums of squares of ``kv - v * theta`` over a row chunk, ``(1, width)``."""
    return column_squares(kv - v * theta)
