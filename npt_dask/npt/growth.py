"""Models that grow: ``partial_fit``, exact at full rank, driven by the certificate.

A full-rank model on m basis rows ``L`` (a landmark model, or an exact fit
with ``n_components=None``) spans ``phi(L)``. A batch of new rows grows it:

1. one pass over the batch gives each row's coordinates ``w = R^{-1} kappa(L, x)``
   in the orthonormal frame of the lower Cholesky factor ``R`` of the uncentred
   ``kappa(L, L) = R R^T``, and the part of ``phi(x)`` outside the span,
   ``e^2 = kappa(x, x) - ||w||^2`` (002's exact map, grown by Gram--Schmidt);
2. rows whose share outside the span, ``e^2 / kappa(x, x)``, exceeds
   ``residual_tol`` are candidates; LAPACK's pivoted Cholesky (``dpstrf``) of
   their Schur complement ``kappa(C, C) - W_C W_C^T``, scaled to unit
   diagonal, adds them greedily, largest share first, re-measuring the others
   after each pick -- near-duplicates within the batch are not all added --
   until no share is above the tolerance or ``max_landmarks`` is reached;
3. ``R`` is extended by a block: ``[[R, 0], [W_A, S]]`` (``S`` the pivoted
   factor of the added rows). The batch costs ``O(b m d + b m^2 + b c (d + m))``
   for ``c <= b`` candidates: no ``m^3`` step.

The certificate is the model's own Lemma 5 residual of every row passed to
``partial_fit``, right after its batch. With centring it is the distance of
``phi(x)`` from the affine hull of ``phi(L)``: in the frame of ``R`` that is
``e^2 + ((w - w_bar) . u)^2`` with ``w_bar`` the basis rows' mean and ``u``
the unit vector along ``R^{-1} 1`` (the one direction of the span that the
centred basis rows do not reach). The hull only grows, so a row's recorded
residual bounds its residual under any later model.

The rotation to the eigenbasis of the centred kernel of the basis rows (an
``m x m`` eigenproblem, what a fresh dense fit on those rows solves) is done
once, when eigen-ordered output is first needed (``transform``,
``eigenvalues``, ``save``...): the dense eigenproblem of the basis rows'
centred kernel matrix, as a fresh ``npt.fit(basis, n_components=None)``
solves it -- so the grown model *is* the fresh full-rank fit on the union of
its basis rows (float64), with the growth record in ``diagnostics.landmarks``.

Truncated models (``n_components`` below the rank of the basis) are refused
with the fix: the discarded spectrum is not stored, so no growth of them
could be exact (refit with ``n_components=None``, or fit afresh with
``start=model``).

Layer rule: numpy maths on the driver (kernel blocks of the batch against the
basis, triangular solves, one LAPACK call per batch); the only graph is the
rotation's kernel matrix. Rows that live on a device (the batch, a device-fitted
parent's training rows) are gathered to the host once each
(:meth:`~npt_dask.engine.rows.Rows.take`); the grown model's rows are host numpy.
Below :mod:`npt_dask.npt.model` (whose ``partial_fit`` calls :func:`grow`): a model is
read as its record (:class:`~npt_dask.npt.fitted.FittedModel`: the batch's rows by the
projector's rule, :func:`npt_dask.npt.projector.rows_rule`), and grown models are built
from the parent with ``dataclasses.replace``; nothing calls back into the model. Saving
is the store's (:func:`npt_dask.storage.store.save`).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg

from npt_dask.arrays.host import to_host
from npt_dask.engine.centres import certificate, extended_factor, pivoted_cholesky
from npt_dask.engine.operator import KernelOperator
from npt_dask.errors import InputError
from npt_dask.kernels import KernelSpec
from npt_dask.npt.eigen import dense_eigh, select_eigenpairs
from npt_dask.npt.fitted import FittedModel
from npt_dask.npt.planning import max_rank
from npt_dask.npt.projector import rows_rule
from npt_dask.params.constraints import INT, NONE, REAL, Interval, Param, check_table
from npt_dask.params.parsing import number_or
from npt_dask.runtime.inputs import InputInfo
from npt_dask.runtime.scheduler import compute
from npt_dask.storage import store

__all__ = [
    "DIRECTION_FLOOR",
    "GROW_PARAMS",
    "RESIDUAL_TOL",
    "GrowingModel",
    "check_cap",
    "check_growable",
    "grow",
    "is_full_rank",
    "start_growth",
]

GROW_PARAMS: tuple[Param, ...] = (
    Param(
        "residual_tol",
        (Interval(REAL, 0, None, "left"), NONE),
        None,
        "add a row when more than this share of k(x, x) is outside the model's span "
        "(None: 0.01; 0: every new direction)",
        parse=number_or(float),
    ),
    Param(
        "max_landmarks",
        (Interval(INT, 2, None), NONE),
        None,
        "most training rows the model may reach",
        parse=number_or(int),
    ),
)
"""``partial_fit`` and ``npt grow``: growth's parameters (``max_landmarks`` below the
model's rows is refused once the model is known)."""

RESIDUAL_TOL = 1e-2
"""Default ``residual_tol``: a new row joins the basis when more than 1% of its
feature-space energy ``kappa(x, x)`` lies outside the span of the basis rows."""

DIRECTION_FLOOR = 1e-10
"""Shares outside the span at or below this are rounding, not a new direction: the
floor under ``residual_tol=0`` (the pivot would make the factor unstable)."""


def _rows(x: Any) -> np.ndarray:
    """Rows in host memory as float64 (growth works on the driver): a lazy array computed,
    a sparse one made dense, a device's copied to the host once."""
    block = compute(x)[0] if hasattr(x, "dask") else x
    block = block.toarray() if hasattr(block, "toarray") else block
    return np.asarray(to_host(block), dtype=np.float64)


def check_growable(model: FittedModel) -> None:
    """Refuse models that cannot grow exactly, naming the fix."""
    if model.kernel.precomputed:
        raise InputError(
            "partial_fit needs the training rows, and a model fitted with "
            "kernel='precomputed' stores none (only their kernel matrix). Refit with the "
            "kernel as a function (a named or callable kernel) on the rows themselves."
        )
    if model.x_train.shape[1] == 0:
        raise InputError(
            "This model's training rows are not stored, and partial_fit needs them. Refit "
            "on the rows (npt.fit(X, ..., n_components=None)) and save that model."
        )
    if not is_full_rank(model):
        full = max_rank(model.n_samples, model.center)
        raise InputError(
            f"partial_fit grows full-rank models only: this one keeps r={model.n_components} "
            f"of the {full} components its {model.n_samples} training rows span, and the "
            "discarded spectrum is not stored, so no growth could be exact. Refit with "
            "n_components=None (e.g. npt.fit(X, landmarks=m, n_components=None)) and grow "
            "that model, or fit the union afresh with start=model (a warm start)."
        )


def is_full_rank(model: FittedModel) -> bool:
    """Whether ``model`` keeps every component its training rows span (``n_components=None``
    and no eigenvalue below ``rtol``): what exact growth needs."""
    return model.n_components >= max_rank(model.n_samples, model.center)


def _factor(basis: np.ndarray, kernel: KernelSpec) -> np.ndarray:
    gram = np.asarray(kernel(basis, basis), dtype=np.float64)
    try:
        return np.linalg.cholesky((gram + gram.T) / 2)
    except np.linalg.LinAlgError:
        raise InputError(
            "The model's training rows are linearly dependent in feature space (their "
            "kernel matrix is singular), so their span has no Cholesky frame to grow. "
            "Refit on distinct rows (landmark_method='rpcholesky' picks independent ones)."
        ) from None


def _frame(factor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``w_bar`` (the basis rows' mean coordinates) and the unit vector ``u`` along
    ``R^{-1} 1``, the one direction of the span orthogonal to the centred basis rows."""
    m = factor.shape[0]
    mean = factor.sum(axis=0) / m
    u = scipy.linalg.solve_triangular(factor, np.ones(m), lower=True)
    return mean, u / np.linalg.norm(u)


def _lemma5(
    w: np.ndarray, outside: np.ndarray, diag: np.ndarray, factor: np.ndarray, center: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The model's Lemma 5 residual and self-similarity ``k(x, x)`` of rows with frame
    coordinates ``w`` and squared part outside the span ``outside``."""
    if not center:
        return np.sqrt(outside), diag
    mean, u = _frame(factor)
    shifted = w - mean
    along = shifted @ u
    res2 = outside + along * along
    return np.sqrt(res2), np.einsum("ij,ij->i", shifted, shifted) + outside


def _summary(res: np.ndarray, energy: np.ndarray) -> dict[str, float]:
    full = certificate(res, energy)
    keys = ("mean", "max", "relative_mean", "relative_max")
    return {k: full[k] for k in keys}


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class GrowingModel:
    """A full-rank model that grows with :meth:`partial_fit` (see the module docstring).

    It behaves as the :class:`~npt_dask.npt.model.NPTModel` it stands for
    (``transform``, ``residual``, ``eigenvalues``, ``save``...): those rotate
    to the eigenbasis once, on first use (:attr:`model`). ``partial_fit``
    returns a new grown model and leaves this one as it was.

    Attributes
    ----------
    basis : ndarray (m, d)
        The basis rows: the parent's training rows, then the added rows in pick order.
    factor : ndarray (m, m)
        Lower Cholesky factor of the uncentred ``kappa(basis, basis)``.
    batches : tuple of dict
        One record per batch: rows seen and added, the model size after it,
        and the Lemma 5 residual summary of its rows before and after.
    """

    kernel: KernelSpec
    basis: np.ndarray
    factor: np.ndarray
    center: bool
    parent: FittedModel
    batches: tuple[dict[str, Any], ...] = ()
    seen_residuals: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    seen_energy: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    rotation: FittedModel | None = None  # the rotated model of this basis, once computed

    @property
    def n_basis(self) -> int:
        """Number of basis rows m."""
        return int(self.basis.shape[0])

    @property
    def rows_added(self) -> int:
        """Basis rows added since the parent model."""
        return self.n_basis - self.parent.n_samples

    def partial_fit(
        self,
        X_new: Any,
        *,
        residual_tol: float | None = None,
        max_landmarks: int | None = None,
    ) -> GrowingModel:
        """The model grown by the rows of ``X_new`` whose share outside its span exceeds
        ``residual_tol`` (see :func:`grow`)."""
        return grow(self, X_new, residual_tol=residual_tol, max_landmarks=max_landmarks)

    def growth_record(self) -> dict[str, Any]:
        """What ``diagnostics.landmarks`` of the grown model holds (JSON-serialisable)."""
        earlier = dict(self.parent.diagnostics.landmarks).get("lineage", [])
        return {
            "method": "grown",
            "m": self.n_basis,
            "lineage": [
                *earlier,
                {
                    "parent": self.parent.identity,
                    "parent_m": self.parent.n_samples,
                    "rows_added": self.rows_added,
                    "rows_seen": int(self.seen_residuals.size),
                },
            ],
            "batches": [dict(b) for b in self.batches],
            "certificate": certificate(self.seen_residuals, self.seen_energy)
            if self.seen_residuals.size
            else dict(self.parent.diagnostics.landmarks).get("certificate", {}),
        }

    @functools.cached_property
    def model(self) -> FittedModel:
        """The rotated model: the full-rank fit on the basis rows (what a fresh
        ``npt.fit(basis, n_components=None)`` solves: the dense eigenproblem of their
        centred kernel matrix), with the growth record (batches, certificate,
        lineage) in ``diagnostics.landmarks``."""
        parent = self.parent
        if self.rows_added == 0:
            base = parent
        else:
            base = self.rotation or _rotated(parent, self.basis, self.kernel, self.center)
        diagnostics = dataclasses.replace(base.diagnostics, landmarks=self.growth_record())
        # a new model: its identity is its own, not the parent store's
        return dataclasses.replace(base, diagnostics=diagnostics, store_path=None)

    def save(self, path: Any, *, overwrite: bool = False) -> Any:
        """Rotate (once) and write the model, its growth record in the manifest; a model
        already at ``path`` is replaced only with ``overwrite=True`` (``npt grow
        --overwrite``), as :meth:`NPTModel.save <npt_dask.npt.model.NPTModel.save>`."""
        return store.save(self.model, path, overwrite=overwrite, command="npt grow")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in {"model", "parent", "basis", "factor"}:
            raise AttributeError(name)
        return getattr(self.model, name)

    def __repr__(self) -> str:
        return (
            f"GrowingModel(m={self.n_basis}, added={self.rows_added}, "
            f"batches={len(self.batches)}, kernel={self.kernel.name})"
        )


def _rotated(
    parent: FittedModel, basis: np.ndarray, kernel: KernelSpec, center: bool
) -> FittedModel:
    """The full-rank model on ``basis``: one ``m x m`` eigenproblem (a model of the
    parent's kind, built from the parent: float64 kernel blocks, the training rows kept
    in the parent's precision -- a float32 model stays float32, its rows exactly so,
    as every batch was read in that precision)."""
    start = time.perf_counter()
    x = da.from_array(basis, chunks=(parent.chunk_size, -1))
    op = KernelOperator(x, kernel, center=center, kept=())
    gram = op.explicit()
    means = op.row_means if center else np.zeros(len(basis))
    result = dense_eigh(gram, None)
    values, vectors, residuals = select_eigenpairs(result, None)
    if center:  # eigenvectors of lambda > 0 are orthogonal to 1; remove rounding
        vectors -= vectors.mean(axis=0)
    diagnostics = dataclasses.replace(
        parent.diagnostics,
        solver=result.solver,
        passes=result.passes,
        residuals=residuals,
        converged=result.converged,
        min_eigenvalue=result.min_eigenvalue,
        block_size=result.block_size,
        seconds=time.perf_counter() - start,
        plan={},
    )
    return dataclasses.replace(
        parent,
        x_train=x.astype(parent.precision),
        eigenvalues=values,
        eigenvectors=np.ascontiguousarray(vectors),
        row_means=np.ascontiguousarray(means),
        grand_mean=float(means.mean()) if center else 0.0,
        diagnostics=diagnostics,
        train_info=InputInfo("numpy", False),
        store_path=None,
        moments=None,
    )


def start_growth(model: FittedModel) -> GrowingModel:
    """A :class:`GrowingModel` at ``model`` (checked growable; one ``kappa(L, L)`` and its
    Cholesky factor, once)."""
    if isinstance(model, GrowingModel):
        return model
    check_growable(model)
    basis = _rows(model.x_train)
    return GrowingModel(model.kernel, basis, _factor(basis, model.kernel), model.center, model)


def _batch_rows(model: GrowingModel, X_new: Any) -> np.ndarray:
    """The batch as numpy rows: features matched by name, count and NaN checked (as
    ``transform`` checks them), in the model's precision; the kernel-scale rule applied."""
    rows, _ = rows_rule(model.parent).of(X_new, name="X_new")
    x = _rows(rows)
    model.parent.warn_scale(x)  # rows on another scale would all be added, or none
    return x


def check_cap(max_landmarks: int | None, m: int) -> None:
    """A cap below the model's size could add nothing (growth never removes rows)."""
    if max_landmarks is not None and int(max_landmarks) < m:
        raise InputError(
            f"max_landmarks={int(max_landmarks)} is below the model's {m} basis rows: growth "
            f"never removes rows, so no row could be added. Pass max_landmarks >= {m} (the "
            "most basis rows the grown model may have), or None for no cap."
        )


def grow(
    model: FittedModel | GrowingModel,
    X_new: Any,
    *,
    residual_tol: float | None = None,
    max_landmarks: int | None = None,
) -> GrowingModel:
    """Grow a full-rank model by a batch of rows (see the module docstring).

    Parameters
    ----------
    model : NPTModel or GrowingModel
        A full-rank model holding its training rows.
    X_new : array-like, dask array or DataArray of shape (b, d)
    residual_tol : float, optional
        Default :data:`RESIDUAL_TOL`.
        A row joins the basis when the share of ``kappa(x, x)`` outside the span
        of the basis rows exceeds this (0: every new direction, down to
        :data:`DIRECTION_FLOOR`), re-measured after each row picked.
    max_landmarks : int, optional
        Most basis rows the model may reach; rows beyond it are not added.

    Returns
    -------
    GrowingModel
    """
    check_table(GROW_PARAMS, {"residual_tol": residual_tol, "max_landmarks": max_landmarks})
    grown = start_growth(model)  # type: ignore[arg-type]
    residual_tol = RESIDUAL_TOL if residual_tol is None else residual_tol
    check_cap(max_landmarks, grown.n_basis)
    x = _batch_rows(grown, X_new)
    kernel, factor, basis = grown.kernel, grown.factor, grown.basis
    diag = _diagonal(x, kernel)
    w = scipy.linalg.solve_triangular(factor, kernel(basis, x), lower=True).T  # b x m
    outside = np.maximum(diag - np.einsum("ij,ij->i", w, w), 0.0)
    before = _lemma5(w, outside, diag, factor, grown.center)
    share = np.divide(outside, diag, out=np.zeros_like(outside), where=diag > 0)
    tol = max(float(residual_tol), DIRECTION_FLOOR)
    candidates = np.flatnonzero(share > tol)
    room = len(candidates) if max_landmarks is None else int(max_landmarks) - grown.n_basis
    added = np.zeros(0, dtype=np.int64)
    new_factor, new_basis, after = factor, basis, before
    if len(candidates) and room > 0:
        xc = x[candidates]
        cross = np.asarray(kernel(x, xc), dtype=np.float64) - w @ w[candidates].T  # b x c
        chosen, lower = pivoted_cholesky(cross[candidates], tol, diag=diag[candidates], room=room)
        added = candidates[chosen]
        new_factor = extended_factor(factor, w[added], lower)
        new_basis = np.concatenate([basis, x[added]])
        extra = scipy.linalg.solve_triangular(lower, cross[:, chosen].T, lower=True).T
        w_new = np.hstack([w, extra])
        out_new = np.maximum(outside - np.einsum("ij,ij->i", extra, extra), 0.0)
        out_new[added] = 0.0
        after = _lemma5(w_new, out_new, diag, new_factor, grown.center)
    record = {
        "rows_seen": len(x),
        "rows_added": len(added),
        "m": int(new_basis.shape[0]),
        "residual_tol": float(residual_tol),
        "max_landmarks": None if max_landmarks is None else int(max_landmarks),
        "before": _summary(*before),
        "after": _summary(*after),
    }
    # no new rows: the rotation already done (if any) still holds
    same = None if len(added) else (grown.__dict__.get("model") or grown.rotation)
    return dataclasses.replace(
        grown,
        rotation=same,
        basis=new_basis,
        factor=new_factor,
        batches=(*grown.batches, record),
        seen_residuals=np.concatenate([grown.seen_residuals, after[0]]),
        seen_energy=np.concatenate([grown.seen_energy, after[1]]),
    )


def _diagonal(x: np.ndarray, kernel: KernelSpec) -> np.ndarray:
    """``kappa(x_i, x_i)``, from the diagonals of small square blocks."""
    out = np.empty(len(x))
    step = 256
    for i in range(0, len(x), step):
        block = x[i : i + step]
        out[i : i + step] = np.diagonal(kernel(block, block))
    return out
