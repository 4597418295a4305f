"""The block engine: every per-block computation.

The kernel blocks and their products (:func:`scratch_block`, :func:`kept_block`,
:func:`as_float64_block`, :func:`block_products`, :func:`pair_products`,
:func:`block_times`, :func:`kernel_times`, :func:`finish_parts`,
:func:`sym_gram_block`) take the array namespace of their input
(:func:`npt_dask.arrays.namespace.namespace_of`) and return arrays of it: numpy, or any
array API library (CuPy, torch, ``array_api_strict``) through the same code. numpy keeps
its fast paths -- per-thread scratch and prefaulted buffers (:mod:`npt_dask.arrays.buffers`),
products written with ``out=`` -- and every other namespace gets new arrays. The sums,
the moments and the Krylov panels below work on the driver's (host) numpy arrays.

Layer rule: arrays in, arrays out. Nothing here knows dask, xarray or zarr;
the graph code (:mod:`npt_dask.engine.operator` for the fit's passes, the consumers of
:mod:`npt_dask.engine.passes`'s passes, :mod:`npt_dask.methods.alignment` for the
alignment pass) calls these functions as task bodies. One formula each:

* kernel blocks: :func:`scratch_block` (reused per thread), :func:`kept_block`
  (its own memory, kept between passes), :func:`as_float64_block`;
* a Krylov pass's pair products: :func:`block_products`, :func:`pair_products`;
* projections: :func:`projection_weights` (``[A, 1/n]``, ``A = U Lambda^{-1/2}``),
  :func:`block_times` and :func:`kernel_times` (one training block's contribution),
  :func:`finish_parts` (centring and the Lemma 5 residual); the task that streams
  them over the training blocks is :class:`npt_dask.engine.consumers.Projection`;
* sums: :func:`sum_parts`, :func:`add_tuples` (the nodes of the
  fan-in :data:`FAN_IN` trees that :func:`npt_dask.engine.sums.tree_reduce` builds);
* the Krylov solver's row-chunked panels (:mod:`npt_dask.npt.panels`): seeded
  Gaussian rows (:func:`chunk_seeds`, :func:`gaussian_block`,
  :func:`gaussian_rows`), the two halves of a tall-skinny QR
  (:func:`tsqr_r`, :func:`tsqr_q`) and column sums of squares
  (:func:`column_squares`, :func:`residual_squares`).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from npt_dask.arrays.buffers import populated_empty, scratch
from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of
from npt_dask.kernels import KernelSpec, Prepared

__all__ = [
    "FAN_IN",
    "GRAM_PANEL_ROWS",
    "PANEL_ROWS",
    "PREPARED_BYTES",
    "LinearMoments",
    "ProjectionTerms",
    "add_tuples",
    "as_float64_block",
    "block_products",
    "block_times",
    "chunk_moments",
    "chunk_seeds",
    "column_squares",
    "finish_parts",
    "fixed_point_terms",
    "gaussian_block",
    "gaussian_rows",
    "gram_of",
    "host_rows",
    "kept_block",
    "kernel_times",
    "normal_products",
    "one_hot",
    "pair_products",
    "projection_terms",
    "projection_weights",
    "residual_squares",
    "scratch_block",
    "sum_parts",
    "sym_gram_block",
    "tsqr_q",
    "tsqr_r",
]

FAN_IN = 8
"""Inputs per node of every summation tree (bounded memory per task)."""


def _in_float64(a: Any, key: str) -> Any:
    """``a`` in float64: as it is, cast in its namespace, or (numpy) converted into the
    thread's scratch buffer ``key``."""
    xp = namespace_of(a)
    if a.dtype == xp.float64:
        return a
    if not is_numpy(xp):
        return xp.astype(a, xp.float64)
    out = scratch(key, a.shape, np.float64)
    np.copyto(out, a)
    return out


def as_float64_block(block: Any) -> Any:
    """The block in float64 (on numpy a float32 block is converted into thread scratch)."""
    return _in_float64(block, "block-f64")


def kept_block(x_i: Any, x_j: Any, kernel: KernelSpec) -> Any:
    """``kappa(x_i, x_j)`` in its own memory, kept between passes (numpy: prefaulted)."""
    if not is_numpy(namespace_of(x_i, x_j)):
        return kernel(x_i, x_j)
    dtype = np.result_type(x_i.dtype, x_j.dtype, np.float32)
    out = populated_empty((x_i.shape[0], x_j.shape[0]), dtype)
    return kernel(x_i, x_j, out=out)


def sym_gram_block(upper: Any, lower: Any) -> Any:
    """``(K_ij + K_ji^T) / 2``: block (i, j) of the symmetric part of a given kernel matrix.

    A precomputed matrix need not be exactly symmetric (scikit-learn accepts
    any); its symmetric part is what the eigensolvers see, in its own
    C-ordered memory (kept between passes or used once).
    """
    xp = namespace_of(upper, lower)
    out = np.array(upper, order="C", copy=True) if is_numpy(xp) else xp.asarray(upper, copy=True)
    out += lower.T
    out *= 0.5
    return out


PREPARED_BYTES = 256 * 2**20
"""Most bytes of prepared right-hand rows (:meth:`~npt_dask.kernels.KernelSpec.prepare`:
for rbf the rows shifted to their mean and their norms, about the rows' own size) one
process keeps for :func:`scratch_block`, least recently used first out. A pass's centres
(m x d) are prepared once per process, not once per row chunk: at m = 20,000, d = 784 that
was a fifth of each block's time."""


class _Prepared:
    """Prepared rows by the identity of their source array, held while it lives (a weak
    reference: an entry goes with its array) and within :data:`PREPARED_BYTES`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.entries: OrderedDict[tuple[int, str], tuple[Any, Prepared]] = OrderedDict()
        self.lock = threading.RLock()

    def _forget(self, key: tuple[int, str], ref: Any) -> None:
        """The source array ``ref`` pointed at is gone: so is its entry."""
        with self.lock:
            entry = self.entries.get(key)
            if entry is not None and entry[0] is ref:
                del self.entries[key]

    def get(self, x: Any, kernel: KernelSpec) -> Any:
        """``kernel.prepare(x)``, computed once per live numpy ``x`` (others as they are)."""
        if not isinstance(x, np.ndarray):
            return x
        key = (id(x), str(getattr(kernel, "name", "")))
        with self.lock:
            entry = self.entries.get(key)
            if entry is not None and entry[0]() is x:
                self.entries.move_to_end(key)
                return dataclasses.replace(entry[1], source=x)
        prepared = kernel.prepare(x)
        if not isinstance(prepared, Prepared) or prepared.nbytes > self.limit:
            return prepared
        with self.lock:
            ref = weakref.ref(x, functools.partial(self._forget, key))
            self.entries[key] = (ref, dataclasses.replace(prepared, source=None))
            total = sum(p.nbytes for _, p in self.entries.values())
            while total > self.limit:
                _, (_, oldest) = self.entries.popitem(last=False)
                total -= oldest.nbytes
        return prepared


_PREPARED = _Prepared(PREPARED_BYTES)


def scratch_block(x_i: Any, x_j: Any, kernel: KernelSpec) -> Any:
    """``kappa(x_i, x_j)`` in this thread's reusable buffer (valid until its next use); a
    new array in another namespace. ``x_j`` (the centres of a pass, used by every row
    chunk) is prepared once per process (:data:`PREPARED_BYTES`)."""
    if not is_numpy(namespace_of(x_i, x_j)):
        return kernel(x_i, x_j)
    dtype = np.result_type(x_i.dtype, x_j.dtype, np.float32)
    out = scratch("block", (x_i.shape[0], x_j.shape[0]), dtype)
    return kernel(x_i, _PREPARED.get(x_j, kernel), out=out)


PANEL_ROWS = 128
"""Rows of a kernel block per step of the fused product (128 x 4096 float64 = 4 MiB)."""


def panel_rows(block: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of the block in float64 (on numpy float32 rows are converted in
    scratch)."""
    return _in_float64(block[start:stop, ...], "panel-f64")


def block_products(block: Any, v_i: Any, v_j: Any, diagonal: bool) -> tuple[Any, ...]:
    """``B V_j`` (and, off the diagonal, ``B^T V_i``) in one sweep over B.

    The block is read a panel of rows at a time and each panel serves both
    products while it is still in cache, so B leaves memory once per pass,
    not twice (measured 15-27% faster on 4096^2 blocks, two tasks at once). A float32
    block with float32 panels (conjugate gradient in float32) is multiplied as it is,
    panel by panel, at the single-precision rate (17% faster fused than as two
    products), ``B^T V_i`` summed over the panels in float64.
    The narrow products themselves run at 45-72% of BLAS's square-product
    rate for b = 20-160 (``benchmarks/blas.py``): that, not memory traffic,
    bounds a kept-block pass. ``(V_i^T P)`` reads the panel row-major, like
    ``P V_j``. A float32 block is converted panel by panel, never copied
    whole. On numpy each panel's product is written into its rows of the result;
    another namespace concatenates them.
    """
    xp = namespace_of(block, v_i, v_j)
    single = block.dtype == xp.float32 and v_i.dtype == xp.float32  # the block's own rate
    rows, numpy = block.shape[0], is_numpy(xp)
    right = v_i if diagonal else v_j
    device = device_of(block)
    out_i: Any = np.empty((rows, right.shape[1]), dtype=right.dtype) if numpy else None
    parts: list[Any] = []  # another namespace's panel products, concatenated after
    out_j = None if diagonal else xp.zeros((v_i.shape[1], block.shape[1]), device=device)
    for start in range(0, rows, PANEL_ROWS):
        stop = min(start + PANEL_ROWS, rows)
        panel = block[start:stop, ...] if single else panel_rows(block, start, stop)
        if numpy:
            np.matmul(panel, right, out=out_i[start:stop])
        else:
            parts.append(panel @ right)
        if out_j is not None:
            out_j += v_i[start:stop, ...].T @ panel
    if not numpy:
        out_i = xp.concat(parts, axis=0) if parts else xp.zeros((0, right.shape[1]))
    out_i = xp.astype(out_i, xp.float64, copy=False)
    if out_j is None:
        return (out_i,)
    return (out_i, out_j.T)


def normal_products(block: Any, p: Any, w: Any = None) -> tuple[Any, Any]:
    """``B P`` and ``B^T diag(w) (B P)`` (float64; ``w`` None: ones) in one sweep over B.

    A conjugate-gradient product on Nyström ridge's normal equations: each panel of
    :data:`PANEL_ROWS` rows gives its rows of ``B P`` and, while it is still in cache,
    its share of ``B^T W B P`` -- B leaves memory once, not twice. A float32 block and
    float32 ``P`` multiply at the single-precision rate; the shares are summed in float64.
    """
    xp = namespace_of(block, p)
    single = block.dtype == xp.float32 and p.dtype == xp.float32
    rows, numpy = block.shape[0], is_numpy(xp)
    bp: Any = np.empty((rows, p.shape[1]), dtype=p.dtype) if numpy else None
    parts: list[Any] = []
    total = xp.zeros((block.shape[1], p.shape[1]), dtype=xp.float64, device=device_of(block))
    for start in range(0, rows, PANEL_ROWS):
        stop = min(start + PANEL_ROWS, rows)
        panel = block[start:stop, ...] if single else panel_rows(block, start, stop)
        if numpy:
            u = np.matmul(panel, p, out=bp[start:stop])
        else:
            u = panel @ p
            parts.append(u)
        if w is not None:
            u = u * xp.astype(w[start:stop, None], u.dtype)
        total += panel.T @ u
    if not numpy:
        bp = xp.concat(parts, axis=0) if parts else xp.zeros((0, p.shape[1]))
    return xp.astype(bp, xp.float64, copy=False), total


def pair_products(
    x_i: Any, x_j: Any, v_i: Any, v_j: Any, kernel: KernelSpec, diagonal: bool
) -> tuple[Any, ...]:
    """:func:`block_products` of the block ``kappa(x_i, x_j)`` (evaluated into scratch)."""
    return block_products(scratch_block(x_i, x_j, kernel), v_i, v_j, diagonal)


# --- sums ---------------------------------------------------------------------------------


def sum_parts(parts: Sequence[Any], which: Sequence[int | None]) -> np.ndarray:
    """``sum_k parts[k][which[k]]`` (``which[k] is None``: the part itself), a new array."""
    out = None
    for part, w in zip(parts, which, strict=True):
        term = part if w is None else part[w]
        out = term.copy() if out is None else out.__iadd__(term)
    assert out is not None, "sum_parts needs at least one part"
    return out


def host_rows(parts: Sequence[Any]) -> np.ndarray:
    """Row blocks of a pass's result stacked in their namespace, then taken to host once
    (a numpy result is concatenated as the driver did: the crossing point counts)."""
    xp = namespace_of(*parts)
    stacked = np.concatenate(parts, axis=0) if is_numpy(xp) else xp.concat(list(parts), axis=0)
    return np.asarray(to_host(stacked))


def add_tuples(parts: Sequence[tuple[Any, ...]]) -> tuple[np.ndarray, ...]:
    """Element-wise sum of tuples of arrays (or scalars) of fixed shapes."""
    total = [np.array(p, copy=True) for p in parts[0]]
    for part in parts[1:]:
        for acc, term in zip(total, part, strict=True):
            acc += term
    return tuple(total)


# --- projections ----------------------------------------------------------------------------


def projection_weights(u_rows: np.ndarray, eigenvalues: np.ndarray, n: int) -> np.ndarray:
    """``[A, 1/n]`` for some training rows: ``A = U Lambda^{-1/2}``, then a column of ``1/n``.

    Row-wise, so a block of rows gives the same bits as the block of the whole.
    """
    a = u_rows / np.sqrt(eigenvalues)
    return np.hstack([a, np.full((a.shape[0], 1), 1.0 / n)])


class ProjectionTerms(dict):
    """The constants of :func:`finish_parts`: ``offset``, ``ones``, ``grand_mean``, ``center``."""


def projection_terms(
    a: np.ndarray, row_means: np.ndarray, grand_mean: float, center: bool
) -> ProjectionTerms:
    """``A^T m``, ``A^T 1``, ``g`` and the centring flag, from ``A = U Lambda^{-1/2}``."""
    return ProjectionTerms(
        offset=row_means @ a, ones=a.sum(axis=0), grand_mean=float(grand_mean), center=center
    )


def block_times(block: Any, w: Any) -> Any:
    """``block @ w``: in float32 when both are float32 (BLAS's single-precision rate; the
    caller accumulates in float64), else in float64."""
    xp = namespace_of(block, w)
    if block.dtype == xp.float32 and w.dtype == xp.float32:
        return block @ w
    return as_float64_block(block) @ xp.astype(w, xp.float64, copy=False)


def kernel_times(z: Any, x: Any, w: Any, kernel: KernelSpec) -> Any:
    """``kappa(z, x) @ w``: one training block's share of ``kappa(z) [A, 1/n]``."""
    return block_times(scratch_block(z, x, kernel), w)


def finish_parts(
    p: Any, diag: Any, offset: Any, ones: Any, grand_mean: float, center: bool
) -> tuple[Any, Any, Any]:
    """``(y, residual, ||y||^2)`` from ``p = kappa(z) [A, 1/n]`` and ``kappa(z, z)``.

    ``y = A^T (kappa - m) - (mean(kappa) - g) A^T 1``: the last term is zero in
    exact arithmetic (``U^T 1 = 0``) and is kept so rounding in U is not
    amplified by a large constant part of the kernel. The residual is Lemma 5's
    ``sqrt(max(0, k(z, z) - ||y||^2))``. ``y`` is C-contiguous (its own memory). The
    constants (host arrays) are taken to ``p``'s namespace and device.
    """
    xp = namespace_of(p, diag)
    if not is_numpy(xp):
        offset, ones = (xp.asarray(a, device=device_of(p)) for a in (offset, ones))
    r = offset.shape[0]
    y = p[:, :r] - offset
    if center:
        y -= (p[:, r] - grand_mean)[:, None] * ones
    kzz = diag - 2.0 * p[:, r] + grand_mean if center else diag
    if is_numpy(xp):
        norms = np.einsum("ij,ij->i", y, y)
        return y, np.sqrt(np.maximum(kzz - norms, 0.0)), norms
    norms = xp.sum(y * y, axis=1)
    return y, xp.sqrt(xp.clip(kzz - norms, min=0.0)), norms


def fixed_point_terms(
    z: np.ndarray,
    x: np.ndarray,
    a: np.ndarray,
    beta: np.ndarray,
    c: np.ndarray,
    kernel: KernelSpec,
) -> np.ndarray:
    """One training block's share of a fixed-point pre-image step: ``[num | den]``.

    The weights ``w_ij = g_ij kappa(z_i, x_j)`` with the feature-space
    coefficients ``g = beta A_j^T + c`` give ``num = w x`` and
    ``den = w 1`` (Mika et al. 1999: ``z <- num / den``).
    """
    w = as_float64_block(scratch_block(z, x, kernel)) * (beta @ a.T + c[:, None])
    xf = np.asarray(x, dtype=np.float64)
    return np.hstack([w @ xf, w.sum(axis=1, keepdims=True)])


# --- moments of a linear method on coordinates -------------------------------------------


def one_hot(labels: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """``(len(labels), len(classes))`` float64 indicator of each row's class."""
    index = np.searchsorted(classes, labels)
    index = np.minimum(index, len(classes) - 1)
    if not np.array_equal(classes[index], labels):
        raise ValueError("a label is not among the classes found before the pass")
    t = np.zeros((len(labels), len(classes)))
    t[np.arange(len(labels)), index] = 1.0
    return t


GRAM_PANEL_ROWS = 8192
"""Most rows per ``y^T y`` product: numpy's symmetric (``syrk``) path is known to crash a
threaded OpenBLAS at about 16,000 rows."""


def gram_of(y: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
    """``y^T y`` (float64) by numpy's symmetric product (half a general product's work),
    at most :data:`GRAM_PANEL_ROWS` rows at a time, each panel's product in ``dtype``.

    ``dtype=float32`` runs at BLAS's single-precision rate; each entry then has
    a relative error of about ``1e-7 sqrt(rows)`` of ``||y_k|| ||y_l||`` (the
    columns keep their own scale), and the panels are summed in float64.
    """
    x = np.asarray(y, dtype=dtype)
    out = np.zeros((x.shape[1], x.shape[1]))
    for start in range(0, len(x), GRAM_PANEL_ROWS):
        panel = x[start : start + GRAM_PANEL_ROWS]
        out += panel.T @ panel
    return out


def chunk_moments(
    y: np.ndarray, t: np.ndarray, gram_dtype: Any = np.float64
) -> tuple[np.ndarray, ...]:
    """A chunk's share of ridge's sufficient statistics, float64.

    ``(n, sum y, sum t, y^T y, y^T t, sum t^2)``: summed over chunks they are
    the moments of :class:`LinearMoments`. ``y^T y`` is formed in ``gram_dtype``
    (see :func:`gram_of`).
    """
    xp = namespace_of(y, t)
    if not is_numpy(xp):  # the same sums in the rows' namespace, on their device
        x, tt = xp.astype(y, xp.float64), xp.astype(t, xp.float64)
        g = xp.astype(x, getattr(xp, np.dtype(gram_dtype).name))
        return (
            xp.asarray(float(x.shape[0]), dtype=xp.float64, device=device_of(x)),
            xp.sum(x, axis=0),
            xp.sum(tt, axis=0),
            xp.astype(g.T @ g, xp.float64),
            x.T @ tt,
            xp.sum(tt * tt, axis=0),
        )
    x = np.asarray(y, dtype=np.float64)
    tt = np.asarray(t, dtype=np.float64)
    return (
        np.array(float(len(x))),
        x.sum(axis=0),
        tt.sum(axis=0),
        gram_of(x, gram_dtype),
        x.T @ tt,
        np.einsum("ij,ij->j", tt, tt),
    )


@dataclass(frozen=True)
class LinearMoments:
    """Sufficient statistics of a linear method on coordinates Y with targets T.

    ``classes`` is set when T is the one-hot indicator of class labels (then
    ``t_sum`` holds the class counts); see :func:`chunk_moments`.
    """

    n: float
    y_sum: np.ndarray  # (r,)
    t_sum: np.ndarray  # (k,)
    gram: np.ndarray  # (r, r) Y^T Y
    cross: np.ndarray  # (r, k) Y^T T
    t_norm2: np.ndarray  # (k,)
    classes: np.ndarray | None = None

    @classmethod
    def from_tuple(cls, parts: Sequence[Any], classes: np.ndarray | None = None) -> LinearMoments:
        n, y_sum, t_sum, gram, cross, t_norm2 = parts
        return cls(float(n), y_sum, t_sum, gram, cross, t_norm2, classes)

    def as_tuple(self) -> tuple[Any, ...]:
        return (self.n, self.y_sum, self.t_sum, self.gram, self.cross, self.t_norm2)

    def plus_minus_one(self) -> LinearMoments:
        """The moments of the one-vs-all targets ``2 T - 1`` (scikit-learn's
        ``RidgeClassifier``), one column for two classes (that of ``classes[1]``)."""
        if self.classes is None:
            raise ValueError("plus_minus_one needs class moments")
        cols = slice(1, None) if len(self.classes) == 2 else slice(None)
        cross = 2.0 * self.cross[:, cols] - self.y_sum[:, None]
        t_sum = 2.0 * self.t_sum[cols] - self.n
        return LinearMoments(
            self.n, self.y_sum, t_sum, self.gram, cross, np.full(len(t_sum), self.n), self.classes
        )


# --- the Krylov solver's row-chunked panels -----------------------------------------------


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
