"""Kernel-target alignment (004, eqs. 51-52) in one pass over kernel blocks.

``A(K, T) = <K, T>_F / (||K||_F ||T||_F)`` with the target ``T_ij = +1`` for
samples of the same class and ``-1`` otherwise. For two classes with labels
``y in {-1, +1}`` this is ``T = y y^T`` and ``A = y^T K y / (n ||K||_F)``,
004's formula; for more classes it is the natural generalisation.

One pass over the upper-triangle kernel blocks accumulates the C x C matrix
``O^T calK O`` (O the one-hot class matrix), ``||calK||_F^2`` and the row
sums ``calK 1``. From those both the plain alignment of 004 and the centred
alignment (Cortes, Mohri & Rostamizadeh 2012: both K and T centred, which
removes the constant offset of the kernel) follow exactly:

* ``<HKH, T> = 2 sum_c o~_c^T calK o~_c`` with ``o~_c = o_c - n_c/n``,
* ``||H calK H||_F^2 = ||calK||_F^2 - 2 ||calK 1||^2 / n + (1^T calK 1)^2 / n^2``,
* ``||H T H||_F = 2 ||O~^T O~||_F``.

Layer rule: graph code over the rows' blocks in their namespace (numpy, or a device's:
the kernel blocks and the sums stay there, and the sums come to the host once); memory
per task is one kernel block (``chunk_size**2`` floats), the driver holds O(n + C^2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from dask import delayed

from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of
from npt_dask.engine.blocks import as_float64_block, scratch_block
from npt_dask.engine.budget import upper_pairs
from npt_dask.engine.rows import Aligned, Rows
from npt_dask.engine.sums import FAN_IN, tree_reduce
from npt_dask.errors import InputError
from npt_dask.kernels import KernelSpec, resolve_kernel
from npt_dask.kernels.params import KernelArguments
from npt_dask.methods._passes import add_parts, aligned, as_labels, host_sums
from npt_dask.runtime.inputs import (
    CHUNK_SIZE_PARAM,
    DEFAULT_CHUNK_SIZE,
    as_row_chunked,
    data_variance,
)
from npt_dask.runtime.labels import class_index
from npt_dask.runtime.scheduler import compute

__all__ = ["alignment_scores", "kernel_target_alignment"]


def _pair_terms(
    x_i: Any,
    x_j: Any,
    o_i: Any,
    o_j: Any,
    n_classes: int,
    kernel: KernelSpec,
    diagonal: bool,
) -> tuple[Any, Any, Any, Any]:
    """For block (i, j): ``O_i^T B O_j`` (+ transpose), ``||B||^2`` and row/column sums,
    in the rows' namespace (``o_i``, ``o_j``: the blocks' class positions)."""
    b = as_float64_block(scratch_block(x_i, x_j, kernel))
    o_i, o_j = _onehot(o_i, n_classes), _onehot(o_j, n_classes)
    cross = o_i.T @ (b @ o_j)
    xp = namespace_of(b)
    if is_numpy(xp):
        fro = np.array(np.einsum("ij,ij->", b, b))
        empty = np.zeros(0)
    else:
        fro, empty = xp.sum(b * b), xp.zeros(0, dtype=xp.float64, device=device_of(b))
    if diagonal:
        return cross, fro, b.sum(axis=1), empty
    return cross + cross.T, 2.0 * fro, b.sum(axis=1), b.sum(axis=0)


def _add_pairs(parts: list[tuple], starts_i: list[int], starts_j: list[int], n: int) -> tuple:
    """Sum a group of pair terms; row sums go to the rows of block i and block j."""
    cross = sum(p[0] for p in parts)
    fro = sum(p[1] for p in parts)
    xp = namespace_of(parts[0][2])
    rows = np.zeros(n) if is_numpy(xp) else xp.zeros(n, dtype=xp.float64, device=device_of(cross))
    for part, si, sj in zip(parts, starts_i, starts_j, strict=True):
        rows[si : si + part[2].shape[0]] += part[2]
        rows[sj : sj + part[3].shape[0]] += part[3]  # empty on the diagonal
    return cross, fro, rows


def _one_pass(
    x: Rows, index: Aligned, n_classes: int, kernel: KernelSpec
) -> tuple[np.ndarray, float, np.ndarray]:
    xs, os_ = list(x.data.to_delayed().ravel()), list(index.blocks)
    starts = np.concatenate([[0], np.cumsum(x.chunks)]).astype(int)
    n, nb = int(starts[-1]), len(xs)
    pairs = upper_pairs(nb)
    groups = [pairs[k : k + FAN_IN] for k in range(0, len(pairs), FAN_IN)]
    level = [
        delayed(_add_pairs, pure=True)(
            [delayed(_pair_terms, pure=False)(xs[i], xs[j], os_[i], os_[j], n_classes, kernel,
                                              i == j)
             for i, j in g],
            [int(starts[i]) for i, _ in g], [int(starts[j]) for _, j in g], n,
        )
        for g in groups
    ]  # fmt: skip
    total = delayed(host_sums, pure=False)(tree_reduce(level, add_parts))  # one crossing
    cross, fro, rows = compute(total, release_scratch=True)[0]
    return cross, float(fro), rows


def _onehot(index: Any, n_classes: int) -> Any:
    """The ``(rows, classes)`` indicator of rows' class positions, in their namespace."""
    xp = namespace_of(index)
    if is_numpy(xp):
        out = np.zeros((len(index), n_classes))
        out[np.arange(len(index)), index] = 1.0
        return out
    hits = index[:, None] == xp.arange(n_classes, device=device_of(index))[None, :]
    return xp.astype(hits, xp.float64)


def alignment_scores(
    X: Any,
    y: Any,
    kernel: str | KernelSpec | dict | Callable[..., Any] = "rbf",
    *,
    gamma: float | str | None = None,
    degree: float | None = None,
    coef0: float | None = None,
    kernel_params: dict[str, Any] | None = None,
    chunk_size: int | None = DEFAULT_CHUNK_SIZE,
) -> dict[str, float]:
    """Plain and centred kernel-target alignment from the same single pass.

    Returns ``{"alignment": ..., "centered_alignment": ...}``; see
    :func:`kernel_target_alignment` for the definitions.
    """
    params = KernelArguments(
        kernel=kernel, gamma=gamma, degree=degree, coef0=coef0, kernel_params=kernel_params
    )
    CHUNK_SIZE_PARAM.check(chunk_size)
    data, _ = as_row_chunked(X, name="X", chunk_size=chunk_size, min_samples=2)
    x = Rows.of(data)
    # read once: the one check and the class counts; the positions moved to x's device once
    classes, index = class_index(as_labels(y, data), name="y", owner="Kernel-target alignment")
    counts = np.bincount(index, minlength=len(classes))
    spec = resolve_kernel(params, int(data.shape[1]), lambda: data_variance(data))
    cross, fro, rows = _one_pass(x, aligned(x, index), len(classes), spec)
    n = data.shape[0]
    return {
        "alignment": float((2.0 * np.trace(cross) - cross.sum()) / (n * np.sqrt(fro))),
        "centered_alignment": _centered(cross, fro, rows, counts.astype(np.float64), n),
    }


def kernel_target_alignment(
    X: Any,
    y: Any,
    kernel: str | KernelSpec | dict | Callable[..., Any] = "rbf",
    *,
    gamma: float | str | None = None,
    degree: float | None = None,
    coef0: float | None = None,
    kernel_params: dict[str, Any] | None = None,
    centered: bool = False,
    chunk_size: int | None = DEFAULT_CHUNK_SIZE,
) -> float:
    """Alignment of the kernel matrix with the labels, from one pass over kernel blocks.

    Parameters
    ----------
    X : array-like, dask array or DataArray of shape (n, d)
    y : array-like of shape (n,)
        Class labels (any values; at least two classes).
    kernel, gamma, degree, coef0, kernel_params
        As for :func:`npt_dask.fit` (``gamma="scale"`` is ``1 / (d var X)``), resolved by
        the same function (:func:`npt_dask.kernels.resolve_kernel`).
    centered : bool, default False
        ``False``: 004's alignment of the uncentred kernel matrix. ``True``:
        the centred alignment (K and T centred), which the constant part of
        a kernel does not inflate -- the better score for choosing kernels.
    chunk_size : int, default 4096
        Rows per kernel block.

    Returns
    -------
    float in [-1, 1].

    Notes
    -----
    One pass over ``n (n + 1) / 2`` kernel entries (the upper triangle);
    memory per task is one ``chunk_size**2`` block; the driver holds
    ``n + C^2`` numbers.

    Examples
    --------
    >>> import numpy as np
    >>> from npt_dask.methods import kernel_target_alignment
    >>> X = np.array([[0.0], [0.1], [5.0], [5.1]])
    >>> y = np.array([-1, -1, 1, 1])
    >>> round(kernel_target_alignment(X, y, "rbf", gamma=1.0), 3)
    0.707
    """
    scores = alignment_scores(
        X, y, kernel, gamma=gamma, degree=degree, coef0=coef0, kernel_params=kernel_params,
        chunk_size=chunk_size,
    )  # fmt: skip
    score = scores["centered_alignment" if centered else "alignment"]
    if np.isnan(score):
        raise InputError(
            "The centred kernel matrix is zero (constant data or kernel), so the centred "
            "alignment is undefined; use centered=False or check the data."
        )
    return score


def _centered(cross: np.ndarray, fro: float, rows: np.ndarray, counts: np.ndarray, n: int) -> float:
    p = counts / n
    total = rows.sum()
    class_rows = cross.sum(axis=0)  # 1^T calK O (calK symmetric)
    tilde = cross - np.outer(p, class_rows) - np.outer(class_rows, p) + np.outer(p, p) * total
    kc_norm2 = fro - 2.0 * rows @ rows / n + total**2 / n**2
    o_gram = np.diag(counts) - n * np.outer(p, p)
    denom = np.sqrt(max(kc_norm2, 0.0)) * 2.0 * np.linalg.norm(o_gram)
    return float(2.0 * np.trace(tilde) / denom) if denom > 0 else float("nan")
