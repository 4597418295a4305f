"""The one kernel-scale rule: is the kernel blind on these rows (another scale)?

A named kernel whose parameters do not suit the data's scale is blind to it:
distinct rows have similarity about 0 (``gamma`` too large for the spread: raw
0-255 pixels against ``gamma`` for [0, 1]), or about the same similarity
everywhere (a saturated sigmoid). A fit then gives coordinates with no
structure, and rows projected onto a fitted model all get the same coordinates
(and every residual sits at the kernel's maximum), while every solver converges.

One rule (:func:`scale_problem`) decides it on small samples, for every caller:
the fit (rows = training rows), ``transform``, ``residual``, ``partial_fit``,
``npt grow`` and ``npt project`` (rows against the model's training rows). Its
samples are the first :data:`SCALE_SAMPLE` rows of each side: one small read.
Given kernel matrices (``kernel="precomputed"``), callables and sparse rows are
the caller's scale and are not checked.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from npt_dask.arrays.host import to_host
from npt_dask.errors import KernelScaleWarning, warn
from npt_dask.kernels import KernelSpec, NamedKernel
from npt_dask.runtime.inputs import is_sparse_rows
from npt_dask.runtime.scheduler import compute

__all__ = [
    "RIDGE_CONSTANT_TOL",
    "SCALE_SAMPLE",
    "SCALE_TOL",
    "sample_rows",
    "scale_problem",
    "warn_kernel_scale",
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


def sample_rows(x: Any) -> np.ndarray | None:
    """The first :data:`SCALE_SAMPLE` rows of ``x`` (numpy or dask, on any device) as float64
    numpy (one small read of a dask array, one host crossing); None for sparse rows or rows
    without features."""
    if x is None or int(x.shape[1]) == 0 or is_sparse_rows(x) or hasattr(x, "toarray"):
        return None
    head = x[:SCALE_SAMPLE]
    head = compute(head)[0] if hasattr(head, "dask") else head
    return np.asarray(to_host(head), dtype=np.float64)  # a device sample crosses once


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


def _named(spec: NamedKernel) -> str:
    return spec.name + ("" if spec.gamma is None else f", gamma={spec.gamma:.3g}")


def warn_kernel_scale(
    rows: Any, train: Any, spec: KernelSpec, *, fitting: bool, ridge: bool = False
) -> None:
    """Warn (:class:`~npt_dask.errors.KernelScaleWarning`) when :func:`scale_problem`
    finds one on the samples (:func:`sample_rows`) of ``rows`` and ``train`` (numpy or
    dask; only read for a named kernel): ``fitting`` for the fit's own rows (``train``
    is ``rows``), else for rows projected onto a model fitted on ``train``. Each message
    names the fix, in the words of the model: NPT's coordinates and residuals, or
    (``ridge``) kernel ridge's predictions, whose fit also calls a kernel constant from
    :data:`RIDGE_CONSTANT_TOL`."""
    if not isinstance(spec, NamedKernel):
        return  # a given matrix or function: its scale is the caller's
    head = sample_rows(rows)
    base = head if fitting else sample_rows(train)
    if head is None or base is None:
        return
    if ridge and fitting:
        problem = scale_problem(head, base, spec, constant_tol=RIDGE_CONSTANT_TOL)
    else:
        problem = scale_problem(head, base, spec)
    if problem is None:
        return
    if ridge:
        _warn_ridge(problem, spec, fitting=fitting)
        return
    if not fitting:
        what = (
            "similarity below 1e-6 of its maximum"
            if problem == "identity"
            else "the same similarity (within 1e-6)"
        )
        warn(
            f"The kernel sees these rows as unlike every training row ({_named(spec)}: every "
            "pair of distinct rows, one of these and one of a sample of the training rows, "
            f"has {what}), so rows unlike every training row all get the same coordinates and "
            "every residual sits at the kernel's maximum. Scale the rows as the training "
            "rows were (e.g. pixels / 255), or refit with a gamma for the data's scale "
            "(gamma='scale').",
            KernelScaleWarning,
        )
        return
    fix = (
        " Use gamma='scale' (1 / (d var X)), or standardise the features."
        if spec.gamma is not None
        else " Check the kernel and its parameters against the data's scale."
    )
    if problem == "identity":
        warn(
            f"The kernel matrix is nearly the identity on these data ({_named(spec)}: "
            "distinct rows have similarity below 1e-6): every eigenvalue is about the same "
            f"and the coordinates carry no structure.{fix}",
            KernelScaleWarning,
        )
    else:
        warn(
            f"The kernel is nearly constant on these data ({spec.name}: every entry within "
            f"1e-6 of the others), so the centred kernel matrix is nearly zero.{fix}",
            KernelScaleWarning,
        )


_RIDGE_FIX = (
    "Use gamma='scale' (1 / (d var X)), or let KernelRidgeCV / KernelRidgeClassifierCV "
    "(npt ridge --gammas ...) choose gamma on held-out rows."
)


def _warn_ridge(problem: Problem, spec: NamedKernel, *, fitting: bool) -> None:
    """:func:`warn_kernel_scale`'s messages for kernel ridge: what the problem does to its
    predictions, and the fix."""
    fix = _RIDGE_FIX if spec.gamma is not None else (
        "Check the kernel and its parameters against the data's scale."
    )  # fmt: skip
    if not fitting:
        warn(
            f"The kernel sees these rows as unlike every training row ({_named(spec)}: "
            "similarity below 1e-6 of its maximum, or the same similarity, to a sample of "
            "the training rows), so their predictions are all about the same (about 0: no "
            "training row informs them). Scale the rows as the training rows were (e.g. "
            "pixels / 255), or refit with a gamma for the data's scale.",
            KernelScaleWarning,
        )
    elif problem == "identity":
        warn(
            f"The kernel matrix is nearly the identity on these data ({_named(spec)}: "
            "distinct rows have similarity below 1e-6): kernel ridge then memorises each "
            "training row, and predicts about 0 for any other row (a classifier, an "
            f"arbitrary class), however alpha is chosen. {fix}",
            KernelScaleWarning,
        )
    else:
        warn(
            f"The kernel is nearly constant on these data ({_named(spec)}: every entry "
            f"within {RIDGE_CONSTANT_TOL:g} of the largest): kernel ridge with it is no "
            "richer than a linear model on the features, so its predictions are a constant "
            "plus a small linear term (a classifier's accuracy is about a linear one's), "
            f"however small alpha is. {fix}",
            KernelScaleWarning,
        )
