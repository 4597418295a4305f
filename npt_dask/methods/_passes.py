"""One pass over the row chunks of a coordinate array: map each chunk, sum the parts.

Layer rule: graph code. Chunk functions see numpy blocks only; the driver
receives the (small) sums. Memory per task is one row chunk plus what the
chunk function returns, whatever the number of rows.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np

from npt_dask.engine.sums import chunk_sums
from npt_dask.errors import InputError
from npt_dask.params.constraints import FLAG, INT, NONE, Interval, Param
from npt_dask.runtime.inputs import InputInfo, as_row_chunked, check_known_chunks, is_data_array

__all__ = [
    "COORDINATE_CHUNK",
    "COORDINATE_ROWS",
    "PERSIST",
    "PERSIST_AUTO_BYTES",
    "as_coordinates",
    "as_labels",
    "chunk_sums",
    "maybe_persist",
]

PERSIST_AUTO_BYTES = 512 * 2**20
"""``persist=None`` keeps iterated data in (cluster) memory up to this size."""

COORDINATE_CHUNK = 8192
"""Rows per chunk when a method cuts numpy coordinates (r columns each) into chunks."""

COORDINATE_ROWS = Param(
    "chunk_size",
    (Interval(INT, 1, None),),
    COORDINATE_CHUNK,
    "rows per chunk for numpy input (dask and xarray input keep their chunks)",
)
"""The methods' ``chunk_size`` entry (every method's table has it)."""

PERSIST = Param(
    "persist",
    (FLAG, NONE),
    None,
    "keep Y in (cluster) memory across passes, or re-read it each pass (None: persist up "
    "to 512 MiB)",
)
"""The ``persist`` entry of the iterative methods (:func:`maybe_persist`)."""


def maybe_persist(x: da.Array, persist: bool | None) -> da.Array:
    """Hold ``x`` in memory across passes (``True``), re-read it each pass (``False``).

    ``None`` persists when ``x`` takes at most :data:`PERSIST_AUTO_BYTES`:
    iterative methods then pay one read instead of one per iteration, and
    larger data keep streaming from their source (zarr) with bounded memory.
    """
    if persist is None:
        persist = x.nbytes <= PERSIST_AUTO_BYTES
    return x.persist() if persist else x


def as_coordinates(
    Y: Any, *, name: str = "Y", chunk_size: int | None = COORDINATE_CHUNK, min_samples: int = 1
) -> tuple[da.Array, InputInfo]:
    """Coordinates (numpy, dask or DataArray) as a row-chunked float dask array.

    numpy input is cut into ``chunk_size`` rows; lazy input keeps its chunks.
    """
    return as_row_chunked(
        Y, name=name, chunk_size=chunk_size, min_samples=min_samples, keep_lazy_chunks=True
    )


def as_labels(y: Any, rows: da.Array) -> da.Array:
    """Labels as a 1-D dask array chunked like the rows of ``rows``."""
    if is_data_array(y):
        y = y.data
    if not isinstance(y, da.Array):
        y = np.asarray(y)
    check_known_chunks(y, "y")
    if y.ndim != 1:
        raise InputError(f"y must be 1-D with one label per sample; got shape {y.shape}.")
    if y.shape[0] != rows.shape[0]:
        raise InputError(
            f"y has {y.shape[0]} labels but the data have {rows.shape[0]} samples; "
            "pass one label per row."
        )
    if isinstance(y, da.Array):
        return y.rechunk((rows.chunks[0],))
    return da.from_array(y, chunks=(rows.chunks[0],))
