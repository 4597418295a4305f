"""The kernel-scale warnings of an NPT model, in its words: a fit whose kernel is blind
to its rows (another scale), and rows projected onto a model that its kernel sees as
unlike every training row. The rule that decides is :mod:`npt_dask.kernels.scale`'s, on
small samples of the rows (:func:`npt_dask.runtime.inputs.sample_rows`).
"""

from __future__ import annotations

from typing import Any

from npt_dask.errors import KernelScaleWarning, warn
from npt_dask.kernels import KernelSpec, NamedKernel
from npt_dask.kernels.scale import kernel_label, scale_problem
from npt_dask.runtime.inputs import sample_rows

__all__ = ["warn_kernel_scale"]


def warn_kernel_scale(rows: Any, train: Any, spec: KernelSpec, *, fitting: bool) -> None:
    """Warn (:class:`~npt_dask.errors.KernelScaleWarning`) when the one kernel-scale rule
    (:func:`~npt_dask.kernels.scale.scale_problem`) finds a problem on the samples
    (:func:`~npt_dask.runtime.inputs.sample_rows`) of ``rows`` and ``train`` (numpy or
    dask; only read for a named kernel): ``fitting`` for the fit's own rows (``train``
    is ``rows``), else for rows projected onto a model fitted on ``train``. Each message
    names the fix in NPT's words (coordinates and residuals)."""
    if not isinstance(spec, NamedKernel):
        return  # a given matrix or function: its scale is the caller's
    head = sample_rows(rows)
    base = head if fitting else sample_rows(train)
    if head is None or base is None:
        return
    problem = scale_problem(head, base, spec)
    if problem is None:
        return
    if not fitting:
        what = (
            "similarity below 1e-6 of its maximum"
            if problem == "identity"
            else "the same similarity (within 1e-6)"
        )
        warn(
            f"The kernel sees these rows as unlike every training row ({kernel_label(spec)}: every "
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
            f"The kernel matrix is nearly the identity on these data ({kernel_label(spec)}: "
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
