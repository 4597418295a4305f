"""The one kernel-scale rule: is the kernel blind on these rows (another scale)?

A named kernel whose parameters do not suit the data's scale is blind to it:
distinct rows have similarity about 0 (``gamma`` too large for the spread: raw
0-255 pixels against ``gamma`` for [0, 1]), or about the same similarity
everywhere (a saturated sigmoid). A fit then gives coordinates with no
structure, and rows projected onto a fitted model all get the same coordinates
(and every residual sits at the kernel's maximum), while every solver converges.

One rule (:func:`scale_problem`) decides it on small samples, for every caller:
the fit (rows = training rows), ``transform``, ``residual``, ``partial_fit``,
``npt grow`` and ``npt project`` (rows against the model's training rows), and kernel
ridge's fit and predictions. Its samples are the first :data:`SCALE_SAMPLE` rows of
each side (:func:`npt_dask.runtime.inputs.sample_rows`: one small read). Given kernel
matrices (``kernel="precomputed"``), callables and sparse rows are the caller's scale
and are not checked. The warnings that say what the problem does are in the model's
words: NPT's (:mod:`npt_dask.npt.scale_warnings`) and kernel ridge's
(:mod:`npt_dask.ridge.scale_warnings`).

Pure numpy on the samples: nothing here reads dask arrays.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from npt_dask.kernels.specs import KernelSpec, NamedKernel

__all__ = [
    "RIDGE_CONSTANT_TOL",
    "SCALE_SAMPLE",
    "SCALE_TOL",
    "Problem",
    "kernel_label",
    "scale_problem",
]

SCALE_SAMPLE = 256
"""Rows of each side the kernel-scale rule evaluates (one block, before any pass)."""

SCALE_TOL = 1e-6
"""Similarities below this share of the largest one count as none (the kernel is blind)."""

RIDGE_CONSTANT_TOL = 1e-2
"""Kernel ridge's fit calls a kernel constant when every value is within this share of the
largest: the kernel is then in its first-order regime (``exp(-gamma d^2) ~ 1 - gamma d^2``
with ``gamma d^2 < 0.01`` for every pair), and kernel ridge with it is no richer than a
linear model on the features, however small alpha (an eigenproblem still finds the linear
structure, so NPT keeps :data:`SCALE_TOL`)."""

Problem = Literal["identity", "constant"]


def _row_keys(rows: np.ndarray) -> np.ndarray:
    """One comparable key per row (its bytes): equal rows, equal keys."""
    rows = np.ascontiguousarray(rows)
    return rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()


def scale_problem(
    rows: np.ndarray, train: np.ndarray, spec: KernelSpec, constant_tol: float = SCALE_TOL
) -> Problem | None:
    """The one rule: what is wrong with ``spec`` on ``rows`` against ``train`` (samples).

    ``"identity"``: every pair of distinct rows (one of ``rows``, one of ``train``) has
    a kernel value below :data:`SCALE_TOL` of the largest value seen (self-similarities
    included). ``"constant"``: every value of ``kernel(rows, train)`` is within
    ``constant_tol`` of the largest (:data:`SCALE_TOL`; kernel ridge's fit asks
    :data:`RIDGE_CONSTANT_TOL`). None otherwise, and when no pair of distinct rows
    exists (identical rows are the eigenvalue check's, which names them).
    """
    if not isinstance(spec, NamedKernel) or not len(rows) or not len(train):
        return None
    distinct = _row_keys(rows)[:, None] != _row_keys(train)[None, :]
    if not distinct.any():
        return None
    block = np.asarray(spec(rows, train), dtype=np.float64)
    selves = np.concatenate([spec.diag(rows), spec.diag(train)])
    top = max(float(np.max(np.abs(block))), float(np.max(np.abs(selves))), np.finfo(float).tiny)
    if float(np.max(np.abs(block[distinct]))) < SCALE_TOL * top:
        return "identity"
    if float(np.ptp(block)) < constant_tol * top:
        return "constant"
    return None


def kernel_label(spec: NamedKernel) -> str:
    """How a warning names the kernel: ``"rbf, gamma=0.5"``."""
    return spec.name + ("" if spec.gamma is None else f", gamma={spec.gamma:.3g}")
