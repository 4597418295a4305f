"""The kernel-scale warnings of kernel ridge, in its words: a kernel blind to the
training rows (nearly the identity, or nearly constant), and rows to predict that the
kernel sees as unlike every training row. The rule that decides is
:mod:`npt_dask.kernels.scale`'s, on small samples of the rows
(:func:`npt_dask.runtime.inputs.sample_rows`).
"""

from __future__ import annotations

from typing import Any

from npt_dask.errors import KernelScaleWarning, warn
from npt_dask.kernels import KernelSpec, NamedKernel
from npt_dask.kernels.scale import RIDGE_CONSTANT_TOL, kernel_label, scale_problem
from npt_dask.runtime.inputs import sample_rows

__all__ = ["warn_ridge_scale"]


_RIDGE_FIX = (
    "Use gamma='scale' (1 / (d var X)), or let KernelRidgeCV / KernelRidgeClassifierCV "
    "(npt ridge --gammas ...) choose gamma on held-out rows."
)


def warn_ridge_scale(rows: Any, train: Any, spec: KernelSpec, *, fitting: bool) -> None:
    """Warn (:class:`~npt_dask.errors.KernelScaleWarning`) when the one kernel-scale rule
    (:func:`~npt_dask.kernels.scale.scale_problem`) finds a problem on the samples
    (:func:`~npt_dask.runtime.inputs.sample_rows`) of ``rows`` and ``train`` (numpy or
    dask; only read for a named kernel): ``fitting`` for the fit's own rows (``train``
    is ``rows``; a kernel is then also called constant from
    :data:`~npt_dask.kernels.scale.RIDGE_CONSTANT_TOL`), else for rows predicted by a
    model fitted on ``train``. Each message says what the problem does to kernel ridge's
    predictions, and the fix."""
    if not isinstance(spec, NamedKernel):
        return  # a given matrix or function: its scale is the caller's
    head = sample_rows(rows)
    base = head if fitting else sample_rows(train)
    if head is None or base is None:
        return
    if fitting:
        problem = scale_problem(head, base, spec, constant_tol=RIDGE_CONSTANT_TOL)
    else:
        problem = scale_problem(head, base, spec)
    if problem is None:
        return
    fix = _RIDGE_FIX if spec.gamma is not None else (
        "Check the kernel and its parameters against the data's scale."
    )  # fmt: skip
    if not fitting:
        warn(
            f"The kernel sees these rows as unlike every training row ({kernel_label(spec)}: "
            "similarity below 1e-6 of its maximum, or the same similarity, to a sample of "
            "the training rows), so their predictions are all about the same (about 0: no "
            "training row informs them). Scale the rows as the training rows were (e.g. "
            "pixels / 255), or refit with a gamma for the data's scale.",
            KernelScaleWarning,
        )
    elif problem == "identity":
        warn(
            f"The kernel matrix is nearly the identity on these data ({kernel_label(spec)}: "
            "distinct rows have similarity below 1e-6): kernel ridge then memorises each "
            "training row, and predicts about 0 for any other row (a classifier, an "
            f"arbitrary class), however alpha is chosen. {fix}",
            KernelScaleWarning,
        )
    else:
        warn(
            f"The kernel is nearly constant on these data ({kernel_label(spec)}: every entry "
            f"within {RIDGE_CONSTANT_TOL:g} of the largest): kernel ridge with it is no "
            "richer than a linear model on the features, so its predictions are a constant "
            "plus a small linear term (a classifier's accuracy is about a linear one's), "
            f"however small alpha is. {fix}",
            KernelScaleWarning,
        )
