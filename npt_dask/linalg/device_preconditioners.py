"""The ridge preconditioners (:mod:`npt_dask.linalg.preconditioners`, built on the host)
with their solves on a device: :func:`preconditioner_like` copies a
:class:`~npt_dask.linalg.preconditioners.FalkonCholesky`'s or a
:class:`~npt_dask.linalg.preconditioners.LowRank`'s factors once to the namespace and
device of given vectors and solves there (:func:`npt_dask.linalg.cholesky.solve_triangular`);
on numpy the preconditioner itself.

Layer rule: arrays of one namespace in, the same namespace out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of, on_device
from npt_dask.linalg.cholesky import solve_triangular
from npt_dask.linalg.preconditioners import FalkonCholesky, LowRank

__all__ = [
    "preconditioner_like",
]


def preconditioner_like(pc: Callable[[Any], Any], like: Any) -> Callable[[Any], Any]:
    """``pc`` with its solves in the namespace and on the device of ``like`` (the CG
    vectors, or the operator's products): a :class:`FalkonCholesky` or :class:`LowRank`
    gets its factors copied there once -- none for a :class:`LowRank` built there already
    (:func:`~npt_dask.linalg.preconditioners.low_rank_from_coordinates` of a device's
    coordinates) -- (float64 vectors in, float64 out, the solves in the factors'
    precision, as on the host); on numpy, or for any other callable, ``pc`` itself.
    Falkon's two triangles are C-order there: each solve reads its transpose, Fortran
    order, no copy a call (:func:`~npt_dask.linalg.cholesky.solve_triangular`)."""
    xp, device = namespace_of(like), device_of(like)
    if is_numpy(xp):
        return pc
    if isinstance(pc, FalkonCholesky):
        return _falkon_on(pc, xp, device)
    if isinstance(pc, LowRank):
        return _low_rank_on(pc, xp, device)
    return pc


def _falkon_on(pc: FalkonCholesky, xp: Any, device: Any) -> Callable[[Any], Any]:
    """``P^-1 r = T^-1 A^-1 A^-T T^-T r`` with ``T^T`` (lower) and ``A`` (upper) on the
    device, two m x m arrays (the host keeps them in one)."""
    f = pc.factors
    t_lower = np.tril(f, -1)
    t_lower[np.diag_indices_from(t_lower)] = pc.diag_t
    a_upper = np.triu(f, 1)
    a_upper[np.diag_indices_from(a_upper)] = pc.diag_a
    t_dev, a_dev = on_device(t_lower, xp, device), on_device(a_upper, xp, device)
    dtype = t_dev.dtype

    def apply(r: Any) -> Any:
        x = xp.astype(r, dtype)
        x = solve_triangular(t_dev, x, lower=True)  # T^-T: T^T is the lower factor
        x = solve_triangular(a_dev, x, lower=False, trans=True)
        x = solve_triangular(a_dev, x, lower=False)
        x = solve_triangular(t_dev, x, lower=True, trans=True)
        return xp.astype(x, xp.float64)

    return apply


def _low_rank_on(pc: LowRank, xp: Any, device: Any) -> Callable[[Any], Any]:
    """``P^-1 r = r + U ((lam_r + alpha) / (lam + alpha) - 1) U^T r`` with ``U`` on the
    device."""
    u = on_device(pc.u, xp, device)
    if pc.u.shape[1] == 0:
        return lambda r: xp.asarray(xp.astype(r, xp.float64), copy=True)
    scale = (pc.values[-1] + pc.alpha) / (pc.values + pc.alpha) - 1.0
    scale_dev = on_device(np.asarray(scale, dtype=np.float64), xp, device)

    def apply(r: Any) -> Any:
        r = xp.astype(r, xp.float64)
        y = xp.astype(xp.linalg.matrix_transpose(u) @ xp.astype(r, u.dtype), xp.float64)
        correction = u @ xp.astype(scale_dev[:, None] * y, u.dtype)
        return r + xp.astype(correction, xp.float64)

    return apply
