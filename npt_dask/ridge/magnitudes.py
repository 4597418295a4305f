"""The range of targets and sample weights kernel ridge can solve with: one rule for
every route, checked before any pass.

Every route forms sums and squares of the targets and weights: ``K^T W y`` (the
Nyström right-hand side, in the kernel blocks' precision on the CG route), ``sqrt(w) y``
(the exact routes), ``||b||^2`` and the curvatures ``p^T H p`` (CG, where ``x`` is about
``y / alpha``), ``K^T W K`` (the direct Nyström route). A finite target of 1e308 makes
those infinite, and the answer is inf or NaN (or, on CG, a zero model): not an answer.
So a fit refuses, before any kernel pass, a target or weight beyond :data:`LIMIT` of
its precision, and a target times the largest weight beyond it, by an
:class:`~npt_dask.errors.InputError` that names the value and the fix.

Why a limit and not a rescaling: the coefficients are linear in the targets, so the
targets alone could be scaled by a power of two and the coefficients scaled back; the
weights could not (scaling them moves alpha with them, and the search of the CV
estimators with it), and coefficients or predictions that are themselves beyond
float64's range cannot be scaled back. A target near float64's largest value is more
often a marker of missing data than a measurement. One rule for targets and weights:
refuse, and say how to scale (by a power of two: exact).

:data:`LIMIT` leaves the products room: below it a solve is exact under scaling (the
targets times ``2**k`` give the coefficients times ``2**k``, bit for bit, on every
route: the tests check ``2**200`` in float64, ``2**60`` in float32).

* float64 kernel blocks: ``2**256`` (1.2e77). Squares of ``y / alpha`` summed over
  ``2**40`` rows stay finite down to alpha ``2**-200``.
* float32 kernel blocks: ``2**64`` (1.8e19). The targets times the weights are cast to
  float32 (whose largest value is ``2**128``) and summed over a chunk's rows (at most
  8,192) in float32.

Layer rule: numpy and dask reductions only (k + 1 numbers crossing).
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np

from npt_dask.arrays.host import to_host
from npt_dask.errors import InputError
from npt_dask.runtime.scheduler import compute

__all__ = ["LIMIT", "check_magnitudes", "magnitudes"]

LIMIT = {"float64": 2.0**256, "float32": 2.0**64}
"""The largest target, sample weight, and target times the largest weight a fit takes,
by the kernel blocks' precision (see the module doc)."""


def magnitudes(targets: Any, weights: Any) -> tuple[np.ndarray, float]:
    """The largest ``|y|`` of each target column and the largest weight (1 without
    weights): one compute for lazy ones (k + 1 numbers)."""
    parts: list[Any] = [abs(targets).max(axis=0)]
    if weights is not None:
        parts.append(weights.max())
    if any(isinstance(p, da.Array) for p in parts):
        parts = list(compute(*parts))
    parts = list(to_host(tuple(parts)))  # k + 1 numbers of a device's arrays: one crossing
    largest = np.asarray(parts[0], dtype=np.float64).reshape(-1)
    return largest, float(parts[1]) if weights is not None else 1.0


def _limit_words(precision: str) -> str:
    limit = LIMIT[precision]
    return f"2**{int(np.log2(limit))} (about {limit:.2g}) for {precision} kernel blocks"


def check_magnitudes(targets: Any, weights: Any, precision: str) -> None:
    """Refuse targets and weights beyond :data:`LIMIT` of ``precision`` (see the module
    doc), naming the value and the fix, before any pass."""
    limit = LIMIT[str(precision)]
    largest, weight = magnitudes(targets, weights)
    where = str(precision)
    f32 = " (or precision='float64', whose limit is 2**256)" if where == "float32" else ""
    if weight > limit:
        raise InputError(
            f"sample_weight holds a weight of {weight:.3g}, beyond {_limit_words(where)}: "
            "the weighted sums kernel ridge forms would overflow, and its answer would be "
            "inf or NaN. Divide sample_weight and alpha by the same power of two (the "
            f"coefficients are the same){f32}."
        )
    column = int(np.argmax(largest)) if largest.size else 0
    top = float(largest[column]) if largest.size else 0.0
    if top * max(weight, 1.0) > limit:
        scaled = f", times the largest sample weight {weight:.3g}," if weight > 1.0 else ""
        raise InputError(
            f"y holds a target of magnitude {top:.3g} (target column {column}){scaled} "
            f"beyond {_limit_words(where)}: the sums and squares kernel ridge forms would "
            "overflow, and its answer would be inf or NaN. If such values mark missing "
            "data, leave those rows out; otherwise divide y by a power of two, 2**e "
            f"(exact), and multiply the predictions by it{f32}."
        )
