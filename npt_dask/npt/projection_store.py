"""Chunked, resumable projection of many rows into a zarr store, as xarray.

``project(model, data, out)`` writes, for every row of ``data``, its NPT
coordinates and Lemma 5 residual into a zarr v3 group that
``xarray.open_zarr`` reads as a Dataset::

    coordinates   (sample, component)   model precision
    residual      (sample,)             model precision
    sample        (sample,)             carried over from xarray input, else 0..m-1
    component     (component,)          0..r-1
    npt_done      (npt_chunk,)          uint8, 1 once a chunk's rows are written
    npt_digest    (npt_chunk,)          uint64, digest of the chunk's input rows
                                        (how: the root attribute ``npt_row_digest``,
                                        absent for BLAKE2b of the rows' bytes)

One task per output chunk reads its input rows, streams over the training
blocks (kernel block, centring, ``A = U Lambda^{-1/2}``), writes its region
and only then sets its ``npt_done`` flag. A re-run skips chunks already
done, after checking that their input rows still hash to the stored digest;
a store written for another model, another input shape or another chunking
is refused. Computation is deterministic, so an interrupted and resumed
projection is byte-identical to an uninterrupted one.

**What a reader sees before the last chunk is written.** While a projection
runs, and after it was interrupted, the results live in the store's group
``incomplete`` and the root holds only ``npt_done`` and ``npt_digest`` and the
attribute ``npt_incomplete`` (what happened and how to finish)::

    >>> xr.open_zarr("proj.zarr")                  # doctest: +SKIP
    <xarray.Dataset> ... Data variables: npt_done, npt_digest
    Attributes: npt_incomplete: This projection is incomplete: ...

so ``xr.open_zarr(out).coordinates`` is an ``AttributeError``, never a
half-filled array whose NaN rows a ``mean()`` would skip. When every chunk is
done, ``project`` moves the results to the root, removes the attribute and
consolidates the metadata: only then does the store read as the Dataset above.
Re-running the same call resumes an incomplete store (and finishes one whose
finishing was interrupted). Stores of earlier versions keep their results at
the root; they are resumed and finished as before.

**Rows on a device** (a dask array of CuPy chunks): each task projects its chunk there,
hashes it there (:data:`POSITIONAL`: a sum of its words, exact integer arithmetic, the
same bits on numpy) and takes to the host, in one copy, what it writes -- the values in
the store's dtype, the digest's sum and the chunk's finiteness verdict -- so a chunk
crosses once and the task never waits on a flag of its own. A store written from host
rows is resumed with device rows (its BLAKE2b digests then need the rows' bytes: they
cross with the values) and the other way round.

Layer rule: this module does I/O (zarr, xarray); the numbers come from the task
functions below (numpy blocks, or a device's on the device route).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import scipy.sparse
from dask import delayed
from dask.array.core import normalize_chunks

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import device_of, namespace_of
from npt_dask.engine.consumers import Projection, projection_verdict
from npt_dask.engine.passes import run_block
from npt_dask.engine.rows import Rows
from npt_dask.errors import (
    ClusterError,
    InputError,
    InputTypeError,
    NPTWarning,
    ProjectionError,
    ResidualWarning,
    warn,
)
from npt_dask.kernels import KernelSpec
from npt_dask.npt.model import NPTModel
from npt_dask.npt.params import fit_param
from npt_dask.npt.projector import rows_rule
from npt_dask.params.constraints import (
    FLAG,
    NONE,
    HasMethod,
    InstanceOf,
    Param,
    check_table,
    table_defaults,
)
from npt_dask.runtime.atomic import (
    discard,
    promote,
    release_lock,
    sweep,
    take_lock,
    write_into_place,
)
from npt_dask.runtime.inputs import InputInfo, check_finite_eagerly
from npt_dask.runtime.owners import describe
from npt_dask.runtime.places import check_output_place
from npt_dask.runtime.progress import ProgressBar
from npt_dask.runtime.scheduler import (
    blas_threads_for_tasks,
    current_client,
    lost_data,
    retry_on_lost_data,
)
from npt_dask.storage.datasets import read_numpy

__all__ = [
    "PROJECT_PARAMS",
    "ProjectionError",
    "open_data",
    "project",
    "scheduler_lost",
]

_CLI = {"resume=False": "--overwrite"}
"""This module's Python spellings in error messages, as ``npt project`` spells them."""

FORMAT_VERSION = 1

PROJECT_PARAMS: tuple[Param, ...] = (
    Param(
        "client",
        (HasMethod("as_current", "a distributed.Client"), NONE),
        None,
        "run on this client (None: the current scheduler)",
    ),
    dataclasses.replace(
        fit_param("chunk_size"),
        default=None,
        help="rows per task and per stored chunk (None: the model's chunk size)",
    ),
    Param("resume", (FLAG,), True, "continue an interrupted projection (False overwrites)"),
    Param("progress", (FLAG,), True, "show a progress bar on stderr"),
    Param("key", (InstanceOf((str,), "a string"), NONE), None, "array name in a .npz file"),
    Param("var", (InstanceOf((str,), "a string"), NONE), None, "variable of an xarray zarr store"),
)
"""``npt_dask.project``'s keyword parameters (``chunk_size``: the fit's rule)."""

_D = table_defaults(PROJECT_PARAMS)  # the signature's defaults: the parameter table's


def _digest(block: np.ndarray) -> np.uint64:
    raw = hashlib.blake2b(np.ascontiguousarray(block).tobytes(), digest_size=8).digest()
    return np.frombuffer(raw, dtype=np.uint64)[0]


# --- digests of rows on a device --------------------------------------------------------

DIGEST_ATTR = "npt_row_digest"
"""Root attribute naming how a store's ``npt_digest`` hashes the input rows: absent for
:data:`BLAKE2B` (rows read on the host), :data:`POSITIONAL` for a store written from rows
on a device (hashed there: only 8 bytes a chunk cross)."""

BLAKE2B = "blake2b-8"
"""BLAKE2b (8 bytes) of the chunk's dense rows' bytes in C order (:func:`_digest`)."""

POSITIONAL = "positional-64"
"""A positional sum of the rows' 32-bit words, ``sum_i w_i a_i mod 2**64`` with odd
pseudo-random ``a_i`` of the word's place, reduced where the rows are
(:func:`_positional_sum`), then BLAKE2b of that sum and the chunk's shape on the host
(:func:`_positional_digest`). Exact integer arithmetic: numpy and a device give the same
bits. It is not cryptographic (it detects changed rows, not an adversary): a change of
one word always shows (``a_i`` is odd), of several with probability ``2**-64``."""

_SEGMENT = 1 << 20
"""Words summed at once by :func:`_positional_sum` (its device memory: ``24`` bytes each)."""


def _mix32(h: Any) -> Any:
    """MurmurHash3's 32-bit finaliser on values below ``2**32`` held in uint64 (every
    constant a Python integer below ``2**32``: no namespace has to hold a larger one)."""
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _words(z: Any, xp: Any) -> Any:
    """A chunk's rows (a precomputed kernel's list of column blocks: side by side) as
    their 32-bit words in C order, in their namespace."""
    if isinstance(z, list):
        z = z[0] if len(z) == 1 else xp.concat(list(z), axis=1)
    return xp.reshape(z, (-1,)).view(xp.uint32)


def _positional_sum(z: Any) -> Any:
    """``sum_i w_i a_i mod 2**64`` over the words ``w_i`` of the rows ``z`` (see
    :data:`POSITIONAL`), a 0-d uint64 array where ``z`` lives: nothing crosses."""
    xp = namespace_of(z[0] if isinstance(z, list) else z)
    words = _words(z, xp)
    device = device_of(words)
    total = xp.zeros((), dtype=xp.uint64, device=device)
    for start in range(0, int(words.shape[0]), _SEGMENT):
        w = xp.astype(words[start : start + _SEGMENT], xp.uint64)
        i = xp.arange(start, start + int(w.shape[0]), dtype=xp.uint64, device=device)
        lo = _mix32((i & 0xFFFFFFFF) ^ 0x9E3779B9)
        hi = _mix32(((i >> 32) ^ lo ^ 0x7F4A7C15) & 0xFFFFFFFF)
        total = total + xp.sum(w * ((hi << 32) | lo | 1), dtype=xp.uint64)
    return total


def _positional_digest(total: Any, shape: tuple[int, ...]) -> np.uint64:
    """The :data:`POSITIONAL` digest from a chunk's positional sum (on host)."""
    text = np.asarray(total, dtype=np.uint64).tobytes() + repr(tuple(shape)).encode()
    raw = hashlib.blake2b(text, digest_size=8, person=b"npt-pos64").digest()
    return np.frombuffer(raw, dtype=np.uint64)[0]


def _rows_shape(z: Any) -> tuple[int, int]:
    if isinstance(z, list):
        return int(z[0].shape[0]), sum(int(b.shape[1]) for b in z)
    return int(z.shape[0]), int(z.shape[1])


def _row_digest(z: Any, kind: str) -> np.uint64:
    """The digest of a chunk's input rows ``z`` (numpy, or a device's) by ``kind`` (the
    store's): on numpy as it always was; rows on a device cross 8 bytes for
    :data:`POSITIONAL`, their values for :data:`BLAKE2B` (a host-written store resumed
    with device rows)."""
    if kind == POSITIONAL:  # (host rows dense first: sparse ones hash as their values)
        total = _positional_sum(_dense(z) if _on_host(z) else z)
        return _positional_digest(to_host(total), _rows_shape(z))
    return _digest(_dense(to_host(z) if not _on_host(z) else z))


def _on_host(z: Any) -> bool:
    parts = z if isinstance(z, list) else [z]
    return all(isinstance(p, np.ndarray) or scipy.sparse.issparse(p) for p in parts)


# --- numeric task bodies (numpy only) -------------------------------------------------


def _dense(z: Any) -> np.ndarray:
    """A chunk's input rows, dense: digests are of the dense rows (of the whole kernel
    rows for a precomputed kernel, whose chunk comes as a list of column blocks)."""
    if isinstance(z, list):
        return np.hstack([_dense(b) for b in z])
    return z.toarray() if scipy.sparse.issparse(z) else np.asarray(z)


def _results(group: Any) -> Any:
    """The group holding the result arrays: ``incomplete`` until the store is finished
    (the root of a finished store, or of one written by an earlier version)."""
    return group.get(INCOMPLETE, group)


def _write_chunk(
    z: Any, index: int, start: int, both: np.ndarray, out: str, dtype: str, kind: str = BLAKE2B
) -> int:
    """Write one chunk's ``[y | residual]`` (host values) and its input digest."""
    return _store_chunk(out, index, start, both.astype(dtype), _row_digest(z, kind))


def _store_chunk(out: str, index: int, start: int, both: np.ndarray, digest: np.uint64) -> int:
    """Write a chunk's ``[y | residual]`` (in the store's dtype) and digest, then flag it
    done."""
    import zarr

    group: Any = zarr.open_group(out, mode="r+", use_consolidated=False)  # members are arrays
    results = _results(group)
    stop = start + both.shape[0]
    results["coordinates"][start:stop] = both[:, :-1]
    results["residual"][start:stop] = both[:, -1]
    group["npt_digest"][index] = digest
    group["npt_done"][index] = 1  # last: the chunk counts only once its rows are written
    return index


def _write_device_chunk(
    z: Any, centres: Any, kernel: KernelSpec, projection: Projection, index: int, start: int,
    out: str, dtype: str, kind: str,
) -> int:  # fmt: skip
    """Project a chunk of rows on a device and write it: ``[y | residual]`` cast to the
    store's dtype there, with its verdict (:func:`~npt_dask.engine.consumers.
    projection_verdict`) and its digest's sum (or, for a :data:`BLAKE2B` store, the rows),
    crosses to host in one copy; a failed verdict is refused as numpy's route refuses it,
    before anything of the chunk is written."""
    outputs, _ = run_block(z, {}, None, centres, kernel, {"both": projection}, on_device=True)
    both = outputs["both"]
    xp = namespace_of(both)
    carried = [xp.astype(both, getattr(xp, dtype)), projection_verdict(both, z, kernel)]
    carried.append(_positional_sum(z) if kind == POSITIONAL else _dense_on_device(z, xp))
    values, finite, third = _one_crossing(carried)
    if not bool(finite):
        projection.refuse(z, centres, kernel)
    positional = kind == POSITIONAL
    digest = _positional_digest(third, _rows_shape(z)) if positional else _digest(third)
    return _store_chunk(out, index, start, values, digest)


def _dense_on_device(z: Any, xp: Any) -> Any:
    """A chunk's rows side by side (a precomputed kernel's column blocks), where they are."""
    if isinstance(z, list):
        return z[0] if len(z) == 1 else xp.concat(list(z), axis=1)
    return z


def _one_crossing(arrays: list[Any]) -> list[np.ndarray]:
    """Arrays on one device, on the host, in one copy: their bytes side by side, crossed
    once (:func:`npt_dask.arrays.host.to_host`), then cut and viewed as they were."""
    xp = namespace_of(*arrays)
    raw = to_host(xp.concat([xp.reshape(a, (-1,)).view(xp.uint8) for a in arrays]))
    out, start = [], 0
    for a in arrays:
        size = int(np.prod(a.shape)) * a.dtype.itemsize
        out.append(raw[start : start + size].view(np.dtype(a.dtype.name)).reshape(a.shape))
        start += size
    return out


def _check_chunk(z: Any, index: int, out: str, kind: str = BLAKE2B) -> int:
    import zarr

    group: Any = zarr.open_group(out, mode="r", use_consolidated=False)  # members are arrays
    stored = group["npt_digest"][index]
    if stored != _row_digest(z, kind):
        raise ProjectionError(
            f"{out}: rows of chunk {index} differ from those projected before; refusing to "
            "mix results. Project into a new store or pass resume=False.",
            spellings=_CLI,
        )
    return index


# --- inputs ---------------------------------------------------------------------------


def open_data(source: Any, *, key: str | None = None, var: str | None = None) -> Any:
    """Open ``source`` lazily: arrays pass through; a path may be ``.npy``, ``.npz``
    (``key``), a zarr array, or an xarray dataset in zarr (``var``)."""
    if not isinstance(source, str | os.PathLike):
        return source
    path = Path(source)
    if not path.exists():
        raise InputError(f"{path} does not exist.")
    if path.suffix == ".npy":
        return read_numpy(path, lambda: _open_npy(path))
    if path.suffix == ".npz":
        name = key or "x"
        x = read_numpy(path, lambda: _npz_array(path, name))
        if x.ndim != 2:  # flattening would hide rows unlike the training rows (raw images)
            raise InputError(
                f"{path}: array {name!r} has shape {x.shape}; rows must be 2-D (n_samples, "
                "n_features). Flatten and scale it as the model's training rows were, e.g. "
                "x = npt.datasets.load_npz(path, scale=255.0)[0], and save that as .npy."
            )
        return x
    return _open_zarr_data(path, var)


def _npz_array(path: Path, name: str) -> np.ndarray:
    with np.load(path, allow_pickle=False) as data:
        if name not in data.files:
            raise InputError(f"{path} has no array {name!r}; it has {data.files} (--key).")
        return data[name]


class _NpyRows:
    """A ``.npy`` file as an array-like that reads only the rows a chunk asks for.

    ``da.from_array`` keeps this small object (path, shape, dtype) in the
    graph, never the data: each task maps the file and copies its slice, so
    on a cluster the workers read the file themselves (it must be on a
    shared filesystem) and nothing of it passes through the scheduler.
    """

    def __init__(self, path: Path) -> None:
        header = np.load(path, mmap_mode="r", allow_pickle=False)
        self.path = str(path)
        self.shape, self.dtype, self.ndim = header.shape, header.dtype, header.ndim

    def __getitem__(self, index: Any) -> np.ndarray:
        return np.array(np.load(self.path, mmap_mode="r", allow_pickle=False)[index])


def _open_npy(path: Path) -> da.Array:
    rows = _NpyRows(path)
    chunks = normalize_chunks(("auto",) + (-1,) * (rows.ndim - 1), rows.shape, dtype=rows.dtype)
    return da.from_array(rows, chunks=chunks, asarray=False)


def _open_zarr_data(path: Path, var: str | None) -> Any:
    import xarray as xr
    import zarr

    try:
        node = zarr.open(str(path), mode="r")
    except Exception as exc:  # zarr raises several kinds for "not a zarr store"
        raise InputError(
            f"{path} is not a .npy or .npz file, a zarr array or an xarray dataset in zarr "
            f"({type(exc).__name__}: {exc})."
        ) from exc
    if isinstance(node, zarr.Array):
        return da.from_zarr(node)
    if var is None:
        raise InputError(
            f"{path} is a zarr group; name the variable to project (var=/--var).",
            spellings={"var=/--var": "--var"},
        )
    ds = xr.open_zarr(path, consolidated=None)
    if var not in ds:
        raise InputError(f"{path} has no variable {var!r}; it has {sorted(ds.data_vars)}.")
    return ds[var]


# --- the store ------------------------------------------------------------------------


def _identity(model: NPTModel, x: da.Array) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "model_checksum": model.identity,
        "kernel": model.kernel.to_dict(),
        "n_components": model.n_components,
        "n_rows": int(x.shape[0]),
        "n_features": int(x.shape[1]),
        "row_chunks": [int(c) for c in x.chunks[0]],
    }


INCOMPLETE = "incomplete"
"""The group that holds a projection's results until its last chunk is written."""

INCOMPLETE_ATTR = "npt_incomplete"
"""Root attribute of a store whose results are not all written (removed when they are)."""

INCOMPLETE_NOTE = (
    "This projection is incomplete: npt project was interrupted or is still running, so "
    f"its results are not here yet (the chunks written so far are in the group "
    f"'{INCOMPLETE}'; npt_done flags them). Re-run the same npt project command (or "
    "npt.project call) to finish it: done chunks are checked, not projected again."
)


def _create_store(
    out: str, model: NPTModel, x: da.Array, info: InputInfo, digest: str = BLAKE2B
) -> None:
    """A new store: the results (coordinates, residual, their coordinates) in the group
    :data:`INCOMPLETE`, the completion flags and digests (of kind ``digest``) at the root
    with the note."""
    import xarray as xr
    import zarr

    m, r = int(x.shape[0]), model.n_components
    rows = x.chunks[0][0]
    nchunks = len(x.chunks[0])
    dtype = str(model.precision)
    sample_dim = "sample"
    coords: dict[str, Any] = {"component": np.arange(r)}
    coords.update({str(k): (sample_dim, np.asarray(v)) for k, v in info.sample_coords.items()})
    if sample_dim not in coords:
        coords[sample_dim] = np.arange(m)
    for name, value in coords.items():
        if np.asarray(value[1] if isinstance(value, tuple) else value).dtype == object:
            raise InputError(f"Coordinate {name!r} has object dtype; convert it before projecting.")
    lazy = {
        "coordinates": (("sample", "component"), da.zeros((m, r), chunks=(rows, r), dtype=dtype)),
        "residual": (("sample",), da.zeros((m,), chunks=(rows,), dtype=dtype)),
    }
    results = xr.Dataset(lazy, coords=coords)
    status = xr.Dataset(
        {
            "npt_done": (("npt_chunk",), da.zeros((nchunks,), chunks=1, dtype=np.uint8)),
            "npt_digest": (("npt_chunk",), da.zeros((nchunks,), chunks=1, dtype=np.uint64)),
        }
    )
    status.attrs["npt_projection"] = json.dumps(_identity(model, x), sort_keys=True)
    status.attrs[INCOMPLETE_ATTR] = INCOMPLETE_NOTE
    if digest != BLAKE2B:  # a store hashed as before has no such attribute
        status.attrs[DIGEST_ATTR] = digest
    status.to_zarr(out, mode="w-", compute=False, zarr_format=3, consolidated=False)
    results.to_zarr(out, group=INCOMPLETE, mode="w-", compute=False, zarr_format=3,
                    consolidated=False)  # fmt: skip
    group: Any = zarr.open_group(out, mode="r+", use_consolidated=False)  # members are arrays
    group["npt_done"][:] = 0  # the flags must start at 0 in the store, not only as a fill value
    # consolidated metadata (all of it in the root zarr.json): a plain xr.open_zarr(out)
    # finds it and does not warn; writing chunks later leaves the metadata unchanged
    with _quiet_v3_consolidation():
        zarr.consolidate_metadata(out)


@contextlib.contextmanager
def _quiet_v3_consolidation() -> Iterator[None]:
    """Silence zarr's note that v3 consolidated metadata is not in the spec yet.

    zarr-python reads and writes it (zarr-specs#309) and xarray looks for it
    first; readers that do not know it read each array's own zarr.json.
    """
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Consolidated metadata is currently not part")
        warnings.filterwarnings("ignore", rf"Object at {re.escape(_LOCK)}")  # our lock file
        yield


def _finish(out: str) -> None:
    """Show the results: move every array of :data:`INCOMPLETE` to the root, remove the
    group and the note, consolidate the metadata (a store of an earlier version: only
    that). Each step can be repeated: a finish that was interrupted is completed by the
    next run (the note stays until the end, so a plain ``xr.open_zarr`` never reads a
    half-finished store as a result); a finished store is left as it is."""
    import zarr

    root = Path(out)
    partial = root / INCOMPLETE
    meta = json.loads((root / "zarr.json").read_text())
    finished = meta.get("consolidated_metadata") and INCOMPLETE_ATTR not in meta["attributes"]
    if finished and not partial.exists():
        return  # a finished store's metadata is not rewritten
    if partial.is_dir():
        for member in sorted(partial.iterdir()):
            if (member / "zarr.json").is_file():
                promote(member, root / member.name)
        shutil.rmtree(partial)  # its group metadata alone is left
    group: Any = zarr.open_group(out, mode="r+", use_consolidated=False)
    if INCOMPLETE_ATTR in group.attrs:
        del group.attrs[INCOMPLETE_ATTR]
    with _quiet_v3_consolidation():
        zarr.consolidate_metadata(out)


def _is_projection_store(path: Path) -> bool:
    try:
        meta = json.loads((path / "zarr.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "npt_projection" in (meta.get("attributes") or {})


_NAMES = ("coordinates", "residual", "npt_done", "npt_digest", "sample", "component")
_LOCK = "npt-writer.lock"  # in the store: JSON naming the one process writing it


def _check_output(path: Path) -> None:
    """Refuse an output path holding anything but a projection (or a half-created one)."""
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ProjectionError(f"Cannot write {path}: {parent} is a file, not a directory.")
    if path.exists() and not path.is_dir():
        raise ProjectionError(
            f"{path} exists and is a file, not a projection store; refusing to overwrite it. "
            "Choose another output path."
        )
    ours = not path.is_dir() or _is_projection_store(path) or _half_created(path)
    if not ours and any(p.name != _LOCK for p in path.iterdir()):
        raise ProjectionError(
            f"{path} exists and is not an npt projection store (a model or other data?); "
            "refusing to overwrite it or write into it. Choose another output path."
        )


def _half_created(path: Path) -> bool:
    """A store whose creation was interrupted by an older npt-dask (this one creates
    stores atomically): its arrays without the root metadata, or the root without all
    of its arrays (at the root, or in :data:`INCOMPLETE`). Nothing in it is flagged
    done; it is recreated."""
    entries = [p for p in path.iterdir() if p.name != _LOCK] if path.is_dir() else []
    if not entries:
        return False
    arrays = {p.name for p in entries if (p / "zarr.json").is_file()}
    if not (path / "zarr.json").is_file():
        return arrays == {p.name for p in entries} and bool(arrays & set(_NAMES))
    partial = path / INCOMPLETE
    if partial.is_dir():
        arrays |= {p.name for p in partial.iterdir() if (p / "zarr.json").is_file()}
    return _is_projection_store(path) and not set(_NAMES) <= arrays


@contextlib.contextmanager
def _writer(
    path: Path, model: NPTModel, x: da.Array, info: InputInfo, resume: bool,
    digest: str = BLAKE2B,
) -> Iterator[None]:  # fmt: skip
    """Be the one writer of the projection store at ``path`` for the whole block.

    The store is created atomically (built under a temporary sibling name with
    this process's lock inside, then renamed into place), so no path ever holds
    half a store; an existing store is locked (:func:`_acquire`), cleared if not
    resuming or half-created, else checked to hold this projection.
    """
    _check_output(path)
    sweep(path)  # builds and removals of killed writers beside the store
    while True:
        if not path.exists() or (path.is_dir() and not any(path.iterdir())):
            with contextlib.suppress(OSError):
                path.rmdir()  # an empty directory: as if absent
            if _create_atomically(path, model, x, info, digest):
                break
            continue  # another writer created it first: lock it like any store
        _acquire(path)
        if resume and not _half_created(path):
            try:
                _done_chunks(str(path), model, x)  # another projection: refused
            except BaseException:
                _release(path)
                raise
            _remove_partial_writes(path)
            break
        discard(path)  # under our lock, which goes with it (npt_dask.runtime.atomic)
        resume = True
    try:
        yield
    finally:
        _release(path)


def _create_atomically(
    path: Path, model: NPTModel, x: da.Array, info: InputInfo, digest: str = BLAKE2B
) -> bool:
    """Build the store beside ``path`` (with this process's lock inside) and move it into
    place (:func:`npt_dask.runtime.atomic.write_into_place`); False if another writer's store
    got there first."""

    def build(tmp: Path) -> None:
        _create_store(str(tmp), model, x, info, digest)
        if take_lock(tmp / _LOCK) is not None:  # pragma: no cover - a name only we use
            raise ProjectionError(f"{tmp}: could not lock the store being built.")

    return write_into_place(path, build, replace=False)


def _acquire(path: Path) -> None:
    """Take the writer lock of the store at ``path``; a lock of a dead process on this
    host is broken; a live (or unverifiable) holder is a ProjectionError naming it."""
    holder = take_lock(path / _LOCK)
    if holder is not None:
        raise ProjectionError(_held_message(path, holder))


def _held_message(path: Path, holder: dict[str, Any]) -> str:
    who = describe(str(holder.get("owner")))
    return (
        f"{path} is being written by {who} (host {holder.get('host', '?')}, pid "
        f"{holder.get('pid', '?')}, since {holder.get('started', '?')}); a store has one "
        "writer at a time. Wait for it to finish (then rerun to reuse its chunks), or write "
        f"to another path. If that process is gone (it ran on another host), remove "
        f"{path / _LOCK} and rerun."
    )


def _release(path: Path) -> None:
    """Remove the store's writer lock if this process holds it."""
    release_lock(path / _LOCK)


_PARTIAL = re.compile(r"\.[0-9a-f]{32}\.partial$")


def _remove_partial_writes(path: Path) -> int:
    """Delete the temporary files of chunk writes a killed writer left behind.

    zarr's local store writes each chunk to ``<key>.<uuid>.partial`` and renames
    it into place, so an interrupted write never shows as a chunk; the
    temporary file, though, stays. Their chunks are not flagged done and are
    written again, so the files are garbage. Returns how many were removed.
    """
    stale = [p for p in path.rglob("*.partial") if _PARTIAL.search(p.name)]
    for p in stale:
        p.unlink(missing_ok=True)
    return len(stale)


def _digest_kind(out: str) -> str:
    """How the store at ``out`` hashes its input rows (:data:`DIGEST_ATTR`)."""
    import zarr

    group: Any = zarr.open_group(out, mode="r", use_consolidated=False)
    return str(dict(group.attrs).get(DIGEST_ATTR, BLAKE2B))


def _done_chunks(out: str, model: NPTModel, x: da.Array) -> np.ndarray:
    import zarr

    group: Any = zarr.open_group(out, mode="r", use_consolidated=False)  # members are arrays
    try:
        found = json.loads(dict(group.attrs).get("npt_projection", "null"))
    except (TypeError, ValueError):
        found = None
    want = json.loads(json.dumps(_identity(model, x)))
    if found != want:
        what = [k for k in want if not isinstance(found, dict) or found.get(k) != want[k]]
        raise ProjectionError(
            f"{out} holds a projection of another {'/'.join(what) or 'kind'}; refusing to mix "
            "results. Project into a new store or pass resume=False to overwrite.",
            spellings=_CLI,
        )
    return np.asarray(group["npt_done"][:]).astype(bool)


# --- progress -------------------------------------------------------------------------


def _run(tasks: list[Any], bar: ProgressBar) -> None:
    """Compute the chunk tasks, one ``bar.step()`` each.

    Interrupting it (Ctrl-C: ``KeyboardInterrupt``) cancels what is queued on a
    cluster and propagates: chunks already flagged done stay done, and the
    same call resumes.
    """
    checks = {t.key for t in tasks if str(t.key).startswith(f"{_check_chunk.__name__}-")}
    bar.resuming(len(checks))  # the bar starts at done + 1: checks are not steps
    client = current_client()
    if client is not None:
        from distributed import as_completed

        futures = client.compute(tasks)
        try:
            for future in as_completed(futures):
                future.result()
                if future.key not in checks:
                    bar.step()
        except KeyboardInterrupt:  # Ctrl-C: stop the cluster's queued work, then re-raise
            with contextlib.suppress(Exception):  # the interrupt matters, not this one
                client.cancel(futures)
            raise
        except Exception as exc:
            if not scheduler_lost(client, exc):
                if lost_data(exc):  # retried: no task of this attempt may write after that
                    _settle(futures)
                raise  # a task's own error, or lost data (the caller retries): as it is
            raise ClusterError(
                f"Lost the connection to the dask scheduler at {client.scheduler.address}: "
                "it stopped, or the network to it failed."
            ) from None
        return
    from dask.callbacks import Callback

    keys = {t.key for t in tasks} - checks

    class _Tick(Callback):
        def _posttask(self, key, result, dsk, state, worker_id) -> None:
            if key in keys:
                bar.step()

    with blas_threads_for_tasks(), _Tick():
        dask.compute(*tasks)


SETTLE_SECONDS = 300.0
"""Most seconds a failed attempt's other chunk tasks are waited for (see :func:`_settle`)."""


def _settle(futures: list[Any]) -> None:
    """Wait until every task of an attempt that lost its data has ended.

    A worker that dies loses its shipped blocks, and the attempt is run again
    (:func:`~npt_dask.runtime.scheduler.retry_on_lost_data`); tasks of the first attempt that
    still run would otherwise write their chunks after the retry has finished the
    store (moved its results out of :data:`INCOMPLETE`), into a group that is gone.
    What they finish is kept: the retry checks those chunks instead of projecting them.
    """
    from distributed import wait

    with contextlib.suppress(Exception):  # the attempt's own error is the one to report
        wait(futures, timeout=SETTLE_SECONDS)


LOST_SCHEDULER_WAIT = 5.0
"""Seconds a connection error waits for the client to notice a lost scheduler."""


def scheduler_lost(client: Any, exc: BaseException, wait: float = LOST_SCHEDULER_WAIT) -> bool:
    """Whether ``exc`` ended a run because the client lost its scheduler (killed, or the
    network gone), not because a task failed. A connection error (``OSError``: distributed's
    ``CommClosedError``, ``ConnectionResetError``) can reach the caller a moment before the
    client marks itself disconnected: then the client's status is watched for ``wait``
    seconds (seen: 2 in 6 killed schedulers gave a bare "Connection reset by peer")."""

    def lost() -> bool:
        return getattr(client, "status", "running") not in ("running", "newly-created")

    if lost() or "scheduler-connection-lost" in str(exc):
        return True
    if not isinstance(exc, OSError):
        return False
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if lost():
            return True
    return False


def project(
    model: NPTModel,
    data: Any,
    out: str | os.PathLike,
    *,
    client: Any | None = _D["client"],
    chunk_size: int | None = _D["chunk_size"],
    resume: bool = _D["resume"],
    progress: bool = _D["progress"],
    key: str | None = _D["key"],
    var: str | None = _D["var"],
) -> Any:
    """Project ``data`` chunk by chunk into the zarr store ``out``; return it as a Dataset.

    Parameters
    ----------
    model : NPTModel
    data : numpy, dask, DataArray, or a path (``.npy``, ``.npz`` with ``key``, a zarr
        array, or an xarray dataset in zarr with ``var``)
    out : path of the output zarr store
    client : distributed.Client, optional
        Run on this client; default the current scheduler (an active client,
        else local threads).
    chunk_size : rows per task and per stored chunk; default the model's chunk size
    resume : continue an interrupted projection in ``out`` (False overwrites it)
    progress : show a console progress bar on stderr
    key : str, optional
        The array's name in a ``.npz`` file (default ``"x"``).
    var : str, optional
        The variable to project of an xarray dataset in zarr (required for one).

    Returns
    -------
    xarray.Dataset opened lazily from ``out`` (``coordinates``, ``residual``).

    Notes
    -----
    Runs on the current dask scheduler: local threads, or the active
    ``distributed.Client``, to which the training blocks and projection
    weights are scattered once. Memory per task: one input chunk
    (``chunk_size * d``), one kernel block (``chunk_size * training chunk``)
    and the accumulator (``chunk_size * (r + 1)``); each worker also holds
    the training rows and weights once (``n * (d + r + 1)``). If a worker
    dies, its tasks run elsewhere; chunks it had finished stay done, and
    weights shipped to it are shipped again.

    Rows on a device (a dask array of CuPy chunks) are projected there. Crossings per
    call: the model's training panels and weights to the device once (a stored model's
    read once), the ``2 r`` finishing terms once, the eager finiteness check one flag
    back, the kernel-scale sample one read back; per chunk one copy back holding its
    values in the store's dtype, its digest's sum (8 bytes) and its verdict (1 byte),
    no other sync. A done chunk checked on resume crosses 8 bytes (its rows for a store
    written from host rows).
    """
    given = {"client": client, "chunk_size": chunk_size, "resume": resume}
    check_table(PROJECT_PARAMS, given | {"progress": progress, "key": key, "var": var})
    if client is not None:
        with client.as_current():
            return project(
                model,
                data,
                out,
                chunk_size=chunk_size,
                resume=resume,
                progress=progress,
                key=key,
                var=var,
            )
    import xarray as xr

    if not isinstance(model, NPTModel):
        raise InputTypeError(
            f"model must be an NPTModel (from npt.fit or npt.load(path)); got "
            f"{type(model).__name__}."
        )
    check_output_place(out, error=ProjectionError)  # inside a zarr store, or not writable
    size = model.chunk_size if chunk_size is None else int(chunk_size)
    rows = rows_rule(model).rows(  # features matched by name, as transform's
        open_data(data, key=key, var=var), chunk_size=size, name="data"
    )
    x, info = rows.data, rows.info
    assert info is not None
    if info.lazy:  # one read pass now, so NaN/inf fail before any output exists
        check_finite_eagerly(x, "data")
    model.warn_scale(x)  # the one kernel-scale rule (npt_dask.kernels.scale), as fit and transform
    if model.kernel.precomputed:
        warn(
            "This model's kernel is precomputed: the rows to project are test x train kernel "
            "rows, which lack each row's k(z, z), so the store's residual column is NaN "
            "(the coordinates are exact). For residuals, call model.residual(K_test, "
            "diag=<diagonal of kernel(Z, Z)>).",
            ResidualWarning,
        )
    out = str(out)
    if not os.path.exists(out) and Path(out).suffix != ".zarr":
        warn(
            f"{out} will be a zarr store (a directory), whatever its suffix; name it "
            "*.zarr so that it is not taken for a file of another format.",
            NPTWarning,
        )
    attempts = iter(range(1 << 30))

    def attempt() -> None:  # a worker's death loses the shipped weights: ship them again
        fresh = next(attempts) > 0
        tasks = _tasks(model, rows, out, _done_chunks(out, model, x), fresh)
        _run(tasks, ProgressBar("npt project", len(tasks), "chunks", progress))

    digest = BLAKE2B if rows.numpy else POSITIONAL  # a new store's
    with _writer(Path(out), model, x, info, resume, digest):
        try:
            retry_on_lost_data(attempt)
        except ClusterError as exc:  # the scheduler is gone: say what is kept and how to go on
            raise ClusterError(
                f"{exc} The chunks written so far are kept in {out}: run the same call "
                "again to resume once the scheduler is back (done chunks are checked, not "
                "projected again).",
                spellings={"the same call": "the same npt project command"},
            ) from None
        _finish(out)
    return xr.open_zarr(out, consolidated=True).drop_vars(["npt_done", "npt_digest"])


def _tasks(model: NPTModel, rows: Rows, out: str, done: np.ndarray, fresh: bool) -> list[Any]:
    """One task per chunk: project and write it (the model's projector), or check a done
    one (its rows' digest, by the store's kind)."""
    projector = model.projector(fresh=fresh)  # built once (again after lost data)
    kind = _digest_kind(out)
    starts = np.concatenate([[0], np.cumsum(rows.chunks)])
    parts = projector.chunk_inputs(rows)
    checks = {i: delayed(_check_chunk, pure=False)(part, i, out, kind)
              for i, part in enumerate(parts) if done[i]}  # fmt: skip
    if not rows.numpy:
        if len(checks) == len(parts):
            return list(checks.values())
        centres, projection = projector.task_inputs(rows, check=False)  # moved once
        write = delayed(_write_device_chunk, pure=False)
        dtype = str(model.precision)
        return [checks[i] if i in checks else write(part, centres, model.kernel, projection,
                i, int(starts[i]), out, dtype, kind) for i, part in enumerate(parts)]  # fmt: skip
    projected = projector.chunk_tasks(rows)  # lazy: those of done chunks never run
    return [
        checks[i]
        if i in checks
        else delayed(_write_chunk, pure=False)(
            part, i, int(starts[i]), projected[i], out, str(model.precision), kind
        )
        for i, part in enumerate(parts)
    ]
