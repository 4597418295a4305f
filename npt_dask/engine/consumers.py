"""What a pass does with a kernel block: the consumers of :mod:`npt_dask.engine.passes`.

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
                               labels or targets (:class:`~npt_dask.engine.moments.LinearMoments`)
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

Everything a consumer computes stays in the namespace of the rows (on their device):
the running sums too. :meth:`Consumer.finish` is where a result crosses to host, through
the one boundary :func:`npt_dask.arrays.host.to_host`: a ``sum`` consumer's total once per
pass (after the chains are added), a ``rows`` consumer's output once per chunk when the
driver needs it (:func:`npt_dask.engine.passes.row_pass`: a zarr write, a digest, the
centres' own rows; only chunks that hold centres cross for :class:`CentreRows`), never
for a lazy per-row result (:func:`npt_dask.engine.passes.map_rows` keeps it there).

The array namespace is chosen here, once: :class:`RowBlock` takes the namespace of the
rows it is handed (numpy's, or CuPy's, torch's, ``array_api_strict``'s:
:func:`npt_dask.arrays.namespace.namespace_of`), brings the centres and the row-aligned extras
there (:meth:`RowBlock.local`) and evaluates every block and product in it. On numpy nothing moves.

Layer rule: task bodies, arrays only (numpy or another array API namespace); the graph
is built by :mod:`npt_dask.engine.passes`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

import numpy as np
import scipy.sparse

from npt_dask.arrays.buffers import scratch
from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import (
    device_of,
    is_numpy,
    namespace_and_device,
    namespace_of,
    on_device,
)
from npt_dask.engine.blocks import (
    block_products,
    block_times,
    kept_block,
    normal_products,
    scratch_block,
)
from npt_dask.engine.moments import chunk_moments, one_hot
from npt_dask.engine.projection import ProjectionTerms, finish_parts
from npt_dask.engine.sums import add_into
from npt_dask.errors import InputError
from npt_dask.kernels import KernelSpec
from npt_dask.kernels.specs import checks_carried
from npt_dask.linalg.tiles import TiledUpper
from npt_dask.runtime.inputs import NON_FINITE_INPUT

__all__ = [
    "DIGEST_LANES",
    "Apply",
    "CentreRows",
    "Certificate",
    "Consumer",
    "Cross",
    "Digest",
    "Gram",
    "KeptBlock",
    "Moments",
    "Normal",
    "PairProducts",
    "Projection",
    "RowBlock",
    "centre_pairs",
    "dense_rows",
    "device_lanes",
    "finite_flag",
    "projection_verdict",
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
    extras (targets, weights, centre slots, a pair's ``V_i``); ``block`` a block already
    evaluated (kept between passes, or read from a given matrix) for the one panel. ``B``
    is evaluated on first use and kept for the other consumers (one evaluation per block
    per pass); products are memoised by name. ``xp`` is the namespace of ``z`` (the one
    decision of the seam): the block and its products live there, on ``z``'s device.
    """

    def __init__(
        self,
        z: Any,
        centres: Any,
        kernel: KernelSpec,
        aux: Mapping[str, Any],
        block: Any = None,
    ) -> None:
        self.z = z
        self.centres = centres
        self.kernel = kernel
        self.aux = aux
        first = block if block is not None else z[0] if isinstance(z, list) else z
        self.xp, self.device = namespace_and_device(first)
        self.numpy = is_numpy(self.xp)
        self._block: Any = block  # given: a block kept between passes (one panel)
        self._memo: dict[str, Any] = {}

    def local(self, a: Any) -> Any:
        """``a`` (centres, weights, a host matrix) in the block's namespace and device; on
        numpy as it is."""
        return on_device(a, self.xp, self.device)

    def extra(self, name: str, dtype: Any = np.float64) -> Any:
        """The row-aligned extra ``name`` in ``dtype``, in the block's namespace and device
        (a host extra is copied there: host to device, no crossing back)."""
        a = self.aux[name]
        if self.numpy:
            return np.asarray(a, dtype=dtype)
        return self.xp.astype(self.local(a), getattr(self.xp, np.dtype(dtype).name))

    @staticmethod
    def host(a: Any) -> Any:
        """``a`` in host memory, through the one boundary (:func:`~npt_dask.arrays.host.
        to_host`: one crossing)."""
        return to_host(a)

    @property
    def n_rows(self) -> int:
        return int(self.z[0].shape[0] if isinstance(self.z, list) else self.z.shape[0])

    def _panels(self) -> Iterator[tuple[Any, Any]]:
        """``(B_j, w_j)`` for each centre panel, each block evaluated (or read) once."""
        precomputed = self.kernel.precomputed
        for j, (x_j, w_j) in enumerate(centre_pairs(self.centres)):
            if not precomputed:
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
        return None if self.aux.get("weights") is None else self.extra("weights")

    def weighted64(self) -> Any:
        """``sqrt(w) B`` in float64; on numpy in Fortran order (a thread's scratch; its
        column panels contiguous for :func:`npt_dask.linalg.symmetric.syrk_update`)."""
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

    def vectors(self, p: Any) -> Any:
        """Vectors ``P`` a product takes (host numpy, or already in the block's namespace:
        a driver whose iterates live on the device) in the block's namespace."""
        return np.asarray(p) if self.numpy else self.local(p)

    def times(self, name: str, p: np.ndarray) -> Any:
        """``B P`` (float64; the product in the block's precision), memoised by ``name``."""
        if name not in self._memo:
            b, xp = self.block(), self.xp
            product = block_times(b, xp.astype(self.vectors(p), b.dtype, copy=False))
            self._memo[name] = xp.astype(product, xp.float64, copy=False)
        return self._memo[name]

    def normal(self, p: np.ndarray) -> Any:
        """``B^T diag(w) B P`` (float64), its ``B P`` memoised as :meth:`times`'s ``"p"``
        (:func:`~npt_dask.engine.blocks.normal_products`: one sweep over the block; the products in
        the block's precision)."""
        b, xp = self.block(), self.xp
        bp, total = normal_products(b, xp.astype(self.vectors(p), b.dtype, copy=False),
                                    self.weights())  # fmt: skip
        self._memo.setdefault("p", bp)
        return total

    def projected(self, terms: ProjectionTerms) -> tuple[Any, Any, Any]:
        """``(y, residual, ||y||^2)`` of the rows onto a model whose centres carry the
        weights ``[A, 1/n]`` (:func:`npt_dask.engine.projection.finish_parts`), memoised;
        a precomputed kernel's residual is NaN (its ``k(z, z)`` is not in the test x
        train rows)."""
        if "projected" not in self._memo:
            p, xp = self.apply(), self.xp
            diag = (
                self.kernel.diag(self.z)
                if not self.kernel.precomputed
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
    in row order) or ``"sum"`` (added into its chain's running sum ``before``). A call
    returns arrays of the rows' namespace; :meth:`finish` takes a result to host."""

    kind: ClassVar[str] = "rows"

    def __call__(self, rows: RowBlock, before: Any) -> Any:
        raise NotImplementedError

    def finish(self, value: Any) -> Any:
        """``value`` (a chunk's output, or a sum's total) in host memory: one crossing."""
        return to_host(value)


@dataclass(frozen=True)
class Apply(Consumer):
    """``B W`` with the centres' own weights (float64, one row per row)."""

    def __call__(self, rows: RowBlock, before: Any) -> Any:
        return rows.apply()


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
    :meth:`RowBlock.projected`); non-finite input rows, kernel values or coordinates are
    an error (the input's, the kernel's or this one naming the kernel).

    On numpy each is checked as it is made (nothing crosses). On a device one verdict
    covers them all (:func:`projection_verdict`: the rows, the coordinates and the
    residuals are finite -- a non-finite kernel value makes its row's products
    non-finite, so the blocks are made unchecked,
    :func:`~npt_dask.kernels.specs.checks_carried`) and is read once: with ``check`` (the
    default) in the task, one flag a chunk (a task raises only on what the host sees);
    with ``check=False`` not at all, for a caller that reads the verdict with the values
    it takes to the host anyway (:func:`npt_dask.project`: no sync of its own). A failed
    verdict is worded by :meth:`refuse`, as numpy's route words it."""

    terms: ProjectionTerms
    check: bool = True

    def __call__(self, rows: RowBlock, before: Any) -> Any:
        if rows.numpy:
            y, res = rows.projected(self.terms)[:2]
            if not np.isfinite(y).all():  # (a precomputed kernel's residual is NaN)
                raise InputError(non_finite_message(rows.kernel))
            return np.hstack([y, res[:, None]])
        with checks_carried():  # the blocks' checks ride on the verdict
            y, res = rows.projected(self.terms)[:2]
        out = rows.xp.concat([y, res[:, None]], axis=1)
        if self.check and not bool(to_host(projection_verdict(out, rows.z, rows.kernel))):
            self.refuse(rows.z, rows.centres, rows.kernel)  # one flag crossed, and it failed
        return out

    def refuse(self, z: Any, centres: Any, kernel: KernelSpec) -> NoReturn:
        """Raise the error of a chunk whose verdict failed (:func:`projection_verdict`) as
        numpy's route raises it: the rows' own (NaN or inf in the input), else the
        kernel's (its blocks made again, checked), else this projection's. The error path
        only: its work and crossings are not counted."""
        parts = z if isinstance(z, list) else [z]
        if not kernel.precomputed and not all(bool(to_host(finite_flag(p))) for p in parts):
            raise InputError(NON_FINITE_INPUT)
        RowBlock(z, centres, kernel, {}).projected(self.terms)
        raise InputError(non_finite_message(kernel))


def projection_verdict(out: Any, z: Any, kernel: KernelSpec) -> Any:
    """Whether a device chunk's projection ``out`` (``[y | residual]``) and its rows ``z``
    are all finite, as a 0-d array on their device (nothing crosses): the one check of
    :class:`Projection` on a device. A non-finite kernel value makes every coordinate of
    its row non-finite, so this covers the blocks too. For a precomputed kernel: the
    coordinates (its residual is NaN; its rows are checked as they are read)."""
    if kernel.precomputed:
        return finite_flag(out[:, :-1])
    return finite_flag(out) & finite_flag(z)


def finite_flag(y: Any) -> Any:
    """Whether every entry of ``y`` is finite, as a 0-d array where ``y`` lives (no sync:
    read it with the values it belongs to)."""
    xp = namespace_of(y)
    return xp.all(xp.isfinite(y))


@dataclass(frozen=True)
class Certificate(Consumer):
    """``[residual, k(z, z)]`` of each row, shape ``(2, rows)``: Lemma 5's residual against
    the model and the centred self-similarity ``||y||^2 + residual^2``."""

    terms: ProjectionTerms

    def __call__(self, rows: RowBlock, before: Any) -> Any:
        _, res, norms = rows.projected(self.terms)
        return (np.stack if rows.numpy else rows.xp.stack)([res, norms + res * res])


@dataclass(frozen=True)
class Moments(Consumer):
    """Ridge's moments of the rows' coordinates with their class labels (one-hot by
    ``classes``) or targets (the extra ``"labels"`` or ``"targets"``), as the tuple of
    :func:`npt_dask.engine.moments.chunk_moments` (``Y^T Y`` in ``precision``, summed in
    float64)."""

    terms: ProjectionTerms
    classes: np.ndarray | None
    precision: str

    kind: ClassVar[str] = "sum"

    def __call__(self, rows: RowBlock, before: Any) -> tuple[Any, ...]:
        y = rows.projected(self.terms)[0]
        if self.classes is not None:  # the labels' indicator, made on host
            labels = rows.aux["labels"]
            labels = labels if isinstance(labels, np.ndarray) else rows.host(labels)
            t = one_hot(np.asarray(labels), self.classes)
        else:
            t = rows.aux["targets"]
        if rows.numpy:
            t = np.asarray(t)
            finite = bool(np.isfinite(t).all())
        elif isinstance(t, np.ndarray):  # host targets: checked before they move
            finite = bool(np.isfinite(t).all())
            t = rows.xp.astype(rows.local(t), rows.xp.float64)
        else:
            t = rows.xp.astype(rows.local(t), rows.xp.float64)
            finite = bool(to_host(rows.xp.all(rows.xp.isfinite(t))))
        if not finite:
            raise InputError("targets contain NaN or infinity; pass finite targets.")
        shaped = t.reshape(len(y), -1) if rows.numpy else rows.xp.reshape(t, (y.shape[0], -1))
        mine = chunk_moments(y, shaped, self.precision)
        return mine if before is None else add_into(before, mine)


@dataclass(frozen=True)
class Gram(Consumer):
    """``B^T diag(w) B`` summed over rows, float64, as the upper tiles of the ``m x m``
    matrix (:class:`~npt_dask.linalg.tiles.TiledUpper`: every BLAS call in place; ``c m^2``
    flops a chunk, symmetric rank-k updates). On another namespace the running sum is the
    whole ``m x m`` product on the device, tiled on host once, by :meth:`finish`."""

    kind: ClassVar[str] = "sum"

    def __call__(self, rows: RowBlock, before: Any) -> Any:
        b = rows.weighted64()
        if not rows.numpy:  # the whole product there (the upper tiles are what is read)
            return b.T @ b if before is None else add_into(before, b.T @ b)
        acc = before if before is not None else TiledUpper(b.shape[1])
        return acc.add_gram(b)

    def finish(self, value: Any) -> TiledUpper:
        """The total as host tiles (a device total crosses once, then is tiled)."""
        if isinstance(value, TiledUpper):
            return to_host(value)  # host already: the crossing point, nothing moves
        full = to_host(value)
        return TiledUpper(full.shape[0]).add_full(full)


@dataclass(frozen=True)
class Cross(Consumer):
    """``B^T diag(w) T`` summed over rows, float64 (``m x k``): the targets ``T`` are the
    row-aligned extra ``"targets"``. The product is float64 (beside :class:`Gram`, which
    makes ``sqrt(w) B`` in float64 anyway), or with ``block_precision`` in the block's
    precision, each chunk's part summed in float64 (CG's right-hand side: its rounding is
    that of the float32 products, which CG's true-residual check sees; a float64 copy of a
    float32 block would more than double that pass's work)."""

    block_precision: bool = False
    kind: ClassVar[str] = "sum"

    def __call__(self, rows: RowBlock, before: Any) -> Any:
        t = rows.xp.reshape(rows.extra("targets"), (rows.n_rows, -1))
        w, xp = rows.weights(), rows.xp
        if self.block_precision:
            b = rows.block()
            tw = xp.astype(t if w is None else t * w[:, None], b.dtype)
            part = xp.astype(b.T @ tw, xp.float64)
        else:
            if w is not None:
                t = t * xp.sqrt(w)[:, None]  # weighted64 carries the other sqrt(w)
            part = rows.weighted64().T @ t
        return part if before is None else add_into(before, part)


@dataclass(frozen=True)
class Normal(Consumer):
    """``B^T diag(w) (B P)`` summed over rows (``m x k`` float64): one conjugate-gradient
    product ``K_nm^T W K_nm P`` (``4 c m k`` flops a chunk in the block's precision, both
    products from the one block)."""

    p: np.ndarray

    kind: ClassVar[str] = "sum"

    def __call__(self, rows: RowBlock, before: Any) -> Any:
        part = rows.normal(self.p)
        return part if before is None else add_into(before, part)


@dataclass(frozen=True)
class CentreRows(Consumer):
    """The chunk's rows that are centres: ``(slots, B[rows])``, or ``(slots, (B P)[rows])``
    with ``p`` -- rows of ``K_mm`` (or of ``K_mm P``) from the blocks the pass evaluates
    anyway. The row-aligned extra ``"slot"`` holds each row's place among the centres
    (-1: not a centre). On numpy the rows are float64; on a device they keep the block's
    precision (``B``'s, or float64 for ``B P``), taken at the extra ``"at"`` (the chunk's
    centre positions, already on the device: moved once per fit) when it is given."""

    p: np.ndarray | None = None

    def __call__(self, rows: RowBlock, before: Any) -> tuple[np.ndarray, Any]:
        slot = np.asarray(rows.aux["slot"])
        local = np.flatnonzero(slot >= 0)
        values = rows.block() if self.p is None else rows.times("p", self.p)
        if rows.numpy:
            return slot[local], np.array(values[local], dtype=np.float64)
        at = rows.aux.get("at")
        return slot[local], rows.xp.take(values, rows.local(local) if at is None else at, axis=0)

    def finish(self, value: tuple[np.ndarray, Any]) -> tuple[np.ndarray, np.ndarray]:
        """The chunk's centre rows on host: a chunk with none crosses nothing."""
        slots, values = value
        if len(slots) == 0:
            return slots, np.zeros((0, int(values.shape[1])))
        return to_host(value)


@dataclass(frozen=True)
class Digest(Consumer):
    """A SHA-256 of the chunk's rows as the pass sees them (their bytes in the kernel
    precision; a sparse chunk's data, indices and pointers) and of its extras (targets,
    weights) -- no kernel is evaluated for it.

    On a device the bytes do not cross: each part is reduced there to
    :data:`DIGEST_LANES` 64-bit sums of its 32-bit words times pseudo-random multipliers
    of their positions (:func:`device_lanes`: integer arithmetic modulo ``2**64``, exact
    and the same in any order of summation), and the SHA-256 is taken of those sums, its
    shape and dtype (``8 x DIGEST_LANES`` bytes cross a part). A changed word changes a
    lane unless its multiplier vanishes modulo ``2**64`` over the change (below ``2**-32``
    a lane). The two kinds of digest differ: a checkpoint resumes on the kind of memory it
    was written from."""

    def __call__(self, rows: RowBlock, before: Any) -> bytes:
        """The hash is taken on host: the chunk's rows and extras cross once (one call);
        on a device only their lanes cross."""
        h = hashlib.sha256()
        parts = rows.z if isinstance(rows.z, list) else [rows.z]
        parts = [*parts, *(rows.aux[k] for k in sorted(rows.aux))]
        if not rows.numpy and all(hasattr(p, "view") for p in parts):
            lanes = rows.host(rows.xp.stack([device_lanes(rows.xp, p) for p in parts]))
            h.update(b"device-lanes")
            for part, lane in zip(parts, np.asarray(lanes), strict=True):
                h.update(lane.tobytes() + f"{np.dtype(part.dtype).str}{part.shape}".encode())
            return h.digest()
        parts = [p if scipy.sparse.issparse(p) else np.asarray(p) for p in rows.host(parts)]
        for part in parts:
            if scipy.sparse.issparse(part):
                csr = scipy.sparse.csr_matrix(part)
                for a in (csr.data, csr.indices, csr.indptr):
                    h.update(np.ascontiguousarray(a).tobytes())
            else:
                h.update(np.ascontiguousarray(part).tobytes())
            h.update(repr(part.shape).encode())
        return h.digest()

    def finish(self, value: bytes) -> bytes:
        """The digest is host bytes already (the rows crossed in the call)."""
        return value


DIGEST_LANES = 4
"""64-bit sums a device part is reduced to by :func:`device_lanes` (256 bits)."""

_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)
"""splitmix64's constants: position -> pseudo-random 64-bit multiplier."""

_WORDS = 1 << 22
"""Words a step of :func:`device_lanes` takes (its temporaries: a few of this many
64-bit integers)."""


def device_lanes(xp: Any, a: Any) -> Any:
    """:data:`DIGEST_LANES` sums ``sum_i w_i m_l(i) mod 2**64`` of the 32-bit words ``w_i``
    of ``a``'s bytes (C order), ``m_l`` splitmix64 of the position and the lane, where
    ``a`` lives (uint64 there; nothing crosses)."""
    flat = xp.reshape(a, (-1,))
    words = flat.view(xp.uint32) if flat.dtype.itemsize >= 4 else xp.astype(flat, xp.uint32)
    mix = [xp.asarray(c, dtype=xp.uint64, device=device_of(a)) for c in _MIX]
    lanes = []
    for lane in range(DIGEST_LANES):
        total = xp.zeros((), dtype=xp.uint64, device=device_of(a))
        for start in range(0, int(words.shape[0]), _WORDS):
            w = xp.astype(words[start : start + _WORDS], xp.uint64)
            z = xp.arange(start, start + int(w.shape[0]), dtype=xp.uint64, device=device_of(a))
            z = (z + (lane + 1)) * mix[0]
            z = (z ^ (z >> 30)) * mix[1]
            z = (z ^ (z >> 27)) * mix[2]
            z = z ^ (z >> 31)
            total = total + xp.sum(w * z, dtype=xp.uint64)
        lanes.append(total)
    return xp.stack(lanes)


# --- the training operator's pairs (the pair pass of npt_dask.engine.operator) ----------------


def _one_panel(rows: RowBlock) -> tuple[Any, Any]:
    """The one centre panel ``(x_j, w_j)`` of a pair's task."""
    (panel,) = list(centre_pairs(rows.centres))
    return panel


@dataclass(frozen=True)
class PairProducts(Consumer):
    """A pair ``(i, j)`` of the training operator's blocks: ``B V_j`` and, off the
    diagonal, ``B^T V_i`` (:func:`~npt_dask.engine.blocks.block_products`: one sweep over
    ``B``); the panel's weights are ``V_j``, the extra ``"v"`` is ``V_i``. Both stay in
    the rows' namespace: the pass adds them into its row sums there."""

    diagonal: bool

    def __call__(self, rows: RowBlock, before: Any) -> tuple[Any, ...]:
        v_j = rows.local(_one_panel(rows)[1])
        v_i = rows.local(rows.aux["v"])
        return block_products(rows.block(), v_i, v_j, self.diagonal)


@dataclass(frozen=True)
class KeptBlock(Consumer):
    """The pair's kernel block in its own memory (:func:`~npt_dask.engine.blocks.
    kept_block`), to be kept between passes and given back to :class:`PairProducts`."""

    def __call__(self, rows: RowBlock, before: Any) -> Any:
        return kept_block(rows.z, rows.local(_one_panel(rows)[0]), rows.kernel)
