"""A resumed solver state (CG's, or any iterative method's) checked against the problem
itself: the operator applied once to the saved iterate.

A checkpoint pins its problem by a fingerprint of the data and parameters and by the
kernel's values on a small probe of the data (:mod:`npt_dask.ridge.checkpoint`). Both
are samples: a kernel function changed away from the probe's rows leaves them as they
were, and on the exact route, whose right-hand side is the targets themselves, so does
the right-hand side. The state is not a sample: CG's residual ``r`` is ``b - H x`` of
the problem it was saved under, to within CG's own rounding. So a resume applies the
operator ``H`` of the problem at hand to the saved iterate ``x`` (one pass over the
kernel blocks, for every target column at once: :func:`check_resumed`) and compares the
true residual ``b - H x`` with the saved one, column by column:

* a column iterating, converged or verified: ``||(b - H x) - r||``;
* a column stopped at its best iterate (breakdown or divergence: ``x`` was put back to
  that iterate, ``r`` was not): ``| ||b - H x|| - best ||b|| |`` (``best``: the relative
  residual the steps had at that iterate).

**The bound** is CG's residual gap (Greenbaum 1997, "Estimating the attainable accuracy
of recursive computed residual methods"): each product ``fl(H p)`` is off by at most
about ``u |H| |p|`` (``u``: the unit rounding of the kernel blocks, :data:`UNIT`), and
after ``k`` steps the updated residual is off from the true one by at most about ``u (k +
1) (||b|| + || |H| |x| ||)`` (the check's own product included). The same pass applies
``H`` to ``|x|`` beside ``x`` (``H |x| = |H| |x|`` for a kernel of nonnegative values:
rbf, laplacian, ...; a kernel with negative values gives a smaller norm, covered by
:data:`SAFETY`), so the bound costs nothing more. Measured on genuine resumes (rbf,
linear, polynomial and cosine kernels; exact and Nyström; float32 and float64; alpha
1e-2 and 1e-5 or 1e-6; 3 to 300 iterations; a noisy target 100 times the others): the
gap is at most 7.3 times ``u (k + 1) (||b|| + ||H |x|||)``, so :data:`SAFETY` leaves a
margin of more than ten. A changed kernel shows as ``(H' - H) x``: rbf plus a term one
row in a hundred sees, 1 then 50 times it, on 1,200 rows after 4 iterations (exact
route) is 0.47 of ``||b||`` away where the bound allows 2.3e-11 (float64; float32:
0.43 where it allows 0.012).

Below the bound a change is within what CG's own rounding does; the resumed solve then
goes on as CG from a restart, and each column that converges is still checked against
the true residual of the problem at hand (:func:`npt_dask.linalg.cg.verify`). In
float32 at small alpha the bound is large (the rounding is: genuine gaps of ``||b||``
and more were measured), so there a residual check cannot tell a small change from
rounding.

Layer rule: the state's arrays and an operator product in, k host numbers out.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import is_numpy, namespace_of
from npt_dask.errors import CheckpointError
from npt_dask.ridge.state import SolverState, gather

__all__ = ["SAFETY", "UNIT", "check_resumed", "gap_bound", "residual_gaps"]

UNIT = {"float64": 2.0**-53, "float32": 2.0**-24}
"""Unit rounding of the kernel blocks, by the plan's precision."""

SAFETY = 100.0
"""The factor over CG's residual gap ``u (k + 1) (||b|| + ||H |x|||)`` that a genuine
resume stays within (measured: at most 7.3; see the module doc)."""


def _norms(xp: Any, a: Any) -> np.ndarray:
    """Column norms on the host (one crossing of k numbers)."""
    return np.sqrt(np.asarray(to_host(xp.sum(a * a, axis=0)), dtype=np.float64))


def residual_gaps(state: SolverState, hx: Any) -> np.ndarray:
    """Per column, how far the true residual ``b - H x`` (``hx``: ``H x`` of every column)
    is from the saved state's (see the module doc), on the host."""
    xp = namespace_of(state.b)
    true = state.b - hx
    gaps = _norms(xp, true - state.r)
    stopped = state.breakdown
    if stopped.any():  # x is its best iterate, r is not that iterate's residual
        best = state.best[stopped] * state.b_norm[stopped]
        gaps[stopped] = np.abs(_norms(xp, true)[stopped] - best)
    return gaps


def gap_bound(state: SolverState, habs: Any, precision: str) -> np.ndarray:
    """The largest gap rounding explains after ``state.iteration`` steps, per column
    (``habs``: ``H |x|``)."""
    scale = state.b_norm + _norms(namespace_of(habs), habs)
    return SAFETY * UNIT[precision] * (state.iteration + 1) * scale


def check_resumed(
    state: SolverState, product: Callable[[Any, np.ndarray], Any], *, precision: str,
    path: Path,
) -> np.ndarray:  # fmt: skip
    """Refuse a saved state whose residual is not ``b - H x`` of this problem (see the
    module doc): ``H x`` and ``H |x|`` of every column in one call of ``product`` (one
    pass). Returns the columns' gaps relative to ``||b||``; the state is not changed."""
    k = len(state.converged)
    cols = np.arange(k)
    x = gather(state, [("x", cols)])
    xp = namespace_of(x)
    both = np.hstack([x, np.abs(x)]) if is_numpy(xp) else xp.concat([x, xp.abs(x)], axis=1)
    out = product(both, np.concatenate([cols, cols]))
    gaps = residual_gaps(state, out[:, :k])
    limit = gap_bound(state, out[:, k:], precision)
    norm = np.where(state.b_norm > 0, state.b_norm, 1.0)
    bad = np.flatnonzero(gaps > limit)
    if bad.size:
        worst = bad[np.argmax(gaps[bad] / norm[bad])]
        raise CheckpointError(
            f"{path} holds a solver state that is not of this problem: the operator of "
            "the data, kernel and alpha given now, applied to the saved iterate, leaves a "
            f"residual {gaps[worst] / norm[worst]:.3g} of the right-hand side's norm away "
            f"from the saved one (target {worst}), where rounding explains at most "
            f"{limit[worst] / norm[worst]:.2g}. The kernel (a function changed where the "
            "checkpoint's probe of the data does not see it, or a value it closes over), "
            "the data or alpha differ from the fit that wrote it, or its state was "
            "altered since. Pass the original ones to resume; otherwise delete the "
            "checkpoint to start afresh, or pass another checkpoint path."
        )
    return gaps / norm
