"""The fitted model as a record: its arrays, how they were obtained, and what follows.

:class:`FittedModel` holds what a fit produced -- the training rows (lazily, a
row-chunked dask array), the kernel, ``U``, ``Lambda``, the row means ``m`` and
grand mean ``g`` -- and what follows from those alone (sizes, ``A = U
Lambda^{-1/2}``, the terms that finish a projection, the kernel-scale sample,
the identity). It projects nothing: the modules below the model read it as data
(:mod:`npt_dask.npt.projector` builds a projector from its arrays, :mod:`npt_dask.storage.store`
writes them, :mod:`npt_dask.npt.growth` grows them) and never call back into
:class:`~npt_dask.npt.model.NPTModel`, which adds the projections on top.

Layer rule: no graph and no I/O here but one small read (the scale sample) and
the identity, which the store computes (:func:`npt_dask.storage.store.model_identity`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np

from npt_dask.engine.moments import LinearMoments
from npt_dask.engine.projection import ProjectionTerms, projection_terms
from npt_dask.kernels import KernelSpec, NamedKernel
from npt_dask.npt.scale_warnings import warn_kernel_scale
from npt_dask.runtime.inputs import InputInfo, sample_rows
from npt_dask.storage import store

__all__ = ["FittedModel", "SolverDiagnostics"]


@dataclass(frozen=True)
class SolverDiagnostics:
    """How the eigenpairs were obtained."""

    solver: str
    passes: int
    tol: float
    residuals: np.ndarray
    converged: bool
    min_eigenvalue: float
    cache: str
    block_size: int
    seconds: float
    cached_fraction: float = 0.0
    plan: Mapping[str, Any] = field(default_factory=dict)  # the FitPlan, as its dict
    landmarks: Mapping[str, Any] = field(default_factory=dict)  # method, m, certificate

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["residuals"] = [float(v) for v in self.residuals]
        out["plan"] = dict(self.plan)
        out["landmarks"] = dict(self.landmarks)
        return out


@dataclass(frozen=True, eq=False, repr=False)
class FittedModel:
    """The record of a fitted model (its fields are described on
    :class:`~npt_dask.npt.model.NPTModel`, which is one)."""

    kernel: KernelSpec
    x_train: da.Array
    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    row_means: np.ndarray
    grand_mean: float
    center: bool
    diagnostics: SolverDiagnostics
    train_info: InputInfo = field(default_factory=lambda: InputInfo("numpy", False))
    store_path: str | None = None  # set by npt.load: where the arrays can be streamed from
    train_diagonal: np.ndarray | None = None  # precomputed kernels: diag of the training matrix
    moments: LinearMoments | None = None  # fit(labels=/targets=): ridge moments (saved)
    feature_names: tuple[str, ...] | None = None  # named input's features, in fitted order

    @property
    def n_samples(self) -> int:
        """Number of training rows n."""
        return int(self.x_train.shape[0])

    @property
    def n_features(self) -> int:
        """Number of input features d (n for a precomputed kernel: one per training row)."""
        if self.kernel.precomputed:
            return self.n_samples
        return int(self.x_train.shape[1])

    @property
    def n_components(self) -> int:
        """Dimension r of the NPT coordinates."""
        return int(self.eigenvalues.shape[0])

    @property
    def precision(self) -> np.dtype:
        """dtype of the kernel blocks (float32 or float64)."""
        return self.x_train.dtype

    @property
    def chunk_size(self) -> int:
        """Rows per training block."""
        return int(max(self.x_train.chunks[0]))

    @property
    def train_chunks(self) -> tuple[int, ...]:
        """Rows of each training block."""
        return tuple(int(c) for c in self.x_train.chunks[0])

    @property
    def projection_matrix(self) -> np.ndarray:
        """``A = U Lambda^{-1/2}``, shape (n, r): coordinates are ``A^T (kappa(z) - m)``."""
        return self.eigenvectors / np.sqrt(self.eigenvalues)

    def projection_terms(self) -> ProjectionTerms:
        """The constants that finish a projection
        (:func:`npt_dask.engine.projection.finish_parts`)."""
        return projection_terms(
            self.projection_matrix, self.row_means, self.grand_mean, self.center
        )

    @functools.cached_property
    def scale_sample(self) -> np.ndarray | None:
        """The training rows the kernel-scale rule compares rows with (the first
        :data:`npt_dask.kernels.scale.SCALE_SAMPLE`, float64; read once); None when the rule
        does not apply (a precomputed or callable kernel)."""
        if not isinstance(self.kernel, NamedKernel):
            return None
        return sample_rows(self.x_train)

    def warn_scale(self, rows: Any) -> None:
        """Warn when ``rows`` are on another scale than the training rows (the one rule,
        :func:`~npt_dask.npt.scale_warnings.warn_kernel_scale`, as the fit and ``npt project`` apply
        it)."""
        warn_kernel_scale(rows, self.scale_sample, self.kernel, fitting=False)

    @functools.cached_property
    def identity(self) -> str:
        """The model's one identity: the checksum of its manifest (see
        :func:`npt_dask.storage.store.manifest_checksum`); read from the store for a loaded
        model, else computed once (every array hashed once)."""
        if self.store_path is not None:
            return store.manifest_checksum(store.read_manifest(self.store_path))
        return store.model_identity(self)
