"""Where the rows' arithmetic runs: host memory (numpy) or a CUDA GPU (CuPy).

``device="gpu"`` moves each chunk of a dask array onto the current CUDA device with
``cupy.asarray`` (``map_blocks``, the array's ``meta`` a CuPy array, so dask and every
later step know the chunks are CuPy's), once: the moved rows are persisted on the device
when they fit its memory (:func:`persist_on_device`), so the passes of a fit read them
there instead of moving X again; ``device="cpu"`` (or None) leaves the rows as they are.
Asking for the GPU where CuPy or a CUDA device is missing is refused at once, naming the
fix, before anything is read or written.

CuPy is optional (:data:`GPU_INSTALL`: the ``gpu`` extra, which is ``gpu-cu13`` for CUDA 13
drivers, or ``gpu-cu12``): this module imports it only when the GPU is asked for, so
everything else installs and runs without it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
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
    "persist_on_device",
    "to_device",
]

DEVICES = ("cpu", "gpu")
"""The devices a caller may name (None means ``"cpu"``: the rows stay where they are)."""

GPU_INSTALL = (
    "pip install 'npt-dask[gpu]' for CUDA 13 drivers (the same as [gpu-cu13]) or "
    "'npt-dask[gpu-cu12]' for CUDA 12 ones (nvidia-smi tells), uninstalling the other "
    "cupy-cuda13x/cupy-cuda12x first: both install cupy/"
)
"""How to install the optional GPU dependencies (CuPy, dask-cuda, RMM), for either CUDA."""

CUPY_PACKAGES = ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy")
"""The distributions that install the ``cupy`` module (each its own copy of ``cupy/``)."""

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
        CuPy is not installed (or two CuPy packages overwrite each other, or it does not
        import), or it finds no usable CUDA device; one line naming the fix.
    """
    try:
        cupy = importlib.import_module("cupy")
    except ImportError as exc:
        raise DeviceError(_no_cupy_message(exc), param="device", spellings=_SPELLINGS) from None
    if not _has_cuda_device(cupy):
        raise DeviceError(_no_device_message(), param="device", spellings=_SPELLINGS)
    return cupy


def installed_cupy_packages() -> list[str]:
    """The installed distributions that provide ``cupy`` (``"cupy-cuda13x 14.2.0"``):
    more than one means they overwrote each other's ``cupy/`` folder.

    >>> isinstance(installed_cupy_packages(), list)
    True
    """
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in CUPY_PACKAGES:
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            continue
    return found


def _no_cupy_message(exc: ImportError) -> str:
    """Why ``import cupy`` failed, in one line with the fix."""
    installed = installed_cupy_packages()
    if len(installed) > 1:
        return _mixed_cupy_message(installed)
    if installed:
        reason = " ".join(str(exc).split())[:200]
        return (
            f"device='gpu' needs CuPy: {installed[0]} is installed but does not import "
            f"({type(exc).__name__}: {reason}). Reinstall it for this machine's CUDA: "
            f"{GPU_INSTALL}; or use device='cpu'."
        )
    return (
        f"device='gpu' needs CuPy, which is not installed here: {GPU_INSTALL}; or use device='cpu'."
    )


def _no_device_message() -> str:
    """Why CuPy sees no device, in one line with the fix."""
    installed = installed_cupy_packages()
    if len(installed) > 1:
        return _mixed_cupy_message(installed)
    return (
        f"device='gpu' found no CUDA device: {installed[0] if installed else 'CuPy'} is "
        "installed but cupy.is_available() is False (no NVIDIA GPU or driver, "
        "CUDA_VISIBLE_DEVICES hides them, or the driver is older than the package's CUDA: "
        "cupy-cuda13x needs a CUDA 13 driver, R580 or newer; with a CUDA 12 driver pip "
        "uninstall cupy-cuda13x, then pip install 'npt-dask[gpu-cu12]'). Run on a machine "
        "with a GPU, or use device='cpu'."
    )


def _mixed_cupy_message(installed: list[str]) -> str:
    names = " ".join(p.split()[0] for p in installed)
    return (
        f"device='gpu' needs CuPy, and {' and '.join(installed)} are all installed: each "
        "writes the same cupy/ folder, which now holds a mix of them. pip uninstall -y "
        f"{names}, then install one: {GPU_INSTALL}; or use device='cpu'."
    )


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


def to_device(
    x: Any, device: str | None, *, chunk_rows: int = DEFAULT_CHUNK_ROWS, budget: int | None = None
) -> Any:
    """The rows ``x`` with their chunks on ``device``, moved there once.

    Parameters
    ----------
    x : dask array, numpy array, or xarray DataArray of either
        The rows. With ``device="gpu"`` a numpy array becomes a dask array of
        ``chunk_rows`` rows a chunk first; a DataArray keeps its dims and coords.
    device : {"cpu", "gpu"} or None
        ``"gpu"``: each chunk is moved to the current CUDA device by ``cupy.asarray``
        (one task a chunk; its ``meta`` a CuPy array) and the moved rows are persisted
        there (:func:`persist_on_device`), so every later pass reads them where they
        are: X crosses to the device once. ``"cpu"`` or None: ``x`` itself, unchanged.
    chunk_rows : int
        Rows a chunk, for rows not yet in a dask array.
    budget : int, optional
        Device bytes the moved rows may take (default :func:`device_memory_budget`).
        Rows larger than that are not persisted: they stay a lazy move, and every pass
        over them moves each chunk to the device again (one host-to-device copy of X
        per pass, each chunk freed after its task), which holds a few chunks on the
        device instead of all of X.

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
    moved = persist_on_device(moved, device_memory_budget() if budget is None else budget)
    return x.copy(data=moved) if _is_dataarray(x) else moved


def persist_on_device(x: Any, budget: int | None) -> Any:
    """The device-backed dask array ``x`` computed once and held on the device (persisted
    unfused, its chunks as they are) when its ``nbytes`` fit ``budget`` (None: no reading
    of the device's memory, persisted); else ``x`` as it is, a lazy graph each pass
    computes again (for rows moved from the host: one more host-to-device copy of each
    chunk per pass). Under a ``distributed`` client the chunks are held by the workers.
    """
    if budget is not None and int(x.nbytes) > int(budget):
        return x
    return x.persist(optimize_graph=False)


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


def device_memory_budget(share: float = DEVICE_MEMORY_SHARE, *, client: Any = None) -> int | None:
    """The default device memory budget, bytes: ``share`` of the memory CuPy can still take
    on the GPU that runs the tasks; None where no GPU runs them.

    Parameters
    ----------
    share : float
        Share of the free memory the budget takes.
    client : distributed.Client, optional
        The client the tasks run on: the memory is read on each of its workers (its own GPU,
        ``client.run``) and the least reading counts (workers without a GPU are left out;
        None if none has one). Without a client, this process's current GPU.

    Notes
    -----
    What CuPy can still take is the device's free memory (``mem_info``) and the blocks its
    own memory pool holds free; where CuPy allocates from an RMM pool (``npt.connect(gpu=True,
    rmm_pool_size=...)``), also what that pool has not handed out (RMM tells the bytes handed
    out only under a tracking adaptor, dask-cuda's ``rmm_track_allocations``; otherwise the
    whole pool counts as free, as it is when a fit starts).

    >>> budget = device_memory_budget()
    >>> budget is None or budget > 0
    True
    """
    readings = [_free_device_bytes()] if client is None else _worker_readings(client)
    found = [r for r in readings if r is not None]
    return int(min(found) * share) if found else None


def _worker_readings(client: Any) -> list[int | None]:
    """:func:`_free_device_bytes` read on every worker of ``client``."""
    readings: Mapping[str, int | None] = client.run(_free_device_bytes)
    return list(readings.values())


def _free_device_bytes() -> int | None:
    """Bytes CuPy can still allocate on this process's current GPU (see
    :func:`device_memory_budget`), or None without CuPy or a GPU. Runs on workers too."""
    try:
        cupy = importlib.import_module("cupy")
    except ImportError:
        return None
    if not _has_cuda_device(cupy):
        return None
    free = int(cupy.cuda.Device().mem_info[0])
    pool = getattr(cupy, "get_default_memory_pool", None)
    if pool is not None:
        free += int(pool().free_bytes())  # blocks CuPy keeps for reuse
    return free + _rmm_spare_bytes(cupy)


def _rmm_spare_bytes(cupy: ModuleType) -> int:
    """What the RMM pool CuPy allocates from has not handed out; 0 where CuPy does not
    allocate from RMM (then the pool is not CuPy's to use)."""
    try:
        from rmm.allocators.cupy import rmm_cupy_allocator
    except ImportError:
        return 0
    get_allocator = getattr(cupy.cuda, "get_allocator", None)
    if get_allocator is None or get_allocator() is not rmm_cupy_allocator:
        return 0
    from distributed.diagnostics import rmm as rmm_diagnostics

    # distributed's reading (its dashboard's): the pool's size and, under a tracking
    # adaptor, the bytes handed out
    sizes: dict[str, Any] = rmm_diagnostics.real_time()  # type: ignore[no-untyped-call]
    return max(0, int(sizes["rmm-total"] or 0) - int(sizes["rmm-used"] or 0))


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
