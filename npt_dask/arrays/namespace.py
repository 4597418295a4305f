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

from npt_dask.errors import InputError

__all__ = [
    "device_of",
    "is_numpy",
    "namespace_and_device",
    "namespace_of",
    "on_device",
    "on_device_of",
    "to_numpy",
]


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


def _concrete(a: Any) -> Any:
    """The array that decides ``a``'s namespace: a dask array's ``_meta``, a DataArray's
    data (recursively); None for None and scipy.sparse blocks (numpy's)."""
    if a is None or scipy.sparse.issparse(a):
        return None
    if hasattr(a, "dims") and hasattr(a, "data"):  # an xarray DataArray
        return _concrete(a.data)
    if hasattr(a, "dask") and hasattr(a, "_meta"):  # a dask array: its blocks' type
        return _concrete(a._meta)
    return a


def _library(a: Any) -> str:
    return type(a).__module__.split(".")[0]


def namespace_and_device(*arrays: Any) -> tuple[Any, Any]:
    """The namespace and device of a pass: the one decision both pass engines take (as
    scikit-learn's ``get_namespace_and_device``). ``arrays`` may be numpy, CuPy (any array
    API library), dask arrays (their ``_meta`` decides) or DataArrays; None and
    scipy.sparse count as numpy's (device None).

    Arrays of two libraries, or of one library on two devices, are an
    :class:`~npt_dask.errors.InputError` naming the fix (one device for every input).

    >>> xp, device = namespace_and_device(np.ones(2), None)
    >>> is_numpy(xp), device
    (True, None)
    """
    dense = [c for c in (_concrete(a) for a in arrays) if c is not None]
    if not dense:
        return numpy_namespace, None
    try:
        xp = array_api_compat.array_namespace(*dense)
    except TypeError:
        kinds = sorted({_library(a) for a in dense})
        raise InputError(
            f"The inputs of this call live in different array libraries ({', '.join(kinds)}): "
            "rows, centres and targets must share one device. Move them to one: e.g. "
            "x.map_blocks(cupy.asarray) and cupy.asarray(y) for the GPU, or "
            "x.map_blocks(cupy.asnumpy) and cupy.asnumpy(y) for the CPU."
        ) from None
    if is_numpy(xp):
        return xp, None
    devices: list[Any] = []
    for a in dense:
        d = array_api_compat.device(a)
        if all(d != seen for seen in devices):
            devices.append(d)
    if len(devices) > 1:
        raise InputError(
            f"The inputs of this call live on different devices ({devices}): rows, centres "
            "and targets must share one. Copy them to one device first (e.g. under "
            "`with cupy.cuda.Device(0):` call cupy.asarray on each)."
        )
    return xp, devices[0]


def on_device(a: Any, xp: Any, device: Any) -> Any:
    """``a`` (a host array, centres or weights) in namespace ``xp`` on ``device``; on
    numpy as it is (no copy)."""
    if a is None or is_numpy(xp):
        return a
    return xp.asarray(a, device=device)


def on_device_of(a: Any, like: Any) -> Any:
    """``a`` in the namespace and on the device of ``like`` (:func:`namespace_and_device`:
    the one decision); on numpy as it is."""
    return on_device(a, *namespace_and_device(like))


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
