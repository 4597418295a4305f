"""Data sets: loaders for ``.npz`` files with arrays ``x`` (samples) and ``y`` (labels),
and a seeded generator of deformed MNIST digits written to zarr.

npt-dask never ships data. Point these loaders at your own files, or set
``NPT_DATA_DIR`` to a folder holding them (``mnist.npz``,
``fashion_mnist_8class.npz``, ``covertype_odds.npz``). Files are read with
``allow_pickle=False``.

:func:`deformed_mnist` grows MNIST's 60,000 training digits to any number of
rows in the manner of infiMNIST/MNIST8M: row ``i`` beyond the originals is
original ``i mod n_originals`` under a random affine map (rotation, scale,
shear, shift) and an elastic distortion (Simard et al. 2003: a uniform random
displacement field smoothed by a Gaussian of width ``sigma`` and scaled by
``alpha``). Row ``i``'s randomness comes from ``numpy.random.default_rng([seed,
i])`` alone, so the rows do not depend on chunk size, chunk order or the number
of workers. :func:`write_deformed_mnist` writes them to a zarr v3 store once,
each dask task generating and writing its own rows, atomically.

:func:`pixel_scale` is the one rule telling raw 8-bit pixels (to be divided by 255)
from rows to be taken as they are (``npt ridge`` applies it).

Layer: numpy and scipy.ndimage for the images; dask, xarray and zarr only in
the lazy and writing functions.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from npt_dask.errors import InputError, InputTypeError
from npt_dask.params.constraints import INT, REAL, Interval, Param, check_table, table_defaults
from npt_dask.runtime import atomic as _atomic
from npt_dask.runtime.places import check_output_place

__all__ = [
    "DATA_DIR_ENV",
    "DEFORMATION_PARAMS",
    "GENERATE_PARAMS",
    "GENERATORS",
    "MNIST_TRAIN_ROWS",
    "PIXEL_SCALE",
    "Deformation",
    "array_shape",
    "data_path",
    "deformed_mnist",
    "find_file",
    "first_per_class",
    "generated_mismatch",
    "generator_params",
    "load_npz",
    "open_generated",
    "pixel_scale",
    "raw_pixels",
    "read_numpy",
    "recover_generated",
    "write_deformed_mnist",
]

DATA_DIR_ENV = "NPT_DATA_DIR"


def data_path(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Path of ``name`` in ``data_dir`` or ``$NPT_DATA_DIR``; a clear error if absent."""
    base = data_dir or os.environ.get(DATA_DIR_ENV)
    if not base:
        raise InputError(
            f"No data directory given: pass data_dir or set {DATA_DIR_ENV} to the folder "
            f"holding {name!r}.",
            spellings={"data_dir": "--data-dir"},
        )
    path = Path(base) / name
    if not path.is_file():
        raise InputError(
            f"{path} does not exist; check data_dir or ${DATA_DIR_ENV}.",
            spellings={"data_dir": "--data-dir"},
        )
    return path


def _find(path: str | os.PathLike) -> Path:
    """``path`` itself if it is a file, else ``$NPT_DATA_DIR/path`` for a relative one."""
    given = Path(path)
    tried = [given.absolute()]
    if given.is_file():
        return given
    base = os.environ.get(DATA_DIR_ENV)
    if base and not given.is_absolute():
        candidate = Path(base) / given
        if candidate.is_file():
            return candidate
        tried.append(candidate.absolute())
    where = " or ".join(str(t) for t in tried)
    hint = (
        ""
        if base or given.is_absolute()
        else f"; set {DATA_DIR_ENV} to the folder holding it, or give its full path"
    )
    raise InputError(f"No file {os.fspath(path)!r}: looked for {where}{hint}.")


def find_file(path: str | os.PathLike) -> Path:
    """``path`` itself if it is a file, else ``$NPT_DATA_DIR/path`` for a relative one (as
    :func:`load_npz` looks a file up); an :class:`~npt_dask.errors.InputError` naming
    every place looked in when neither exists."""
    return _find(path)


T = TypeVar("T")


def read_numpy(path: str | os.PathLike, read: Callable[[], T]) -> T:
    """``read()`` of the ``.npy``/``.npz`` file ``path``, numpy's errors as one clear
    :class:`~npt_dask.errors.InputError`: a file of Python objects (pickled data, an
    object array) is refused, never loaded (every read here passes
    ``allow_pickle=False``: unpickling can run code)."""
    try:
        return read()
    except InputError:
        raise  # ours already: a missing array, rows of the wrong shape
    except (ValueError, EOFError) as exc:
        text = str(exc)
        if any(w in text for w in ("pickle", "Python objects", "Object arrays")):
            raise InputError(
                f"{os.fspath(path)} holds Python objects (pickled data, or an object array), "
                "which npt-dask never loads: unpickling can run code. Save the rows as a "
                "numeric array instead, e.g. np.save(path, np.asarray(x, dtype=np.float64))."
            ) from None
        raise InputError(f"{os.fspath(path)} is not a readable numpy file ({text}).") from None


def load_npz(
    path: str | os.PathLike,
    *,
    rows: slice | None = None,
    scale: float | None = None,
    dtype: Any = np.float64,
) -> tuple[np.ndarray, np.ndarray]:
    """Load ``x`` flattened to ``(n, d)`` and ``y`` from an ``.npz`` file.

    Parameters
    ----------
    path : path-like
        File with arrays ``x`` (n, ...) and ``y`` (n,).
    rows : slice, optional
        Rows to keep (e.g. ``slice(0, 60000)`` for MNIST's training split).
    scale : float, optional
        Divide ``x`` by this (``255`` maps pixels to [0, 1]).
    dtype : dtype, default float64
        dtype of the returned ``x``.

    A relative ``path`` not found from the current directory is looked up in
    ``$NPT_DATA_DIR``: ``load_npz("mnist.npz")`` reads ``$NPT_DATA_DIR/mnist.npz``.
    """
    path = _find(path)
    x, y = read_numpy(path, lambda: _x_and_y(path))
    if rows is not None:
        x, y = x[rows], y[rows]
    x = x.reshape(len(x), -1).astype(dtype)
    if scale is not None:
        x /= scale
    return x, y


def array_shape(
    path: str | os.PathLike, *, key: str | None = None, var: str | None = None
) -> tuple[int, ...]:
    """The shape of the rows a data file holds, from its header alone (no row is read):
    a ``.npy`` file, array ``key`` (default ``x``) of a ``.npz``, a zarr array, or variable
    ``var`` of a zarr group (an xarray dataset). An
    :class:`~npt_dask.errors.InputError` naming the file when it holds no such array."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path} does not exist.")
    try:
        if path.suffix == ".npy":
            return tuple(np.load(path, mmap_mode="r", allow_pickle=False).shape)
        if path.suffix == ".npz":
            return _npz_shape(path, key or "x")
        return _zarr_shape(path, var)
    except InputError:
        raise
    except Exception as exc:  # numpy, zipfile and zarr each raise their own kinds
        raise InputError(
            f"{path} is not a readable .npy or .npz file, zarr array or xarray dataset in "
            f"zarr ({type(exc).__name__}: {exc})."
        ) from None


def _npz_shape(path: Path, key: str) -> tuple[int, ...]:
    import zipfile

    with zipfile.ZipFile(path) as archive:
        names = [n.removesuffix(".npy") for n in archive.namelist()]
        if key not in names:
            raise InputError(f"{path} has no array {key!r}; it has {names}.")
        with archive.open(f"{key}.npy") as member:
            version = np.lib.format.read_magic(member)
            read = {(1, 0): np.lib.format.read_array_header_1_0}.get(
                version, np.lib.format.read_array_header_2_0
            )
            shape = read(member, max_header_size=1 << 20)[0]
    return tuple(int(v) for v in shape)


def _zarr_shape(path: Path, var: str | None) -> tuple[int, ...]:
    import zarr

    node = zarr.open(str(path), mode="r")
    if isinstance(node, zarr.Array):
        return tuple(node.shape)
    if var is None or var not in node:
        raise InputError(
            f"{path} is a zarr group; name its variable of rows (var) among "
            f"{sorted(name for name, _ in node.arrays())}."
        )
    member = node[var]
    if not isinstance(member, zarr.Array):
        raise InputError(f"{path}/{var} is a zarr group, not an array of rows.")
    return tuple(member.shape)


# --- 8-bit pixels ----------------------------------------------------------------------------

PIXEL_SCALE = 255.0
"""What raw 8-bit pixels are divided by to lie in [0, 1] (``load_npz(scale=255)``)."""

PIXEL_SAMPLE_ROWS = 4096
"""The rows of a lazy array :func:`raw_pixels` reads (an array in memory is read whole)."""


def _sample(x: Any) -> np.ndarray:
    """The values :func:`raw_pixels` looks at: all of an array in memory, the first
    :data:`PIXEL_SAMPLE_ROWS` rows of a lazy one (dask, xarray: one small read)."""
    values = getattr(x, "data", x) if hasattr(x, "dims") else x  # an xarray variable
    if isinstance(values, np.ndarray):
        return values
    head = values[:PIXEL_SAMPLE_ROWS]
    return np.asarray(head.compute() if hasattr(head, "compute") else head)


def _whole_bytes(values: np.ndarray) -> bool:
    """Whether ``values`` are whole numbers in [0, 255] (none: vacuously)."""
    if values.size == 0:
        return True
    if not (values.min() >= 0 and values.max() <= 255):
        return False
    return bool(np.issubdtype(values.dtype, np.integer) or np.all(values == np.round(values)))


def _numeric(dtype: Any) -> bool:
    return bool(np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating))


def raw_pixels(x: Any) -> bool:
    """Whether the values of ``x`` could be raw 8-bit pixels: whole numbers in [0, 255]
    (all of an array in memory; the first :data:`PIXEL_SAMPLE_ROWS` rows of a lazy one).
    Rows already divided by 255 (fractions in [0, 1]) are not."""
    return _numeric(x.dtype) and _whole_bytes(_sample(x))


def pixel_scale(x: Any) -> float | None:
    """:data:`PIXEL_SCALE` when ``x`` holds raw 8-bit pixels, else None: the rule by which
    ``npt ridge`` divides rows by 255 when ``--scale`` is not given.

    Raw 8-bit pixels are

    * stored as ``uint8``, or as images -- three dimensions or more, ``(n, height,
      width[, channels])`` -- of another numeric type;
    * whole numbers in [0, 255] (:func:`raw_pixels`: all values of an array in memory,
      the first :data:`PIXEL_SAMPLE_ROWS` rows of a lazy one);
    * reaching the upper half of that range (maximum at least 128): small counts and
      small-range images are not 8-bit pixels (scikit-learn's digits, 0 to 16; binary
      masks, 0 and 1), nor are rows already divided by 255.

    Rows of two dimensions of any other type are tabular and never scaled: their
    units are the user's (covertype's ``int16`` columns reach 7,173; a float column of
    whole numbers in [0, 255] may be a count).
    """
    dtype = np.dtype(x.dtype)
    if not (dtype == np.uint8 or (len(x.shape) >= 3 and _numeric(dtype))):
        return None
    values = _sample(x)
    if not _whole_bytes(values) or values.size == 0 or values.max() < 128:
        return None
    return PIXEL_SCALE


def _x_and_y(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        missing = {"x", "y"} - set(data.files)
        if missing:
            raise InputError(f"{path} lacks arrays {sorted(missing)}; it needs 'x' and 'y'.")
        return data["x"], data["y"]


def first_per_class(
    labels: np.ndarray, classes: tuple | list | None = None, per_class: int | None = None
) -> np.ndarray:
    """Indices (ascending) of the first ``per_class`` rows of each class in ``classes``.

    ``classes=None`` keeps every class, ``per_class=None`` every row of them.

    >>> first_per_class(np.array([2, 4, 2, 7, 2, 4]), classes=(2, 4), per_class=2)
    array([0, 1, 2, 5])
    """
    labels = np.asarray(labels)
    keep = np.unique(labels) if classes is None else np.asarray(classes)
    rows = [np.flatnonzero(labels == c)[:per_class] for c in keep]
    return np.sort(np.concatenate(rows)) if rows else np.zeros(0, dtype=np.intp)


# --------------------------------------------------------------------------
# Deformed MNIST (infiMNIST-style): seeded, per-row randomness, written once.

MNIST_TRAIN_ROWS = 60_000
"""MNIST's training rows are ``0 .. 59,999`` of ``mnist.npz``; the rest are test rows."""

GENERATED_ATTR = "npt_generated"
"""Store attribute naming the generator; written last, so a half-written store has none."""


def _range(name: str, default: float, help: str, high: float | None = None) -> Param:
    closed = "both" if high is None else "left"
    return Param(name, (Interval(REAL, 0, high, closed),), default, help)


DEFORMATION_PARAMS: tuple[Param, ...] = (
    _range("rotation", 10.0, "degrees, drawn in [-rotation, rotation]"),
    dataclasses.replace(
        _range("scale", 0.1, "per axis, a factor drawn in [1 - scale, 1 + scale]", high=1),
        hint="The scale factor is 1 ± scale, which must stay positive.",
    ),
    _range("shear", 0.15, "drawn in [-shear, shear]"),
    _range("shift", 1.0, "pixels per axis, drawn in [-shift, shift]"),
    _range("alpha", 20.0, "pixels of the elastic field (0: none)"),
    _range("sigma", 4.0, "pixels of the elastic field's Gaussian smoothing (> 0 with alpha)"),
)
""":class:`Deformation`'s ranges, in field order, with their defaults."""

_RANGES = table_defaults(DEFORMATION_PARAMS)

GENERATE_PARAMS: tuple[Param, ...] = (
    Param("n_rows", (Interval(INT, 1, None),), 1_000_000, "rows of the deformed set"),
    Param("seed", (Interval(INT, 0, None),), 0, "seed of every row's deformation"),
    Param("chunk_size", (Interval(INT, 1, None),), 10_000, "rows per chunk"),
)
"""The counts of :func:`deformed_mnist`, :func:`write_deformed_mnist` and a pipeline
config's ``[data] generate`` table."""

_COUNTS = table_defaults(GENERATE_PARAMS)


def _counts(values: Mapping[str, Any], owner: str) -> dict[str, int]:
    """``values`` checked by :data:`GENERATE_PARAMS` (the error naming ``owner``), as ints."""
    return {name: int(v) for name, v in check_table(GENERATE_PARAMS, values, owner=owner).items()}


@dataclass(frozen=True)
class Deformation:
    """Ranges of the random distortions; each deformed row draws its own values.

    ``rotation`` (degrees), ``shear`` and ``shift`` (pixels, per axis) are drawn
    uniformly in ``[-value, value]``, the scale per axis in ``[1 - scale,
    1 + scale]``. The elastic field (Simard et al. 2003) is uniform noise in
    [-1, 1] per pixel and axis, smoothed by a Gaussian of width ``sigma``
    pixels and multiplied by ``alpha`` pixels; ``alpha = 0`` turns it off.
    """

    rotation: float = _RANGES["rotation"]
    scale: float = _RANGES["scale"]
    shear: float = _RANGES["shear"]
    shift: float = _RANGES["shift"]
    alpha: float = _RANGES["alpha"]
    sigma: float = _RANGES["sigma"]

    def __post_init__(self) -> None:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name, value in check_table(DEFORMATION_PARAMS, values, owner="Deformation").items():
            object.__setattr__(self, name, float(value))
        if self.alpha > 0 and self.sigma == 0:
            raise InputError("Deformation sigma must be > 0 when alpha > 0 (or set alpha = 0).")


def _as_images(source_x: Any, source_y: Any) -> tuple[np.ndarray, np.ndarray]:
    """The originals as ``(n, h, w)`` (uint8 kept, else float32 in [0, 1]) and their labels."""
    x, y = np.asarray(source_x), np.asarray(source_y)
    if x.ndim == 2:
        side = math.isqrt(x.shape[1])
        if side * side != x.shape[1]:
            raise InputError(
                f"source_x rows have {x.shape[1]} features, not a square image; "
                "pass images shaped (n, height, width)."
            )
        x = x.reshape(len(x), side, side)
    if x.ndim != 3 or len(x) == 0:
        raise InputError(f"source_x must be images shaped (n, height, width); got {x.shape}.")
    if y.shape != (len(x),):
        raise InputError(f"source_y must have one label per image ({len(x)}); got {y.shape}.")
    if x.dtype == np.uint8:
        return x, y
    if not np.issubdtype(x.dtype, np.floating) and not np.issubdtype(x.dtype, np.integer):
        raise InputTypeError(f"source_x must be uint8 or real pixels; got dtype {x.dtype}.")
    x = x.astype(np.float32)
    if not np.isfinite(x).all() or x.min() < 0 or x.max() > 1:
        raise InputError(
            "source_x pixels must be uint8 (0..255) or floats in [0, 1]; "
            "divide 0..255 pixels by 255."
        )
    return x, y


def _affine(rng: np.random.Generator, d: Deformation) -> np.ndarray:
    """One row's 2 x 3 map from output pixel (about the centre) to input pixel."""
    angle, shear = np.deg2rad(d.rotation) * rng.uniform(-1, 1), d.shear * rng.uniform(-1, 1)
    sy, sx = 1 + d.scale * rng.uniform(-1, 1, size=2)
    shift = d.shift * rng.uniform(-1, 1, size=2)
    c, s = math.cos(angle), math.sin(angle)
    rotate = np.array([[c, -s], [s, c]])
    stretch = np.array([[1 / sy, 0.0], [shear, 1 / sx]])
    return np.column_stack([rotate @ stretch, shift])


def _deform(images: np.ndarray, rows: np.ndarray, seed: int, d: Deformation) -> np.ndarray:
    """Deform ``images`` (b, h, w), drawing image ``k``'s randomness from ``[seed, rows[k]]``.

    All images in one call: the elastic fields are smoothed as one stacked
    array and the images resampled (bilinear, zero outside) by one
    ``map_coordinates``; only the draws are per row.
    """
    from scipy import ndimage

    b, h, w = images.shape
    maps, fields = np.empty((b, 2, 3)), np.empty((b, 2, h, w))
    for k, row in enumerate(rows):
        rng = np.random.default_rng([seed, int(row)])
        maps[k] = _affine(rng, d)
        fields[k] = rng.uniform(-1, 1, size=(2, h, w))
    if d.alpha > 0:
        fields = d.alpha * ndimage.gaussian_filter(fields, (0, 0, d.sigma, d.sigma))
    else:
        fields[:] = 0
    centre = np.array([(h - 1) / 2, (w - 1) / 2])
    grid = np.stack(np.meshgrid(np.arange(h), np.arange(w), indexing="ij")) - centre[:, None, None]
    where = np.einsum("bij,jhw->bihw", maps[:, :, :2], grid)
    where += (maps[:, :, 2] + centre)[:, :, None, None] + fields
    index = np.broadcast_to(np.arange(b, dtype=float)[:, None, None], (b, h, w))
    coords = np.stack([index, where[:, 0], where[:, 1]])
    out = ndimage.map_coordinates(images, coords, order=1, mode="constant", cval=0.0)
    return np.clip(out, 0.0, 1.0, out=out)


def _rows_block(
    rows: np.ndarray,
    images: np.ndarray,
    *,
    seed: int,
    deformation: Deformation,
    originals: bool,
) -> np.ndarray:
    """Flattened float32 rows ``rows`` of the deformed set (the originals stay as they are)."""
    n0 = len(images)
    source = images[rows % n0]
    source = source / np.float32(255) if source.dtype == np.uint8 else source
    source = source.astype(np.float32, copy=False)
    out = source.reshape(len(rows), -1).copy()
    todo = rows >= n0 if originals else np.ones(len(rows), dtype=bool)
    if todo.any():
        out[todo] = _deform(source[todo], rows[todo], seed, deformation).reshape(
            int(todo.sum()), -1
        )
    return out


def deformed_mnist(
    source_x: Any,
    source_y: Any,
    n_rows: int,
    seed: int = _COUNTS["seed"],
    chunk_size: int = _COUNTS["chunk_size"],
    *,
    deformation: Deformation | None = None,
    originals: bool = True,
) -> tuple[Any, Any]:
    """Lazy ``(x, y)``: ``n_rows`` digits grown from ``source_x`` by random deformations.

    Parameters
    ----------
    source_x : array (n0, h, w) or (n0, h * w)
        The originals: uint8 pixels (0..255) or floats in [0, 1]. For MNIST,
        the 60,000 training rows only (never the test rows).
    source_y : array (n0,)
        Their labels.
    n_rows : int
        Rows to generate.
    seed : int
        Row ``i`` (a deformation of original ``i mod n0``) draws from
        ``numpy.random.default_rng([seed, i])``: same seed, same rows, however
        they are chunked or scheduled.
    chunk_size : int
        Rows per dask chunk (one task generates one chunk).
    deformation : Deformation, optional
        Ranges of the distortions (defaults: :class:`Deformation`).
    originals : bool, default True
        Rows ``0 .. n0 - 1`` are the originals themselves (then ``n_rows`` must
        be at least ``n0``); with False every row is deformed.

    Returns
    -------
    x : dask array (n_rows, h * w), float32 in [0, 1]
    y : dask array (n_rows,), the labels of the originals
    """
    import dask.array as da

    from npt_dask.runtime.scheduler import keep_blocks

    images, labels = _as_images(source_x, source_y)
    counts = {"n_rows": n_rows, "seed": seed, "chunk_size": chunk_size}
    n_rows, seed, chunk_size = _counts(counts, "deformed_mnist").values()
    deformation = deformation or Deformation()
    if not isinstance(deformation, Deformation):
        raise InputTypeError(
            f"deformation must be a datasets.Deformation; got {type(deformation).__name__}."
        )
    if originals and n_rows < len(images):
        raise InputError(
            f"n_rows={n_rows} is fewer than the {len(images)} originals it starts with; "
            f"ask for n_rows >= {len(images)}, or pass originals=False."
        )
    rows = da.arange(n_rows, chunks=chunk_size)
    # under a distributed client the originals are sent to the cluster once, kept with
    # lineage (the graph holds a reference); locally the tasks share the array itself
    shared = keep_blocks([images])[0]
    x = da.map_blocks(
        _rows_block, rows, shared,
        seed=seed, deformation=deformation, originals=bool(originals),
        new_axis=1, chunks=(rows.chunks[0], (images.shape[1] * images.shape[2],)),
        dtype=np.float32, meta=np.empty((0, 0), dtype=np.float32),
    )  # fmt: skip
    y = da.from_array(labels, chunks=-1)[rows % len(images)]
    return x, y.rechunk(rows.chunks)


def _refuse_foreign(path: Path, overwrite: bool) -> None:
    """Refuse a ``path`` that exists unless ``overwrite`` and it is a generated store."""
    if not path.exists():
        return
    if not overwrite:
        raise InputError(f"{path} exists; remove it or pass overwrite=True to regenerate it.")
    try:
        open_generated(path)
    except InputError as exc:
        raise InputError(
            f"{path} exists and is not a store written by write_deformed_mnist; "
            "refusing to replace it. Choose another path or remove it."
        ) from exc


def write_deformed_mnist(
    path: str | os.PathLike,
    n_rows: int = _COUNTS["n_rows"],
    seed: int = _COUNTS["seed"],
    *,
    source: str | os.PathLike = "mnist.npz",
    chunk_size: int = _COUNTS["chunk_size"],
    deformation: Deformation | None = None,
    originals: bool = True,
    overwrite: bool = False,
) -> Path:
    """Write :func:`deformed_mnist` rows to a zarr v3 store at ``path``, atomically.

    The store is an xarray Dataset: ``x`` (sample, feature) float32 in [0, 1],
    ``y`` (sample) labels, attributes ``seed``, ``source``, ``n_originals``,
    ``n_rows``, ``originals`` and the deformation ranges. Each dask task (on the workers
    when a ``distributed`` client is active) generates one chunk of rows and
    writes it. The store is written under a temporary name beside ``path``
    and renamed into place when complete: an interrupted write leaves no
    store at ``path`` (read it with :func:`open_generated`).

    ``source`` is an ``.npz`` with MNIST's layout (``x`` uint8 images, ``y``
    labels); only its training rows ``0 .. 59,999`` are used. A relative
    ``source`` is looked up in ``$NPT_DATA_DIR`` as :func:`load_npz` does.
    """
    path = Path(path)
    n_rows, seed = _counts({"n_rows": n_rows, "seed": seed}, "write_deformed_mnist").values()
    check_output_place(path)  # inside a zarr store, or in a folder that takes no file
    recover_generated(path)
    _refuse_foreign(path, overwrite)
    found = _find(source)
    with np.load(found, allow_pickle=False) as data:
        images, labels = data["x"][:MNIST_TRAIN_ROWS], data["y"][:MNIST_TRAIN_ROWS]
    deformation = deformation or Deformation()
    x, y = deformed_mnist(
        images, labels, n_rows, seed, chunk_size, deformation=deformation, originals=originals
    )
    attrs = {
        "seed": seed, "source": found.name, "n_originals": len(images), "n_rows": n_rows,
        "originals": bool(originals), "deformation": dataclasses.asdict(deformation),
    }  # fmt: skip
    _write_atomically(path, x, y, attrs, chunk_size)
    return path


def _write_atomically(path: Path, x: Any, y: Any, attrs: dict, chunk_size: int) -> None:
    """Write the store under an owner-tagged temporary name beside ``path`` and move it
    into place (:func:`npt_dask.runtime.atomic.write_into_place`): a killed write leaves no
    store at ``path``, and its temporary is removed by the next write or open."""
    import xarray as xr
    import zarr

    ds = xr.Dataset({"x": (("sample", "feature"), x), "y": (("sample",), y)}, attrs=attrs)

    def write(tmp: Path) -> None:
        encoding = {"x": {"chunks": (chunk_size, x.shape[1])}, "y": {"chunks": (chunk_size,)}}
        ds.to_zarr(tmp, mode="w-", zarr_format=3, consolidated=False, encoding=encoding)
        zarr.open_group(str(tmp), mode="r+").attrs[GENERATED_ATTR] = "deformed_mnist"

    _atomic.write_into_place(path, write, replace=True)  # overwrite=True: checked before


def _is_generated(path: Path) -> bool:
    """Whether ``path`` holds a complete store of :func:`write_deformed_mnist` (its
    generator attribute is written last)."""
    try:
        meta = json.loads((path / "zarr.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and GENERATED_ATTR in (meta.get("attributes") or {})


def recover_generated(path: str | os.PathLike) -> bool:
    """Repair what a killed :func:`write_deformed_mnist` at ``path`` left: a store stranded
    beside ``path`` by a swap killed between its renames is moved back, and the
    temporaries of dead writers are removed (live writers' are left alone). True if a
    store was moved into place."""
    return _atomic.recover(Path(path), _is_generated)


def open_generated(path: str | os.PathLike) -> Any:
    """The xarray Dataset (lazy, chunk by chunk) of a store :func:`write_deformed_mnist` wrote.

    A missing, foreign or incomplete store raises :class:`InputError`.
    """
    import xarray as xr

    path = Path(path)
    recover_generated(path)
    if not (path / "zarr.json").is_file():
        raise InputError(f"{path} is not a zarr store; write it with write_deformed_mnist.")
    try:
        ds = xr.open_zarr(path, consolidated=False)
    except Exception as exc:
        raise InputError(f"{path} could not be opened as a zarr dataset: {exc}") from exc
    if GENERATED_ATTR not in ds.attrs or not {"x", "y"} <= set(ds.data_vars):
        raise InputError(
            f"{path} is not a complete generated store (no {GENERATED_ATTR!r} attribute: "
            "foreign or interrupted); remove it and write it again with write_deformed_mnist."
        )
    return ds


GENERATORS = ("deformed_mnist",)
"""Names a pipeline's ``[data] generate`` table may give."""


def generator_params(values: Mapping[str, Any]) -> dict[str, Any]:
    """A config's generator table as keyword arguments of :func:`write_deformed_mnist`.

    ``values`` holds ``name = "deformed_mnist"`` and any of ``n_rows``,
    ``seed``, ``source``, ``chunk_size``, ``originals`` and ``deformation`` (a
    table of :class:`Deformation` ranges). Unknown keys and bad values raise.

    >>> generator_params({"name": "deformed_mnist", "n_rows": 70000})["n_rows"]
    70000
    """
    if not isinstance(values, Mapping):
        raise InputError(f"[data] generate must be a table; got {type(values).__name__}.")
    values = dict(values)
    name = values.pop("name", None)
    if name not in GENERATORS:
        raise InputError(f"[data] generate needs name = one of {GENERATORS}; got {name!r}.")
    allowed = {"n_rows", "seed", "source", "chunk_size", "deformation", "originals"}
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise InputError(
            f"Unknown key(s) {unknown} in [data] generate; allowed: {sorted(allowed)}."
        )
    counts = {p.name: values[p.name] for p in GENERATE_PARAMS if p.name in values}
    values |= _counts(counts, "[data] generate")
    if not isinstance(values.get("source", ""), str):
        raise InputTypeError("[data] generate source must be a path string.")
    if not isinstance(values.get("originals", True), bool):
        raise InputTypeError("[data] generate originals must be true or false.")
    table = values.pop("deformation", {})
    if not isinstance(table, Mapping):
        raise InputError("[data] generate deformation must be a table of Deformation ranges.")
    fields = {f.name for f in dataclasses.fields(Deformation)}
    unknown = sorted(set(table) - fields)
    if unknown:
        raise InputError(
            f"Unknown key(s) {unknown} in [data] generate deformation; allowed: {sorted(fields)}."
        )
    defaults = {
        key: p.default
        for key, p in inspect.signature(write_deformed_mnist).parameters.items()
        if key in allowed
    }
    return {**defaults, **values, "deformation": Deformation(**table)}


def generated_mismatch(attrs: Mapping[str, Any], params: Mapping[str, Any]) -> str | None:
    """How a generated store's ``attrs`` differ from :func:`generator_params` output, or None."""
    wanted = {
        "seed": params["seed"],
        "n_rows": params["n_rows"],
        "originals": params["originals"],
        "source": Path(params["source"]).name,
        "deformation": dataclasses.asdict(params["deformation"] or Deformation()),
    }
    diffs = [f"{k}={attrs.get(k)!r} (wanted {v!r})" for k, v in wanted.items() if attrs.get(k) != v]
    return ", ".join(diffs) or None
