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
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
from dask import delayed

from npt_dask.arrays.namespace import is_numpy, namespace_and_device
from npt_dask.arrays.threads import blas_limit
from npt_dask.engine.consumers import Consumer, RowBlock, add_into, dense_rows
from npt_dask.kernels import KernelSpec
from npt_dask.runtime.progress import ProgressBar, compute_counted
from npt_dask.runtime.scheduler import compute, keep_blocks

__all__ = [
    "Centres",
    "PassResult",
    "check_one_device",
    "chunk_inputs",
    "chunk_tasks",
    "empty_like_rows",
    "map_rows",
    "row_pass",
]


@dataclass(frozen=True)
class Centres:
    """The columns of a kernel operator, as the tasks receive them.

    ``x_blocks``/``w_blocks``: the centre rows and their weights in panels (numpy
    locally; futures on a cluster, kept with lineage by
    :func:`npt_dask.runtime.scheduler.keep_blocks`), or ``store``: an object the tasks iterate
    for ``(x_j, w_j)`` (a stored model's training blocks). ``sizes`` are the panels' row
    counts; for a precomputed kernel the x blocks are None (the rows' column blocks of
    the given matrix stand for them).
    """

    sizes: tuple[int, ...]
    x_blocks: Sequence[Any] = ()
    w_blocks: Sequence[Any] = ()
    store: Any = None

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
        x: np.ndarray | None,
        weights: np.ndarray | None = None,
        *,
        panel: int | None = None,
        sizes: Sequence[int] | None = None,
    ) -> Centres:
        """Centres from numpy rows ``x`` (None for a precomputed kernel, then ``sizes``
        gives the panels) and optional weights, in panels of ``panel`` rows (one panel:
        None), shipped once."""
        m = int(x.shape[0]) if x is not None else int(sum(sizes or ()))
        if sizes is None:
            step = panel or max(m, 1)
            sizes = [min(step, m - s) for s in range(0, m, step)]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        cut = [slice(int(a), int(b)) for a, b in itertools.pairwise(offsets)]
        xs = [None] * len(cut) if x is None else keep_blocks([x[s] for s in cut])
        ws = [None] * len(cut) if weights is None else keep_blocks([weights[s] for s in cut])
        return cls(tuple(int(s) for s in sizes), xs, ws)


@dataclass(frozen=True)
class PassResult:
    """What :func:`row_pass` returns: each ``rows`` consumer's per-chunk outputs (in row
    order) and each ``sum`` consumer's total."""

    rows: Mapping[str, list[Any]]
    sums: Mapping[str, Any]


def _chunk(
    z: Any,
    aux: Mapping[str, Any],
    running: Mapping[str, Any] | None,
    centres: Any,
    kernel: KernelSpec,
    consumers: Mapping[str, Consumer],
    blas_threads: int = 1,
    on_device: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Task body: the chunk's kernel block, fed to every consumer (evaluated once), with
    ``blas_threads`` BLAS threads (a worker process's all, for a pass of one running sum
    per process); ``on_device``: the ``rows`` outputs stay in the rows' namespace."""
    if blas_threads > 1:
        with blas_limit(blas_threads):
            return _chunk(z, aux, running, centres, kernel, consumers, 1, on_device)
    rows = RowBlock(dense_rows(z), centres, kernel, aux)
    outputs, sums = {}, {}
    for name, consumer in consumers.items():
        if consumer.kind == "rows":  # the driver keeps it: on host, one crossing a chunk
            out = consumer(rows, None)
            outputs[name] = out if on_device else consumer.finish(out)
        else:
            sums[name] = consumer(rows, None if running is None else running[name])
    return outputs, sums


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


def chunk_inputs(rows: da.Array, precomputed: bool) -> list[Any]:
    """Each row chunk of ``rows`` as a task argument (for a precomputed kernel, its list of
    column blocks); keys stable across graphs (no run_spec clash)."""
    parts = rows.to_delayed(optimize_graph=False)
    if precomputed:
        return [list(parts[i]) for i in range(parts.shape[0])]
    return [parts[i, 0] for i in range(parts.shape[0])]


def check_one_device(rows: da.Array, aux: Mapping[str, Any]) -> None:
    """Refuse row-aligned extras on another device than the rows (an
    :class:`~npt_dask.errors.InputError` naming the fix); host (numpy) extras go with any
    rows (a task copies its share to the rows' device)."""
    namespace_and_device(rows)
    for values in aux.values():
        if values is not None and not is_numpy(namespace_and_device(values)[0]):
            namespace_and_device(rows, values)


def _aux_blocks(aux: Mapping[str, Any], chunks: tuple[int, ...]) -> list[dict[str, Any]]:
    """The row-aligned extras split like the rows: one ``{name: block}`` per chunk."""
    split: dict[str, list[Any]] = {}
    for name, values in aux.items():
        if values is None:
            continue
        arr = values if isinstance(values, da.Array) else da.from_array(np.asarray(values))
        arr = arr.rechunk({0: chunks, **{a: -1 for a in range(1, arr.ndim)}})
        split[name] = list(arr.to_delayed(optimize_graph=False).ravel())
    return [{name: blocks[i] for name, blocks in split.items()} for i in range(len(chunks))]


def row_pass(
    rows: da.Array,
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

    ``aux`` are row-aligned extras (numpy or dask, first axis n) the consumers read by
    name (``"targets"``, ``"weights"``, ``"slot"``). ``chains`` running sums per ``sum``
    consumer (``blas_threads`` BLAS threads per task under the local threaded
    scheduler: ``threads / chains`` keeps the cores busy with fewer, larger sums).
    ``progress`` steps once per finished chunk.

    ``on_device``: the results stay in the rows' namespace -- each sum's total as the
    chains add it, each ``rows`` output as its consumer gives it, no :meth:`~npt_dask.
    engine.consumers.Consumer.finish` -- for a driver that goes on computing there (kernel
    ridge's CG iterations, its normal matrix on a device) and crosses what it needs
    itself. On numpy the same arrays either way.
    """
    precomputed = kernel.precomputed
    check_one_device(rows, aux or {})
    inputs = chunk_inputs(rows, precomputed)
    extras = _aux_blocks(aux or {}, tuple(int(c) for c in rows.chunks[0]))
    task_centres = centres.task_input()
    chains = max(1, min(int(chains), len(inputs)))
    has_sums = any(c.kind == "sum" for c in consumers.values())
    per_chunk: list[Any] = []
    running: list[Any] = [None] * chains
    for i, z in enumerate(inputs):
        task = delayed(_chunk, pure=False, nout=2)(
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
    block = RowBlock(dense_rows(z), centres, kernel, {})
    out = consumer(block, None)
    if host:
        out = consumer.finish(out)
    if block.numpy or host:
        return np.asarray(out, dtype=dtype)
    xp = block.xp
    return out if dtype is None else xp.astype(out, getattr(xp, np.dtype(dtype).name))


def chunk_tasks(
    rows: da.Array,
    centres: Centres,
    kernel: KernelSpec,
    consumer: Consumer,
    dtype: Any = None,
    *,
    host: bool = True,
) -> list[Any]:
    """One lazy output (Delayed) of a ``rows`` consumer per row chunk of ``rows`` (each
    task streaming over the centre panels); ``dtype`` converts it (None: as it is).
    ``host``: each output crosses to host (one crossing a chunk: what the driver writes);
    else it stays in the rows' namespace."""
    task_centres = centres.task_input()
    return [
        delayed(_mapped, pure=False)(z, task_centres, kernel, consumer, dtype, host)
        for z in chunk_inputs(rows, kernel.precomputed)
    ]


def empty_like_rows(rows: da.Array, shape: tuple[int, ...], dtype: Any) -> Any:
    """An empty array of ``rows``' array type (a dask ``meta``): numpy's, or the device
    library's (a CuPy-backed input gives a CuPy meta)."""
    xp, device = namespace_and_device(rows)
    if is_numpy(xp):
        return np.empty(shape, dtype=dtype)
    return xp.empty(shape, dtype=getattr(xp, np.dtype(dtype).name), device=device)


def map_rows(
    rows: da.Array,
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
    tasks = chunk_tasks(rows, centres, kernel, consumer, dtype, host=False)
    meta = empty_like_rows(rows, (0, width), dtype)
    blocks = [
        da.from_delayed(task, shape=(int(c), width), dtype=dtype, meta=meta)
        for task, c in zip(tasks, rows.chunks[0], strict=True)
    ]
    return da.concatenate(blocks, axis=0) if len(blocks) > 1 else blocks[0]
