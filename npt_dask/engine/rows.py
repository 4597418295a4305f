"""The rows of a call, decided once at its entrance: :class:`Rows`.

A public call (a fit, a projection, a prediction) turns the user's data into a
row-chunked dask array (:func:`npt_dask.runtime.inputs.as_row_chunked`) and then into a
:class:`Rows`: that array with the array library and device its chunks live in (the
one decision, :func:`npt_dask.arrays.namespace.namespace_and_device`, taken here and
nowhere again along the route) and where the data came from. Every route carries it,
and every move between the host and the rows' device goes through it:

* :meth:`Rows.put` -- a host array (centres, weights, a model's matrices) onto the rows'
  device, once per call; on numpy the array itself.
* :meth:`Rows.aligned` -- row-aligned extras (targets, weights, slots) split like the
  rows and moved to their device once, so that each pass reuses the same blocks.
* :meth:`Rows.take` -- the one gather of rows at indices (centres, landmarks, growth, a
  precomputed model's block), dense, on the rows' device or on the host.
* :meth:`Rows.empty` -- an empty array of the rows' type: the ``meta`` of a lazy result.

Graph code: builds and computes dask graphs; no zarr, no xarray.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import array_api_compat
import array_api_compat.numpy as numpy_namespace
import dask.array as da
import numpy as np
import scipy.sparse
from dask import delayed

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import is_numpy, namespace_and_device, on_device
from npt_dask.runtime.inputs import InputInfo
from npt_dask.runtime.scheduler import compute, current_client, keep_blocks

__all__ = ["Aligned", "Rows", "dense", "put_like"]


def dense(block: Any) -> Any:
    """A gathered block of rows, dense (a scipy.sparse block expanded; others as they are)."""
    return block.toarray() if scipy.sparse.issparse(block) else block


@dataclass(frozen=True)
class Aligned:
    """Row-aligned values split like the rows: one block per row chunk, each already in
    the rows' namespace and on their device (numpy blocks locally; on a cluster, futures
    of blocks kept there). Passes take them as they are, pass after pass."""

    blocks: tuple[Any, ...]

    def __len__(self) -> int:
        return len(self.blocks)


@dataclass(frozen=True)
class Rows:
    """A row-chunked dask array and where its chunks live, decided once.

    ``data`` has one chunk along its columns (features; for a precomputed kernel the
    columns may be chunked too); ``xp`` and ``device`` are its chunks' array namespace
    and device; ``info`` says how the user's data came (to return results the same way).
    """

    data: da.Array
    xp: Any
    device: Any
    info: InputInfo | None = field(default=None, compare=False)

    @classmethod
    def of(cls, data: da.Array, info: InputInfo | None = None) -> Rows:
        """The rows of ``data``: its namespace and device read from its ``meta``."""
        xp, device = namespace_and_device(data)
        return cls(data, xp, device, info)

    @property
    def numpy(self) -> bool:
        """Whether the chunks are numpy's (host memory; its fast paths apply)."""
        return is_numpy(self.xp)

    @property
    def meta(self) -> Any:
        """An empty array of the chunks' type."""
        return self.data._meta

    @property
    def chunks(self) -> tuple[int, ...]:
        """The row chunks' sizes."""
        return tuple(int(c) for c in self.data.chunks[0])

    @property
    def n(self) -> int:
        return int(self.data.shape[0])

    def like(self, data: da.Array) -> Rows:
        """Another dask array of the same rows' library and device (rechunked, cast,
        indexed): no new decision is taken."""
        return replace(self, data=data)

    def put(self, a: Any) -> Any:
        """``a`` in the rows' namespace, on their device: a host array copied there once
        (one host-to-device copy), one already there as it is; for numpy rows a device
        array comes to the host (one crossing). None stays None."""
        return _put(a, self.xp, self.device)

    def host(self, a: Any) -> Any:
        """``a`` in host memory: one crossing (:func:`npt_dask.arrays.host.to_host`)."""
        return to_host(a)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """An empty array of the rows' type (a dask ``meta``)."""
        if self.numpy:
            return np.empty(shape, dtype=dtype)
        return self.xp.empty(shape, dtype=getattr(self.xp, np.dtype(dtype).name),
                             device=self.device)  # fmt: skip

    def take(self, idx: np.ndarray, *, host: bool = False, columns: Any = None) -> Any:
        """The rows at ``idx`` (sorted host integers), dense: one gather, reading every
        chunk that holds one. ``host``: in host memory (numpy), else in the rows'
        namespace on their device. ``columns`` (host integers): only those columns, taken
        chunk by chunk before the rows are joined (a precomputed kernel's ``K[idx][:, idx]``:
        ``m x m`` values, never ``m x n``). On a device (local threads, one chunk of
        columns, all columns) the indices cross there once, each chunk indexed by its slice
        of them (dask's own gather would copy a host index into every chunk's task)."""
        idx = np.asarray(idx)
        if columns is None and not self.numpy and self._gathers_there(idx):
            got = self._take_there(idx)
        else:
            picked = self.data[idx]
            if columns is not None:
                picked = picked[:, np.asarray(columns)]
            got = dense(compute(picked)[0])
        return np.asarray(to_host(got)) if host and not self.numpy else got

    def _gathers_there(self, idx: np.ndarray) -> bool:
        """Whether :meth:`_take_there` applies: sorted indices, rows of one column chunk,
        no cluster (there dask's gather runs where the chunks are)."""
        return (
            idx.ndim == 1 and idx.size > 0 and bool(np.all(idx[1:] >= idx[:-1]))
            and len(self.data.chunks[1]) == 1 and current_client() is None
        )  # fmt: skip

    def _take_there(self, idx: np.ndarray) -> Any:
        """The rows at sorted ``idx`` gathered on the device: one copy of the indices
        (each relative to its chunk), one task per chunk holding some, joined there."""
        starts = np.concatenate([[0], np.cumsum(self.chunks)]).astype(np.int64)
        cut = [int(c) for c in np.searchsorted(idx, starts)]
        local = self.put(idx - np.repeat(starts[:-1], np.diff(cut)))
        blocks = self.data.to_delayed(optimize_graph=False).ravel()
        parts = [delayed(_pick, pure=False)(blocks[i], local[cut[i] : cut[i + 1]])
                 for i in range(len(blocks)) if cut[i + 1] > cut[i]]  # fmt: skip
        picked = [dense(p) for p in compute(*parts)]
        return picked[0] if len(picked) == 1 else self.xp.concat(picked, axis=0)

    def aligned(self, values: Any, dtype: Any = None, *, host: bool = False) -> Aligned | None:
        """``values`` (``(n,)`` or ``(n, k)``: numpy, a device array, or a dask array of
        either) split like the rows, each block on the rows' device: moved once here,
        reused by every pass. ``dtype`` casts them (None: as they are). ``host``: kept in
        host memory instead (what a task reads on the host: the centres' slots). None
        stays None."""
        if values is None:
            return None
        if isinstance(values, Aligned):
            return values
        if host:
            return Rows(self.data, numpy_namespace, None).aligned(values, dtype)
        if not self.numpy and not is_numpy(namespace_and_device(values)[0]):
            namespace_and_device(self.data, values)  # one library, one device (else named)
        if isinstance(values, da.Array):
            return self._aligned_lazy(values, dtype)
        whole = self.put(values)  # either namespace: moved to the rows' once
        if dtype is not None:
            whole = _astype(whole, dtype, self.xp)
        starts = np.concatenate([[0], np.cumsum(self.chunks)]).astype(int)
        blocks = [whole[a:b] for a, b in itertools.pairwise(starts)]
        if current_client() is not None:
            blocks = keep_blocks(blocks)
        return Aligned(tuple(blocks))

    def _aligned_lazy(self, values: da.Array, dtype: Any) -> Aligned:
        """A dask array of extras rechunked like the rows: on numpy its blocks as they are
        (read by each pass, as the rows are); on a device moved there and held where the
        tasks run (one read, one move: ``n k`` values on the device)."""
        values = values.rechunk({0: self.chunks, **{a: -1 for a in range(1, values.ndim)}})
        if dtype is not None:
            values = values.astype(dtype)
        parts = list(values.to_delayed(optimize_graph=False).ravel())
        if self.numpy:
            return Aligned(tuple(parts))
        # not pure: a key by tokenizing would pickle the device meta (a copy to the host)
        moved = [delayed(put_like, pure=False)(p, self.meta) for p in parts]
        client = current_client()
        if client is not None:
            return Aligned(tuple(client.compute(moved)))
        return Aligned(tuple(compute(*moved)))

    def split(self, whole: Any) -> Sequence[Any]:
        """A row-aligned array already on the rows' device, cut like the rows (views)."""
        starts = np.concatenate([[0], np.cumsum(self.chunks)]).astype(int)
        return [whole[a:b] for a, b in itertools.pairwise(starts)]


def _pick(block: Any, local: Any) -> Any:
    """Task body: the rows of ``block`` at ``local`` (indices on the block's device)."""
    return dense(block)[local]


def _astype(a: Any, dtype: Any, xp: Any) -> Any:
    if isinstance(a, np.ndarray):
        return a.astype(dtype, copy=False)
    return xp.astype(a, getattr(xp, np.dtype(dtype).name), copy=False)


def _put(a: Any, xp: Any, device: Any) -> Any:
    """``a`` in namespace ``xp`` on ``device``: :meth:`Rows.put`'s rule."""
    if a is None or not is_numpy(xp):
        return on_device(a, xp, device)
    foreign = array_api_compat.is_array_api_obj(a) and not isinstance(a, np.ndarray | np.generic)
    return np.asarray(to_host(a)) if foreign else a


def put_like(a: Any, like: Any) -> Any:
    """Task body: ``a`` in the namespace and on the device of ``like`` (an empty array of
    the rows' type), by :meth:`Rows.put`'s rule."""
    return _put(a, *namespace_and_device(like))
