"""Where the rows' arithmetic runs: host memory (numpy) or a CUDA GPU (CuPy).

``device="gpu"`` moves each chunk of a dask array onto the current CUDA device with
``cupy.asarray`` (``map_blocks``, the array's ``meta`` a CuPy array, so dask and every
later step know the chunks are CuPy's); ``device="cpu"`` (or None) leaves the rows as
they are. Asking for the GPU where CuPy or a CUDA device is missing is refused at once,
naming the fix, before anything is read or written.

CuPy is optional (``pip install 'npt-dask[gpu]'``): this module imports it only when
the GPU is asked for, so everything else installs and runs without it.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import numpy as np

from npt_dask.errors import DeviceError, InputError
from npt_dask.params.constraints import NONE, Options, Param
from npt_dask.params.parsing import optional

__all__ = [
    "DEVICES",
    "DEVICE_PARAM",
    "GPU_INSTALL",
    "check_device",
    "cupy_or_refuse",
    "device_memory_budget",
    "to_device",
]

DEVICES = ("cpu", "gpu")
"""The devices a caller may name (None means ``"cpu"``: the rows stay where they are)."""

GPU_INSTALL = "pip install 'npt-dask[gpu]'"
"""The install command of the optional GPU dependencies (CuPy for CUDA 12, dask-cuda)."""

DEVICE_MEMORY_SHARE = 0.75
"""Share of the device's free memory the default device budget takes (the rest is left
for CuPy's memory pool, the CUDA libraries' workspaces and other processes)."""

_SPELLINGS = {"device='gpu'": "--device gpu", "device='cpu'": "--device cpu"}
"""How the command line spells the devices in these messages."""

DEFAULT_CHUNK_ROWS = 4096
"""Rows per chunk when in-memory rows are first made a dask array (as the fit's default)."""


def cupy_or_refuse() -> ModuleType:
    """The ``cupy`` module, after checking that it sees a CUDA device.

    Raises
    ------
    DeviceError
        CuPy is not installed, or it finds no usable CUDA device.
    """
    try:
        cupy = importlib.import_module("cupy")
    except ImportError:
        raise DeviceError(
            f"device='gpu' needs CuPy, which is not installed here: {GPU_INSTALL} (CuPy for "
            "CUDA 12 and dask-cuda), or use device='cpu'.",
            param="device",
            spellings=_SPELLINGS,
        ) from None
    if not _has_cuda_device(cupy):
        raise DeviceError(
            "device='gpu' found no CUDA device: CuPy is installed but cupy.is_available() is "
            "False (no NVIDIA GPU or driver, or CUDA_VISIBLE_DEVICES hides them). Run on a "
            "machine with a GPU, or use device='cpu'.",
            param="device",
            spellings=_SPELLINGS,
        )
    return cupy


def _has_cuda_device(cupy: ModuleType) -> bool:
    try:
        return bool(cupy.is_available())
    except Exception:  # a broken CUDA install raises from the driver query
        return False


def check_device(device: Any) -> str:
    """``device`` as ``"cpu"`` or ``"gpu"`` (None is ``"cpu"``); ``"gpu"`` only where CuPy
    and a CUDA device are at hand (:func:`cupy_or_refuse`), so a run that cannot use the
    GPU stops before it reads or writes anything.

    >>> check_device(None), check_device("cpu")
    ('cpu', 'cpu')
    >>> check_device("cuda")
    Traceback (most recent call last):
    ...
    npt_dask.errors.InputError: The 'device' parameter must be one of 'cpu', 'gpu' or None. ...
    """
    if device is None:
        return "cpu"
    if not isinstance(device, str) or device not in DEVICES:
        raise InputError(
            f"The 'device' parameter must be one of 'cpu', 'gpu' or None. Got {device!r} instead.",
            param="device",
        )
    if device == "gpu":
        cupy_or_refuse()
    return device


def to_device(x: Any, device: str | None, *, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Any:
    """The rows ``x`` with their chunks on ``device``.

    Parameters
    ----------
    x : dask array, numpy array, or xarray DataArray of either
        The rows. With ``device="gpu"`` a numpy array becomes a dask array of
        ``chunk_rows`` rows a chunk first; a DataArray keeps its dims and coords.
    device : {"cpu", "gpu"} or None
        ``"gpu"``: each chunk is moved to the current CUDA device by ``cupy.asarray``
        (lazily, one task a chunk; its ``meta`` a CuPy array). ``"cpu"`` or None:
        ``x`` itself, unchanged.
    chunk_rows : int
        Rows a chunk, for rows not yet in a dask array.

    Returns
    -------
    The same kind of object as ``x`` (a numpy array becomes a dask array).

    Raises
    ------
    DeviceError
        ``device="gpu"`` without CuPy or without a CUDA device (naming the fix).
    InputError
        An unknown device name.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.ones((3, 2))
    >>> to_device(x, "cpu") is x
    True
    """
    if check_device(device) == "cpu":
        return x
    cupy = cupy_or_refuse()
    data = getattr(x, "data", x) if _is_dataarray(x) else x
    moved = _chunks_to_cupy(_as_dask(data, chunk_rows), cupy)
    return x.copy(data=moved) if _is_dataarray(x) else moved


def _is_dataarray(x: Any) -> bool:
    import xarray as xr

    return isinstance(x, xr.DataArray)


def _as_dask(x: Any, chunk_rows: int) -> Any:
    import dask.array as da

    if isinstance(x, da.Array):
        return x
    array = np.asarray(x)
    if array.ndim == 0:
        raise InputError("The rows must be an array of at least one dimension; got a scalar.")
    chunks = (min(chunk_rows, max(1, array.shape[0])), *array.shape[1:])
    return da.from_array(array, chunks=chunks)  # type: ignore[no-untyped-call]


def _chunks_to_cupy(x: Any, cupy: ModuleType) -> Any:
    """Each chunk of the dask array ``x`` through ``cupy.asarray``, ``meta`` a CuPy array."""
    meta = cupy.empty((0,) * x.ndim, dtype=x.dtype)
    return x.map_blocks(cupy.asarray, dtype=x.dtype, meta=meta)


def device_memory_budget(share: float = DEVICE_MEMORY_SHARE) -> int | None:
    """The default device memory budget, bytes: ``share`` of the current CUDA device's
    free memory (``cupy.cuda.Device().mem_info``); None where there is no GPU (CuPy
    missing or no device), so a plan on the host checks its host budget only.

    >>> budget = device_memory_budget()
    >>> budget is None or budget > 0
    True
    """
    try:
        cupy = importlib.import_module("cupy")
    except ImportError:
        return None
    if not _has_cuda_device(cupy):
        return None
    free, _total = cupy.cuda.Device().mem_info
    return int(free * share)


DEVICE_PARAM = Param(
    "device",
    (Options(DEVICES), NONE),
    None,
    "where the rows' arithmetic runs: 'gpu' moves their chunks to the CUDA device "
    f"through CuPy ({GPU_INSTALL}); 'cpu' or None leaves them in host memory",
    parse=optional,
)
"""``npt fit``/``ridge``/``project --device`` and a pipeline's top-level ``device`` key
(:func:`npt_dask.arrays.device.to_device` moves the rows)."""
