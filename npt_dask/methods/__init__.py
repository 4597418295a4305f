"""Methods on NPT coordinates: any linear method there is its kernel version.

* :mod:`~npt_dask.methods.kpca` -- kernel PCA bookkeeping (explained variance).
* :mod:`~npt_dask.methods.ksvm` -- kernel SVM = linear SVM on the coordinates.
* :mod:`~npt_dask.methods.kfd` -- kernel Fisher discriminant = LDA on them.
* :mod:`~npt_dask.methods.pcal1` -- kernel PCA-L1, beyond the kernel trick.
* :mod:`~npt_dask.methods.linear_ridge` -- kernel ridge regression/classification = ridge on them.
* :mod:`~npt_dask.methods.alignment` -- kernel-target alignment, to choose kernels.

Every method takes numpy, dask or xarray coordinates and streams over their
row chunks, so coordinates projected to zarr never have to fit in memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from npt_dask._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "alignment_scores": "npt_dask.methods.alignment",
    "kernel_target_alignment": "npt_dask.methods.alignment",
    "FisherDiscriminant": "npt_dask.methods.kfd",
    "class_scatter": "npt_dask.methods.kfd",
    "explained_variance": "npt_dask.methods.kpca",
    "explained_variance_ratio": "npt_dask.methods.kpca",
    "total_variance": "npt_dask.methods.kpca",
    "ChunkedLinearSVM": "npt_dask.methods.ksvm",
    "kernel_svm": "npt_dask.methods.ksvm",
    "Ridge": "npt_dask.methods.linear_ridge",
    "RidgeClassifier": "npt_dask.methods.linear_ridge",
    "ridge_moments": "npt_dask.methods.linear_ridge",
    "PCAL1": "npt_dask.methods.pcal1",
    "l1_dispersion": "npt_dask.methods.pcal1",
}

__all__ = [
    "PCAL1",
    "ChunkedLinearSVM",
    "FisherDiscriminant",
    "Ridge",
    "RidgeClassifier",
    "alignment_scores",
    "class_scatter",
    "explained_variance",
    "explained_variance_ratio",
    "kernel_svm",
    "kernel_target_alignment",
    "l1_dispersion",
    "ridge_moments",
    "total_variance",
]

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:
    from npt_dask.methods.alignment import alignment_scores, kernel_target_alignment
    from npt_dask.methods.kfd import FisherDiscriminant, class_scatter
    from npt_dask.methods.kpca import explained_variance, explained_variance_ratio, total_variance
    from npt_dask.methods.ksvm import ChunkedLinearSVM, kernel_svm
    from npt_dask.methods.linear_ridge import Ridge, RidgeClassifier, ridge_moments
    from npt_dask.methods.pcal1 import PCAL1, l1_dispersion
