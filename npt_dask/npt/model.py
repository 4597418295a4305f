"""The fitted NPT model: eigenpairs, centring statistics and the projections.

A model holds what a projection needs -- the training rows (lazily, as a
row-chunked dask array), the kernel, ``U``, ``Lambda``, the row means ``m``
and grand mean ``g`` -- and maps any rows ``z`` to their coordinates

    y = Lambda^{-1/2} U^T k(z) = A^T kappa(z) - A^T m,   A = U Lambda^{-1/2}

and to the Lemma 5 residual ``sqrt(max(0, k(z, z) - ||y||^2))``, the distance
of ``phi(z)`` from the fitted subspace. Projection streams over training
blocks: each task evaluates one kernel block ``kappa(Z_i, X_j)`` and
multiplies it straight into ``[A_j, 1/n]``, so memory per task is one block
plus its inputs, whatever the number of rows.

A model fitted with ``kernel="precomputed"`` holds no training rows: its
``x_train`` is an ``(n, 0)`` placeholder that only carries the row chunks,
the diagonal of the training kernel matrix is kept in ``train_diagonal``
(for ``total_variance``), and ``transform`` takes the test x train kernel
rows, read chunk by chunk. Its residual needs ``k(z, z)``, which those rows
lack: ``residual(K_test, diag=...)`` takes it; without it the residual is
NaN, with a :class:`~npt_dask.errors.ResidualWarning`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np

from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of
from npt_dask.engine.kernel_matrix import kernel_diagonal
from npt_dask.engine.projection import finish_parts
from npt_dask.engine.rows import Rows, put_like
from npt_dask.errors import InputError, ResidualWarning, StoreIntegrityError, warn
from npt_dask.kernels import KernelSpec
from npt_dask.npt.fitted import FittedModel, SolverDiagnostics
from npt_dask.npt.growth import GrowingModel, grow
from npt_dask.npt.projector import Projector, build_projector, client_key, rows_rule
from npt_dask.runtime.inputs import InputInfo, is_data_array, pad_columns, wrap_rows
from npt_dask.runtime.scheduler import compute
from npt_dask.storage import store

__all__ = ["NPTModel", "SolverDiagnostics", "load"]


def _energy(both: Any, r: int) -> Any:
    """``[||y||^2, residual^2]`` of a chunk of ``[y | residual]``, in its namespace."""
    y, res = both[:, :r], both[:, r]
    xp = namespace_of(both)
    if is_numpy(xp):
        return np.stack([np.einsum("ij,ij->i", y, y), res * res], axis=1)
    return xp.stack([xp.sum(y * y, axis=1), res * res], axis=1)


def _on_rows(rows: Rows, a: np.ndarray) -> Any:
    """A small host array the graph combines with the rows' results: on numpy as it is;
    else moved to their device once and wrapped as a one-chunk dask array (named at
    random: tokenizing a device array would copy it back)."""
    if rows.numpy:
        return a
    return da.from_array(rows.put(a), chunks=a.shape, asarray=False, name=False)


def _moved_lazy(rows: Rows, d: da.Array) -> da.Array:
    """A lazy vector in the rows' namespace: as it is when it is there, else each block
    moved by its own task (one copy a block)."""
    d = da.asarray(d)
    there = Rows.of(d)
    if rows.numpy or (there.xp, there.device) == (rows.xp, rows.device):
        return d
    meta, name = rows.empty((0,), d.dtype), f"put-{d.name}-{rows.device}"
    return d.map_blocks(put_like, rows.meta, dtype=d.dtype, meta=meta, name=name)  # type: ignore[arg-type]


def _info(rows: Rows) -> InputInfo:
    """How the rows of a projection came (to return its result the same way)."""
    assert rows.info is not None, "a projection's rows carry their input info"
    return rows.info


def _no_rows(x: da.Array) -> da.Array:
    """The ``(n, 0)`` placeholder of a precomputed model's training rows (chunks kept)."""
    return da.zeros((x.shape[0], 0), chunks=(x.chunks[0], (0,)), dtype=x.dtype)


@dataclass(frozen=True, eq=False, repr=False)
class NPTModel(FittedModel):
    """A fitted Nonlinear Projection Trick model (see :func:`npt_dask.fit`).

    Attributes
    ----------
    kernel : KernelSpec
        The resolved kernel.
    x_train : dask.array.Array
        Training rows ``(n, d)`` in the kernel precision, chunked by rows.
    eigenvalues : ndarray of shape (r,)
        Eigenvalues of the (centred) kernel matrix, largest first.
    eigenvectors : ndarray of shape (n, r)
        Orthonormal eigenvectors ``U``; the largest-magnitude entry of each
        column is positive.
    row_means : ndarray of shape (n,)
        Row means ``m`` of the uncentred kernel matrix (zeros when
        ``center=False``).
    grand_mean : float
        ``g``, the mean of all kernel entries (0 when ``center=False``).
    center : bool
        Whether the kernel was centred in feature space.
    diagnostics : SolverDiagnostics
        Solver, passes, residual norms, convergence.
    moments : LinearMoments or None
        With ``npt.fit(..., labels=y)`` or ``targets=t``: the ridge moments of
        the training rows' coordinates (for ``RidgeClassifier.fit_moments``);
        saved with the model and verified on load like every array.
    feature_names : tuple of str or None
        The names of the features fitted on: a DataFrame's columns (all
        strings, scikit-learn's ``feature_names_in_`` rule) or a DataArray's
        feature coordinate (as strings); None for unnamed input. Saved with
        the model. Rows given to ``transform``, ``residual``, ``partial_fit``,
        :func:`npt_dask.project` and ``npt grow`` with named features are
        reordered to these names, or refused when their names differ; unnamed
        rows are taken by position.
    """

    def __post_init__(self) -> None:
        if self.kernel.precomputed and self.x_train.shape[1] != 0:
            # fitted on the kernel matrix: keep its diagonal (read from the diagonal
            # blocks), not the matrix -- a precomputed model holds no training rows
            diag = compute(kernel_diagonal(self.x_train, self.kernel))[0]
            object.__setattr__(self, "train_diagonal", np.asarray(diag, dtype=np.float64))
            object.__setattr__(self, "x_train", _no_rows(self.x_train))

    def train_coordinates(self) -> Any:
        """NPT coordinates of the training rows: row i is ``sqrt(lambda) * U[i, :]``.

        Returns a numpy array, or a DataArray when the model was fitted on one.
        """
        y = self.eigenvectors * np.sqrt(self.eigenvalues)
        if self.train_info.kind != "xarray":
            return y
        info = InputInfo("xarray", False, self.train_info.sample_dim, self.train_info.sample_coords)
        return wrap_rows(da.from_array(y, chunks=(self.chunk_size, -1)), info, name="coordinates")

    def coordinates_of(self, alpha: Any) -> np.ndarray:
        """NPT coordinates ``beta = Y alpha`` of a dual direction ``w = Phi(X) alpha``.

        Lemma 6: any direction given by dual coefficients (a kernel SVM's
        ``alpha_i c_i``, a kernel Fisher direction, ...) has coordinates
        ``beta = Lambda^{1/2} U^T alpha`` in the fitted subspace, so dual
        solutions computed elsewhere can be used on NPT coordinates:
        ``w^T phi~(z) = beta^T y(z)``.

        Parameters
        ----------
        alpha : array-like of shape (n,) or (n, k)
            Dual coefficients, one per training row (centred feature space
            when the model is centred).

        Returns
        -------
        ndarray of shape (r,) or (r, k)
        """
        a = np.asarray(alpha, dtype=np.float64)
        if a.ndim not in (1, 2) or a.shape[0] != self.n_samples:
            raise InputError(
                f"alpha must have shape ({self.n_samples},) or ({self.n_samples}, k): one "
                f"coefficient per training row; got {a.shape}."
            )
        scale = np.sqrt(self.eigenvalues)
        beta = self.eigenvectors.T @ a
        return beta * (scale if a.ndim == 1 else scale[:, None])

    def project_onto(self, z: Any, beta: Any) -> Any:
        """Corollary 7: NPT coordinates of the projection of ``phi(z)`` onto ``w``.

        ``gamma = beta beta^T y(z) / (beta^T beta)`` for each row of z, where
        ``beta`` are the coordinates of the direction (see
        :meth:`coordinates_of`). The signed length along ``w / ||w||`` is
        ``y(z) @ beta / ||beta||``. Same container type as ``z``.

        Notes
        -----
        On a device: the projection's crossings (:meth:`transform`) and the unit
        direction moved there once (``r`` numbers); the result stays there.
        """
        b = np.asarray(beta, dtype=np.float64)
        if b.shape != (self.n_components,):
            raise InputError(f"beta must have shape ({self.n_components},); got {b.shape}.")
        rows = self._rows(z)
        unit = _on_rows(rows, b / np.linalg.norm(b))  # on a device: one copy of r numbers
        y = self._project(rows)[:, : self.n_components]
        gamma = (y @ unit)[:, None] * unit[None, :]
        return wrap_rows(gamma.astype(rows.data.dtype), _info(rows), name="projection")

    def rows_of(
        self, z: Any, *, name: str = "Z", chunk_size: int | None = None
    ) -> tuple[da.Array, InputInfo]:
        """``z`` as row chunks to project: named features put in the fitted order
        (:attr:`feature_names`, or refused when they differ), the feature count checked,
        NaN refused (:class:`npt_dask.npt.projector.ProjectionRows`; no projector is built)."""
        return rows_rule(self).of(z, chunk_size=chunk_size, name=name)

    def _rows(self, z: Any) -> Rows:
        """The rows to project as one :class:`~npt_dask.engine.rows.Rows` (their namespace
        and device decided here, once, and carried along the route), scale-checked when
        they are in memory (lazy rows are not read here: ``transform`` of dask input stays
        lazy; :func:`npt_dask.project` reads and checks them)."""
        rows = rows_rule(self).rows(z)
        if not _info(rows).lazy:
            self.warn_scale(rows.data)
        return rows

    def projector(self, *, fresh: bool = False) -> Projector:
        """The model's :class:`~npt_dask.npt.projector.Projector` under the current scheduler,
        built from its arrays once per client (:func:`npt_dask.npt.projector.build_projector`);
        ``fresh`` builds it again, shipping the training blocks again (after a worker took
        them along: see :func:`npt_dask.runtime.scheduler.retry_on_lost_data`)."""
        built: dict[str | None, Projector] = self.__dict__.setdefault("_projectors", {})
        key = client_key()
        if fresh or key not in built:
            built[key] = build_projector(self)
        return built[key]

    def _project(self, rows: Rows) -> da.Array:
        """Lazy ``[y | residual]`` of shape (m, r + 1), chunked like the rows, in their
        namespace (:meth:`npt_dask.npt.projector.Projector.rows`: its Notes state what
        crosses per call)."""
        return self.projector().rows(rows)

    def transform(self, z: Any, *, columns: int | None = None) -> Any:
        """NPT coordinates ``y = Lambda^{-1/2} U^T k(z)`` of the rows of ``z``.

        Parameters
        ----------
        z : array-like, dask array or DataArray of shape (m, d)
            Rows to project. numpy input is projected in row chunks of the
            model's ``chunk_size``; dask input keeps its row chunks.
        columns : int, optional
            Append zero columns up to this many (scikit-learn's ``KernelPCA`` gives
            ``n_components`` columns past the rank).

        Returns
        -------
        Same kind as ``z``: numpy ``(m, r)``, lazy dask ``(m, r)``, or a
        DataArray with dims ``(sample, component)``. The dtype is the model's
        ``precision`` (float32 for a model fitted on float32 data);
        accumulation is always float64. Rows on a device (a dask array, or a DataArray
        of one, whose chunks are CuPy's) give a lazy result on that device.

        Notes
        -----
        On a device, per call: the model's training panels and weights move there once
        and the ``2 r`` terms that finish a projection once (never per chunk); each chunk
        reads back one byte (its finiteness flag); the zero columns of ``columns`` are
        made there.
        """
        rows = self._rows(z)
        y = self._project(rows)[:, : self.n_components].astype(rows.data.dtype)
        return wrap_rows(pad_columns(y, columns or 0), _info(rows), name="coordinates")

    def residual(self, z: Any, diag: Any = None) -> Any:
        """Lemma 5: distance of ``phi(z)`` from the fitted subspace, shape (m,).

        ``||y||^2 + residual^2 = k(z, z)``, the centred self-similarity; 0 for
        training rows at full rank.

        With ``kernel="precomputed"``, ``z`` is the test x train kernel matrix,
        which lacks ``k(z, z)``: pass ``diag``, the rows' self-similarities
        (the diagonal of ``kernel(Z, Z)``, shape (m,)). Without it the
        residual is NaN, with a :class:`~npt_dask.errors.ResidualWarning`.

        Notes
        -----
        On a device, what :meth:`transform` moves; a ``diag`` given on the host moves
        there once (``m`` numbers).
        """
        rows = self._rows(z)
        x, info = rows.data, _info(rows)
        if not self.kernel.precomputed:
            if diag is not None:
                raise InputError(
                    "diag is for kernel='precomputed' only; this model evaluates k(z, z) "
                    f"from its {self.kernel.name} kernel. Call residual(z) without it."
                )
            res = self._project(rows)[:, self.n_components].astype(x.dtype)
        elif diag is None:
            warn(
                "residual() of a precomputed-kernel model needs k(z, z) of each row, which "
                "the test x train kernel matrix does not hold: the residuals are NaN. Pass "
                "the rows' self-similarities: residual(K_test, diag=<diagonal of "
                "kernel(Z, Z)>).",
                ResidualWarning,
            )
            res = self._project(rows)[:, self.n_components].astype(x.dtype)
        else:
            res = self._residual_from_diag(rows, diag).astype(x.dtype)
        return wrap_rows(res, info, name="residual")

    def _residual_from_diag(self, rows: Rows, diag: Any) -> da.Array:
        """Residuals of the test x train kernel rows given ``k(z, z)`` (precomputed), in
        the rows' namespace (a host ``diag`` moved to their device once)."""
        x = rows.data
        d = diag.data if is_data_array(diag) else diag
        d = d if isinstance(d, da.Array) else np.asarray(d, dtype=np.float64)
        if d.shape != (x.shape[0],):
            raise InputError(
                f"diag must hold k(z, z) of each of the {x.shape[0]} rows, shape "
                f"({x.shape[0]},); got shape {d.shape}."
            )
        if not isinstance(d, da.Array) and not np.isfinite(d).all():
            raise InputError("diag contains NaN or infinity; it must be k(z, z) of each row.")
        d = _on_rows(rows, d) if isinstance(d, np.ndarray) else _moved_lazy(rows, d)
        d = da.asarray(d).astype(np.float64).rechunk((x.chunks[0],))
        y = self._project(rows)[:, : self.n_components]
        means = x.astype(np.float64).mean(axis=1)  # p[:, r] = kappa(z) 1 / n
        parts = da.concatenate([y, means[:, None], d[:, None]], axis=1).rechunk({1: -1})
        return parts.map_blocks(
            _given_diag_residual,
            self.grand_mean,
            self.center,
            dtype=np.float64,
            drop_axis=1,
            chunks=(parts.chunks[0],),
            meta=rows.empty((0,), np.float64),
        )

    def energy_split(self, z: Any) -> da.Array:
        """Lazy ``(m, 2)``: ``||y||^2`` and ``residual^2`` of each row (their sum is k(z, z)).

        One pass over the training blocks; only two numbers per row come back,
        whatever r (the landmark certificate uses it on every training row).
        """
        rows = rows_rule(self).rows(z)
        r = self.n_components
        both = self._project(rows)
        chunks = (rows.data.chunks[0], (2,))
        return both.map_blocks(_energy, r, dtype=np.float64, chunks=chunks,  # type: ignore[arg-type]
                               meta=rows.empty((0, 2), np.float64))  # fmt: skip

    def transform_with_residual(self, z: Any) -> tuple[Any, Any]:
        """Both coordinates and residuals from one pass over the training rows."""
        rows = self._rows(z)
        info = _info(rows)
        both = self._project(rows).astype(rows.data.dtype)
        if not info.lazy:  # compute once, then wrap the two parts
            both = da.from_array(compute(both, release_scratch=True)[0], chunks=both.chunks)
        r = self.n_components
        return (
            wrap_rows(both[:, :r], info, name="coordinates"),
            wrap_rows(both[:, r], info, name="residual"),
        )

    def total_variance(self) -> float:
        """``trace(K)``: the total scatter of the training data in feature space.

        Centred: ``sum_i kappa(x_i, x_i) - n g`` (since ``sum_i m_i = n g``);
        uncentred: ``sum_i kappa(x_i, x_i)``. One pass over the training rows,
        ``O(n d)`` work, one row chunk per task.
        """
        if self.train_diagonal is not None:
            diag_sum = float(np.sum(self.train_diagonal))
        else:
            diag_sum = float(compute(kernel_diagonal(self.x_train, self.kernel).sum())[0])
        return diag_sum - self.n_samples * self.grand_mean if self.center else diag_sum

    def explained_variance(self) -> np.ndarray:
        """Variance along each component, ``lambda / (n - 1)`` (as scikit-learn's PCA)."""
        return self.eigenvalues / (self.n_samples - 1)

    def explained_variance_ratio(self) -> np.ndarray:
        """Share of the total feature-space variance per component, ``lambda / trace(K)``."""
        return self.eigenvalues / self.total_variance()

    def to_dataset(self) -> Any:
        """The model as an ``xarray.Dataset``: spectrum, eigenvectors, training coordinates.

        Dims ``sample`` and ``component``; attributes carry the kernel, the
        centring and the solver diagnostics (as JSON strings, so the Dataset
        writes to netCDF or zarr unchanged).
        """
        import json

        import xarray as xr

        info = self.train_info
        coords: dict[str, Any] = {"component": np.arange(self.n_components)}
        coords.update({str(k): (info.sample_dim, v) for k, v in info.sample_coords.items()})
        sample = info.sample_dim if info.kind == "xarray" else "sample"
        diagnostics = self.diagnostics.to_dict()
        return xr.Dataset(
            {
                "eigenvalues": (("component",), self.eigenvalues),
                "eigenvectors": ((sample, "component"), self.eigenvectors),
                "train_coordinates": (
                    (sample, "component"),
                    self.eigenvectors * np.sqrt(self.eigenvalues),
                ),
                "row_means": ((sample,), self.row_means),
            },
            coords=coords,
            attrs={
                "kernel": json.dumps(self.kernel.to_dict()),
                "center": int(self.center),
                "grand_mean": float(self.grand_mean),
                "n_samples": self.n_samples,
                "n_features": self.n_features,
                "diagnostics": json.dumps(diagnostics, default=float),
            },
        )

    def partial_fit(
        self, X_new: Any, *, residual_tol: float | None = None, max_landmarks: int | None = None
    ) -> GrowingModel:
        """The model grown by a batch of new rows: a :class:`~npt_dask.npt.growth.GrowingModel`.

        Rows of ``X_new`` with more than ``residual_tol`` of ``kappa(x, x)``
        outside the model's span (default :data:`npt_dask.npt.growth.RESIDUAL_TOL`;
        0: every new direction) join the training rows, greedily (pivoted
        Cholesky), up to ``max_landmarks`` rows; the batch costs no ``m^3``
        step. The grown model equals a fresh full-rank fit on its training rows;
        its ``diagnostics.landmarks`` records each batch, the certificate and
        the lineage. Full-rank models only (``n_components=None``); see
        :mod:`npt_dask.npt.growth`.
        """
        return grow(self, X_new, residual_tol=residual_tol, max_landmarks=max_landmarks)

    def save(self, path: Any, *, overwrite: bool = False) -> Any:
        """Write the model to a zarr v3 store at ``path`` (see :func:`npt_dask.storage.store.save`);
        a model already there is replaced only with ``overwrite=True``."""
        return store.save(self, path, overwrite=overwrite)

    def __repr__(self) -> str:
        from npt_dask.npt.display import model_text

        return model_text(self)

    def _repr_html_(self) -> str:
        from npt_dask.npt.display import model_html

        return model_html(self)


def load(path: str | os.PathLike, *, verify: bool = True) -> NPTModel:
    """Load a model saved by :meth:`NPTModel.save` (see :func:`npt_dask.storage.store.read`).

    ``verify`` re-computes the SHA-256 of every array against the manifest
    (reads the training rows once, chunk by chunk). CRC32C checks of each
    chunk happen on every read regardless.
    """
    stored = store.read(path, verify=verify)
    manifest, small = stored.manifest, stored.arrays
    where = f"{stored.path}: the manifest's diagnostics"
    fields = store.parse_fields(SolverDiagnostics, dict(manifest.diagnostics), where)
    fields.pop("residuals", None)  # stored as an array
    try:
        diagnostics = SolverDiagnostics(residuals=small["residuals"], **fields)
        kernel = KernelSpec.from_dict(manifest.kernel)
    except (TypeError, ValueError) as exc:  # a missing diagnostic, an invalid kernel spec
        raise StoreIntegrityError(
            f"{stored.path}: the model manifest is malformed ({exc}); the store is damaged. "
            "Save the model again."
        ) from exc
    model = NPTModel(
        kernel,
        stored.x_train,
        small["eigenvalues"],
        small["eigenvectors"],
        small["row_means"],
        float(manifest.grand_mean),
        bool(manifest.center),
        diagnostics,
        store_path=str(stored.path),
        train_diagonal=small.get("train_diagonal"),
        feature_names=manifest.names(),
        moments=stored.moments,
    )
    model.__dict__["identity"] = stored.identity  # pinned: the model as read, not as it is now
    return model


def _given_diag_residual(parts: Any, grand_mean: float, center: bool) -> Any:
    """Lemma 5's residual from ``[y | kappa(z) 1 / n | k(z, z)]`` (one decision:
    :func:`npt_dask.engine.projection.finish_parts`; ``y`` is already finished), in the
    namespace of ``parts``."""
    r = parts.shape[1] - 2
    xp = namespace_of(parts)
    none = np.zeros(r) if is_numpy(xp) else xp.zeros(r, dtype=xp.float64, device=device_of(parts))
    _, res, _ = finish_parts(parts[:, : r + 1], parts[:, r + 1], none, none, grand_mean, center)
    return res
