"""The one projector: rows of any data set onto a fitted model, one task per row chunk.

Every projection goes through :class:`Projector`: :meth:`NPTModel.transform`
(and ``residual``, ``energy_split``, ``transform_with_residual``),
:func:`npt_dask.project` (resumable zarr) and the training pass
(:mod:`npt_dask.npt.training`: coordinates, certificate and linear-method moments
in one read of the training rows). It is the kernel operator of
:mod:`npt_dask.engine.passes` with the model's training rows as centres, each
carrying its weights ``[A_j, 1/n]``: a task takes one row chunk of the data,
streams over the training blocks -- kernel block ``kappa(z, x_j)`` times
``[A_j, 1/n]``, accumulated in float64 -- and finishes ``[y | residual]``
(:class:`npt_dask.engine.consumers.Projection`).

* **Built from arrays** (:func:`build_projector`): the projector reads the fields of
  the model's record (:class:`npt_dask.npt.fitted.FittedModel`) and never calls back
  into the model; the model keeps one per scheduler
  (:meth:`npt_dask.npt.model.NPTModel.projector`).
* **One chunking rule** (:func:`projection_rows`, :class:`ProjectionRows`): numpy input is cut into
  the model's ``chunk_size`` rows; dask and xarray input keep their row
  chunks (the caller chose them).
* **Training blocks** reach the tasks once per projector: under a
  ``distributed`` client the training rows are persisted on the workers and
  the weights kept there (the graph carries references, never the data);
  locally the tasks share them by reference. A model loaded from a store
  instead streams its training blocks from the store inside each task
  (:class:`npt_dask.storage.store.StoredTraining`), so a task holds one training
  block at a time.
* **Precision**: the block products run in the model's precision (float32
  kernel blocks times float32 weights for a float32 model: BLAS's single
  precision rate); every sum over training blocks, and everything after, is
  float64.

Layer rule: graph code over numpy blocks; the numbers come from
:mod:`npt_dask.engine.blocks`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np

from npt_dask.arrays.namespace import namespace_and_device
from npt_dask.engine.consumers import Projection
from npt_dask.engine.passes import Centres, as_rows, chunk_inputs, chunk_tasks, map_rows
from npt_dask.engine.projection import ProjectionTerms, projection_weights
from npt_dask.engine.rows import Rows
from npt_dask.errors import InputError
from npt_dask.kernels import KernelSpec
from npt_dask.npt.fitted import FittedModel
from npt_dask.runtime.inputs import InputInfo, as_kernel_matrix, as_row_chunked, match_features
from npt_dask.runtime.progress import count
from npt_dask.runtime.scheduler import current_client, keep_blocks, persist_blocks, task_threads
from npt_dask.storage.store import StoredTraining

__all__ = [
    "ProjectionRows",
    "Projector",
    "balanced_rows",
    "build_projector",
    "client_key",
    "projection_rows",
    "rows_rule",
]


@dataclass(frozen=True)
class Projector:
    """What a projection task needs of a model (built from the model's arrays by
    :func:`build_projector`): the kernel operator's centres (the training rows with their
    weights ``[A_j, 1/n]``) and the terms that finish ``[y | residual]``."""

    kernel: KernelSpec
    centres: Centres  # shipped training blocks, or a store streaming them
    terms: ProjectionTerms
    n_components: int
    shipped: Callable[[], Centres] | None = None  # a stored model's panels, for a device

    def centres_for(self, rows: Rows) -> Centres:
        """The centres a projection of ``rows`` reads: a stored model's training blocks
        stream from the store into every task on the host (one block held at a time);
        for rows on a device they are read once and moved there once per call (made
        once per projector: :attr:`shipped`), not copied into every chunk."""
        if self.centres.store is not None and self.shipped is not None and not rows.numpy:
            return self.shipped()
        return self.centres

    def projection(self, rows: Rows, *, check: bool = True) -> Projection:
        """The consumer that projects ``rows``: the terms that finish ``[y | residual]``
        moved to the rows' device once (``2 r`` numbers; kept on a cluster, never copied
        per chunk). ``check=False``: a device task does not read its verdict (the caller
        reads it with the values: :func:`~npt_dask.engine.consumers.projection_verdict`)."""
        terms = self.terms
        if not rows.numpy:
            offset, ones = keep_blocks([rows.put(terms["offset"]), rows.put(terms["ones"])])
            terms = ProjectionTerms(offset=offset, ones=ones, grand_mean=terms["grand_mean"],
                                    center=terms["center"])  # fmt: skip
        return Projection(terms, check=check)

    def task_inputs(self, rows: Rows, *, check: bool = True) -> tuple[Any, Projection]:
        """What a task projecting a chunk of ``rows`` takes besides the chunk: the centres
        on the rows' device (moved once, here) and the consumer (:meth:`projection`)."""
        return self.centres_for(rows).on(rows).task_input(), self.projection(rows, check=check)

    def chunk_inputs(self, rows: Rows | da.Array) -> list[Any]:
        """Each row chunk of ``rows`` as a task argument (its list of column blocks for a
        precomputed kernel, whose test x train rows are chunked like the training rows)."""
        return chunk_inputs(as_rows(rows), self.kernel.precomputed)

    def chunk_tasks(self, rows: Rows | da.Array) -> list[Any]:
        """One lazy ``[y | residual]`` (Delayed, float64, on host: each chunk crosses once;
        on a device its verdict first, one flag) per row chunk of ``rows``."""
        rows = as_rows(rows)
        return chunk_tasks(rows, self.centres_for(rows), self.kernel, self.projection(rows))

    def rows(self, rows: Rows | da.Array) -> da.Array:
        """Lazy ``[y | residual]`` of shape ``(m, r + 1)``, float64, chunked like the rows,
        in their namespace (a device's rows: device-backed, its ``meta`` theirs).

        Notes
        -----
        Crossings per call on a device (the rows' device, or a model's whose rows live
        elsewhere): the centres' panels and weights move there once
        (:meth:`~npt_dask.engine.passes.Centres.on`), the finishing terms once
        (:meth:`projection`); each chunk reads one byte back, its finiteness flag (a task
        can only raise on what the host sees), and nothing else crosses until the caller
        computes the result.
        """
        rows = as_rows(rows)
        return map_rows(rows, self.centres_for(rows), self.kernel, self.projection(rows),
                        width=self.n_components + 1)  # fmt: skip


@dataclass(frozen=True)
class ProjectionRows:
    """What a row to project is for a model, and the one chunking rule
    (:func:`projection_rows`): made from the model's fields by :func:`rows_rule`, with
    no projector built (nothing is shipped to check rows)."""

    kind: FeatureRows | KernelRows  # chosen once: rows_kind
    precision: np.dtype
    train_chunks: tuple[int, ...]
    feature_names: tuple[str, ...] | None  # the fitted order of named features

    def of(
        self, data: Any, *, chunk_size: int | None = None, name: str = "Z",
        device_check: bool = True,
    ) -> tuple[da.Array, InputInfo]:  # fmt: skip
        """``data`` as row chunks to project: named features put in the fitted order (or
        refused when they differ), the feature count checked, NaN refused (lazy rows on
        a device with ``device_check=False``: by the projection's verdict, not here)."""
        n_features = self.kind.n_features if isinstance(self.kind, FeatureRows) else None
        data = match_features(data, self.feature_names, n_features=n_features, name=name)
        return projection_rows(
            data,
            kind=self.kind,
            precision=self.precision,
            train_chunks=self.train_chunks,
            chunk_size=chunk_size,
            name=name,
            device_check=device_check,
        )

    def rows(self, data: Any, *, chunk_size: int | None = None, name: str = "Z") -> Rows:
        """``data`` as the :class:`~npt_dask.engine.rows.Rows` of a projection (:meth:`of`;
        a device's lazy rows checked by the projection's one verdict)."""
        return Rows.of(*self.of(data, chunk_size=chunk_size, name=name, device_check=False))


def rows_rule(fitted: FittedModel) -> ProjectionRows:
    """The rows ``fitted`` projects (:class:`ProjectionRows`), from its fields."""
    return ProjectionRows(
        kind=rows_kind(fitted.kernel, fitted.n_features),
        precision=np.dtype(fitted.precision),
        train_chunks=fitted.train_chunks,
        feature_names=fitted.feature_names,
    )


@dataclass(frozen=True)
class FeatureRows:
    """Rows to project are rows of features (an evaluated kernel): ``n_features`` columns,
    one task input per row chunk."""

    n_features: int

    def of(
        self, data: Any, *, name: str, size: int, dtype: np.dtype, keep: bool,
        train_chunks: tuple[int, ...], device_check: bool = True,
    ) -> tuple[da.Array, InputInfo]:  # fmt: skip
        """``data`` as row chunks of ``size`` rows, its features checked against the model."""
        x, info = as_row_chunked(
            data, name=name, chunk_size=size, dtype=dtype, keep_lazy_chunks=keep,
            device_check=device_check,
        )  # fmt: skip
        if x.shape[1] != self.n_features:
            d = self.n_features
            raise InputError(
                f"{name} has {count(x.shape[1], 'feature')}, but the model was fitted on "
                f"{count(d, 'feature')}: give rows with {d} columns (the model expects {d})."
            )
        return x, info


@dataclass(frozen=True)
class KernelRows:
    """Rows to project are test x train kernel rows (a precomputed kernel): their columns
    chunked like the training rows, each task input a row chunk's list of column blocks."""

    def of(
        self, data: Any, *, name: str, size: int, dtype: np.dtype, keep: bool,
        train_chunks: tuple[int, ...], device_check: bool = True,
    ) -> tuple[da.Array, InputInfo]:  # fmt: skip
        """``data`` as a kernel matrix against the training rows (columns checked; every
        block of lazy rows, whatever ``device_check``: a projection's verdict does not
        cover them)."""
        return as_kernel_matrix(
            data, name=name, chunk_size=size, column_chunks=train_chunks, dtype=dtype,
            keep_lazy_chunks=keep,
        )  # fmt: skip


def rows_kind(kernel: KernelSpec, n_features: int) -> FeatureRows | KernelRows:
    """What a row to project is for ``kernel``: the one dispatch on the kind."""
    return KernelRows() if kernel.precomputed else FeatureRows(n_features)


def projection_rows(
    data: Any,
    *,
    kind: FeatureRows | KernelRows,
    precision: np.dtype,
    train_chunks: tuple[int, ...],
    chunk_size: int | None = None,
    name: str = "Z",
    device_check: bool = True,
) -> tuple[da.Array, InputInfo]:
    """The one chunking rule, with the rows checked against the model (``kind``).

    Without ``chunk_size``: numpy rows in chunks of at most the model's largest
    training chunk, as many as keeps every thread busy (:func:`balanced_rows`:
    the chunking of numpy output is invisible to the caller), lazy input in its
    own row chunks (the caller chose them). With ``chunk_size`` (a zarr store,
    one stored chunk per task): every input in regular chunks of that many rows.
    """
    size = chunk_size or max(train_chunks)
    keep = chunk_size is None
    x, info = kind.of(
        data, name=name, size=size, dtype=precision, keep=keep, train_chunks=train_chunks,
        device_check=device_check,
    )  # fmt: skip
    if not keep:
        return x.rechunk({0: size}), info
    return (x if info.lazy else balanced_rows(x, task_threads())), info


def balanced_rows(x: da.Array, threads: int) -> da.Array:
    """``x`` in a multiple of ``threads`` equal row chunks, none larger than its largest.

    For passes that keep no rows (the training pass): with 5 chunks on 2
    threads the last chunk would run alone, a sixth of the pass on one core.
    """
    count = len(x.chunks[0])
    if threads <= 1 or count % threads == 0 or count < threads:
        return x
    count = threads * -(-count // threads)
    n = int(x.shape[0])
    size = -(-n // count)
    return x.rechunk({0: size})


def _gemm_weights(fitted: FittedModel) -> np.ndarray:
    w = projection_weights(fitted.eigenvectors, fitted.eigenvalues, fitted.n_samples)
    return w.astype(fitted.precision, copy=False)


def _ship(fitted: FittedModel) -> Centres:
    """The training blocks (persisted where the tasks run, with lineage) and their weights
    (kept: sent once, never lost) as the operator's centres."""
    sizes = fitted.train_chunks
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    w = _gemm_weights(fitted)
    blocks = [w[offsets[j] : offsets[j + 1]] for j in range(len(offsets) - 1)]
    if fitted.kernel.precomputed:  # no training rows: the test x train blocks carry them
        x_blocks: list[Any] = [None] * len(blocks)
    else:
        x_blocks = persist_blocks(fitted.x_train.to_delayed(optimize_graph=False).ravel())
    where = namespace_and_device(fitted.x_train)
    return Centres(sizes, x_blocks, keep_blocks(blocks), x_where=where,
                   w_where=namespace_and_device(w))  # fmt: skip


def build_projector(fitted: FittedModel) -> Projector:
    """A projector of ``fitted``'s arrays under the current scheduler: its training
    blocks shipped where the tasks run, or (a model read from a store) streamed from
    the store inside each task (:class:`npt_dask.storage.store.StoredTraining`, which refuses a
    store no longer holding this model). Each call ships the blocks again: the model
    keeps one per client (:meth:`npt_dask.npt.model.NPTModel.projector`)."""
    if fitted.store_path is not None and not fitted.kernel.precomputed:
        sizes = fitted.train_chunks
        offsets = tuple(int(o) for o in np.concatenate([[0], np.cumsum(sizes)]))
        stored = StoredTraining(
            fitted.store_path, offsets, fitted.eigenvalues, str(fitted.precision),
            fitted.identity,
        )  # fmt: skip
        centres = Centres(sizes, store=stored)
        shipped = functools.cache(functools.partial(_ship, fitted))
    else:
        centres, shipped = _ship(fitted), None
    return Projector(
        kernel=fitted.kernel,
        centres=centres,
        terms=fitted.projection_terms(),
        n_components=fitted.n_components,
        shipped=shipped,
    )


def client_key() -> str | None:
    """Which scheduler projections run on now (None: local threads): a projector is built
    once for each."""
    client = current_client()
    return None if client is None else str(getattr(client, "id", id(client)))
