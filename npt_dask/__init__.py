"""npt-dask: the Nonlinear Projection Trick, exact and out of core, on Dask.

>>> import numpy as np
>>> import npt_dask as npt
>>> X = np.random.default_rng(0).normal(size=(300, 4))
>>> model = npt.fit(X, kernel="rbf", gamma=0.5, n_components=3)
>>> model.transform(X[:2]).shape
(2, 3)
"""

from __future__ import annotations

from npt_dask import _aliases
from npt_dask._version import __version__
from npt_dask.errors import (
    CheckpointError,
    ClusterError,
    ConvergenceWarning,
    DegenerateKernelError,
    DeviceError,
    InputError,
    InputTypeError,
    KernelParameterError,
    KernelScaleWarning,
    KernelValueError,
    NegativeDefiniteKernelError,
    NegativeEigenvalueError,
    NegativeEigenvalueWarning,
    NotFittedError,
    NPTError,
    ProjectionError,
    RankWarning,
    RefitWarning,
    ResidualWarning,
    RidgeWarning,
    ScratchError,
    StoreError,
)
from npt_dask.kernels import KERNELS, KernelSpec, make_kernel
from npt_dask.npt import accessor as _accessor  # noqa: F401  (registers .npt on xarray)
from npt_dask.npt.estimator import NonlinearProjection
from npt_dask.npt.fitting import fit
from npt_dask.npt.model import NPTModel, SolverDiagnostics, load
from npt_dask.npt.projection_store import project
from npt_dask.ridge import inverse_map as _inverse_map  # noqa: F401  (registers the pre-image map)
from npt_dask.ridge.classifier import KernelRidgeClassifier
from npt_dask.ridge.cv import KernelRidgeClassifierCV, KernelRidgeCV
from npt_dask.ridge.load import load_ridge
from npt_dask.ridge.regressor import KernelRidge
from npt_dask.runtime.cluster import TLSConfig, connect
from npt_dask.storage.store import ModelManifest

_aliases.install()

__all__ = [
    "KERNELS",
    "CheckpointError",
    "ClusterError",
    "ConvergenceWarning",
    "DegenerateKernelError",
    "DeviceError",
    "InputError",
    "InputTypeError",
    "KernelParameterError",
    "KernelRidge",
    "KernelRidgeCV",
    "KernelRidgeClassifier",
    "KernelRidgeClassifierCV",
    "KernelScaleWarning",
    "KernelSpec",
    "KernelValueError",
    "ModelManifest",
    "NPTError",
    "NPTModel",
    "NegativeDefiniteKernelError",
    "NegativeEigenvalueError",
    "NegativeEigenvalueWarning",
    "NonlinearProjection",
    "NotFittedError",
    "ProjectionError",
    "RankWarning",
    "RefitWarning",
    "ResidualWarning",
    "RidgeWarning",
    "ScratchError",
    "SolverDiagnostics",
    "StoreError",
    "TLSConfig",
    "__version__",
    "connect",
    "fit",
    "load",
    "load_ridge",
    "make_kernel",
    "project",
]
