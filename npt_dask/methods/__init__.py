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

from npt_dask.methods.alignment import alignment_scores, kernel_target_alignment
from npt_dask.methods.kfd import FisherDiscriminant, class_scatter
from npt_dask.methods.kpca import explained_variance, explained_variance_ratio, total_variance
from npt_dask.methods.ksvm import ChunkedLinearSVM, kernel_svm
from npt_dask.methods.linear_ridge import Ridge, RidgeClassifier, ridge_moments
from npt_dask.methods.pcal1 import PCAL1, l1_dispersion

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
