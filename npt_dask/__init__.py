"""npt-dask: the Nonlinear Projection Trick, exact and out of core, on Dask.

>>> import numpy as np
>>> import npt_dask as npt
>>> X = np.random.default_rng(0).normal(size=(300, 4))
>>> model = npt.fit(X, kernel="rbf", gamma=0.5, n_components=3)
>>> model.transform(X[:2]).shape
(2, 3)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# scikit-learn's first import is not thread-safe (its modules import each other: a second
# thread gets a half-initialised sklearn.utils._array_api); the package's own first import,
# which every thread waits for, takes it once here, so npt-dask's lazy names and modules
# can then be first imported from any number of threads at once.
import sklearn.base as _sklearn_base  # noqa: F401
import sklearn.utils.validation as _sklearn_validation  # noqa: F401

from npt_dask._lazy import lazy_exports
from npt_dask.npt import accessor as _accessor  # noqa: F401  (registers .npt on xarray)

_EXPORTS: dict[str, str] = {
    "__version__": "npt_dask._version",
    "CheckpointError": "npt_dask.errors",
    "ClusterError": "npt_dask.errors",
    "ConvergenceWarning": "npt_dask.errors",
    "DegenerateKernelError": "npt_dask.errors",
    "DeviceError": "npt_dask.errors",
    "InputError": "npt_dask.errors",
    "InputScaleWarning": "npt_dask.errors",
    "InputTypeError": "npt_dask.errors",
    "KernelParameterError": "npt_dask.errors",
    "KernelScaleWarning": "npt_dask.errors",
    "KernelValueError": "npt_dask.errors",
    "NegativeDefiniteKernelError": "npt_dask.errors",
    "NegativeEigenvalueError": "npt_dask.errors",
    "NegativeEigenvalueWarning": "npt_dask.errors",
    "NotFittedError": "npt_dask.errors",
    "NPTError": "npt_dask.errors",
    "OutputPathError": "npt_dask.errors",
    "ProjectionError": "npt_dask.errors",
    "RankWarning": "npt_dask.errors",
    "RefitWarning": "npt_dask.errors",
    "ResidualWarning": "npt_dask.errors",
    "RidgeWarning": "npt_dask.errors",
    "ScratchError": "npt_dask.errors",
    "StoreError": "npt_dask.errors",
    "KERNELS": "npt_dask.kernels.specs",
    "KernelSpec": "npt_dask.kernels.specs",
    "make_kernel": "npt_dask.kernels.specs",
    "NonlinearProjection": "npt_dask.npt.estimator",
    "fit": "npt_dask.npt.fitting",
    "NPTModel": "npt_dask.npt.model",
    "load": "npt_dask.npt.model",
    "SolverDiagnostics": "npt_dask.npt.fitted",
    "project": "npt_dask.npt.projection_store",
    "KernelRidge": "npt_dask.ridge.regressor",
    "KernelRidgeClassifier": "npt_dask.ridge.classifier",
    "KernelRidgeCV": "npt_dask.ridge.cv",
    "KernelRidgeClassifierCV": "npt_dask.ridge.cv",
    "load_ridge": "npt_dask.ridge.load",
    "TLSConfig": "npt_dask.runtime.cluster",
    "connect": "npt_dask.runtime.cluster",
    "ModelManifest": "npt_dask.storage.store",
}
"""Each public name and the module that defines it: imported on first use
(:mod:`npt_dask._lazy`), so ``import npt_dask`` imports no module of its own but the
``.npt`` accessor."""

__all__ = [
    "KERNELS",
    "CheckpointError",
    "ClusterError",
    "ConvergenceWarning",
    "DegenerateKernelError",
    "DeviceError",
    "InputError",
    "InputScaleWarning",
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
    "OutputPathError",
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


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:
    from npt_dask._version import __version__
    from npt_dask.errors import (
        CheckpointError,
        ClusterError,
        ConvergenceWarning,
        DegenerateKernelError,
        DeviceError,
        InputError,
        InputScaleWarning,
        InputTypeError,
        KernelParameterError,
        KernelScaleWarning,
        KernelValueError,
        NegativeDefiniteKernelError,
        NegativeEigenvalueError,
        NegativeEigenvalueWarning,
        NotFittedError,
        NPTError,
        OutputPathError,
        ProjectionError,
        RankWarning,
        RefitWarning,
        ResidualWarning,
        RidgeWarning,
        ScratchError,
        StoreError,
    )
    from npt_dask.kernels.specs import KERNELS, KernelSpec, make_kernel
    from npt_dask.npt.estimator import NonlinearProjection
    from npt_dask.npt.fitted import SolverDiagnostics
    from npt_dask.npt.fitting import fit
    from npt_dask.npt.model import NPTModel, load
    from npt_dask.npt.projection_store import project
    from npt_dask.ridge.classifier import KernelRidgeClassifier
    from npt_dask.ridge.cv import KernelRidgeClassifierCV, KernelRidgeCV
    from npt_dask.ridge.load import load_ridge
    from npt_dask.ridge.regressor import KernelRidge
    from npt_dask.runtime.cluster import TLSConfig, connect
    from npt_dask.storage.store import ModelManifest
