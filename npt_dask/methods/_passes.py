"""One pass over the row chunks of a coordinate array: map each chunk, sum the parts.

Layer rule: graph code. Chunk functions see the rows' blocks in their namespace (numpy,
or CuPy on a GPU) and return sums there; the driver receives the (small) sums, in host
memory, in one crossing per pass (:func:`pass_sums`). Memory per task is one row chunk
plus what the chunk function returns, whatever the number of rows. A method's small
host arrays (coefficients, means, directions) go to the rows' device once per call
(:func:`affine`, :func:`take_labels`), never once per chunk.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import dask.array as da
import numpy as np
from dask import delayed

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import is_numpy, namespace_of
from npt_dask.engine.rows import Aligned, Rows
from npt_dask.engine.sums import add_into, chunk_sums, tree_reduce
from npt_dask.errors import InputError
from npt_dask.params.constraints import FLAG, INT, NONE, Interval, Param
from npt_dask.runtime.inputs import InputInfo, as_row_chunked, check_known_chunks, is_data_array
from npt_dask.runtime.labels import on_a_device
from npt_dask.runtime.scheduler import compute

__all__ = [
    "COORDINATE_CHUNK",
    "COORDINATE_ROWS",
    "PERSIST",
    "PERSIST_AUTO_BYTES",
    "add_parts",
    "affine",
    "aligned",
    "as_coordinates",
    "as_labels",
    "chunk_sums",
    "class_positions",
    "coordinate_rows",
    "host_sums",
    "lazy_name",
    "maybe_persist",
    "pass_sums",
    "take_labels",
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


def coordinate_rows(
    Y: Any, *, name: str = "Y", chunk_size: int | None = COORDINATE_CHUNK, min_samples: int = 1
) -> tuple[Rows, InputInfo]:
    """Coordinates as :func:`as_coordinates` gives them, as the :class:`~npt_dask.engine.
    rows.Rows` of the call (their namespace and device decided once)."""
    data, info = as_coordinates(Y, name=name, chunk_size=chunk_size, min_samples=min_samples)
    return Rows.of(data, info), info


def as_labels(y: Any, rows: da.Array) -> Any:
    """1-D labels, one per row of ``rows``, as given (numpy, dask or a device's array;
    a DataArray's data): checked, not read."""
    if is_data_array(y):
        y = y.data
    if not isinstance(y, da.Array) and not on_a_device(y):
        y = np.asarray(y)
    check_known_chunks(y, "y")
    if y.ndim != 1:
        raise InputError(f"y must be 1-D with one label per sample; got shape {y.shape}.")
    if y.shape[0] != rows.shape[0]:
        raise InputError(
            f"y has {y.shape[0]} labels but the data have {rows.shape[0]} samples; "
            "pass one label per row."
        )
    return y


def aligned(rows: Rows, values: Any) -> Aligned:
    """Row-aligned ``values`` (targets, class positions) split like ``rows`` and moved to
    their device once (:meth:`~npt_dask.engine.rows.Rows.aligned`): every pass of the
    call reads the same blocks."""
    split = rows.aligned(values)
    assert split is not None, "aligned values are given"
    return split


# ------------------------------------------------------------------ one pass of sums


def pass_sums(
    func: Callable[..., tuple[Any, ...]],
    rows: Rows,
    extras: Sequence[Aligned] = (),
    *args: Any,
    combine: Callable[[list[Any]], Any] | None = None,
) -> tuple[Any, ...]:
    """``sum over chunks k of func(rows_k, *(e_k for e in extras), *args)``, one read pass.

    ``extras`` are row-aligned values already split like the rows and on their device
    (:meth:`~npt_dask.engine.rows.Rows.aligned`: moved once per call, reused by every
    pass); ``args`` the same for every chunk (host arrays moved once per pass by the
    caller: :meth:`~npt_dask.engine.rows.Rows.put`). ``func`` returns a tuple of arrays
    (or numbers) of fixed shapes in the rows' namespace, summed by a tree of fan-in 8
    (``combine``: element-wise by default, :func:`add_parts`) where they are; the total
    comes to the host in one crossing (:func:`host_sums`). Returns the summed tuple, numpy.
    """
    blocks = list(rows.data.to_delayed().ravel())
    columns = [blocks, *(list(e.blocks) for e in extras)]
    parts = [delayed(func, pure=False)(*chunk, *args) for chunk in zip(*columns, strict=True)]
    total = tree_reduce(parts, combine or add_parts)
    if not rows.numpy:
        total = delayed(host_sums, pure=False)(total)
    return tuple(compute(total)[0])


def add_parts(parts: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
    """Element-wise sum of tuples of arrays (or numbers) of fixed shapes, in their
    namespace (a device's sums stay there): the first copied, the others added in place."""
    total = tuple(_copy(p) for p in parts[0])
    for part in parts[1:]:
        add_into(total, part)
    return total


def _copy(a: Any) -> Any:
    """A new array holding ``a`` (a number or numpy array: a numpy array, as np.array)."""
    return a.copy() if on_a_device(a) else np.array(a, copy=True)


def host_sums(total: Sequence[Any]) -> tuple[Any, ...]:
    """Task body: a pass's summed tuple in host memory, in one crossing (its device
    arrays joined into one float64 vector, copied, and cut again; numbers as they are)."""
    moved = [i for i, a in enumerate(total) if on_a_device(a)]
    out = list(total)
    if not moved:
        return tuple(out)
    xp = namespace_of(*(total[i] for i in moved))
    flat = xp.concat([xp.reshape(xp.astype(total[i], xp.float64), (-1,)) for i in moved])
    host = np.asarray(to_host(flat))
    start = 0
    for i in moved:
        shape, dtype = tuple(total[i].shape), np.dtype(str(total[i].dtype))
        size = int(np.prod(shape, dtype=np.int64))
        out[i] = host[start : start + size].reshape(shape).astype(dtype, copy=False)
        start += size
    return tuple(out)


# ------------------------------------------------------------------ lazy per-row results


def lazy_name(rows: Rows, label: str) -> str | None:
    """The name of a lazy result that reads arrays on the rows' device (small arrays moved
    there, or its ``meta``): a fresh one (dask would hash those arrays to name it, which
    copies them to the host); None on numpy (dask's own name)."""
    return None if rows.numpy else f"{label}-{uuid.uuid4().hex}"


def affine(
    rows: Rows, matrix: np.ndarray, *, shift: Any = None, offset: Any = None, label: str
) -> da.Array:
    """``(rows - shift) @ matrix + offset`` in float64, lazy and in the rows' namespace
    (a device's result device-backed): ``matrix``, ``shift`` and ``offset`` (small host
    arrays, or None) moved to the rows' device once, read by every chunk."""
    width = int(matrix.shape[1])
    moved = [rows.put(a) if isinstance(a, np.ndarray) else a for a in (matrix, shift, offset)]
    return da.map_blocks(
        _affine_block, rows.data, *moved, dtype=np.float64, chunks=(rows.data.chunks[0], (width,)),
        meta=rows.empty((0, width), np.float64), name=lazy_name(rows, label),
    )  # fmt: skip


def _affine_block(block: Any, matrix: Any, shift: Any, offset: Any) -> Any:
    """Task body of :func:`affine`: one chunk, in its namespace."""
    xp = namespace_of(block)
    x = block.astype(np.float64) if is_numpy(xp) else xp.astype(block, xp.float64)
    if shift is not None:
        x = x - shift
    out = x @ matrix
    return out if offset is None else out + offset


def class_positions(scores: Any) -> Any:
    """Each row's class position from decision values ``scores`` (numpy, or lazy with one
    chunk of columns): ``scores > 0`` for one column, else the largest score's column; in
    the scores' namespace."""
    if scores.shape[1] == 1:
        return (scores[:, 0] > 0).astype(np.intp)
    if not isinstance(scores, da.Array):
        return scores.argmax(axis=1)
    rows = Rows.of(scores)
    return da.map_blocks(
        _argmax_rows, scores, drop_axis=1, dtype=np.intp, meta=rows.empty((0,), np.intp),
        name=lazy_name(rows, "argmax"),
    )  # fmt: skip


def _argmax_rows(block: Any) -> Any:
    return block.argmax(axis=1)


def take_labels(rows: Rows, index: da.Array, classes: np.ndarray) -> da.Array:
    """Lazy class labels ``classes[index]`` of lazy row positions ``index``: on the rows'
    device for numeric classes (moved there once), in host memory for others (strings
    live on the host: each chunk's positions cross once, as the labels must)."""
    numeric = classes.dtype.kind in "biuf"
    if rows.numpy or numeric:
        return da.map_blocks(
            _take, index, rows.put(classes), dtype=classes.dtype, name=lazy_name(rows, "label"),
            meta=rows.empty((0,), classes.dtype),
        )  # fmt: skip
    return da.map_blocks(
        _take_home, index, classes, dtype=classes.dtype, meta=np.empty((0,), classes.dtype)
    )


def _take(index: Any, classes: Any) -> Any:
    return classes.take(index)


def _take_home(index: Any, classes: np.ndarray) -> np.ndarray:
    return classes.take(np.asarray(to_host(index)))
