"""The block engine: the kernel blocks and their products, one task body each.

Every function here takes the array namespace of its input
(:func:`npt_dask.arrays.namespace.namespace_of`) and returns arrays of it: numpy, or any
array API library (CuPy, torch, ``array_api_strict``) through the same code. numpy keeps
its fast paths -- per-thread scratch and prefaulted buffers (:mod:`npt_dask.arrays.buffers`),
products written with ``out=`` -- and every other namespace gets new arrays.

Layer rule: arrays in, arrays out. Nothing here knows dask, xarray or zarr;
the graph code (:mod:`npt_dask.engine.operator` for the fit's passes, the consumers of
:mod:`npt_dask.engine.passes`'s passes, :mod:`npt_dask.methods.alignment` for the
alignment pass) calls these functions as task bodies. One formula each:

* kernel blocks: :func:`scratch_block` (reused per thread), :func:`kept_block`
  (its own memory, kept between passes), :func:`as_float64_block`, and the centres'
  prepared copy reused across a process's tasks (:data:`PREPARED_BYTES`);
* a Krylov pass's pair products: :func:`block_products` (the pair pass's task body is
  :func:`npt_dask.engine.passes.pair_task`),
  :func:`sym_gram_block`; a normal-equations pass's: :func:`normal_products`;
* a block times weights: :func:`block_times` and :func:`kernel_times` (one training
  block's share of a projection, finished by :func:`npt_dask.engine.projection.finish_parts`).

The other task bodies live by topic: sums (:mod:`npt_dask.engine.sums`), projections
(:mod:`npt_dask.engine.projection`), the moments of a linear method
(:mod:`npt_dask.engine.moments`), the Krylov panels (:mod:`npt_dask.linalg.tall`).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

from npt_dask.arrays.buffers import populated_empty, scratch
from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of
from npt_dask.kernels import KernelSpec, Prepared

__all__ = [
    "PANEL_ROWS",
    "PREPARED_BYTES",
    "as_float64_block",
    "block_products",
    "block_times",
    "kept_block",
    "kernel_times",
    "normal_products",
    "scratch_block",
    "sym_gram_block",
]


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
process keeps for :func:`scratch_block`, least recently used first out: a pass's centres
(m x d) are prepared once per process, not once per row chunk."""


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
    not twice. A float32 block with float32 panels (conjugate gradient in float32) is
    multiplied as it is, panel by panel, at the single-precision rate, ``B^T V_i``
    summed over the panels in float64. The narrow products themselves run below
    BLAS's square-product rate (``benchmarks/blas.py`` measures it): that, not memory
    traffic, bounds a kept-block pass. ``(V_i^T P)`` reads the panel row-major, like
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


# --- a block times weights (projections) ---------------------------------------------------


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
