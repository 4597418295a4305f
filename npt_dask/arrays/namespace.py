"""Which array library a block lives in: the array API namespace of its input.

``array_api_compat`` (the shim scikit-learn and SciPy use) gives the namespace of an
array: numpy's (wrapped to the standard), CuPy's, torch's, ``array_api_strict``'s. Block
code written against that namespace runs on any of them; numpy keeps its fast paths
(``out=``, per-thread scratch buffers, threaded tiles), chosen by :func:`is_numpy`, so
one test decides, and every other namespace takes the generic path.

A scipy.sparse block belongs to numpy (its products are numpy's).

Numeric helpers only: no dask, xarray or zarr.
"""

from __future__ import annotations

from typing import Any

import array_api_compat
import array_api_compat.numpy as numpy_namespace
import numpy as np
import scipy.sparse

__all__ = ["device_of", "is_numpy", "namespace_of", "to_numpy"]


def namespace_of(*arrays: Any) -> Any:
    """The array API namespace of ``arrays`` (None and scipy.sparse blocks count as numpy's;
    arrays of two libraries are an error, as in ``array_api_compat``).

    >>> import numpy as np
    >>> is_numpy(namespace_of(np.ones(2), None))
    True
    """
    dense = [a for a in arrays if a is not None and not scipy.sparse.issparse(a)]
    return array_api_compat.array_namespace(*dense) if dense else numpy_namespace


def is_numpy(xp: Any) -> bool:
    """True for numpy's namespace (its fast paths apply)."""
    return bool(array_api_compat.is_numpy_namespace(xp))


def device_of(a: Any) -> Any:
    """The device an array lives on (None for a scipy.sparse block: numpy's memory)."""
    return None if scipy.sparse.issparse(a) else array_api_compat.device(a)


def to_numpy(a: Any) -> np.ndarray:
    """An array of any namespace as a numpy array in host memory (numpy's own as it is;
    anything else numpy can read, a number or a list, through ``np.asarray``).

    >>> to_numpy(np.arange(3)).tolist(), to_numpy(2.5)
    ([0, 1, 2], array(2.5))
    """
    if isinstance(a, np.ndarray):
        return a
    if not array_api_compat.is_array_api_obj(a) or isinstance(a, np.generic):
        return np.asarray(a)
    if array_api_compat.is_cupy_array(a):
        return np.asarray(a.get())
    if array_api_compat.is_torch_array(a):
        return np.asarray(a.detach().cpu().numpy())
    return np.from_dlpack(a)
