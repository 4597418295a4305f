"""The matrix-free (centred) kernel operator of the training rows, :class:`KernelOperator`.

``V -> K V`` for the centred (or uncentred) kernel matrix of the training rows. One call
is one *pass*: every block ``kappa(X_i, X_j)`` with ``i <= j`` is evaluated (or read
from the cache) once and used twice, ``B V_j`` for row block i and ``B^T V_i`` for row
block j. The centring ``K V = C(calK C(V))`` with ``C(V) = V - mean_rows(V)`` is folded
into the block V and the result, so centring costs O(n b) per pass. The row means ``m``
of the uncentred matrix come free with the first pass (a column of ones rides along
with V). The lazy kernel matrix itself is :mod:`npt_dask.engine.kernel_matrix`'s.

Layer rule: this is graph code. It builds dask graphs over numpy blocks and
calls the numeric kernels of :mod:`npt_dask.kernels`; it never touches zarr or
xarray, and it never materialises the n x n kernel matrix.

With ``kernel="precomputed"`` the "rows" are the kernel matrix itself,
chunked in both directions (:func:`npt_dask.runtime.inputs.as_kernel_matrix`): a pass
reads block (i, j) of the given matrix instead of evaluating it, the diagonal
comes from the diagonal blocks, and projections read test x train blocks.

The device seam is the row pass's (:func:`npt_dask.arrays.namespace.namespace_and_device`):
the blocks, kept blocks, pair products and running row sums live in the namespace of the
training rows' chunks. A pass ships V to the rows' device once (one host-to-device task
per row chunk; none on numpy) and returns ``K V`` to host once
(:func:`~npt_dask.engine.sums.host_rows`, through :func:`npt_dask.arrays.host.to_host`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, get_args

import dask
import dask.array as da
import numpy as np
from dask import delayed
from dask.delayed import Delayed

from npt_dask.arrays.buffers import clear_scratch
from npt_dask.arrays.host import to_host
from npt_dask.engine.blocks import sym_gram_block
from npt_dask.engine.budget import cached_fraction, default_memory_budget, kept_for
from npt_dask.engine.kernel_matrix import check_row_chunked, kernel_matrix
from npt_dask.engine.passes import as_rows, kept_task, pair_task
from npt_dask.engine.rows import Rows, put_like
from npt_dask.engine.sums import host_rows, join_rows, sum_parts
from npt_dask.errors import InputError
from npt_dask.kernels import KernelSpec
from npt_dask.params.constraints import Options, Param
from npt_dask.runtime.inputs import is_sparse_rows
from npt_dask.runtime.scheduler import (
    blas_threads_for_tasks,
    compute,
    current_client,
    retry_on_lost_data,
    ship_blocks,
)

__all__ = [
    "Cache",
    "KernelOperator",
    "center_columns",
    "drop_zero_features",
]

Cache = Literal["auto", "recompute", "memory"]
"""What a Krylov fit does with kernel blocks between passes."""

BlockKey = tuple[int, int]


def drop_zero_features(x: da.Array, kernel: KernelSpec | None = None) -> da.Array:
    """``x`` without the feature columns that are zero in every row (one read pass).

    Exact for the training operator: each registry kernel depends on a pair
    of rows only through their coordinates, norms and differences, none of
    which a column that is zero in both rows changes. (Projections of new
    rows, which may be non-zero there, use all columns.) On MNIST 67 of the
    784 pixels are blank in all 60,000 training images: 8.5% less kernel work.
    ``x`` is returned as it is for a precomputed or callable ``kernel`` (a
    function may use every column) and for sparse rows (they skip zeros anyway).
    """
    if kernel is not None and not kernel.feature_local:
        return x
    if is_sparse_rows(x):
        return x
    used = np.asarray(to_host(da.any(x != 0, axis=0).compute()))
    if used.all() or not used.any():
        return x
    return x[:, used]


def center_columns(v: np.ndarray) -> np.ndarray:
    """``C(V) = V - mean over rows of V``: the centring projector ``I - E``."""
    return v - v.mean(axis=0, keepdims=True)


def _chain_sum(items: Sequence[tuple[Delayed, int | None]], key: str) -> Delayed:
    """Sum Delayed contributions (``part[which]``) as a running sum, in the given order.

    A pass's pair products each feed two row sums; a tree over them keeps a
    pair's output alive until both rows' groups are complete, and the
    scheduler runs many pairs ahead of the sums: many row panels of
    ``n x (b + 1)`` alive at once. A running sum, in the order
    the pairs are laid out, releases each output as soon as both rows have
    added it: about one panel (the sums themselves) plus the pairs in flight.
    """
    part, which = items[0]
    total = delayed(sum_parts, pure=True)([part], [which], dask_key_name=f"{key}-0")
    for k, (part, which) in enumerate(items[1:], start=1):
        total = delayed(sum_parts, pure=True)(
            [total, part], [None, which], dask_key_name=f"{key}-{k}"
        )
    return total


class KernelBlocks:
    """Kernel blocks evaluated from row chunks of features (a named or callable kernel)."""

    def __init__(self, x: da.Array, kernel: KernelSpec) -> None:
        check_row_chunked(x, "x")
        self.x = x
        self.kernel = kernel
        self._parts: list[Delayed] = list(x.to_delayed().ravel())

    def chunk(self, i: int) -> Delayed:
        """Row chunk ``i`` (where its blocks live)."""
        return self._parts[i]

    def block(self, i: int, j: int, key: str) -> Delayed:
        """Block ``(i, j)`` as its own task (to be kept between passes)."""
        return delayed(kept_task, pure=True)(
            self._parts[i], self._parts[j], self.kernel, dask_key_name=key
        )

    def pair(
        self, i: int, j: int, v_i: Any, v_j: Any, key: str, kept: Delayed | None, tag: str
    ) -> Delayed:
        """The pair's products with ``v``: from the kept block, or evaluated in the task
        (the one task body, :func:`~npt_dask.engine.passes.pair_task`)."""
        return delayed(pair_task, pure=True)(
            self._parts[i], v_i, self._parts[j], v_j, self.kernel, i == j, kept,
            dask_key_name=key,
        )  # fmt: skip


class PrecomputedBlocks:
    """Blocks read from a given square kernel matrix, as its symmetric part
    ``(K + K^T) / 2`` (a precomputed kernel); its columns chunked like its rows."""

    def __init__(self, k: da.Array, kernel: KernelSpec) -> None:
        if k.ndim != 2 or k.shape[0] != k.shape[1]:
            raise InputError(f"A precomputed kernel matrix must be square; got {k.shape}.")
        self.x = k.rechunk({1: k.chunks[0]})
        self.kernel = kernel
        self._grid: list[list[Delayed]] = [list(row) for row in self.x.to_delayed()]

    def chunk(self, i: int) -> Delayed:
        """Diagonal block ``i`` of the given matrix (where its blocks live)."""
        return self._grid[i][i]

    def block(self, i: int, j: int, key: str) -> Delayed:
        """Block ``(i, j)`` of the symmetric part (reads ``K_ij`` and ``K_ji``)."""
        return delayed(sym_gram_block, pure=True)(
            self._grid[i][j], self._grid[j][i], dask_key_name=key
        )

    def pair(
        self, i: int, j: int, v_i: Any, v_j: Any, key: str, kept: Delayed | None, tag: str
    ) -> Delayed:
        """The pair's products with ``v``, from the kept block or one read for this pass."""
        block = kept if kept is not None else self.block(i, j, f"npt-gblock-{tag}")
        return delayed(pair_task, pure=True)(None, v_i, None, v_j, self.kernel, i == j, block,
                                             dask_key_name=key)  # fmt: skip


def block_source(x: da.Array, kernel: KernelSpec) -> KernelBlocks | PrecomputedBlocks:
    """Where the training operator's blocks come from: the one dispatch on the kind."""
    return PrecomputedBlocks(x, kernel) if kernel.precomputed else KernelBlocks(x, kernel)


class KernelOperator:
    """Matrix-free product with the kernel matrix of the training rows.

    Parameters
    ----------
    x : dask.array.Array
        Training rows, ``(n, d)``, one chunk along features. Its row chunks
        are the kernel blocks: a pass evaluates ``nb (nb + 1) / 2`` blocks for
        ``nb`` row chunks.
    kernel : KernelSpec
        Resolved kernel.
    center : bool
        Multiply with the centred matrix ``K = (I - E) calK (I - E)`` (True) or
        the uncentred ``calK`` (False).
    cache : {"auto", "recompute", "memory"}
        ``"recompute"`` evaluates every kernel block on every pass: memory
        stays at a few blocks per thread, whatever n. ``"memory"`` evaluates
        the upper-triangle blocks once and keeps them all (on a distributed
        cluster they live on the workers, which spill them to disk past their
        memory limit); later passes cost only the block products.
        ``"auto"`` keeps as many blocks as fit in ``cache_budget`` and
        recomputes the rest: all of them for small n, none once a single
        block no longer fits. :attr:`cache` then reads ``"memory"``,
        ``"recompute"`` or ``"partial"``.
    cache_budget : int, optional
        Bytes the kept blocks may take with ``cache="auto"`` (default: the fit's
        default ``memory_budget``, :func:`npt_dask.engine.budget.default_memory_budget`).
    kept : iterable of (i, j), optional
        The block pairs to keep, as the fit plan chose them
        (:func:`npt_dask.npt.planning.plan_fit`); overrides ``cache`` and ``cache_budget``.
    products : dtype, default float64
        The precision of the block products in :meth:`uncentered_matmat`: float64 (the
        Krylov fit's), or float32 for float32 blocks (conjugate gradient in the kernel
        precision: BLAS's single-precision rate); the sums over blocks are float64.

    Notes
    -----
    Memory per task: one kernel block (``chunk**2`` elements in the kernel
    precision, plus a float64 copy when that precision is float32), the two
    input row chunks (``chunk * d``) and the block products (``chunk * b``).
    The driver holds V and the result, ``n * b`` float64 each.
    """

    def __init__(
        self,
        x: Rows | da.Array,
        kernel: KernelSpec,
        *,
        center: bool = True,
        kept: Iterable[BlockKey] | None = None,
        cache: Cache = "auto",
        cache_budget: int | None = None,
        products: Any = np.float64,
    ) -> None:
        rows = as_rows(x)
        source = block_source(rows.data, kernel)
        self.rows = rows.like(source.x)
        x = source.x
        self.numpy = rows.numpy
        CACHE_PARAM.check(cache, "KernelOperator")
        self.x = x
        self.kernel = kernel
        self.center = bool(center)
        self.row_chunks = tuple(int(c) for c in x.chunks[0])
        self.offsets = np.concatenate([[0], np.cumsum(self.row_chunks)])
        self.n = int(self.offsets[-1])
        if kept is None:  # the plan's rule, with the default budget
            budget = default_memory_budget() if cache_budget is None else cache_budget
            kept = kept_for(cache, self.row_chunks, x.dtype.itemsize, budget)
        self.cached_pairs = frozenset(kept)
        self.cache = (
            "recompute" if not self.cached_pairs
            else "memory" if len(self.cached_pairs) == self.n_blocks else "partial"
        )  # fmt: skip
        self.products = np.dtype(products)
        self.passes = 0
        self._graphs = 0  # graphs built: a rerun after a lost worker gets fresh keys
        self._source = source
        self._blocks: dict[BlockKey, Delayed] | None = None
        self._row_sums: np.ndarray | None = None
        self._token = uuid.uuid4().hex[:12]

    @property
    def cached_fraction(self) -> float:
        """Share of the kernel-block work (entries) kept between passes."""
        return cached_fraction(self.row_chunks, sorted(self.cached_pairs))

    @property
    def n_blocks(self) -> int:
        """Kernel blocks evaluated per pass (the upper triangle)."""
        nb = len(self.row_chunks)
        return nb * (nb + 1) // 2

    def _cached_blocks(self) -> dict[BlockKey, Delayed]:
        if self._blocks is None:
            lazy = {
                (i, j): self._source.block(i, j, f"npt-kblock-{self._token}-{i}-{j}")
                for i, j in sorted(self.cached_pairs)
            }
            keys = list(lazy)
            with blas_threads_for_tasks():
                persisted = dask.persist(*lazy.values())
            self._blocks = dict(zip(keys, persisted, strict=True))
        return self._blocks

    def _pass_graph(self, v: Any) -> list[Delayed]:
        """The pass's row sums of ``calK v``: ``v`` host numpy (moved to the rows' device
        once per pass: one task a row chunk), an array already there (cut into views:
        nothing moves), or its row chunks as Delayed."""
        nb = len(self.row_chunks)
        host = isinstance(v, np.ndarray) or (isinstance(v, list) and not self.numpy)
        v_parts = (
            v if isinstance(v, list)
            else ship_blocks([v[self.offsets[i] : self.offsets[i + 1]] for i in range(nb)])
        )  # fmt: skip
        self._graphs += 1
        tag = f"{self._token}-p{self.passes}-g{self._graphs}"
        if host and not self.numpy:  # V to the rows' device, once per pass
            v_parts = [
                delayed(put_like, pure=True)(
                    part, self.rows.meta, dask_key_name=f"npt-vdev-{tag}-{i}"
                )
                for i, part in enumerate(v_parts)
            ]
        contributions: list[list[tuple[Delayed, int]]] = [[] for _ in range(nb)]
        blocks = self._cached_blocks() if self.cached_pairs else {}
        for i in range(nb):
            for j in range(i, nb):
                key = f"npt-pair-{tag}-{i}-{j}"
                pair = self._source.pair(
                    i, j, v_parts[i], v_parts[j], key, blocks.get((i, j)), f"{tag}-{i}-{j}"
                )
                contributions[i].append((pair, 0))
                if i != j:
                    contributions[j].append((pair, 1))
        return [_chain_sum(c, f"npt-rowsum-{tag}-{i}") for i, c in enumerate(contributions)]

    def uncentered_matmat(self, v: Any) -> Any:
        """``calK @ v`` for an ``(n, b)`` block; one pass over the kernel. ``v`` on the host
        (float64 numpy) gives a host result (the row blocks joined where they live, then
        one crossing); ``v`` in the rows' namespace on their device (an iterate that lives
        there) gives the result there: nothing crosses but the row sums of the first
        pass (``n`` numbers, once)."""
        there = not self.numpy and not isinstance(v, np.ndarray)
        xp = self.rows.xp if there else np
        v = xp.astype(v, xp.float64) if there else np.asarray(v, dtype=np.float64)
        if v.ndim != 2 or v.shape[0] != self.n:
            raise InputError(f"v must have shape ({self.n}, b); got {v.shape}.")
        want_sums = self._row_sums is None
        if want_sums:
            ones = self.rows.put(np.ones((self.n, 1))) if there else np.ones((self.n, 1))
            v = xp.concat([v, ones], axis=1) if there else np.hstack([v, ones])
        v = xp.astype(v, getattr(xp, self.products.name)) if there else v.astype(
            self.products, copy=False)  # fmt: skip
        if self.numpy:  # the row blocks fetched to the driver and joined there
            out = retry_on_lost_data(lambda: host_rows(compute(*self._pass_graph(v))))
        else:  # joined where they live, then one crossing (none when v lives there)
            join = join_rows if there else host_rows
            out = retry_on_lost_data(
                lambda: compute(delayed(join, pure=False)(self._pass_graph(v)))[0]
            )
        self.passes += 1
        if want_sums:
            sums = to_host(out[:, -1]) if there else out[:, -1]  # n numbers, once
            self._row_sums = np.array(sums, dtype=np.float64)
            out = out[:, :-1]
        return out

    def matmat(self, v: np.ndarray) -> np.ndarray:
        """``K @ v`` (centred when ``center``); one pass over the kernel."""
        if not self.center:
            return self.uncentered_matmat(v)
        return center_columns(self.uncentered_matmat(center_columns(v)))

    def chunked_matmat(self, v: da.Array, keep: Callable[[da.Array], da.Array]) -> da.Array:
        """``K @ v`` for a row-chunked ``v``, never gathered: the result is held by ``keep``.

        ``v`` is rechunked like the training rows if it is not already. The
        pass's result (with the row sums of the first pass, which come free)
        is held by ``keep`` (persisted on a cluster, written to local disk by
        :class:`npt_dask.npt.panels.ChunkedPanels`); its centring is a second,
        ``n x b`` sized, held result.
        """
        v = v.rechunk({0: self.row_chunks, 1: -1}).astype(np.float64)
        if v.ndim != 2 or v.shape[0] != self.n:
            raise InputError(f"v must have shape ({self.n}, b); got {v.shape}.")
        if self.center:
            v = v - v.mean(axis=0, keepdims=True)
        want_sums = self._row_sums is None
        if want_sums:
            ones = da.ones((self.n, 1), chunks=(self.row_chunks, 1))
            v = da.concatenate([v, ones], axis=1).rechunk({1: -1})
        width = int(v.shape[1])
        rows = self._pass_graph(list(v.to_delayed()[:, 0]))
        out = keep(
            da.concatenate(
                [
                    da.from_delayed(
                        part if self.numpy else delayed(to_host, pure=True)(part),
                        (size, width),
                        dtype=np.float64,
                    )
                    for part, size in zip(rows, self.row_chunks, strict=True)
                ]
            )
        )
        self.passes += 1
        if want_sums:
            self._row_sums = np.asarray(to_host(compute(out[:, -1])[0]), dtype=np.float64)
            out = out[:, :-1]
        if self.center:
            out = keep(out - out.mean(axis=0, keepdims=True))
        return out

    def explicit(self) -> np.ndarray:
        """The (centred) kernel matrix as an ``(n, n)`` float64 array, one block at a time.

        For the dense solvers: the uncentred matrix is evaluated blockwise
        (:func:`kernel_matrix`), its row means recorded (:attr:`row_means` then
        costs no pass), and it is centred and symmetrised in place. Memory: the
        ``n x n`` matrix, plus its blocks while they are gathered. On a device each
        block crosses to the host in the task that makes it: the device holds the blocks
        in flight, never the ``n x n`` matrix.
        """
        matrix = kernel_matrix(self.x, self.x, self.kernel)
        if not self.numpy:
            host = np.empty((0, 0), dtype=matrix.dtype)
            matrix = da.map_blocks(to_host, matrix, dtype=matrix.dtype, meta=host)
        gram = np.asarray(to_host(compute(matrix)[0]))
        gram = gram.astype(np.float64, copy=False)
        self._row_sums = gram.sum(axis=1)
        self.passes += 1
        if self.center:
            m = self._row_sums / self.n
            gram -= m[:, None]
            gram -= m[None, :]
            gram += float(m.mean())
        gram += gram.T  # symmetrise in place: (G + G^T) / 2
        gram *= 0.5
        return gram

    @property
    def row_means(self) -> np.ndarray:
        """Row means ``m = calK 1 / n`` of the uncentred matrix (costs a pass if none ran)."""
        if self._row_sums is None:
            self.uncentered_matmat(np.zeros((self.n, 0)))
        assert self._row_sums is not None
        return np.asarray(self._row_sums / self.n)

    @property
    def grand_mean(self) -> float:
        """Grand mean ``g = 1^T calK 1 / n^2``."""
        return float(self.row_means.mean())

    def release(self) -> None:
        """Drop kept kernel blocks and the threads' scratch buffers."""
        self._blocks = None
        clear_scratch()
        client = current_client()
        if client is not None:
            client.run(clear_scratch)


CACHE_PARAM = Param(
    "cache",
    (Options(get_args(Cache)),),
    "auto",
    "keep kernel blocks between Krylov passes, recompute them, or as many as fit",
    parse=str,
)
"""The ``cache`` argument of a fit and of :class:`KernelOperator`."""
