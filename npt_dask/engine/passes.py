"""The kernel-operator seam: ``kappa(rows, centres)`` evaluated block by block, and its uses.

Every pass that needs the kernel between the rows of a data set and a set of
*centres* -- a model's training rows, a ridge model's landmarks -- goes
through :func:`row_pass` (sums and per-row outputs, computed now) or
:func:`map_rows` (a lazy per-row result). One task per row chunk evaluates
the chunk's kernel block against the centres once and hands it to every
consumer the pass was given (:mod:`npt_dask.engine.consumers`): the projection
``B W``, ridge's normal matrix ``B^T W B`` and right-hand side ``B^T W T``, a
conjugate-gradient product ``B^T W (B p)``, the rows of ``K_mm`` from the
centres' own rows, a digest of the data. So the fit's training pass, a
projection, a prediction and every ridge solver read each block once per pass,
whatever they take from it.

* :class:`Centres` -- the operator's columns, shipped to the tasks once: rows
  of features in panels ``(x_j, w_j)`` (``w_j``: weights that :class:`~npt_dask.
  consumers.Apply` multiplies, or None), or a store that streams them.
* :func:`row_pass` -- sums along ``chains`` fixed chains (chunk ``i`` joins
  chain ``i mod chains``: memory bounded by ``chains`` running sums whatever n,
  and the order of summation fixed, so the result does not depend on
  scheduling); per-row outputs concatenated in row order.
* :func:`map_rows` -- a lazy ``(n, width)`` result, one task per row chunk.

Memory per task: the row chunk, its kernel block (``rows x m`` in the kernel
precision; a whole-block consumer needs the centres as one panel, a product
streams panel by panel), a float64 Fortran copy for the sums that must be
float64 (:class:`~npt_dask.engine.consumers.Gram`, :class:`~npt_dask.engine.consumers.Cross`),
and the consumers' outputs; plus, for a ``sum`` consumer, its chain's running sum.

The array namespace of a pass is that of its row chunks, chosen once in the task body
(:class:`~npt_dask.engine.consumers.RowBlock`,
:func:`npt_dask.arrays.namespace.namespace_and_device`): numpy chunks give numpy blocks, a
CuPy-backed dask array CuPy blocks on the GPU. The running sums stay there along their
chains and are added there; each sum crosses to host once per pass, in the task that adds
the chains (:meth:`~npt_dask.engine.consumers.Consumer.finish`, through
:func:`npt_dask.arrays.host.to_host`). A ``rows`` consumer of :func:`row_pass` crosses once
per chunk (the driver writes or keeps those outputs); :func:`map_rows` keeps its per-row
results in the rows' namespace (the lazy array's ``meta`` is of the rows' array type).

Layer rule: graph code. Task bodies are :mod:`npt_dask.engine.consumers` (arrays only).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import array_api_compat.numpy as numpy_namespace
import dask.array as da
import numpy as np
from dask import delayed
from dask.delayed import Delayed

from npt_dask.arrays.namespace import is_numpy, namespace_and_device, namespace_of
from npt_dask.arrays.threads import blas_limit
from npt_dask.engine.consumers import Consumer, KeptBlock, PairProducts, RowBlock, dense_rows
from npt_dask.engine.rows import Rows, put_like
from npt_dask.engine.sums import add_into
from npt_dask.kernels import KernelSpec
from npt_dask.runtime.progress import ProgressBar, compute_counted
from npt_dask.runtime.scheduler import compute, current_client, keep_blocks

__all__ = [
    "Centres",
    "PassResult",
    "as_rows",
    "chunk_inputs",
    "chunk_tasks",
    "kept_task",
    "map_rows",
    "pair_task",
    "row_pass",
    "run_block",
]


Where = tuple[Any, Any] | None
"""The namespace and device a side of the centres lives in; None: not known here (blocks
given as Delayed or futures)."""


@dataclass(frozen=True)
class Centres:
    """The columns of a kernel operator, as the tasks receive them.

    ``x_blocks``/``w_blocks``: the centre rows and their weights in panels (locally the
    arrays themselves, or Delayed; futures on a cluster, kept with lineage by
    :func:`npt_dask.runtime.scheduler.keep_blocks`), each side living where ``x_where``
    and ``w_where`` say; or ``store``: an object the tasks iterate for ``(x_j, w_j)`` (a
    stored model's training blocks, read where the tasks run). :meth:`on` brings them to
    the rows of a pass once, never per chunk. ``sizes`` are the panels' row counts; for a
    precomputed kernel the x blocks are None (the rows' column blocks of the given matrix
    stand for them).
    """

    sizes: tuple[int, ...]
    x_blocks: Sequence[Any] = ()
    w_blocks: Sequence[Any] = ()
    store: Any = None
    x_where: Where = None
    w_where: Where = None

    @property
    def m(self) -> int:
        return int(sum(self.sizes))

    @property
    def panels(self) -> int:
        return len(self.sizes)

    def task_input(self) -> Any:
        """The argument a task gets: ``(xs, ws)`` lists, or the store."""
        if self.store is not None:
            return self.store
        return (list(self.x_blocks), list(self.w_blocks))

    @classmethod
    def of(
        cls,
        x: Any,
        weights: Any = None,
        *,
        panel: int | None = None,
        sizes: Sequence[int] | None = None,
        rows: Rows | None = None,
    ) -> Centres:
        """Centres from rows ``x`` (None for a precomputed kernel, then ``sizes`` gives
        the panels) and optional weights, in panels of ``panel`` rows (one panel: None),
        shipped once. With ``rows`` they are first moved to those rows' device (one copy
        each; numpy rows take host arrays)."""
        m = int(x.shape[0]) if x is not None else int(sum(sizes or ()))
        if sizes is None:
            step = panel or max(m, 1)
            sizes = [min(step, m - s) for s in range(0, m, step)]
        if rows is not None:
            x, weights = rows.put(x), rows.put(weights)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        cut = [slice(int(a), int(b)) for a, b in itertools.pairwise(offsets)]
        xs = [None] * len(cut) if x is None else keep_blocks([x[s] for s in cut])
        ws = [None] * len(cut) if weights is None else keep_blocks([weights[s] for s in cut])
        return cls(tuple(int(s) for s in sizes), xs, ws, x_where=_where(x), w_where=_where(weights))

    def on(self, rows: Rows) -> Centres:
        """These centres in the namespace and on the device of ``rows``: themselves when
        they are there (or stream from a store), else their panels moved once, here (a
        side given as Delayed blocks moves in one task a panel, run once per compute; on
        numpy rows such a side is taken as it is)."""
        if self.store is not None:
            return self
        x_blocks, x_where = _side_on(self.x_blocks, self.x_where, rows)
        w_blocks, w_where = _side_on(self.w_blocks, self.w_where, rows)
        if x_where == self.x_where and w_where == self.w_where:
            return self
        return replace(self, x_blocks=x_blocks, w_blocks=w_blocks, x_where=x_where,
                       w_where=w_where)  # fmt: skip


def _where(a: Any) -> Where:
    """Where a side of the centres lives (None sides live anywhere: numpy's)."""
    return (numpy_namespace, None) if a is None else namespace_and_device(a)


def _side_on(blocks: Sequence[Any], where: Where, rows: Rows) -> tuple[Sequence[Any], Where]:
    """One side of the centres in the rows' namespace: as it is when it is there (or
    unknown, for numpy rows), else each panel moved once."""
    here = (rows.xp, rows.device)
    if where is not None and ((is_numpy(where[0]) and rows.numpy) or where == here):
        return blocks, where
    if where is None and rows.numpy:
        return blocks, where
    return [_moved_panel(b, rows) for b in blocks], here


def _moved_panel(block: Any, rows: Rows) -> Any:
    """A panel (an array, a Delayed, or a future on a cluster) in the rows' namespace:
    moved once (a task where the panel lives, for a Delayed or a future)."""
    if block is None:
        return None
    if isinstance(block, Delayed):  # named, not tokenized: a device meta would be pickled
        name = f"put-{block.key}-{rows.xp.__name__}-{rows.device}"
        return delayed(put_like, pure=True)(block, rows.meta, dask_key_name=name)
    if hasattr(block, "key") and not hasattr(block, "shape"):  # a future: move it there
        client = current_client()
        assert client is not None, "futures of centres need their client"
        return client.submit(put_like, block, rows.meta, pure=False)
    return rows.put(block)


@dataclass(frozen=True)
class PassResult:
    """What :func:`row_pass` returns: each ``rows`` consumer's per-chunk outputs (in row
    order) and each ``sum`` consumer's total."""

    rows: Mapping[str, list[Any]]
    sums: Mapping[str, Any]


def run_block(
    z: Any,
    aux: Mapping[str, Any],
    running: Mapping[str, Any] | None,
    centres: Any,
    kernel: KernelSpec,
    consumers: Mapping[str, Consumer],
    blas_threads: int = 1,
    on_device: bool = False,
    *,
    block: Any = None,
    dense: bool = True,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The task body of every pass: a row chunk ``z`` against the centre panels, its
    kernel block evaluated once (or ``block``, given: kept between passes, or read from
    a given matrix) and fed to every consumer, with ``blas_threads`` BLAS threads (a
    worker process's all, for a pass of one running sum per process).

    Returns each ``rows`` consumer's output (on host: one crossing a chunk, what the
    driver keeps; ``on_device``: in the rows' namespace) and each ``sum`` consumer's
    running sum (``running``'s, added into in place; in the rows' namespace). ``dense``:
    a sparse chunk is expanded first (the row pass; the pair pass multiplies sparse
    chunks as they are).
    """
    if blas_threads > 1:
        with blas_limit(blas_threads):
            return run_block(z, aux, running, centres, kernel, consumers, 1, on_device,
                             block=block, dense=dense)  # fmt: skip
    rows = RowBlock(dense_rows(z) if dense else z, centres, kernel, aux, block=block)
    outputs, sums = {}, {}
    for name, consumer in consumers.items():
        if consumer.kind == "rows":  # the driver keeps it: on host, one crossing a chunk
            out = consumer(rows, None)
            outputs[name] = out if on_device else consumer.finish(out)
        else:
            sums[name] = consumer(rows, None if running is None else running[name])
    return outputs, sums


def pair_task(
    x_i: Any, v_i: Any, x_j: Any, v_j: Any, kernel: KernelSpec, diagonal: bool,
    block: Any = None,
) -> tuple[Any, ...]:  # fmt: skip
    """Task body of a pair ``(i, j)`` of the training operator (:func:`run_block` with
    one panel ``(x_j, V_j)``): ``B V_j`` and, off the diagonal, ``B^T V_i``, in the rows'
    namespace."""
    outputs, _ = run_block(x_i, {"v": v_i}, None, ([x_j], [v_j]), kernel,
                           {"pair": PairProducts(diagonal)}, on_device=True, block=block,
                           dense=False)  # fmt: skip
    return outputs["pair"]


def kept_task(x_i: Any, x_j: Any, kernel: KernelSpec) -> Any:
    """Task body of a block kept between passes (:func:`run_block`, one panel ``x_j``)."""
    outputs, _ = run_block(x_i, {}, None, ([x_j], [None]), kernel, {"block": KeptBlock()},
                           on_device=True, dense=False)  # fmt: skip
    return outputs["block"]


def _add_chains(
    parts: Sequence[Mapping[str, Any]], consumers: Mapping[str, Consumer],
    on_device: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Each sum's chains added into the first chain's (in place, in the rows' namespace:
    the chains' sums are owned by the pass), then the total taken to host: one crossing
    per sum (``on_device``: none, the totals stay in the rows' namespace)."""
    total = dict(parts[0])
    for part in parts[1:]:
        for name, value in part.items():
            total[name] = add_into(total[name], value)
    if on_device:
        return total
    return {name: consumers[name].finish(value) for name, value in total.items()}


def chunk_inputs(rows: Rows, precomputed: bool) -> list[Any]:
    """Each row chunk as a task argument (for a precomputed kernel, its list of column
    blocks); keys stable across graphs (no run_spec clash)."""
    parts = rows.data.to_delayed(optimize_graph=False)
    if precomputed:
        return [list(parts[i]) for i in range(parts.shape[0])]
    return [parts[i, 0] for i in range(parts.shape[0])]


def as_rows(rows: Rows | da.Array) -> Rows:
    """``rows`` as a :class:`~npt_dask.engine.rows.Rows` (a dask array's namespace and
    device read once)."""
    return rows if isinstance(rows, Rows) else Rows.of(rows)


def _aux_blocks(rows: Rows, aux: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The row-aligned extras split like the rows, on their device: one ``{name: block}``
    per chunk (:meth:`~npt_dask.engine.rows.Rows.aligned`: extras given as
    :class:`~npt_dask.engine.rows.Aligned` were moved once already and are used as they
    are, pass after pass)."""
    split = {name: rows.aligned(values) for name, values in aux.items() if values is not None}
    return [{name: blocks.blocks[i] for name, blocks in split.items() if blocks is not None}
            for i in range(len(rows.chunks))]  # fmt: skip


def row_pass(
    rows: Rows | da.Array,
    centres: Centres,
    kernel: KernelSpec,
    consumers: Mapping[str, Consumer],
    *,
    aux: Mapping[str, Any] | None = None,
    chains: int = 1,
    blas_threads: int = 1,
    progress: ProgressBar | None = None,
    on_device: bool = False,
) -> PassResult:
    """One pass over the row chunks of ``rows``: every consumer fed each chunk's block.

    ``aux`` are row-aligned extras (numpy, a device's arrays, dask, or
    :class:`~npt_dask.engine.rows.Aligned` from :meth:`~npt_dask.engine.rows.Rows.aligned`:
    a route that makes several passes moves them once) the consumers read by name
    (``"targets"``, ``"weights"``, ``"slot"``). ``chains`` running sums per ``sum``
    consumer (``blas_threads`` BLAS threads per task under the local threaded scheduler:
    ``threads / chains`` keeps the cores busy with fewer, larger sums). ``progress``
    steps once per finished chunk. The centres are brought to the rows' device once
    (:meth:`Centres.on`), never per chunk.

    ``on_device``: the results stay in the rows' namespace -- each sum's total as the
    chains add it, each ``rows`` output as its consumer gives it, no :meth:`~npt_dask.
    engine.consumers.Consumer.finish` -- for a driver that goes on computing there (kernel
    ridge's CG iterations, its normal matrix on a device) and crosses what it needs
    itself. On numpy the same arrays either way.
    """
    rows = as_rows(rows)
    precomputed = kernel.precomputed
    inputs = chunk_inputs(rows, precomputed)
    extras = _aux_blocks(rows, aux or {})
    task_centres = centres.on(rows).task_input()
    chains = max(1, min(int(chains), len(inputs)))
    has_sums = any(c.kind == "sum" for c in consumers.values())
    per_chunk: list[Any] = []
    running: list[Any] = [None] * chains
    for i, z in enumerate(inputs):
        task = delayed(run_block, pure=False, nout=2)(
            z, extras[i], running[i % chains], task_centres, kernel, dict(consumers),
            blas_threads, on_device,
        )  # fmt: skip
        per_chunk.append(task[0])
        running[i % chains] = task[1]
    summed = {n: c for n, c in consumers.items() if c.kind == "sum"}
    total = delayed(_add_chains, pure=False)(running, summed, on_device) if has_sums else None
    if progress is None:
        outputs, sums = compute(per_chunk, total, release_scratch=True, blas_threads=blas_threads)
    else:
        rest = [] if total is None else [total]
        done = compute_counted(per_chunk, rest, progress, blas_threads=blas_threads)
        outputs, sums = done[: len(per_chunk)], (done[-1] if rest else None)
    names = [n for n, c in consumers.items() if c.kind == "rows"]
    return PassResult({n: [o[n] for o in outputs] for n in names}, dict(sums or {}))


def _mapped(
    z: Any, centres: Any, kernel: KernelSpec, consumer: Consumer, dtype: Any, host: bool
) -> Any:
    """Task body of a lazy per-row result: :func:`run_block` with one ``rows`` consumer,
    its output in ``dtype`` (on host with ``host``, else in the rows' namespace)."""
    out = run_block(z, {}, None, centres, kernel, {"out": consumer}, on_device=not host)[0]["out"]
    if isinstance(out, np.ndarray) or host:
        return np.asarray(out, dtype=dtype)
    if dtype is None:
        return out
    xp = namespace_of(out)
    return xp.astype(out, getattr(xp, np.dtype(dtype).name))


def chunk_tasks(
    rows: Rows | da.Array,
    centres: Centres,
    kernel: KernelSpec,
    consumer: Consumer,
    dtype: Any = None,
    *,
    host: bool = True,
) -> list[Any]:
    """One lazy output (Delayed) of a ``rows`` consumer per row chunk of ``rows`` (each
    task streaming over the centre panels, brought to the rows' device once); ``dtype``
    converts it (None: as it is). ``host``: each output crosses to host (one crossing a
    chunk: what the driver writes); else it stays in the rows' namespace."""
    rows = as_rows(rows)
    task_centres = centres.on(rows).task_input()
    return [
        delayed(_mapped, pure=False)(z, task_centres, kernel, consumer, dtype, host)
        for z in chunk_inputs(rows, kernel.precomputed)
    ]


def map_rows(
    rows: Rows | da.Array,
    centres: Centres,
    kernel: KernelSpec,
    consumer: Consumer,
    *,
    width: int,
    dtype: Any = np.float64,
) -> da.Array:
    """A lazy ``(n, width)`` result of a ``rows`` consumer, one task per row chunk of
    ``rows`` (each streaming over the centre panels), in the rows' namespace: its
    ``meta`` is of their array type, and nothing crosses to host."""
    rows = as_rows(rows)
    tasks = chunk_tasks(rows, centres, kernel, consumer, dtype, host=False)
    meta = rows.empty((0, width), dtype)
    blocks = [  # named by their tasks: tokenizing a device meta would pickle it (a crossing)
        da.from_delayed(task, shape=(c, width), dtype=dtype, meta=meta, name=f"rows-{task.key}")
        for task, c in zip(tasks, rows.chunks, strict=True)
    ]
    return da.concatenate(blocks, axis=0) if len(blocks) > 1 else blocks[0]
