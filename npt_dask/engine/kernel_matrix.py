"""The lazy kernel matrix: ``kappa(Z, X)`` (:func:`kernel_matrix`) and the
self-similarities ``kappa(z_i, z_i)`` (:func:`kernel_diagonal`) as dask arrays built
blockwise, for projections (``kappa(Z, X) @ W`` fuses block by block), the small-n dense
solver, kernel ridge's exact direct route, landmark choice and the model's residuals.

Each keeps the rows' array type (``meta``): CuPy rows give CuPy blocks. With
``kernel="precomputed"`` the "rows" are the kernel matrix itself, and its blocks are
read, never evaluated.

Layer rule: graph code. It builds dask graphs over the numeric kernels of
:mod:`npt_dask.kernels`; nothing is computed here.
"""

from __future__ import annotations

import math

import dask.array as da
import numpy as np

from npt_dask.arrays.namespace import namespace_and_device
from npt_dask.engine.rows import Rows
from npt_dask.errors import InputError
from npt_dask.kernels import KernelSpec

__all__ = [
    "check_row_chunked",
    "kernel_diagonal",
    "kernel_matrix",
]


def check_row_chunked(x: da.Array, what: str) -> None:
    """Refuse ``x`` (named ``what``) unless it is 2-D, one chunk along features, its row
    chunks known."""
    if x.ndim != 2 or len(x.chunks[1]) != 1:
        raise InputError(
            f"{what} must be a 2-D dask array with one chunk along features; got shape "
            f"{x.shape} and chunks {x.chunks}. Rechunk with x.rechunk({{1: -1}})."
        )
    if any(math.isnan(c) for c in x.chunks[0]):
        raise InputError(
            f"{what} has unknown chunk sizes {x.chunks[0]}; call x.compute_chunk_sizes() first."
        )


def _kernel_block(z: np.ndarray, x: np.ndarray, kernel: KernelSpec) -> np.ndarray:
    return kernel(z, x)


def kernel_matrix(z: da.Array, x: da.Array, kernel: KernelSpec) -> da.Array:
    """Lazy ``kappa(z_i, x_j)`` with chunks ``(z.chunks[0], x.chunks[0])``.

    Nothing is computed. Each output chunk is one kernel block, so the memory
    of a task is ``len(z_chunk) * len(x_chunk)`` elements plus its inputs.
    A precomputed kernel's ``z`` already is that matrix: it is returned with
    its columns chunked like ``x``'s rows (for the training matrix, ``z is x``, its
    symmetric part ``(K + K^T) / 2``, as the Krylov passes see it).
    """
    if kernel.precomputed:
        z = z.rechunk({1: x.chunks[0]})
        return (z + z.T) * 0.5 if z is x else z  # the training matrix: its symmetric part
    check_row_chunked(z, "z")
    check_row_chunked(x, "x")
    namespace_and_device(z, x)  # one device for both (else an error naming the fix)
    dtype = np.result_type(z.dtype, x.dtype, np.float32)
    return da.blockwise(
        _kernel_block,
        "ij",
        z,
        "ik",
        x,
        "jk",
        dtype=dtype,
        concatenate=True,
        meta=Rows.of(z).empty((0, 0), dtype),
        kernel=kernel,
    )


def _diag_block(z: np.ndarray, kernel: KernelSpec) -> np.ndarray:
    return kernel.diag(z)


def kernel_diagonal(z: da.Array, kernel: KernelSpec) -> da.Array:
    """Lazy self-similarities ``kappa(z_i, z_i)`` (float64, chunked like z's rows).

    For a precomputed kernel ``z`` is the square training matrix and its
    diagonal is read from the diagonal blocks.
    """
    if kernel.precomputed:
        if z.shape[0] != z.shape[1]:
            raise InputError(
                f"The diagonal of a precomputed kernel needs the square training matrix; got "
                f"shape {z.shape}."
            )
        return da.diagonal(z.rechunk({1: z.chunks[0]})).astype(np.float64)
    check_row_chunked(z, "z")
    # dask's stubs type map_blocks as a decorator; the call is the documented one
    meta = Rows.of(z).empty((0,), np.float64)
    return z.map_blocks(_diag_block, kernel=kernel, drop_axis=1, dtype=np.float64, meta=meta)  # type: ignore[call-arg, arg-type]
