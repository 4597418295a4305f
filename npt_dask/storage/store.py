"""Persisting a fitted model as a zarr v3 group, atomically and verifiably.

Layout of ``model.zarr`` (every array CRC32C-checked, no pickle, no object
dtypes)::

    zarr.json            group; attribute "npt" holds the ModelManifest
    eigenvalues          (component,)            float64
    eigenvectors         (sample, component)     float64, chunked by rows
    row_means            (sample,)               float64, chunked by rows
    residuals            (component,)            float64  solver diagnostics
    x_train              (sample, feature)       model precision, chunked by rows
    moments_*            (fit(labels=/targets=) only) the training pass's ridge moments:
                         n, y_sum, t_sum, gram, cross, t_norm2 float64, and the
                         classes (numbers as they are; strings as UTF-32 code points,
                         ``moments_classes_utf32``)

A model fitted with ``kernel="precomputed"`` stores no training rows: in
place of ``x_train`` it stores ``train_diagonal`` (sample,) float64, the
diagonal of the training kernel matrix, and its manifest says so
(``"training_rows"``); projecting with the loaded model takes the test x
train kernel matrix, as the fitted one did. A model whose kernel is a Python
function cannot be saved (a function is code; the store holds no pickle):
:func:`save` raises :class:`StoreError` before writing anything. Sparse
training rows are stored dense, chunk by chunk.

A save writes a temporary sibling directory and moves it into place (the one
atomic writer, :mod:`npt_dask.runtime.atomic`); the previous model at that path is
moved aside first and removed only once the new one is in place, so an
interrupted save never leaves a directory that loads as a model and never
damages the previous one. A load checks the manifest version and kind, the
manifest's own checksum (``npt_checksum``: required -- a store without it was
altered, never read as an older version's), every array's shape and dtype
against the manifest, that every chunk exists (zarr 3 would silently return
the fill value for a missing one), through the codec every chunk's checksum,
and with ``verify`` every array's SHA-256 (each array must have one).

Errors are :class:`~npt_dask.errors.StoreError` subclasses a caller can tell
apart: :class:`~npt_dask.errors.StoreNotFoundError` (also a
``FileNotFoundError``), :class:`~npt_dask.errors.StoreIntegrityError` (damaged
or altered), :class:`~npt_dask.errors.StoreVersionError` (newer format) and
:class:`~npt_dask.errors.StoreInUseError` (replaced while in use).

Layer rule: this module is the only one that reads or writes zarr for models.
"""

from __future__ import annotations

import hashlib
import json
import os
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import dask.array as da
import numpy as np

from npt_dask._version import __version__
from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import is_numpy, namespace_and_device
from npt_dask.engine.moments import LinearMoments
from npt_dask.engine.projection import projection_weights
from npt_dask.errors import (
    StoreError,
    StoreIntegrityError,
    StoreInUseError,
    StoreNotFoundError,
    StoreVersionError,
    StoreWarning,
    warn,
)
from npt_dask.kernels import KernelSpec
from npt_dask.runtime import atomic as _atomic
from npt_dask.runtime.places import check_output_place

__all__ = [
    "FORMAT_VERSION",
    "RIDGE_KIND",
    "ModelManifest",
    "SavedModel",
    "StoreError",
    "StoredModel",
    "StoredTraining",
    "array_digest",
    "check_feature_names",
    "check_identity",
    "check_target",
    "check_writable",
    "checked_array",
    "checksum_of",
    "classes_from_codes",
    "manifest_checksum",
    "model_identity",
    "on_host",
    "open_group",
    "parse_fields",
    "read",
    "read_array",
    "read_manifest",
    "recover",
    "save",
    "storable_classes",
    "write_array",
    "write_group",
]

FORMAT_VERSION = 1
KIND = "npt-model"
RIDGE_KIND = "npt-kernel-ridge"  # the kind of :mod:`npt_dask.storage.ridge_store`'s stores
CHECKSUM = "npt_checksum"  # group attribute: manifest_checksum of the "npt" manifest
_ARRAYS = ("eigenvalues", "eigenvectors", "row_means", "residuals", "x_train")
_PRECOMPUTED_ARRAYS = ("eigenvalues", "eigenvectors", "row_means", "residuals", "train_diagonal")
STORED_ROWS = "stored"
NO_ROWS = (
    "none: a precomputed kernel; the model projects test x train kernel rows "
    "and keeps only the diagonal of the training kernel matrix (train_diagonal)"
)


class _Diagnostics(Protocol):
    @property
    def residuals(self) -> np.ndarray: ...
    def to_dict(self) -> dict[str, Any]: ...


class SavedModel(Protocol):
    """What :func:`save` and :func:`model_identity` read of a model: the record's fields
    (:class:`npt_dask.npt.fitted.FittedModel` is one). The store names no model class:
    the model modules are above it, and it reads a model as data."""

    @property
    def kernel(self) -> KernelSpec: ...
    @property
    def x_train(self) -> da.Array: ...
    @property
    def eigenvalues(self) -> np.ndarray: ...
    @property
    def eigenvectors(self) -> np.ndarray: ...
    @property
    def row_means(self) -> np.ndarray: ...
    @property
    def grand_mean(self) -> float: ...
    @property
    def center(self) -> bool: ...
    @property
    def diagnostics(self) -> _Diagnostics: ...
    @property
    def train_diagonal(self) -> np.ndarray | None: ...
    @property
    def moments(self) -> LinearMoments | None: ...
    @property
    def feature_names(self) -> tuple[str, ...] | None: ...
    @property
    def n_samples(self) -> int: ...
    @property
    def n_features(self) -> int: ...
    @property
    def n_components(self) -> int: ...
    @property
    def precision(self) -> np.dtype: ...
    @property
    def chunk_size(self) -> int: ...


@dataclass(frozen=True)
class ModelManifest:
    """Everything about a stored model except its arrays; versioned."""

    format_version: int
    package_version: str
    created: str
    n_samples: int
    n_features: int
    n_components: int
    center: bool
    grand_mean: float
    precision: str
    chunk_size: int
    kernel: Mapping[str, Any]
    diagnostics: Mapping[str, Any]
    arrays: Mapping[str, Mapping[str, Any]]
    kind: str = KIND
    checksums: Mapping[str, str] = field(default_factory=dict)
    training_rows: str = STORED_ROWS  # or NO_ROWS (precomputed kernel)
    extra: Mapping[str, Any] = field(default_factory=dict)  # fields of a newer version, kept
    feature_names: list[str] | None = None  # the features' names, when fitted on named input

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict (a deep copy); ``training_rows`` only when not
        stored, ``feature_names`` only when there are any."""
        out = json.loads(json.dumps(asdict(self)))
        if out["training_rows"] == STORED_ROWS:
            del out["training_rows"]  # the common case: manifests as before
        if out["feature_names"] is None:
            del out["feature_names"]  # unnamed input: manifests (and identities) as before
        extra = out.pop("extra")
        return {**extra, **out}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, note: bool = True) -> ModelManifest:
        """Validate and build: another kind is a StoreError, a newer format a
        StoreVersionError.

        Fields this version does not know (from a newer minor version) are kept
        in ``extra`` (so the manifest's checksum is unchanged) with a note; a
        missing field or one of the wrong type is a StoreIntegrityError.
        """
        if isinstance(data, Mapping) and data.get("kind") == RIDGE_KIND:
            raise StoreError(
                "The store holds a kernel ridge model, not an NPT model: load it with "
                "npt_dask.load_ridge(path) (on the command line: npt ridge --model PATH)."
            )
        if not isinstance(data, Mapping) or data.get("kind") != KIND:
            raise StoreError("The store's 'npt' attribute does not describe an npt model.")
        version = data.get("format_version")
        if isinstance(version, bool) or not isinstance(version, int) or version > FORMAT_VERSION:
            raise StoreVersionError(
                f"The model was written in format version {version!r}; this npt-dask reads "
                f"up to {FORMAT_VERSION}. Upgrade npt-dask to load it."
            )
        names = set(cls.__dataclass_fields__) - {"extra"}
        missing = names - set(data) - {"kind", "checksums", "training_rows", "feature_names"}
        if missing:
            raise StoreIntegrityError(
                f"The model manifest lacks {sorted(missing)}; the store is damaged."
            )
        own = {k: v for k, v in data.items() if k != "extra"}  # "extra" is ours, not a field
        known = parse_fields(cls, own, "the model manifest", note=note)
        check_feature_names(known.get("feature_names"), known["n_features"])
        extra = {k: data[k] for k in data if k not in names}
        return cls(**known, extra=extra)

    def names(self) -> tuple[str, ...] | None:
        """The model's :attr:`~npt_dask.npt.model.NPTModel.feature_names`."""
        return None if self.feature_names is None else tuple(self.feature_names)


def check_feature_names(names: Any, n_features: int, where: str = "The model manifest's") -> None:
    """The optional ``feature_names`` of a manifest (``where`` names it): None, or one
    string per feature."""
    if names is None:
        return
    if not (
        isinstance(names, list)
        and len(names) == n_features
        and all(isinstance(v, str) for v in names)
    ):
        raise StoreIntegrityError(
            f"{where} feature_names is not a list of {n_features} strings; the store is "
            "damaged (or was edited by hand). Save the model again."
        )


_SCALARS: dict[Any, tuple[type, ...]] = {
    int: (int,),
    float: (int, float),
    bool: (bool,),
    str: (str,),
}


def _matches(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint) or hint
    if origin in _SCALARS:
        return isinstance(value, _SCALARS[origin]) and (
            origin is bool or not isinstance(value, bool)
        )
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return isinstance(value, Mapping)
    return True  # arrays and anything else: checked where they are read


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint) or hint
    return f"a {getattr(origin, '__name__', str(origin))}"


def parse_fields(
    cls: type, data: Mapping[str, Any], where: str, *, note: bool = True
) -> dict[str, Any]:
    """The fields of dataclass ``cls`` in ``data``, type-checked (zarr v3's
    ``parse_extra_fields`` manner): a wrong type is a StoreError; a key ``cls``
    does not know (written by a newer npt-dask) is left out with a note."""
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(data) - set(hints))
    if unknown and note:
        warn(
            f"{where} has fields {unknown} that this npt-dask does not know (written by a "
            "newer version?); they are kept in the manifest but not used.",
            StoreWarning,
        )
    out = {}
    for name in set(hints) & set(data):
        if not _matches(data[name], hints[name]):
            raise StoreIntegrityError(
                f"{where}: field {name!r} is {data[name]!r}, not {_type_name(hints[name])}; "
                "the store is damaged (or was edited by hand). Save the model again."
            )
        out[name] = data[name]
    return out


_NOT_IDENTITY = ("created", "package_version")


def manifest_checksum(manifest: ModelManifest) -> str:
    """SHA-256 of the manifest's canonical JSON: the one identity of a model.

    Everything but when and by which version it was written: kernel, shapes,
    centring, diagnostics and every array's SHA-256. A model saved and loaded
    keeps its identity; projection stores record it (:mod:`npt_dask.npt.projection_store`).
    """
    return checksum_of(manifest.to_dict())


def checksum_of(manifest: Mapping[str, Any]) -> str:
    """:func:`manifest_checksum` of a manifest as stored (the ``"npt"`` attribute's JSON),
    before it is parsed: what :func:`save` records beside it as ``npt_checksum``."""
    data = {k: v for k, v in manifest.items() if k not in _NOT_IDENTITY}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def model_identity(model: SavedModel) -> str:
    """:func:`manifest_checksum` of the manifest ``model`` would be saved with.

    Hashes every array once (the training rows chunk by chunk).
    """
    if not model.kernel.storable:  # never saved: an identity of this process only
        return "callable-" + hashlib.sha256(str(id(model)).encode()).hexdigest()
    return manifest_checksum(_manifest(model, _arrays_of(model)))


def array_digest(values: np.ndarray | da.Array) -> str:
    """SHA-256 of an array's bytes, streamed chunk by chunk for dask arrays (a device's
    chunks cross to host one at a time: :func:`on_host`)."""
    digest = hashlib.sha256()
    if isinstance(values, da.Array):
        for block in on_host(values).rechunk({1: -1} if values.ndim == 2 else {}).blocks:
            digest.update(np.ascontiguousarray(block.compute()).tobytes())
    else:
        digest.update(np.ascontiguousarray(values).tobytes())
    return digest.hexdigest()


def on_host(values: da.Array) -> da.Array:
    """A dask array whose chunks live on a device (CuPy's) as one of host chunks: each
    chunk crosses once, in its own task, when it is computed (never gathered); a host
    array as it is."""
    if is_numpy(namespace_and_device(values)[0]):
        return values
    meta = np.empty((0,) * values.ndim, dtype=values.dtype)
    return values.map_blocks(to_host, dtype=values.dtype, meta=meta)  # type: ignore[call-arg, arg-type]


def _codecs() -> list[Any]:
    from zarr.codecs import Crc32cCodec, ZstdCodec

    return [ZstdCodec(level=3), Crc32cCodec()]


def _dense_block(block: Any) -> np.ndarray:
    return block.toarray() if hasattr(block, "toarray") else np.asarray(block)


def _arrays_of(model: SavedModel) -> dict[str, tuple[Any, tuple[str, ...]]]:
    out: dict[str, tuple[Any, tuple[str, ...]]] = {
        "eigenvalues": (model.eigenvalues, ("component",)),
        "eigenvectors": (model.eigenvectors, ("sample", "component")),
        "row_means": (model.row_means, ("sample",)),
        "residuals": (model.diagnostics.residuals, ("component",)),
    }
    if model.kernel.precomputed:
        assert model.train_diagonal is not None
        out["train_diagonal"] = (model.train_diagonal, ("sample",))
    else:
        x = model.x_train
        if hasattr(getattr(x, "_meta", None), "toarray"):  # scipy.sparse chunks: stored dense
            x = x.map_blocks(_dense_block, dtype=x.dtype, meta=np.empty((0, 0), x.dtype))  # type: ignore[call-arg, arg-type]
        out["x_train"] = (x, ("sample", "feature"))
    out.update(moment_arrays(model.moments))
    return out


MOMENTS = "moments_"
"""Prefix of the arrays holding a model's :attr:`~npt_dask.npt.model.NPTModel.moments`."""

_MOMENT_DIMS = {
    "n": (),
    "y_sum": ("component",),
    "t_sum": ("target",),
    "gram": ("component", "component_2"),
    "cross": ("component", "target"),
    "t_norm2": ("target",),
}
_UTF32 = "classes_utf32"  # string classes, as their UTF-32 code points (k, longest)


def storable_classes(classes: np.ndarray) -> tuple[str, np.ndarray] | None:
    """``(array name, values)`` of a moments' classes, None if they cannot be stored
    (numbers and booleans as they are, strings as UTF-32 code points, no objects)."""
    values = np.asarray(classes)
    if values.dtype == object and all(isinstance(v, str) for v in values.tolist()):
        values = values.astype(str)
    if values.dtype.kind in "biuf":
        return "classes", values
    if values.dtype.kind == "U":
        width = max(values.dtype.itemsize // 4, 1)
        codes = np.ascontiguousarray(values.astype(f"<U{width}")).view("<u4")
        return _UTF32, codes.reshape(len(values), width)
    return None


def classes_from_codes(codes: np.ndarray) -> np.ndarray:
    """String classes from the UTF-32 code points :func:`storable_classes` stored."""
    codes = np.ascontiguousarray(codes, dtype="<u4")
    return codes.view(f"<U{codes.shape[1]}").reshape(len(codes))


def moment_arrays(moments: LinearMoments | None) -> dict[str, tuple[Any, tuple[str, ...]]]:
    """The arrays :func:`save` writes for ``moments`` (none if there are none, or if their
    classes are of a kind a store cannot hold: then :func:`save` says so)."""
    if moments is None:
        return {}
    parts = dict(zip(_MOMENT_DIMS, moments.as_tuple(), strict=True))
    out = {
        MOMENTS + name: (np.asarray(parts[name], dtype=np.float64), dims)
        for name, dims in _MOMENT_DIMS.items()
    }
    if moments.classes is not None:
        found = storable_classes(moments.classes)
        if found is None:
            return {}
        name, values = found
        out[MOMENTS + name] = (values, ("target",) if values.ndim == 1 else ("target", "char"))
    return out


def _moments_from(small: Mapping[str, np.ndarray]) -> LinearMoments | None:
    """The moments stored by :func:`moment_arrays` (None if the model has none)."""
    if MOMENTS + "n" not in small:
        return None
    classes = small.get(MOMENTS + "classes")
    if MOMENTS + _UTF32 in small:
        classes = classes_from_codes(small[MOMENTS + _UTF32])
    parts = [small[MOMENTS + name] for name in _MOMENT_DIMS]
    return LinearMoments.from_tuple([float(parts[0]), *parts[1:]], classes)


def _check_storable(model: SavedModel) -> None:
    if not model.kernel.storable:
        raise StoreError(
            f"This model's kernel is the Python function {model.kernel.function_name}; a "
            "function is code, and npt-dask stores no code (no pickle), so the model cannot "
            "be saved. Refit it where the function is defined, or save a model of a named "
            "kernel, or of kernel='precomputed' with the kernel matrix computed by your "
            "function."
        )


def _manifest(model: SavedModel, arrays: Mapping[str, tuple[Any, Any]]) -> ModelManifest:
    diagnostics = model.diagnostics.to_dict()
    diagnostics.pop("residuals")  # stored as an array
    return ModelManifest(
        format_version=FORMAT_VERSION,
        package_version=__version__,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        n_samples=model.n_samples,
        n_features=model.n_features,
        n_components=model.n_components,
        center=model.center,
        grand_mean=float(model.grand_mean),
        precision=str(model.precision),
        chunk_size=model.chunk_size,
        kernel=model.kernel.to_dict(),
        diagnostics=diagnostics,
        training_rows=NO_ROWS if model.kernel.precomputed else STORED_ROWS,
        arrays={
            name: {"shape": list(np.shape(values)), "dtype": str(values.dtype)}
            for name, (values, _) in arrays.items()
        },
        checksums={name: array_digest(values) for name, (values, _) in arrays.items()},
        feature_names=None if model.feature_names is None else list(model.feature_names),
    )


def write_array(group: Any, name: str, values: Any, dims: tuple[str, ...], rows: int) -> None:
    chunks = (rows, *tuple(values.shape[1:])) if dims[:1] == ("sample",) else values.shape
    target = group.create_array(
        name, shape=values.shape, dtype=values.dtype, chunks=chunks,
        compressors=_codecs(), dimension_names=list(dims), fill_value=0,
        config={"write_empty_chunks": True},  # every chunk exists: a missing one is damage
    )  # fmt: skip
    if isinstance(values, da.Array):
        da.store(on_host(values).rechunk(chunks), target, lock=False)
    else:
        target[...] = values


def save(
    model: SavedModel, path: str | os.PathLike, *, overwrite: bool = False, command: str = "npt fit"
) -> Path:
    """Write ``model`` to a zarr v3 group at ``path``, atomically.

    A model already at ``path`` is replaced only with ``overwrite=True``
    (``npt fit --overwrite``; the refusal names ``command``, the command line's
    command that writes such a model: ``"npt grow"`` for a grown one).

    The training rows are copied in the model's precision, chunk by chunk
    (they never pass through one process whole when they are a dask array).

    Notes
    -----
    The training rows are read twice, chunk by chunk: hashed (the manifest's SHA-256),
    then written. A model fitted on a device keeps its rows there: each read crosses
    each chunk to the host once (:func:`on_host`; ``2 n d`` values in all), never the
    whole rows at once; :attr:`~npt_dask.npt.fitted.FittedModel.identity` reads them
    once more, the same way.

    Returns
    -------
    Path of the saved store.
    """
    path = Path(path)
    _check_storable(model)
    check_writable(path, overwrite=overwrite, command=command)
    if model.moments is not None and not moment_arrays(model.moments):
        classes = np.asarray(model.moments.classes)
        warn(
            f"The model's training-pass moments (fit(labels=...)) have class labels of dtype "
            f"{classes.dtype} that a store cannot hold (numbers, booleans and strings can); "
            "the model is saved without them, and npt.load gives moments=None. Pass labels "
            "as numbers or strings to keep them.",
            StoreWarning,
        )
    arrays = _arrays_of(model)
    manifest = _manifest(model, arrays)
    write_group(
        path,
        arrays,
        manifest.to_dict(),
        manifest_checksum(manifest),
        model.chunk_size,
        overwrite=overwrite,
    )
    return path


def check_writable(path: Path, *, overwrite: bool, command: str | None) -> None:
    """Refuse, before any work, a path :func:`check_target` refuses, or one that holds a
    model already unless ``overwrite`` (the refusal names ``command --overwrite``, the
    command line's spelling, when there is one)."""
    check_target(path)
    if (path / "zarr.json").is_file() and not overwrite:
        spelling = f" ({command} --overwrite)" if command else ""
        raise StoreError(
            f"{path} already holds a model; pass overwrite=True to replace it{spelling}, "
            "or choose another path."
        )


def write_group(
    path: Path,
    arrays: Mapping[str, tuple[Any, tuple[str, ...]]],
    manifest: Mapping[str, Any],
    checksum: str,
    rows: int,
    *,
    overwrite: bool,
) -> None:
    """Write ``arrays`` (``name: (values, dimension names)``, a ``"sample"`` first
    dimension chunked by ``rows``) and then, last and in one write, the ``"npt"``
    manifest and its checksum (a store without them is no model) as a zarr v3 group at
    ``path``, atomically (:func:`npt_dask.runtime.atomic.write_into_place`): a killed write
    leaves the previous store, or none, never a partial one that loads. Without
    ``overwrite`` a store another writer put at ``path`` meanwhile is kept (this write is
    refused): ``check_writable`` before the work cannot see a writer that finishes first."""
    import zarr

    recover(path)

    def write(tmp: Path) -> None:
        group = zarr.open_group(str(tmp), mode="w-", zarr_format=3)
        for name, (values, dims) in arrays.items():
            write_array(group, name, values, dims, rows)
        group.attrs.update({"npt": dict(manifest), CHECKSUM: checksum})

    if not _atomic.write_into_place(path, write, replace=overwrite, check=check_target):
        raise StoreInUseError(
            f"Another writer saved a model at {path} while this one was being written; it "
            "is kept as it is and this one was not saved. Save to another path, or pass "
            "overwrite=True to replace it."
        )


def check_target(path: Path) -> None:
    """Refuse, before any work, a path whose parent is a file or that holds other data,
    or one :func:`npt_dask.runtime.places.check_output_place` refuses (inside a zarr store
    or array, in a folder that takes no new file)."""
    check_output_place(path, error=StoreError)
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise StoreError(f"Cannot save to {path}: {parent} is a file, not a directory.")
    if path.exists() and not path.is_dir():
        raise StoreError(
            f"{path} exists and is a file, not a zarr store; refusing to replace it. "
            "Choose another path or remove it."
        )
    if not path.is_dir() or not any(path.iterdir()):
        return
    if not (path / "zarr.json").exists():
        raise StoreError(
            f"{path} exists and is not a zarr store; refusing to replace it. "
            "Choose another path or remove it."
        )
    if not _is_model_store(path):
        raise StoreError(
            f"{path} is a zarr store but not an npt model; refusing to replace it. "
            "Choose another path or remove it."
        )


def _is_model_store(path: Path) -> bool:
    try:
        meta = json.loads((path / "zarr.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "npt" in (meta.get("attributes") or {})


def recover(path: str | os.PathLike) -> bool:
    """Repair what a killed :func:`save` at ``path`` left behind; True if a model was restored.

    A save killed between its two renames leaves nothing at ``path``: the
    swap is finished with its new model when that was complete, else the
    previous model is put back. Temporaries of dead writers (this host,
    process gone) are removed; those of live or remote writers are left alone
    (:func:`npt_dask.runtime.atomic.recover`).
    """
    return _atomic.recover(Path(path), _is_model_store)


def read_manifest(path: str | os.PathLike, *, note: bool = True) -> ModelManifest:
    """The manifest of the model store at ``path`` (no array is read); ``note``: warn
    about fields this version does not know."""
    return _open_manifest(Path(path), note=note)[1]


def open_group(path: Path) -> Any:
    """The zarr group at ``path``, read-only: nothing there is a StoreNotFoundError, a
    group that does not open a StoreIntegrityError."""
    import zarr

    if not (path / "zarr.json").is_file():
        what = "it does not exist" if not path.exists() else "no zarr.json"
        raise StoreNotFoundError(f"{path} is not a zarr store ({what}); nothing to load.")
    try:
        return zarr.open_group(str(path), mode="r", use_consolidated=False)
    except Exception as exc:
        raise StoreIntegrityError(
            f"{path} could not be opened as a zarr group ({type(exc).__name__}: {exc}); its "
            "zarr.json is damaged. Restore the store from a copy or save the model again."
        ) from exc


def _open_manifest(path: Path, *, note: bool = True) -> tuple[Any, ModelManifest]:
    group = open_group(path)
    if "npt" not in group.attrs:
        raise StoreError(f"{path} is a zarr group but not an npt model (no 'npt' attribute).")
    meta = group.attrs["npt"]
    if not isinstance(meta, Mapping):
        raise StoreIntegrityError(
            f"{path}: the 'npt' attribute is not a manifest; the store is damaged."
        )
    manifest = ModelManifest.from_dict(meta, note=note)
    _check_recorded(path, group.attrs.get(CHECKSUM), manifest)
    return group, manifest


def _check_recorded(path: Path, recorded: Any, manifest: ModelManifest) -> None:
    """The manifest's checksum, recorded beside it, must be there and match; and every
    array must have its own checksum. Every npt-dask that writes models records both
    (none ever wrote a model without array checksums), so a store without them was
    altered: it is never read as one of an older version."""
    if recorded is None:
        raise StoreIntegrityError(
            f"{path}: the model manifest has no checksum ({CHECKSUM!r} is missing from its "
            "zarr.json); it was removed after the model was saved, so nothing in the "
            "manifest can be trusted. Restore the store from a copy, or refit and save it."
        )
    if recorded != manifest_checksum(manifest):
        raise StoreIntegrityError(
            f"{path}: the model manifest does not match its checksum; it was altered after "
            "the model was saved (kernel, centring, shapes or diagnostics). Refit and save "
            "the model again, or restore the store from a copy."
        )
    unchecked = sorted(set(manifest.arrays) - set(manifest.checksums))
    if unchecked:
        raise StoreIntegrityError(
            f"{path}: the model manifest lists no checksum for {unchecked}; the store is "
            "damaged (or was edited by hand). Restore it from a copy or save the model again."
        )


def _member(group: Any, name: str, path: Path) -> Any:
    """``group[name]``, a missing or unreadable array a StoreIntegrityError naming it."""
    try:
        return group[name]
    except KeyError:
        raise StoreIntegrityError(
            f"{path} lacks the array {name!r}; the store is damaged."
        ) from None
    except (ValueError, TypeError, OSError) as exc:  # a truncated or edited zarr.json
        raise StoreIntegrityError(
            f"{path}/{name}/zarr.json could not be read ({type(exc).__name__}: {exc}); the "
            "store is damaged. Restore it from a copy or save the model again."
        ) from exc


def checked_array(group: Any, name: str, want: Mapping[str, Any], path: Path) -> Any:
    """``group[name]``, refused as damaged unless its shape and dtype are ``want``'s (a
    manifest's entry for it) and every chunk exists (zarr would fill a missing one)."""
    array = _member(group, name, path)
    if list(array.shape) != list(want["shape"]) or str(array.dtype) != want["dtype"]:
        raise StoreIntegrityError(
            f"{path}/{name} has shape {array.shape} and dtype {array.dtype}; the manifest "
            f"says {tuple(want['shape'])} and {want['dtype']}. The store is damaged."
        )
    if array.nchunks_initialized != array.nchunks:
        raise StoreIntegrityError(
            f"{path}/{name} has {array.nchunks - array.nchunks_initialized} of "
            f"{array.nchunks} chunks missing; the store is damaged."
        )
    return array


def read_array(array: Any, name: str, path: Path) -> np.ndarray:
    try:
        return np.asarray(array[...])
    except ValueError as exc:  # zarr's checksum mismatch
        raise StoreIntegrityError(f"{path}/{name} failed its integrity check: {exc}") from exc


@dataclass(frozen=True)
class StoredModel:
    """What :func:`read` returns: the manifest, the small arrays, the training rows (lazy)
    and the moments of the training pass (None if the model was fitted without them)."""

    path: Path
    manifest: ModelManifest
    arrays: Mapping[str, np.ndarray]
    x_train: da.Array
    identity: str  # manifest_checksum(manifest): the model as read
    moments: LinearMoments | None = None


def _names(manifest: ModelManifest) -> tuple[str, ...]:
    """The arrays a model store holds: those of its kind, and its moments if any."""
    base = _PRECOMPUTED_ARRAYS if manifest.training_rows != STORED_ROWS else _ARRAYS
    return base + tuple(sorted(n for n in manifest.arrays if n.startswith(MOMENTS)))


def read(path: str | os.PathLike, *, verify: bool = True) -> StoredModel:
    """Read a model store written by :func:`save` (use :func:`npt_dask.load` for a model).

    ``verify`` re-computes the SHA-256 of every array against the manifest
    (reads the training rows once, chunk by chunk). CRC32C checks of each
    chunk happen on every read regardless.
    """
    path = Path(path)
    recover(path)
    group, manifest = _open_manifest(path)
    names = _names(manifest)
    arrays = {name: checked_array(group, name, manifest.arrays[name], path) for name in names}
    small = {name: read_array(arrays[name], name, path) for name in names if name != "x_train"}
    if "x_train" in arrays:
        x_train = da.from_array(
            CheckedArray(
                arrays["x_train"], f"{path.resolve()}/x_train", manifest_checksum(manifest)
            ),
            chunks=arrays["x_train"].chunks,
            asarray=False,
            name=f"x_train-{manifest_checksum(manifest)[:16]}",
        )
    else:  # a precomputed kernel: an (n, 0) placeholder that carries the row chunks
        x_train = da.zeros(
            (manifest.n_samples, 0), chunks=(manifest.chunk_size, (0,)), dtype=manifest.precision
        )
    if verify:
        for name in names:
            values = x_train if name == "x_train" else small[name]
            try:
                digest = array_digest(values)
            except ValueError as exc:
                raise StoreIntegrityError(
                    f"{path}/{name} failed its integrity check: {exc}"
                ) from exc
            if digest != manifest.checksums[name]:
                raise StoreIntegrityError(
                    f"{path}/{name} does not match its checksum; it was altered."
                )
    moments = _moments_from(small)
    small = {k: v for k, v in small.items() if not k.startswith(MOMENTS)}
    return StoredModel(
        path.resolve(), manifest, small, x_train, manifest_checksum(manifest), moments
    )


class CheckedArray:
    """A stored zarr array whose reads fail as a StoreError naming it (not zarr's bare
    checksum ``ValueError``); ``da.from_array`` keeps this small object in the graph.

    With an ``identity`` (the manifest checksum the reader loaded), a read that fails is
    first checked against it: a store replaced meanwhile is a :class:`StoreInUseError`,
    not damage; ``each_read`` also checks it after every read that succeeds.
    """

    def __init__(self, array: Any, where: str, identity: str = "", each_read: bool = True) -> None:
        self.array, self.where, self.identity = array, where, identity
        self.each_read = each_read
        self.shape, self.dtype, self.ndim = array.shape, array.dtype, array.ndim

    def __getitem__(self, index: Any) -> np.ndarray:
        store = self.where.rpartition("/")[0]
        try:
            values = np.asarray(self.array[index])
        except StoreError:
            raise
        except ValueError as exc:  # zarr's checksum mismatch, a chunk that does not decode
            check_identity(store, self.identity)  # replaced meanwhile: that, not damage
            raise StoreIntegrityError(
                f"{self.where} failed its integrity check ({exc}); the store is damaged. "
                "Restore it from a copy or save the model again."
            ) from exc
        if self.each_read:
            check_identity(store, self.identity)
        return values


@dataclass(frozen=True)
class StoredTraining:
    """A stored model's training blocks and projection weights, read inside a task.

    Iterating yields ``(x_j, [A_j, 1/n])`` one training block at a time (in
    ``dtype``, the precision of the block products), so a projection task holds
    one training block (``chunk * (d + r + 1)``) instead of the whole training
    set; every chunk is CRC-checked on read. A store replaced while the task reads it
    (another model saved over it, of any shape) is a :class:`StoreInUseError`.
    """

    path: str
    offsets: tuple[int, ...]
    eigenvalues: np.ndarray
    dtype: str = "float64"
    identity: str = ""  # manifest checksum the task must find (empty: not checked)

    def __iter__(self) -> Any:
        import zarr

        self.check_identity()
        try:
            group: Any = zarr.open_group(self.path, mode="r", use_consolidated=False)
            where = Path(self.path)
            x = CheckedArray(_member(group, "x_train", where), f"{self.path}/x_train",
                             self.identity, each_read=False)  # fmt: skip
            u = CheckedArray(_member(group, "eigenvectors", where), f"{self.path}/eigenvectors",
                             self.identity, each_read=False)  # fmt: skip
        except (StoreError, OSError):
            self.check_identity()  # replaced between the check and the opening
            raise
        self.check_identity()  # opened after a replacement: its arrays are another model's
        n = self.offsets[-1]
        for lo, hi in zip(self.offsets[:-1], self.offsets[1:], strict=True):
            w = projection_weights(u[lo:hi], self.eigenvalues, n)
            yield x[lo:hi], w.astype(self.dtype, copy=False)
        self.check_identity()  # every block read came from the recorded model

    def check_identity(self) -> None:
        """Refuse, inside a task, a store that no longer holds the model the run started with."""
        check_identity(self.path, self.identity)


def check_identity(path: str | os.PathLike, identity: str) -> None:
    """Refuse a store at ``path`` that no longer holds the model of checksum ``identity``
    (replaced by a save while a task read it) with a :class:`StoreInUseError`; an empty
    ``identity`` is not checked."""
    if not identity:
        return
    try:
        now = manifest_checksum(_open_manifest(Path(path), note=False)[1])
    except StoreError as exc:
        now = f"unreadable ({exc})"
    if now != identity:
        raise StoreInUseError(
            f"The model at {path} changed while it was in use (its manifest checksum is "
            f"now {now[:16]}..., it was {identity[:16]}... when loaded); nothing computed "
            "from it was kept. Load the model again and rerun."
        )
