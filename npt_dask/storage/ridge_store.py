"""Persisting a fitted kernel ridge estimator as a zarr v3 group, by the model store's
machinery (:mod:`npt_dask.storage.store`: CRC32C-checked chunks, SHA-256 of every array, a
checksummed manifest, atomic writes and recovery); no pickle, no object dtypes.

Layout of ``ridge.zarr``::

    zarr.json      group; attribute "npt" holds the RidgeManifest (kind
                   "npt-kernel-ridge"), "npt_checksum" its checksum
    dual_coef      (centre, target)   float64   the dual coefficients c
    centres        (centre, feature)  the centres' rows, chunked by rows: every training
                   row for exact ridge, the landmark rows with landmarks (absent for
                   kernel="precomputed": predictions take the test x train kernel matrix)
    landmarks      (centre,)          int64     the landmark row indices (landmark models)
    residuals      (iteration,)       float64   CG's relative residual after each iteration
    classes        (class,)           the classifier's classes_ (strings as UTF-32 code
                   points, ``classes_utf32`` (class, char))
    cv_scores      (gamma, alpha)     float64   the CV estimators' held-out scores, and
    cv_fit_rows, cv_held_out_rows     int64     the rows of their subproblem

The manifest holds the estimator's class and hyperparameters (JSON), the resolved
kernel, the shapes, the fitted attributes that are plain values (plan, route,
iterations, seconds, solve details, the CV results), the feature names, and the
npt-dask and scikit-learn versions that wrote it. A model saved by ``npt ridge --out``
also records its *input transform* (:func:`check_input_transform`): what the command
line did to the rows of its files before the fit (images flattened, divided by a
scale), so that ``npt ridge --model`` does the same to the rows it predicts; such a
store is format 2, which an npt-dask that would ignore the transform refuses to read.
A store without one (format 1: saved from Python, or by an earlier npt-dask) is read as
before: the rows are taken as they are given. A load refuses a newer layout
(:class:`~npt_dask.errors.StoreVersionError`), anything altered or damaged
(:class:`~npt_dask.errors.StoreIntegrityError`), and warns
(:class:`~npt_dask.errors.StoreVersionWarning`) when scikit-learn's major.minor
differs from the one that wrote it, or npt-dask is older. A callable kernel is code:
a model with one is refused before anything is written.

This module reads and writes data, never an estimator (the estimators are above it:
:meth:`npt_dask.ridge.regressor.KernelRidge.save`, :func:`npt_dask.ridge.load.load_ridge`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np

from npt_dask._version import __version__
from npt_dask.errors import (
    InputError,
    StoreError,
    StoreIntegrityError,
    StoreVersionError,
    StoreVersionWarning,
    warn,
)
from npt_dask.kernels import KernelSpec
from npt_dask.storage import store
from npt_dask.storage.kinds import refuse_data

__all__ = [
    "FORMAT_VERSION",
    "RidgeManifest",
    "RidgeState",
    "StoredRidge",
    "check_input_transform",
    "plain",
    "read",
    "read_input_transform",
    "read_manifest",
    "save",
]

FORMAT_VERSION = 2
"""The newest layout this npt-dask reads and writes: 2 records an input transform (a
store without one is written as format 1, which every npt-dask reads)."""
_TRANSFORM_FORMAT = 2
KIND = store.RIDGE_KIND
_UTF32 = "classes_utf32"
_CV_ARRAYS = {"scores": ("gamma", "alpha"), "fit_rows": ("row",), "held_out_rows": ("row",)}
CV_PREFIX = "cv_"
"""Prefix of the arrays holding a CV estimator's ``cv_results_`` arrays."""


def _sklearn_version() -> str:
    import sklearn

    return str(sklearn.__version__)


@dataclass(frozen=True)
class RidgeState:
    """What a fitted estimator hands to :func:`save`: its class name, hyperparameters,
    resolved kernel and the arrays and plain values predictions and diagnostics need."""

    estimator: str
    params: Mapping[str, Any]
    kernel: KernelSpec
    precision: str
    n_train: int
    n_features: int
    feature_names: tuple[str, ...] | None
    dual_coef: np.ndarray  # (m, k) float64
    target_ndim: int  # 1: dual_coef_ is (m,)
    centres: Any  # numpy, scipy.sparse or dask rows; None for a precomputed kernel
    landmarks: np.ndarray | None
    residuals: np.ndarray
    fitted: Mapping[str, Any]
    classes: np.ndarray | None = None
    cv_arrays: Mapping[str, np.ndarray] = field(default_factory=dict)
    chunk_size: int = 4096


@dataclass(frozen=True)
class RidgeManifest:
    """Everything about a stored kernel ridge estimator except its arrays; versioned."""

    format_version: int
    package_version: str
    sklearn_version: str
    created: str
    estimator: str
    params: Mapping[str, Any]
    kernel: Mapping[str, Any]
    precision: str
    exact: bool  # every training row a centre (no landmarks)
    n_train: int
    n_centres: int
    n_features: int
    n_targets: int
    target_ndim: int
    chunk_size: int
    fitted: Mapping[str, Any]
    arrays: Mapping[str, Mapping[str, Any]]
    checksums: Mapping[str, str]
    kind: str = KIND
    classes_dtype: str = ""  # the classifier's classes_ dtype ("object": strings as objects)
    param_types: Mapping[str, str] = field(default_factory=dict)  # "tuple", "ndarray:<dtype>"
    feature_names: list[str] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # fields of a newer version, kept
    input_transform: Mapping[str, Any] | None = None  # format 2: what npt ridge did to rows

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict (a deep copy), the ``extra`` fields inlined;
        ``input_transform`` only when there is one (format 1 manifests as before)."""
        out = json.loads(json.dumps(asdict(self)))
        if out["input_transform"] is None:
            del out["input_transform"]
        extra = out.pop("extra")
        return {**extra, **out}

    @classmethod
    def from_dict(cls, data: Any, path: Path) -> RidgeManifest:
        """Validate and build: another kind is a StoreError, a newer layout a
        StoreVersionError, a missing or mistyped field a StoreIntegrityError."""
        if isinstance(data, Mapping) and data.get("kind") == store.KIND:
            raise StoreError(
                f"{path} holds an NPT model, not a kernel ridge model: load it with "
                "npt_dask.load(path)."
            )
        if not isinstance(data, Mapping) or data.get("kind") != KIND:
            raise StoreError(f"{path} is a zarr group but not a kernel ridge model.")
        version = data.get("format_version")
        if isinstance(version, bool) or not isinstance(version, int) or version > FORMAT_VERSION:
            raise StoreVersionError(
                f"{path} was written by npt-dask {data.get('package_version')!r} in kernel "
                f"ridge store format {version!r}; this npt-dask ({__version__}) reads up to "
                f"format {FORMAT_VERSION}. Upgrade npt-dask to load it."
            )
        names = set(cls.__dataclass_fields__) - {"extra"}
        optional = {"kind", "classes_dtype", "param_types", "feature_names", "input_transform"}
        missing = names - set(data) - optional
        if missing:
            raise StoreIntegrityError(
                f"{path}: the kernel ridge manifest lacks {sorted(missing)}; the store is "
                "damaged. Save the model again."
            )
        own = {k: v for k, v in data.items() if k != "extra"}
        known = store.parse_fields(cls, own, f"{path}: the kernel ridge manifest")
        store.check_feature_names(
            known.get("feature_names"), known["n_features"], f"{path}: the manifest's"
        )
        if known.get("input_transform") is not None:
            try:
                check_input_transform(known["input_transform"])
            except ValueError as exc:
                raise StoreIntegrityError(
                    f"{path}: the manifest's input transform is malformed ({exc}); the store "
                    "is damaged. Save the model again."
                ) from None
        return cls(**known, extra={k: data[k] for k in data if k not in names})

    def parameters(self) -> dict[str, Any]:
        """The hyperparameters as given: tuples and numpy arrays as they were."""
        out = dict(self.params)
        for name, kind in self.param_types.items():
            if name in out and isinstance(out[name], list):
                is_array = kind.startswith("ndarray:")
                out[name] = np.asarray(out[name], kind[8:]) if is_array else tuple(out[name])
        return out

    @property
    def checksum(self) -> str:
        """SHA-256 of the manifest's canonical JSON (:func:`npt_dask.storage.store.checksum_of`)."""
        return store.checksum_of(self.to_dict())


@dataclass(frozen=True)
class StoredRidge:
    """What :func:`read` returns: the manifest and every array, read and checked."""

    path: Path
    manifest: RidgeManifest
    arrays: Mapping[str, np.ndarray]

    @property
    def classes(self) -> np.ndarray | None:
        """The classifier's ``classes_`` in their saved dtype (None for a regressor)."""
        if _UTF32 in self.arrays:
            values = store.classes_from_codes(self.arrays[_UTF32])
        elif "classes" in self.arrays:
            values = self.arrays["classes"]
        else:
            return None
        return values.astype(object) if self.manifest.classes_dtype == "object" else values


# --- plain values -------------------------------------------------------------------------


def plain(value: Any, where: str) -> Any:
    """``value`` as JSON values (numpy scalars and arrays as numbers and lists, tuples as
    lists); anything else is a StoreError naming ``where``."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.bool_ | np.integer | np.floating):
        return value.item()
    if isinstance(value, np.dtype):
        return str(value)
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise StoreError(f"{where} has keys that are not strings; a store cannot hold it.")
        return {k: plain(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufU":
        return plain(value.tolist(), where)
    if isinstance(value, list | tuple):
        return [plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise StoreError(
        f"{where} is a {type(value).__name__}, which a store cannot hold (it keeps numbers, "
        "strings, lists and dicts as JSON; no pickle). Pass it as plain values and refit, "
        "or leave it out."
    )


# --- the input transform ------------------------------------------------------------------

_TRANSFORM_KEYS = ("scale", "image_shape")


def check_input_transform(transform: Any) -> dict[str, Any]:
    """``transform`` as stored: ``{"scale": S, "image_shape": [h, w, ...]}``, what the rows
    given to the fit were made from their files by (``npt ridge``): images of
    ``image_shape`` flattened to rows (None: the file held rows), then divided by ``S``
    (None: not divided). An :class:`~npt_dask.errors.InputError` for anything else."""
    if not isinstance(transform, Mapping) or set(transform) != set(_TRANSFORM_KEYS):
        raise InputError(
            f"input_transform must be a dict with the keys {list(_TRANSFORM_KEYS)}; got "
            f"{transform!r}."
        )
    scale, shape = transform["scale"], transform["image_shape"]
    number = isinstance(scale, int | float | np.integer | np.floating) and not isinstance(
        scale, bool
    )
    if scale is not None and not (number and np.isfinite(scale) and scale > 0):
        raise InputError(
            f"input_transform's scale must be a positive number or None; got {scale!r}."
        )
    if shape is not None and not (
        isinstance(shape, list | tuple) and len(shape) >= 2
        and all(isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0
                for v in shape)
    ):  # fmt: skip
        raise InputError(
            f"input_transform's image_shape must be a list of two or more positive sizes "
            f"(an image's shape) or None; got {shape!r}."
        )
    return {
        "scale": None if scale is None else float(scale),
        "image_shape": None if shape is None else [int(v) for v in shape],
    }


# --- save ---------------------------------------------------------------------------------


def _check_storable(state: RidgeState) -> None:
    if not state.kernel.storable:
        raise StoreError(
            f"This {state.estimator}'s kernel is the Python function "
            f"{state.kernel.function_name}; a function is code, and npt-dask stores no code "
            "(no pickle), so the model cannot be saved. Fit it with a named kernel "
            "(kernel='rbf', 'laplacian', ...) to save it, or with kernel='precomputed' and "
            "the kernel matrix your function computes."
        )


def _dense_block(block: Any) -> np.ndarray:
    return block.toarray() if hasattr(block, "toarray") else np.asarray(block)


def _dense_rows(rows: Any, chunk: int) -> Any:
    """The centres' rows, dense: numpy as it is, scipy.sparse and sparse dask chunks made
    dense chunk by chunk (dask)."""
    if not isinstance(rows, da.Array):
        if not hasattr(rows, "toarray"):
            return np.asarray(rows)
        rows = da.from_array(rows.tocsr(), chunks=(chunk, -1), asarray=False)
    if not hasattr(getattr(rows, "_meta", None), "toarray"):
        return rows
    meta = np.empty((0, 0), rows.dtype)
    return rows.map_blocks(_dense_block, dtype=rows.dtype, meta=meta)


def _class_arrays(state: RidgeState) -> dict[str, tuple[Any, tuple[str, ...]]]:
    if state.classes is None:
        return {}
    found = store.storable_classes(state.classes)
    if found is None:
        raise StoreError(
            f"This {state.estimator}'s classes_ have dtype {state.classes.dtype}, which a "
            "store cannot hold (numbers, booleans and strings can; no pickle). Refit with the "
            "labels as numbers or strings to save it."
        )
    name, values = found
    return {name: (values, ("class",) if values.ndim == 1 else ("class", "char"))}


def _arrays(state: RidgeState) -> dict[str, tuple[Any, tuple[str, ...]]]:
    out: dict[str, tuple[Any, tuple[str, ...]]] = {
        "dual_coef": (np.asarray(state.dual_coef, dtype=np.float64), ("centre", "target")),
        "residuals": (np.asarray(state.residuals, dtype=np.float64), ("iteration",)),
    }
    if state.centres is not None:
        out["centres"] = (_dense_rows(state.centres, state.chunk_size), ("sample", "feature"))
    if state.landmarks is not None:
        out["landmarks"] = (np.asarray(state.landmarks, dtype=np.int64), ("centre",))
    out.update(_class_arrays(state))
    for name, values in state.cv_arrays.items():
        out[CV_PREFIX + name] = (np.asarray(values), _CV_ARRAYS[name])
    return out


def _param_types(params: Mapping[str, Any]) -> dict[str, str]:
    """The parameters JSON would turn into lists: tuples and numeric numpy arrays."""
    out = {}
    for name, value in params.items():
        if isinstance(value, tuple):
            out[name] = "tuple"
        elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            out[name] = f"ndarray:{value.dtype}"
    return out


def _manifest(
    state: RidgeState,
    arrays: Mapping[str, tuple[Any, Any]],
    transform: Mapping[str, Any] | None,
) -> RidgeManifest:
    m, k = state.dual_coef.shape
    classes_dtype = "" if state.classes is None else str(np.asarray(state.classes).dtype)
    return RidgeManifest(
        format_version=1 if transform is None else _TRANSFORM_FORMAT,
        package_version=__version__,
        sklearn_version=_sklearn_version(),
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        estimator=state.estimator,
        params=plain(dict(state.params), f"{state.estimator}'s parameter"),
        kernel=state.kernel.to_dict(),
        precision=str(np.dtype(state.precision)),
        exact=state.landmarks is None,
        n_train=int(state.n_train),
        n_centres=int(m),
        n_features=int(state.n_features),
        n_targets=int(k),
        target_ndim=int(state.target_ndim),
        chunk_size=int(state.chunk_size),
        fitted=plain(dict(state.fitted), f"{state.estimator}'s fitted attribute"),
        arrays={
            name: {"shape": list(values.shape), "dtype": str(values.dtype)}
            for name, (values, _) in arrays.items()
        },
        checksums={name: store.array_digest(values) for name, (values, _) in arrays.items()},
        classes_dtype=classes_dtype,
        param_types=_param_types(state.params),
        feature_names=None if state.feature_names is None else list(state.feature_names),
        input_transform=None if transform is None else dict(transform),
    )


def save(
    state: RidgeState,
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
    input_transform: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``state`` to a zarr v3 group at ``path``, atomically (see the module notes),
    with ``input_transform`` (:func:`check_input_transform`) when given.

    Refused before anything is written: a callable kernel, classes or values a store
    cannot hold, a malformed transform, a path holding a file or foreign data, or inside
    a zarr store, a model already there unless ``overwrite``. Returns the path.
    """
    path = Path(path)
    _check_storable(state)
    transform = None if input_transform is None else check_input_transform(input_transform)
    store.check_writable(path, overwrite=overwrite, command=None)
    arrays = _arrays(state)
    manifest = _manifest(state, arrays, transform)
    store.write_group(
        path, arrays, manifest.to_dict(), manifest.checksum, state.chunk_size, overwrite=overwrite
    )
    return path


# --- read ---------------------------------------------------------------------------------


def _check_recorded(path: Path, recorded: Any, manifest: RidgeManifest) -> None:
    """The manifest's recorded checksum must be there and match, and every array must
    have one: a store without them was altered, never read as an older version's."""
    if recorded is None or recorded != manifest.checksum:
        raise StoreIntegrityError(
            f"{path}: the kernel ridge manifest "
            + ("has no checksum" if recorded is None else "does not match its checksum")
            + "; it was altered after the model was saved (parameters, kernel, shapes or "
            "classes). Restore the store from a copy, or refit and save the model again."
        )
    unchecked = sorted(set(manifest.arrays) - set(manifest.checksums))
    if unchecked:
        raise StoreIntegrityError(
            f"{path}: the kernel ridge manifest lists no checksum for {unchecked}; the store "
            "is damaged. Restore it from a copy or save the model again."
        )


def _required(manifest: RidgeManifest) -> set[str]:
    """The arrays a store of this manifest must hold."""
    names = {"dual_coef", "residuals"}
    if manifest.kernel.get("name") != "precomputed":
        names.add("centres")
    if not manifest.exact:
        names.add("landmarks")
    if manifest.classes_dtype:
        names.add(_UTF32 if _UTF32 in manifest.arrays else "classes")
    return names


def _check_shapes(path: Path, manifest: RidgeManifest) -> None:
    """The arrays' recorded shapes agree with the manifest's sizes."""
    want = {"dual_coef": [manifest.n_centres, manifest.n_targets]}
    if "centres" in manifest.arrays:
        want["centres"] = [manifest.n_centres, manifest.n_features]
    if "landmarks" in manifest.arrays:
        want["landmarks"] = [manifest.n_centres]
    for name, shape in want.items():
        if list(manifest.arrays[name]["shape"]) != shape:
            raise StoreIntegrityError(
                f"{path}/{name}: the manifest records shape {manifest.arrays[name]['shape']}, "
                f"not {shape}; the store is damaged. Save the model again."
            )


def _major_minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"\s*(\d+)\.(\d+)", version)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def _check_versions(path: Path, manifest: RidgeManifest) -> None:
    """Warn when scikit-learn's major.minor is not the saving one's, or npt-dask is older."""
    saved, here = manifest.sklearn_version, _sklearn_version()
    if _major_minor(saved) != _major_minor(here):
        warn(
            f"{path} was saved under scikit-learn {saved}; this is scikit-learn {here}. "
            "The model loads and predicts by npt-dask's own code, but its scikit-learn "
            f"estimator state (input checks, tags, classes) may behave otherwise: install "
            f"scikit-learn {saved} to use it as saved, or refit it under this one.",
            StoreVersionWarning,
        )
    written, ours = _major_minor(manifest.package_version), _major_minor(__version__)
    if written is not None and ours is not None and written > ours:
        warn(
            f"{path} was saved by npt-dask {manifest.package_version}, newer than this "
            f"npt-dask ({__version__}); its format ({manifest.format_version}) is one this "
            "version reads, but upgrade npt-dask to use it as saved.",
            StoreVersionWarning,
        )


def read_input_transform(path: str | os.PathLike) -> dict[str, Any] | None:
    """The input transform recorded in the kernel ridge store at ``path``
    (:func:`check_input_transform`'s form), None for a store that records none (saved
    from Python, or by an earlier npt-dask); only the manifest is read."""
    transform = _open(Path(path))[1].input_transform
    return None if transform is None else dict(transform)


def read(path: str | os.PathLike, *, verify: bool = True) -> StoredRidge:
    """Read a kernel ridge store written by :func:`save` (use
    :func:`npt_dask.ridge.load.load_ridge` for an estimator).

    Every array is read whole (the centres too: predictions hold them); each chunk's
    CRC32C is checked on the read, and with ``verify`` every array's SHA-256.
    """
    path = Path(path)
    group, manifest = _open(path)
    absent = sorted(_required(manifest) - set(manifest.arrays))
    if absent:
        raise StoreIntegrityError(f"{path}: the manifest lists no {absent}; the store is damaged.")
    _check_shapes(path, manifest)
    arrays = {}
    for name, want in manifest.arrays.items():
        array = store.checked_array(group, name, want, path)
        arrays[name] = store.read_array(array, name, path)
        if verify and store.array_digest(arrays[name]) != manifest.checksums[name]:
            raise StoreIntegrityError(f"{path}/{name} does not match its checksum; it was altered.")
    _check_versions(path, manifest)
    return StoredRidge(path.resolve(), manifest, arrays)


def read_manifest(path: str | os.PathLike) -> RidgeManifest:
    """The manifest of the kernel ridge store at ``path``, checked against its recorded
    checksum; no array is read (``npt info``)."""
    return _open(Path(path))[1]


def _open(path: Path) -> tuple[Any, RidgeManifest]:
    """The store's group and its checked manifest (a killed save recovered first)."""
    store.recover(path)
    refuse_data(path, "a kernel ridge model")  # data or a projection: said as such
    group = store.open_group(path)
    if "npt" not in group.attrs:
        raise StoreError(f"{path} is a zarr group but not a kernel ridge model (no 'npt').")
    manifest = RidgeManifest.from_dict(group.attrs["npt"], path)
    _check_recorded(path, group.attrs.get(store.CHECKSUM), manifest)
    return group, manifest
