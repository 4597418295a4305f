"""What a pass does with a kernel block: the consumers of :mod:`npt_dask.engine.row_pass`.

A task of a pass holds one row chunk ``Z`` of the data and the kernel between
it and the operator's centres, ``B = kappa(Z, C)``; :class:`RowBlock`
evaluates that block once (or streams it panel by panel, for products only)
and keeps what several consumers share (``B`` itself, its float64 copy,
``B P`` for a given ``P``). Each consumer takes what it needs:

=====================  ======  ==========================================================
consumer               kind    per chunk
=====================  ======  ==========================================================
:class:`Apply`         rows    ``B W`` (the centres' own weights: a prediction)
:class:`Projection`    rows    ``[y | residual]`` onto a model (``W = [A, 1/n]``, centred,
                               Lemma 5's residual)
:class:`Certificate`   rows    ``(residual, k(z, z))`` of each row (the landmark
                               certificate)
:class:`Moments`       sum     ridge's moments of the rows' coordinates with their
                               labels or targets (:class:`~npt_dask.engine.blocks.LinearMoments`)
:class:`Gram`          sum     ``B^T diag(w) B`` (ridge's normal matrix, float64)
:class:`Cross`         sum     ``B^T diag(w) T`` (its right-hand side)
:class:`Normal`        sum     ``B^T diag(w) (B P)`` (a conjugate-gradient product)
:class:`CentreRows`    rows    the rows of ``B`` (or of ``B P``) at the centres
                               themselves: ``K_mm`` (or ``K_mm P``) for free
:class:`Digest`        rows    a SHA-256 of the chunk's rows (what a checkpoint pins)
=====================  ======  ==========================================================

``rows`` consumers give one output per chunk (concatenated in row order);
``sum`` consumers add their share into the running sum of their chain, in
place (each running sum is owned by its chain: one task reads it, the next
receives it).

The array namespace is chosen here, once: :class:`RowBlock` takes the namespace of the
rows it is handed (numpy's, or CuPy's, torch's, ``array_api_strict``'s:
:func:`npt_dask.arrays.namespace.namespace_of`), brings the centres and the row-aligned extras
there (:meth:`RowBlock.local`) and evaluates every block and product in it. What a
consumer hands back -- per-row outputs, running sums -- is host memory (numpy;
:meth:`RowBlock.host`), as the driver's matrices are. On numpy nothing moves.

Layer rule: task bodies, arrays only (numpy or another array API namespace); the graph
is built by :mod:`npt_dask.engine.row_pass`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse

from npt_dask.arrays.buffers import scratch
from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of, to_numpy
from npt_dask.engine.blocks import (
    ProjectionTerms,
    block_times,
    chunk_moments,
    finish_parts,
    normal_products,
    one_hot,
    scratch_block,
)
from npt_dask.errors import InputError
from npt_dask.kernels import KernelSpec
from npt_dask.linalg.tiles import TiledUpper

__all__ = [
    "Apply",
    "CentreRows",
    "Certificate",
    "Consumer",
    "Cross",
    "Digest",
    "Gram",
    "Moments",
    "Normal",
    "Projection",
    "RowBlock",
    "add_into",
    "centre_pairs",
    "dense_rows",
]


def centre_pairs(centres: Any) -> Iterator[tuple[Any, Any]]:
    """``(x_j, w_j)`` panels inside a task: from shipped lists ``(xs, ws)``, or an iterable
    (a store streaming its blocks, :class:`npt_dask.storage.store.StoredTraining`)."""
    if isinstance(centres, tuple):
        return zip(*centres, strict=True)
    return iter(centres)


def dense_rows(z: Any) -> Any:
    """A task's rows as numpy: a sparse chunk expanded; a given kernel matrix's list of
    column blocks, each expanded."""
    if isinstance(z, list):
        return [dense_rows(b) for b in z]
    return np.asarray(z.toarray()) if scipy.sparse.issparse(z) else z


class RowBlock:
    """One row chunk inside a task and its kernel block against the centres.

    ``z`` is the chunk's rows (for a precomputed kernel: its list of column blocks of
    the given matrix, one per centre panel); ``aux`` the chunk's share of the row-aligned
    extras (targets, weights, centre slots). ``B`` is evaluated on first use and kept
    for the other consumers (one evaluation per block per pass); products are memoised
    by name. ``xp`` is the namespace of ``z`` (the one decision of the seam): the block
    and its products live there, on ``z``'s device.
    """

    def __init__(
        self, z: Any, centres: Any, kernel: KernelSpec, aux: Mapping[str, np.ndarray]
    ) -> None:
        self.z = z
        self.centres = centres
        self.kernel = kernel
        self.aux = aux
        first = z[0] if isinstance(z, list) else z
        self.xp = namespace_of(first)
        self.numpy = is_numpy(self.xp)
        self.device = device_of(first)
        self._block: Any = None
        self._memo: dict[str, Any] = {}

    def local(self, a: Any) -> Any:
        """``a`` (centres, weights, a host matrix) in the block's namespace and device; on
        numpy as it is."""
        if a is None or self.numpy:
            return a
        return self.xp.asarray(a, device=self.device)

    @staticmethod
    def host(a: Any) -> np.ndarray:
        """An array of the block's namespace in host memory (numpy's as it is)."""
        return to_numpy(a)

    @property
    def n_rows(self) -> int:
        return int(self.z[0].shape[0] if isinstance(self.z, list) else self.z.shape[0])

    def _panels(self) -> Iterator[tuple[Any, Any]]:
        """``(B_j, w_j)`` for each centre panel, each block evaluated (or read) once."""
        given = not self.kernel.evaluated
        for j, (x_j, w_j) in enumerate(centre_pairs(self.centres)):
            if not given:
                yield scratch_block(self.z, self.local(x_j), self.kernel), self.local(w_j)
            elif self.numpy:
                yield np.ascontiguousarray(self.z[j]), w_j
            else:
                yield self.z[j], self.local(w_j)

    def block(self) -> Any:
        """The whole block ``B`` (``rows x m``, the kernel precision); one centre panel."""
        if self._block is None:
            panels = list(self._panels())
            if len(panels) != 1:
                raise AssertionError("a whole-block consumer needs the centres as one panel")
            self._block = panels[0][0]
        return self._block

    def weights(self) -> Any:
        """The chunk's sample weights (float64, in the block's namespace), or None."""
        w = self.aux.get("weights")
        return None if w is None else self.local(np.asarray(w, dtype=np.float64))

    def weighted64(self) -> Any:
        """``sqrt(w) B`` in float64; on numpy in Fortran order (a thread's scratch; its
        column panels contiguous for :func:`npt_dask.linalg.dense.syrk_update`)."""
        if "weighted64" not in self._memo:
            b, xp = self.block(), self.xp
            if self.numpy:
                out = scratch("block-f64F", (b.shape[1], b.shape[0]), np.float64).T
                np.copyto(out, b)
            else:
                out = xp.astype(b, xp.float64)
            w = self.weights()
            if w is not None:
                out *= xp.sqrt(w)[:, None]
            self._memo["weighted64"] = out
        return self._memo["weighted64"]

    def times(self, name: str, p: np.ndarray) -> Any:
        """``B P`` (float64; the product in the block's precision), memoised by ``name``."""
        if name not in self._memo:
            b, xp = self.block(), self.xp
            product = block_times(b, xp.astype(self.local(np.asarray(p)), b.dtype, copy=False))
            self._memo[name] = xp.astype(product, xp.float64, copy=False)
        return self._memo[name]

    def normal(self, p: np.ndarray) -> Any:
        """``B^T diag(w) B P`` (float64), its ``B P`` memoised as :meth:`times`'s ``"p"``
        (:func:`~npt_dask.engine.blocks.normal_products`: one sweep over the block; the products in
        the block's precision)."""
        b, xp = self.block(), self.xp
        bp, total = normal_products(b, xp.astype(self.local(np.asarray(p)), b.dtype, copy=False),
                                    self.weights())  # fmt: skip
        self._memo.setdefault("p", bp)
        return total

    def projected(self, terms: ProjectionTerms) -> tuple[Any, Any, Any]:
        """``(y, residual, ||y||^2)`` of the rows onto a model whose centres carry the
        weights ``[A, 1/n]`` (:func:`npt_dask.engine.blocks.finish_parts`), memoised; a precomputed
        kernel's residual is NaN (its ``k(z, z)`` is not in the test x train rows)."""
        if "projected" not in self._memo:
            p, xp = self.apply(), self.xp
            diag = (
                self.kernel.diag(self.z)
                if self.kernel.evaluated
                else xp.full((p.shape[0],), math.nan, dtype=xp.float64, device=self.device)
            )
            self._memo["projected"] = finish_parts(p, diag, **terms)
        return self._memo["projected"]

    def apply(self) -> Any:
        """``sum_j B_j W_j`` with the centres' own weights, float64, streaming the panels
        (each product in the weights' precision, summed in float64)."""
        acc: Any = None
        for b_j, w_j in self._panels():
            term = block_times(b_j, w_j)
            acc = self.xp.astype(term, self.xp.float64) if acc is None else acc.__iadd__(term)
        assert acc is not None, "an operator has at least one centre panel"
        return acc


class Consumer:
    """A use of the row block: ``kind`` is ``"rows"`` (one output per chunk, concatenated
    in row order) or ``"sum"`` (added into its chain's running sum ``before``)."""

    kind: ClassVar[str] = "rows"

    def __call__(self, rows: RowBlock, before: Any) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class Apply(Consumer):
    """``B W`` with the centres' own weights (float64, one row per row)."""

    def __call__(self, rows: RowBlock, before: Any) -> np.ndarray:
        return rows.host(rows.apply())


def non_finite_message(kernel: KernelSpec) -> str:
    """The rows are finite (checked on input), so NaN or inf came from the kernel."""
    return (
        f"The {kernel.describe()} gave NaN or inf on rows being projected; nothing was "
        "written for them. Make the kernel return finite values for these rows (or scale "
        "the rows), then project again."
    )


@dataclass(frozen=True)
class Projection(Consumer):
    """``[y | residual]`` (float64) of each row onto a model (see
    :meth:`RowBlock.projected`); a non-finite coordinate is an error naming the kernel."""

    terms: ProjectionTerms

    def __call__(self, rows: RowBlock, before: Any) -> np.ndarray:
        y, res = (rows.host(a) for a in rows.projected(self.terms)[:2])
        if not np.isfinite(y).all():  # (a precomputed kernel's residual is NaN)
            raise InputError(non_finite_message(rows.kernel))
        return np.hstack([y, res[:, None]])


@dataclass(frozen=True)
class Certificate(Consumer):
    """``[residual, k(z, z)]`` of each row, shape ``(2, rows)``: Lemma 5's residual against
    the model and the centred self-similarity ``||y||^2 + residual^2``."""

    terms: ProjectionTerms

    def __call__(self, rows: RowBlock, before: Any) -> np.ndarray:
        _, res, norms = (rows.host(a) for a in rows.projected(self.terms))
        return np.stack([res, norms + res * res])


@dataclass(frozen=True)
class Moments(Consumer):
    """Ridge's moments of the rows' coordinates with their class labels (one-hot by
    ``classes``) or targets (the extra ``"labels"`` or ``"targets"``), as the tuple of
    :func:`npt_dask.engine.blocks.chunk_moments` (``Y^T Y`` in ``precision``, summed in float64)."""

    terms: ProjectionTerms
    classes: np.ndarray | None
    precision: str

    kind: ClassVar[str] = "sum"

    def __call__(self, rows: RowBlock, before: Any) -> tuple[np.ndarray, ...]:
        y = rows.host(rows.projected(self.terms)[0])
        if self.classes is not None:
            t = one_hot(np.asarray(rows.aux["labels"]), self.classes)
        else:
            t = np.asarray(rows.aux["targets"])
        if not np.isfinite(t).all():
            raise InputError("targets contain NaN or infinity; pass finite targets.")
        mine = chunk_moments(y, t.reshape(len(y), -1), self.precision)
        return mine if before is None else add_into(before, mine)


def add_into(total: Any, part: Any) -> Any:
    """``total += part`` in place, element by element for tuples of arrays."""
    if isinstance(total, tuple):
        for acc, term in zip(total, part, strict=True):
            acc += term
        return total
    total += part
    return total


@dataclass(frozen=True)
class Gram(Consumer):
    """``B^T diag(w) B`` summed over rows, float64, as the upper tiles of the ``m x m``
    matrix (:class:`~npt_dask.linalg.tiles.TiledUpper`: every BLAS call in place; ``c m^2``
    flops a chunk, symmetric rank-k updates)."""

    kind: ClassVar[str] = "sum"

    def __call__(self, rows: RowBlock, before: Any) -> TiledUpper:
        b = rows.weighted64()
        acc = before if before is not None else TiledUpper(b.shape[1])
        if not rows.numpy:  # the whole product there (the upper tiles are what is read)
            return acc.add_full(rows.host(b.T @ b))
        return acc.add_gram(b)


@dataclass(frozen=True)
class Cross(Consumer):
    """``B^T diag(w) T`` summed over rows, float64 (``m x k``): the targets ``T`` are the
    row-aligned extra ``"targets"``. The product is float64 (beside :class:`Gram`, which
    makes ``sqrt(w) B`` in float64 anyway), or with ``block_precision`` in the block's
    precision, each chunk's part summed in float64 (CG's right-hand side: its rounding is
    that of the float32 products, which CG's true-residual check sees; a float64 copy of a
    float32 block made that pass 2.3 times its flops)."""

    block_precision: bool = False
    kind: ClassVar[str] = "sum"

    def __call__(self, rows: RowBlock, before: Any) -> np.ndarray:
        t = rows.local(np.asarray(rows.aux["targets"], dtype=np.float64).reshape(rows.n_rows, -1))
        w, xp = rows.weights(), rows.xp
        if self.block_precision:
            b = rows.block()
            tw = xp.astype(t if w is None else t * w[:, None], b.dtype)
            part = rows.host(xp.astype(b.T @ tw, xp.float64))
        else:
            if w is not None:
                t = t * xp.sqrt(w)[:, None]  # weighted64 carries the other sqrt(w)
            part = rows.host(rows.weighted64().T @ t)
        return part if before is None else add_into(before, part)


@dataclass(frozen=True)
class Normal(Consumer):
    """``B^T diag(w) (B P)`` summed over rows (``m x k`` float64): one conjugate-gradient
    product ``K_nm^T W K_nm P`` (``4 c m k`` flops a chunk in the block's precision, both
    products from the one block)."""

    p: np.ndarray

    kind: ClassVar[str] = "sum"

    def __call__(self, rows: RowBlock, before: Any) -> np.ndarray:
        part = rows.host(rows.normal(self.p))
        return part if before is None else add_into(before, part)


@dataclass(frozen=True)
class CentreRows(Consumer):
    """The chunk's rows that are centres: ``(slots, B[rows])``, or ``(slots, (B P)[rows])``
    with ``p`` -- rows of ``K_mm`` (or of ``K_mm P``) from the blocks the pass evaluates
    anyway. The row-aligned extra ``"slot"`` holds each row's place among the centres
    (-1: not a centre)."""

    p: np.ndarray | None = None

    def __call__(self, rows: RowBlock, before: Any) -> tuple[np.ndarray, np.ndarray]:
        slot = np.asarray(rows.aux["slot"])
        local = np.flatnonzero(slot >= 0)
        values = rows.block() if self.p is None else rows.times("p", self.p)
        if rows.numpy:
            return slot[local], np.array(values[local], dtype=np.float64)
        taken = rows.xp.take(values, rows.local(local), axis=0)
        return slot[local], rows.host(rows.xp.astype(taken, rows.xp.float64))


@dataclass(frozen=True)
class Digest(Consumer):
    """A SHA-256 of the chunk's rows as the pass sees them (their bytes in the kernel
    precision; a sparse chunk's data, indices and pointers) and of its extras (targets,
    weights) -- no kernel is evaluated for it."""

    def __call__(self, rows: RowBlock, before: Any) -> bytes:
        h = hashlib.sha256()
        parts = rows.z if isinstance(rows.z, list) else [rows.z]
        parts = [*(p if scipy.sparse.issparse(p) else rows.host(p) for p in parts)]
        parts = [*parts, *(np.asarray(rows.aux[k]) for k in sorted(rows.aux))]
        for part in parts:
            if scipy.sparse.issparse(part):
                csr = scipy.sparse.csr_matrix(part)
                for a in (csr.data, csr.indices, csr.indptr):
                    h.update(np.ascontiguousarray(a).tobytes())
            else:
                h.update(np.ascontiguousarray(part).tobytes())
            h.update(repr(part.shape).encode())
        return h.digest()
