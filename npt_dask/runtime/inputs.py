"""Turning user data into row-chunked dask arrays, and results back into the user's type.

This is the only module that knows about xarray on the compute path: numpy,
dask and xarray inputs come in, a row-chunked dask array and an
:class:`InputInfo` go out; results are wrapped back (numpy in -> numpy out,
dask in -> lazy dask out, DataArray in -> DataArray out with the sample
coordinates carried over).

scipy.sparse rows (CSR or CSC, as scikit-learn's ``KernelPCA`` takes them)
become a dask array of CSR row chunks: they stay sparse up to the kernel
blocks (:mod:`npt_dask.kernels` multiplies sparse chunks directly); results
are dense. A kernel matrix given with ``kernel="precomputed"`` is chunked in
both directions by :func:`as_kernel_matrix`, never gathered into full rows.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import dask.array as da
import numpy as np
import pandas as pd
import scipy.sparse

from npt_dask.arrays.host import to_host
from npt_dask.arrays.namespace import device_of, is_numpy, namespace_and_device, namespace_of
from npt_dask.errors import (
    InputError,
    InputTypeError,
    KernelScaleWarning,
    NegativeDefiniteKernelError,
    warn,
)
from npt_dask.kernels.scale import SCALE_SAMPLE
from npt_dask.params.constraints import INT, NONE, Interval, Param
from npt_dask.params.parsing import number_or
from npt_dask.runtime.scheduler import compute, numpy_rows

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "NON_FINITE_INPUT",
    "InputInfo",
    "align_rows",
    "as_kernel_matrix",
    "as_row_chunked",
    "check_finite_block",
    "check_finite_eagerly",
    "check_known_chunks",
    "check_symmetric",
    "feature_names",
    "float_dtype",
    "is_data_array",
    "is_lazy",
    "is_sparse_rows",
    "match_features",
    "row_labels",
    "sample_rows",
    "wrap_rows",
]

DEFAULT_CHUNK_SIZE = 4096
"""Rows per kernel block (a 4096^2 float64 block is 128 MiB)."""

Kind = Literal["numpy", "dask", "xarray", "pandas"]


@dataclass(frozen=True)
class InputInfo:
    """Where the rows came from, so results can be returned the same way."""

    kind: Kind
    lazy: bool
    sample_dim: str = "sample"
    sample_coords: Mapping[Hashable, Any] = field(default_factory=dict)
    index: Any = None  # pandas input: the rows' index, carried to the output


def is_data_array(data: Any) -> bool:
    """Whether ``data`` is an ``xarray.DataArray`` (the one test; xarray is not imported)."""
    return type(data).__name__ == "DataArray" and hasattr(data, "dims")


def is_lazy(data: Any) -> bool:
    """Whether ``data`` goes to the out-of-core path unconverted: a dask array or a
    DataArray (whose result keeps its type: lazy in, lazy out)."""
    return isinstance(data, da.Array) or is_data_array(data)


def sample_dim_of(data: Any) -> str:
    """A DataArray's sample dim: ``"sample"`` if it has one, else its first dim."""
    return "sample" if "sample" in data.dims else str(data.dims[0])


def float_dtype(dtype: np.dtype) -> np.dtype:
    """The floating dtype computations use: float32 stays, anything else is float64."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        raise InputTypeError(f"Complex data is not supported (got dtype {dtype}).")
    if dtype.kind not in "biuf":
        raise InputTypeError(
            f"Data must be numeric; got dtype {dtype}. Convert it with x.astype(float)."
        )
    return np.dtype(np.float32) if dtype in (np.float16, np.float32) else np.dtype(np.float64)


def _from_xarray(data: Any, name: str) -> tuple[Any, InputInfo]:
    if data.ndim != 2:
        raise InputError(
            f"{name} must be a 2-D DataArray (sample, feature); got dims {data.dims}. "
            f"Stack the feature dims, e.g. {name}.stack(feature=[...])."
        )
    sample_dim = sample_dim_of(data)
    feature_dim = next(d for d in data.dims if d != sample_dim)
    data = data.transpose(sample_dim, feature_dim)
    coords = {k: v.variable for k, v in data.coords.items() if v.dims == (sample_dim,)}
    lazy = data.chunks is not None
    info = InputInfo("xarray", lazy, sample_dim, coords)
    return data.data, info


def _to_array(data: Any, name: str) -> tuple[Any, InputInfo]:
    if is_data_array(data):
        return _from_xarray(data, name)
    if type(data).__name__ == "Dataset" and hasattr(data, "data_vars"):
        raise InputTypeError(
            f"{name} is an xarray Dataset; pass one of its variables, e.g. ds['x']."
        )
    if isinstance(data, pd.DataFrame):
        return data.to_numpy(), InputInfo("pandas", False, index=data.index)
    if isinstance(data, da.Array):
        return data, InputInfo("dask", True)
    if scipy.sparse.issparse(data):
        if data.ndim != 2:
            raise InputError(f"{name} must be a 2-D sparse matrix; got shape {data.shape}.")
        return scipy.sparse.csr_matrix(data), InputInfo("numpy", False)
    if isinstance(data, str | bytes) or data is None:
        raise InputTypeError(f"{name} must be array-like; got {type(data).__name__}.")
    try:
        array = np.asarray(data)
    except Exception as exc:
        raise InputTypeError(f"{name} could not be converted to an array: {exc}") from exc
    return array, InputInfo("numpy", False)


def _check_shape(array: Any, name: str, min_samples: int) -> None:
    if array.ndim != 2:
        hint = f" Reshape with {name}.reshape(len({name}), -1)." if array.ndim > 2 else ""
        raise InputError(
            f"{name} must be 2-D (n_samples, n_features); got shape {array.shape}.{hint}"
        )
    n, d = array.shape
    if not math.isnan(n) and n < min_samples:
        need = "at least 2 samples to fit" if min_samples > 1 else "at least 1 sample"
        raise InputError(f"{name} has {n} sample(s); need {need}.")
    if d < 1:
        raise InputError(f"{name} has 0 features; need at least 1.")


def check_known_chunks(array: Any, name: str) -> None:
    """Refuse a dask array whose row chunk sizes are unknown (NaN, e.g. after boolean
    indexing), naming the fix: rows cannot be matched or chunked without them."""
    if isinstance(array, da.Array) and any(math.isnan(c) for c in array.chunks[0]):
        raise InputError(
            f"{name} has unknown chunk sizes {array.chunks[0]} (as after boolean indexing); "
            f"call {name}.compute_chunk_sizes() first."
        )


def is_sparse_rows(x: da.Array) -> bool:
    """True when the dask array's chunks are scipy.sparse matrices."""
    return bool(scipy.sparse.issparse(getattr(x, "_meta", None)))


NON_FINITE_INPUT = (
    "Input contains NaN or infinity; remove or impute those values first "
    "(e.g. with sklearn.impute.SimpleImputer)."
)
"""The error of rows with NaN or inf (:func:`check_finite_block`'s)."""


def check_finite_block(block: Any) -> Any:
    """``block`` unchanged if finite (a sparse block: its stored values), else InputError
    (a device's block: one flag crosses)."""
    values = block.data if scipy.sparse.issparse(block) else block
    xp = namespace_of(values)
    if is_numpy(xp):
        finite = np.isfinite(values).all()
    else:
        finite = bool(to_host(xp.all(xp.isfinite(values))))
    if not finite:
        raise InputError(NON_FINITE_INPUT)
    return block


def as_row_chunked(
    data: Any,
    *,
    name: str,
    chunk_size: int | None,
    min_samples: int = 1,
    dtype: np.dtype | None = None,
    keep_lazy_chunks: bool = False,
    device_check: bool = True,
) -> tuple[da.Array, InputInfo]:
    """Validate ``data`` and return it as a dask array chunked by rows only.

    numpy input is checked for NaN/inf here; lazy input gets the check inside
    its tasks (it raises when computed). ``chunk_size=None`` keeps the row
    chunks of dask input, and so does ``keep_lazy_chunks`` (projections keep
    the caller's chunking). The feature axis always becomes one chunk.
    ``device_check=False``: lazy rows on a device are not checked chunk by chunk here
    (a flag read back per chunk); the caller's tasks check them with what they compute
    (a projection's one verdict: :class:`~npt_dask.engine.consumers.Projection`).
    """
    array, info = _to_array(data, name)
    _check_shape(array, name, min_samples)
    natural = float_dtype(array.dtype)  # validates: numeric, not complex
    dtype = natural if dtype is None else np.dtype(dtype)
    if scipy.sparse.issparse(array):
        if array.dtype.kind == "f":
            check_finite_block(array)
        rows = chunk_size or DEFAULT_CHUNK_SIZE
        x = da.from_array(array, chunks=(rows, -1), asarray=False)
    elif not isinstance(array, da.Array):
        array = np.asarray(array)
        if array.dtype.kind == "f":
            check_finite_block(array)
        rows = chunk_size or DEFAULT_CHUNK_SIZE
        x = numpy_rows(array, rows)  # shipped once under a cluster, not in every graph
    else:
        check_known_chunks(array, name)
        rows = array.chunks[0] if keep_lazy_chunks or not chunk_size else chunk_size
        x = array.rechunk({0: rows, 1: -1})
        if x.dtype.kind == "f" and (device_check or is_numpy(namespace_and_device(x)[0])):
            x = x.map_blocks(check_finite_block, dtype=x.dtype, meta=x._meta)
    if x.dtype != dtype:
        x = x.astype(dtype)
    return x, info


def as_kernel_matrix(
    data: Any,
    *,
    name: str,
    chunk_size: int | None,
    column_chunks: tuple[int, ...] | None = None,
    dtype: np.dtype | None = None,
    keep_lazy_chunks: bool = False,
) -> tuple[da.Array, InputInfo]:
    """A kernel matrix for ``kernel="precomputed"``, chunked by rows *and* columns.

    Training (``column_chunks=None``): the matrix must be square (n x n) and
    its columns get the row chunks, so block (i, j) is the kernel block of
    row chunks i and j. Projection: the columns get the training row chunks
    ``column_chunks`` (the matrix is test x train). A zarr-backed dask array
    is read block by block; no task holds a full row of it.
    """
    if scipy.sparse.issparse(data):
        data = data.toarray()
    array, info = _to_array(data, name)
    _check_shape(array, name, 1)
    natural = float_dtype(array.dtype)
    dtype = natural if dtype is None else np.dtype(dtype)
    if column_chunks is None and array.shape[0] != array.shape[1]:
        raise InputError(
            f"With kernel='precomputed', {name} must be the square kernel matrix of the "
            f"training rows; got shape {array.shape}. Pass kernel(X_train, X_train)."
        )
    if column_chunks is not None and array.shape[1] != sum(column_chunks):
        raise InputError(
            f"With kernel='precomputed', {name} must hold the kernel values against the "
            f"{sum(column_chunks)} training rows (shape (m, {sum(column_chunks)})); got shape "
            f"{array.shape}. Pass kernel(Z, X_train)."
        )
    if isinstance(array, da.Array):
        check_known_chunks(array, name)
        rows: Any = array.chunks[0] if keep_lazy_chunks or not chunk_size else chunk_size
        x = array.rechunk({0: rows})
    else:
        array = np.asarray(array)
        if array.dtype.kind == "f":
            check_finite_block(array)
        x = numpy_rows(array, chunk_size or DEFAULT_CHUNK_SIZE)
    cols = x.chunks[0] if column_chunks is None else column_chunks
    x = x.rechunk({1: cols})
    if isinstance(array, da.Array) and x.dtype.kind == "f":
        x = x.map_blocks(check_finite_block, dtype=x.dtype, meta=x._meta)
    if column_chunks is None:
        check_symmetric(x, name)
    if x.dtype != dtype:
        x = x.astype(dtype)
    return x, info


def check_symmetric(k: da.Array, name: str) -> None:
    """Warn when a training kernel matrix is not symmetric beyond rounding; refuse one
    with no positive diagonal entry (``-K``: never positive semi-definite).

    One read pass (each block beside its transposed partner). The solvers use
    the symmetric part ``(K + K^T) / 2`` (as scikit-learn's ``KernelPCA`` does,
    whose own tests fit a non-symmetric matrix); beyond ``sqrt(eps)`` of
    ``max |K|`` that is said, with the fix, since it is rarely what was meant.
    """
    diagonal = da.diagonal(k)
    gap, top, high, low = (float(v) for v in compute(
        abs(k - k.T).max(), abs(k).max(), diagonal.max(), diagonal.min()))  # fmt: skip
    tol = math.sqrt(float(np.finfo(float_dtype(k.dtype)).eps))
    if high <= 0.0 and low < -tol * top:
        raise NegativeDefiniteKernelError(
            f"With kernel='precomputed', {name} has no positive diagonal entry (largest "
            f"{high:.3g}, smallest {low:.3g}); a kernel matrix's diagonal k(x, x) is never "
            f"negative, so {name} is not positive semi-definite (a kernel passed with the "
            f"wrong sign, e.g. -K?). Pass the kernel matrix itself."
        )
    if gap > tol * top:
        warn(
            f"With kernel='precomputed', {name} should be symmetric (a kernel matrix is); "
            f"max |{name} - {name}.T| = {gap:.3g}, {gap / top:.3g} of max |{name}| (rounding "
            f"allows {tol:.1g}). Its symmetric part ({name} + {name}.T) / 2 is decomposed; "
            "pass that yourself to silence this, or check how the matrix was computed.",
            KernelScaleWarning,
        )


def _all_finite(block: Any) -> bool:
    values = block.data if scipy.sparse.issparse(block) else block
    return bool(np.isfinite(values).all())


def check_finite_eagerly(x: da.Array, name: str) -> None:
    """Compute whether lazy input is finite now (one read pass), before any real work."""
    if is_sparse_rows(x):
        import dask

        parts = [dask.delayed(_all_finite)(p) for p in x.to_delayed().ravel()]
        ok = all(dask.compute(*parts))
    else:
        ok = not (x.dtype.kind == "f" and not bool(da.isfinite(x).all().compute()))
    if not ok:
        raise InputError(
            f"{name} contains NaN or infinity; remove or impute those values first "
            "(e.g. with sklearn.impute.SimpleImputer)."
        )


def wrap_rows(
    result: da.Array | np.ndarray,
    info: InputInfo,
    *,
    column_dim: str | None = "component",
    name: str | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> Any:
    """Return a row-aligned result (lazy, or numpy already) in the type the rows came in."""
    eager = not isinstance(result, da.Array)
    if info.kind == "dask":
        return result
    if info.kind == "numpy":
        return result if eager else compute(result, release_scratch=True)[0]
    if info.kind == "pandas":  # eager: the rows' index carried over, as a DataArray's coords
        values = result if eager else compute(result, release_scratch=True)[0]
        if values.ndim == 1:
            return pd.Series(values, index=info.index, name=name)
        columns = pd.RangeIndex(values.shape[1], name=column_dim)
        return pd.DataFrame(values, index=info.index, columns=columns)
    import xarray as xr

    dims = (info.sample_dim,) if result.ndim == 1 else (info.sample_dim, column_dim)
    data = result if info.lazy or eager else compute(result, release_scratch=True)[0]
    coords = dict(info.sample_coords)
    if result.ndim == 2:
        coords[column_dim] = np.arange(result.shape[1])
    return xr.DataArray(data, dims=dims, coords=coords, name=name, attrs=dict(attrs or {}))


def pad_columns(y: Any, k: int) -> Any:
    """``y`` (numpy, or a dask array of any array library's chunks) with zero columns
    appended up to ``k`` columns; a dask array's zeros are made in each of its chunks'
    namespace, on their device (nothing crosses), its ``meta`` kept."""
    extra = k - int(y.shape[1])
    if extra <= 0:
        return y
    if isinstance(y, da.Array):
        y = y.rechunk({1: -1})
        return y.map_blocks(_padded, k, chunks=(y.chunks[0], (k,)), dtype=y.dtype,
                            meta=y._meta)  # fmt: skip
    return _padded(y, k)


def _padded(block: Any, k: int) -> Any:
    """A block with zero columns appended up to ``k``, in its namespace."""
    xp = namespace_of(block)
    shape = (block.shape[0], k - int(block.shape[1]))
    if is_numpy(xp):
        return np.hstack([block, np.zeros(shape, dtype=block.dtype)])
    zeros = xp.zeros(shape, dtype=block.dtype, device=device_of(block))
    return xp.concat([block, zeros], axis=1)


def rows_like(data: Any, values: np.ndarray, *, name: str | None = None) -> Any:
    """``values`` (numpy, one row per row of ``data``) in the type ``data`` came in
    (:func:`wrap_rows`): as they are for eager data (no scheduler is involved), lazy and
    chunked like ``data``'s rows for lazy data. ``data`` is only inspected, never read."""
    array, info = _to_array(data, "X")
    if not info.lazy:
        return wrap_rows(values, info, name=name)
    return wrap_rows(da.from_array(values, chunks=(array.chunks[0], -1)), info, name=name)


def zeros_like_rows(data: Any, columns: int, dtype: Any) -> Any:
    """Zeros of ``columns`` columns, one row per row of ``data``, in ``data``'s type (lazy
    data: lazy zeros chunked like its rows; nothing is read or shipped)."""
    array, info = _to_array(data, "X")
    n = int(array.shape[0])
    if not info.lazy:
        return wrap_rows(np.zeros((n, columns), dtype=dtype), info)
    return wrap_rows(da.zeros((n, columns), chunks=(array.chunks[0], columns), dtype=dtype), info)


def data_variance(x: da.Array) -> float:
    """The variance of all entries of ``x`` (``gamma="scale"``), one read pass; sparse too."""
    if not is_sparse_rows(x):
        return float(compute(da.var(x.astype(np.float64)))[0])
    import dask

    def moments(block: Any) -> tuple[float, float]:
        values = block.data.astype(np.float64)
        return float(values.sum()), float(np.dot(values, values))

    parts = dask.compute(*[dask.delayed(moments)(p) for p in x.to_delayed().ravel()])
    size = float(x.shape[0]) * float(x.shape[1])
    mean = sum(p[0] for p in parts) / size
    return max(sum(p[1] for p in parts) / size - mean * mean, 0.0)


# --- labelled rows and named features ----------------------------------------------------


def row_labels(data: Any) -> pd.Index | None:
    """The labels of ``data``'s rows: a pandas object's index, a DataArray's index along
    its sample dim (:func:`sample_dim_of`); None for unlabelled data (numpy, dask, a
    DataArray without a coordinate on that dim), which is matched by position."""
    if isinstance(data, pd.Series | pd.DataFrame):
        return data.index
    if is_data_array(data) and data.ndim >= 1:
        index = data.indexes.get(sample_dim_of(data))
        return None if index is None else pd.Index(index)
    return None


def _take_rows(data: Any, order: np.ndarray) -> Any:
    if isinstance(data, pd.Series | pd.DataFrame):
        return data.iloc[order]
    return data.isel({sample_dim_of(data): order})


def _examples(labels: pd.Index) -> str:
    shown = ", ".join(repr(v) for v in labels[:3].tolist())
    return shown + (", ..." if len(labels) > 3 else "")


def align_rows(aux: Any, rows: Any, *, name: str, rows_name: str = "X") -> Any:
    """``aux`` (labels or targets) with its rows in the order of ``rows`` (the data).

    When both carry row labels (:func:`row_labels`: a DataArray's sample coordinate, a
    pandas index) they are matched by label, as ``xarray.align`` matches them: the same
    labels in another order are reordered (what ``xr.align(rows, aux, join="left")``
    gives), and labels that differ -- a row of one missing from the other, or repeated
    labels -- are refused, as ``join="exact"`` refuses them: no row is dropped or
    invented. Unlabelled data on either side is matched by position (returned as is).
    """
    mine, theirs = row_labels(rows), row_labels(aux)
    if mine is None or theirs is None or mine.equals(theirs):
        return aux
    fix = (
        f"Select the rows of {rows_name} from {name} by label (e.g. "
        f"{name}.sel(sample={rows_name}.sample) or {name}.loc[{rows_name}.index]), or pass "
        f"{name} as a plain array (e.g. {name}.to_numpy()) to match rows by position."
    )
    if not (mine.is_unique and theirs.is_unique):
        raise InputError(
            f"{rows_name} and {name} both label their rows, but "
            f"{rows_name if not mine.is_unique else name} repeats some labels, so they "
            f"cannot be matched by label. {fix}"
        )
    order = theirs.get_indexer(mine)
    if len(mine) == len(theirs) and (order >= 0).all():
        return _take_rows(aux, order)
    missing, extra = mine.difference(theirs), theirs.difference(mine)
    said = []
    if len(missing):
        said.append(
            f"{len(missing)} row label(s) of {rows_name} not in {name} ({_examples(missing)})"
        )
    if len(extra):
        said.append(f"{len(extra)} row label(s) of {name} not in {rows_name} ({_examples(extra)})")
    raise InputError(
        f"{rows_name} and {name} label their rows differently: {'; '.join(said)}. Rows are "
        f"matched by label (xarray's join='exact': none dropped or added). {fix}"
    )


def feature_names(data: Any) -> tuple[str, ...] | None:
    """The names of ``data``'s features, or None: a DataFrame's columns when they are all
    strings (scikit-learn's ``feature_names_in_`` rule), a DataArray's coordinate along
    its feature dim (as strings)."""
    if isinstance(data, pd.DataFrame):
        columns = data.columns
        return tuple(columns) if all(isinstance(c, str) for c in columns) else None
    if is_data_array(data) and data.ndim == 2:
        dim = next(d for d in data.dims if d != sample_dim_of(data))
        index = data.indexes.get(dim)
        return None if index is None else tuple(str(v) for v in index)
    return None


def _transposed_hint(data: Any, n_features: int | None, name: str) -> None:
    """A DataArray without a ``sample`` dim is read with its first dim as the rows; when
    that reading gives the wrong feature count and the other reading the right one, say
    so (the usual cause: a transposed array)."""
    if not (is_data_array(data) and data.ndim == 2 and "sample" not in data.dims):
        return
    first, second = (str(d) for d in data.dims)
    if n_features is not None and data.shape[1] != n_features and data.shape[0] == n_features:
        raise InputError(
            f"{name} has dims ({first!r}, {second!r}) and no 'sample' dim, so its rows were "
            f"taken along its first dim {first!r}: {data.shape[0]} rows of {data.shape[1]} "
            f"features, but the model expects {n_features} features -- as {name} has along "
            f"{first!r}. It looks transposed: pass {name}.transpose({second!r}, {first!r}), "
            f"or name its rows' dim 'sample' ({name}.rename({second}='sample'))."
        )


def _few(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")


def match_features(
    data: Any, names: tuple[str, ...] | None, *, n_features: int | None = None, name: str = "Z"
) -> Any:
    """``data`` with its features in the fitted order ``names`` (a model's feature names).

    Named input (:func:`feature_names`) with the same names in another order is
    reordered by name; names that differ are refused (scikit-learn's
    ``feature_names_in_`` check, which refuses the reordering too). Unnamed input,
    or a model fitted without names, is taken by position.
    """
    _transposed_hint(data, n_features, name)
    given = feature_names(data) if names is not None else None
    if given is None or names is None or given == tuple(names):
        return data
    fitted, now = set(names), set(given)
    unseen = [g for g in given if g not in fitted]
    missing = [n for n in names if n not in now]
    if unseen or missing or len(set(given)) != len(given):
        said = []
        if unseen:
            said.append(f"names unseen at fit time: {_few(unseen)}")
        if missing:
            said.append(f"names seen at fit time, yet now missing: {_few(missing)}")
        if not said:
            said.append("some names are repeated")
        raise InputError(
            f"The feature names of {name} should match those that were passed during fit "
            f"({'; '.join(said)}). Give {name} the columns the model was fitted on "
            f"(model.feature_names), or pass a plain array to take columns by position."
        )
    position = {g: i for i, g in enumerate(given)}
    order = [position[n] for n in names]
    if isinstance(data, pd.DataFrame):
        return data.iloc[:, order]
    dim = next(d for d in data.dims if d != sample_dim_of(data))
    return data.isel({dim: order})


CHUNK_SIZE_PARAM = Param(
    "chunk_size",
    (Interval(INT, 1, None), NONE),
    DEFAULT_CHUNK_SIZE,
    "rows per kernel block (None keeps a dask input's row chunks)",
    parse=number_or(int),
)
"""The ``chunk_size`` argument: rows per task of a pass over rows."""


def sample_rows(x: Any) -> np.ndarray | None:
    """The first :data:`SCALE_SAMPLE` rows of ``x`` (numpy or dask, on any device) as float64
    numpy (one small read of a dask array, one host crossing); None for sparse rows or rows
    without features."""
    if x is None or int(x.shape[1]) == 0 or is_sparse_rows(x) or hasattr(x, "toarray"):
        return None
    head = x[:SCALE_SAMPLE]
    head = compute(head)[0] if hasattr(head, "dask") else head
    return np.asarray(to_host(head), dtype=np.float64)  # a device sample crosses once
