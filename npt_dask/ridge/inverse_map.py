"""The learned pre-image map of ``NonlinearProjection(fit_inverse_transform=True)``.

scikit-learn's ``KernelPCA(fit_inverse_transform=True)`` (Bakir, Weston and
Schoelkopf 2004): kernel ridge regression of the training rows ``X`` on their
coordinates ``Y``, with the model's kernel on the coordinates and ridge ``alpha``.
The dual coefficients solve ``(kappa(Y, Y) + alpha I) C = X`` and the map is
``kappa(Y_new, Y) C``: exact :class:`~npt_dask.ridge.regressor.KernelRidge`
(``landmarks=None``) in float64 within the fit's ``memory_budget``, whose plan
takes the direct solve (scikit-learn's numbers to rounding) when the ``n x n``
matrix fits it and preconditioned conjugate gradients to ``tol`` otherwise. For the
linear kernel the normal equations are ``r x r``: ``W = (Y^T Y + alpha I)^{-1} Y^T X``
from one pass over the training rows, and the map is ``Y_new W`` (the dual form's
numbers).

Kernel ridge sits above :mod:`npt_dask.npt`, so the estimator reaches this module
through :func:`npt_dask.npt.preimage.fit_inverse_map`, which delegates to the
fitting function registered here at import.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg

from npt_dask.arrays.host import to_host
from npt_dask.engine.rows import Rows
from npt_dask.errors import InputError, RidgeWarning
from npt_dask.kernels import KernelSpec
from npt_dask.npt.preimage import register_inverse_map
from npt_dask.ridge.regressor import KernelRidge
from npt_dask.runtime.inputs import as_row_chunked, wrap_rows
from npt_dask.runtime.scheduler import compute

__all__ = ["InverseMap", "fit_inverse_map"]

_IN_THE_SPEC: dict[str, Any] = dict.fromkeys(("gamma", "degree", "coef0"))
"""``KernelRidge``'s kernel hyperparameters, all None: the model's resolved kernel spec
carries its own (a spec with any of them beside it is refused)."""


@dataclass(frozen=True, eq=False)
class InverseMap:
    """Kernel ridge regression from coordinates to input rows.

    ``ridge``: the fitted exact :class:`~npt_dask.ridge.regressor.KernelRidge` (the dual
    form); or ``weights`` ``(r, d)``, the primal form of the linear kernel.
    """

    kernel: KernelSpec
    alpha: float
    n_components: int
    row_chunks: tuple[int, ...]
    ridge: KernelRidge | None = None
    weights: np.ndarray | None = None

    @property
    def dual_coef(self) -> np.ndarray | None:
        """The dual coefficients ``C`` ``(n, d)``; None in the primal form."""
        return None if self.ridge is None else self.ridge.dual_coef_

    @property
    def solver(self) -> str:
        """``"primal"`` (linear kernel), else the kernel ridge route: ``"direct"`` or ``"cg"``."""
        return "primal" if self.ridge is None else str(self.ridge.solver_)

    @property
    def passes(self) -> int:
        """Passes over the training rows or their kernel blocks the solve made."""
        return 1 if self.ridge is None else int(self.ridge.n_iter_)

    @property
    def plan(self) -> dict[str, Any] | None:
        """The kernel ridge fit plan (route, memory, flops and why); None in the primal form."""
        return None if self.ridge is None else self.ridge.plan_

    def predict(self, y: Any) -> Any:
        """Input-space rows for coordinates ``y`` ``(m, r)``.

        numpy in -> numpy out; dask or DataArray in -> lazy out, row chunks kept (on
        the coordinates' device: the primal form's ``r x d`` weights moved there once;
        the dual form is :meth:`~npt_dask.ridge.regressor.KernelRidge.predict`'s).
        """
        z, info = as_row_chunked(
            y, name="Y", chunk_size=max(self.row_chunks), keep_lazy_chunks=True
        )
        z = z.astype(np.float64)
        if z.shape[1] != self.n_components:
            raise InputError(
                f"inverse_transform takes coordinates with {self.n_components} columns "
                f"(n_components); got {z.shape[1]}."
            )
        if self.weights is not None:  # on the coordinates' device: one copy of r d numbers
            out = z @ _like_rows(Rows.of(z), self.weights)
        else:
            assert self.ridge is not None
            out = self.ridge.predict(z)
        return wrap_rows(out, info, column_dim="feature", name="preimage")


def _primal_weights(y: np.ndarray, x: da.Array, alpha: float) -> np.ndarray:
    """``(Y^T Y + alpha I)^{-1} Y^T X``: the moments in one pass over the row chunks of
    ``x`` (rows on a device: ``Y`` moved there once, the ``r x (r + d)`` moments crossing
    back once), then an ``r x r`` solve on the host."""
    rows = Rows.of(x)
    yd = _like_rows(rows, y, chunks=(x.chunks[0], -1))
    gram, xty = (np.asarray(to_host(m)) for m in compute(yd.T @ yd, yd.T @ x.astype(np.float64)))
    gram[np.diag_indices_from(gram)] += alpha
    return np.asarray(scipy.linalg.solve(gram, xty, assume_a="pos"))


def _like_rows(rows: Rows, a: np.ndarray, chunks: Any = None) -> da.Array:
    """A host array as a dask array beside ``rows``: numpy's as before, else moved to
    their device once (named at random: tokenizing a device array would copy it back)."""
    if rows.numpy:
        return da.from_array(a) if chunks is None else da.from_array(a, chunks=chunks)
    return da.from_array(rows.put(a), chunks=chunks or a.shape, asarray=False, name=False)


def fit_inverse_map(
    y_train: np.ndarray,
    x_train: da.Array,
    kernel: KernelSpec,
    alpha: float,
    *,
    tol: float = 1e-10,
    max_passes: int = 500,
    memory_budget: int | str | None = None,
) -> InverseMap:
    """Fit scikit-learn's pre-image map: kernel ridge from ``y_train`` to ``x_train``.

    Parameters
    ----------
    y_train : ndarray (n, r)
        Training coordinates (``model.train_coordinates()``).
    x_train : dask array (n, d)
        Training rows, row-chunked (``model.x_train``).
    kernel : KernelSpec
        The kernel on the coordinates: the model's (scikit-learn uses the
        same kernel and ``gamma_`` on ``X_transformed``).
    alpha : float
        Ridge (scikit-learn's ``alpha``).
    tol, max_passes :
        The conjugate-gradient route's stopping rule (``KernelRidge``'s ``tol`` and
        ``max_iter``): true relative residual per column, most passes over the kernel
        blocks.
    memory_budget : int or str, optional
        Bytes the solve may hold (the fit's ``memory_budget``): exact ``KernelRidge``
        plans its route and the kernel blocks it keeps within it, recorded in
        :attr:`InverseMap.plan`.
    """
    if kernel.precomputed:
        raise InputError(
            "Cannot fit_inverse_transform with a precomputed kernel: the pre-image map needs "
            "the kernel on the coordinates, which a given matrix does not define."
        )
    if hasattr(getattr(x_train, "_meta", None), "toarray"):
        raise InputError(
            "Inverse transform is not implemented for sparse input (as scikit-learn's "
            "KernelPCA); fit on dense rows (X.toarray()) to use it."
        )
    y = np.ascontiguousarray(y_train, dtype=np.float64)
    chunks = tuple(int(c) for c in x_train.chunks[0])
    if kernel.name == "linear":
        weights, ridge = _primal_weights(y, x_train, float(alpha)), None
    else:
        ridge = _exact_ridge(y, x_train, kernel, float(alpha), tol=tol, max_passes=max_passes,
                             memory_budget=memory_budget)  # fmt: skip
        weights = None
    return InverseMap(kernel, float(alpha), int(y.shape[1]), chunks, ridge, weights)


def _exact_ridge(
    y: np.ndarray, x: da.Array, kernel: KernelSpec, alpha: float, *, tol: float,
    max_passes: int, memory_budget: int | str | None,
) -> KernelRidge:  # fmt: skip
    """Exact float64 ``KernelRidge`` of the rows ``x`` on the coordinates ``y``, its kernel
    blocks in the rows' chunks."""
    ridge = KernelRidge(
        alpha, kernel=kernel, **_IN_THE_SPEC, tol=tol, max_iter=max_passes,
        precision="float64", memory_budget=memory_budget, chunk_size=max(x.chunks[0]),
    )  # fmt: skip
    with warnings.catch_warnings():
        # the route taken is InverseMap.solver; conjugate gradients stop at a true
        # relative residual of tol (1e-10 by default), near the direct solve's numbers
        warnings.simplefilter("ignore", RidgeWarning)
        return ridge.fit(y, x)


register_inverse_map(fit_inverse_map)
