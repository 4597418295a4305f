"""Kernel blocks and diagonals, written once against the array API standard.

Definitions and defaults follow scikit-learn (``sklearn.metrics.pairwise``) so
results can be compared one to one:

=============  ====================================  ==========================
name           kappa(x, z)                           parameters (default)
=============  ====================================  ==========================
``rbf``        ``exp(-gamma ||x - z||^2)``           gamma (1 / n_features)
``laplacian``  ``exp(-gamma ||x - z||_1)``           gamma (1 / n_features)
``polynomial`` ``(gamma <x, z> + coef0) ** degree``  gamma (1 / n_features),
                                                     degree (3), coef0 (1)
``sigmoid``    ``tanh(gamma <x, z> + coef0)``        gamma (1 / n_features),
                                                     coef0 (1)
``linear``     ``<x, z>``                            none
``cosine``     ``<x, z> / (||x|| ||z||)``            none
=============  ====================================  ==========================

The hyperparameters each kernel takes, their defaults and constraints are declared in
:data:`npt_dask.kernels.params.KERNEL_TABLE`; here are the functions, each taking the values
as a mapping: ``block(a, b, values, out=None)`` and ``diag(a, values)``, registered in
:data:`MATH` with the rule that says when the kernel is positive semi-definite.

Every function takes the namespace of its input (:func:`npt_dask.arrays.namespace.namespace_of`):
numpy, a scipy.sparse block (numpy's), or any array API library (CuPy, torch,
``array_api_strict``) through the same code. numpy keeps three fast paths: a block is
written into a given ``out`` buffer, its elementwise pass runs in place on cache-sized
row tiles spread over threads (:func:`npt_dask.arrays.threads.map_row_slices`), and the
laplacian's distances are SciPy's ``cdist``; other namespaces get a new array and their
own parallelism. The dot-product kernels (rbf, polynomial, sigmoid, linear, cosine) cost
one matrix product plus one elementwise pass; on numpy the same-operand product
``A @ A.T`` is never issued (numpy's bundled OpenBLAS routes it to ``syrk``, which
crashes multi-threaded on large blocks).

Layer rule: arrays in, arrays out; no dask, xarray or zarr, and no specs (the values
come as a mapping), so :mod:`npt_dask.kernels.specs` builds on this module, never the
other way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import scipy.sparse
from scipy.spatial.distance import cdist

from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of
from npt_dask.arrays.threads import map_row_slices
from npt_dask.kernels.params import KERNEL_NAMES

__all__ = [
    "MATH",
    "BlockFunction",
    "DiagFunction",
    "KernelMath",
    "Prepared",
    "all_finite",
    "block_dtype",
    "dense",
    "is_sparse",
    "max_abs",
    "source_of",
    "sq_norms",
]

Values = Mapping[str, Any]
"""A kernel's resolved hyperparameter values, by name (floats)."""

_TILE_ELEMENTS = 1 << 15  # elements per tile of a numpy elementwise pass (~256 KiB)
_BROADCAST_ELEMENTS = 1 << 22  # elements of one generic laplacian tile (rows x cols x d)


class BlockFunction(Protocol):
    """``kappa(a, b)``, written into ``out`` when given (numpy only)."""

    def __call__(self, a: Any, b: Any, values: Values, out: Any = None) -> Any: ...


DiagFunction = Callable[[Any, Values], Any]
"""``kappa(a_i, a_i)``, float64."""


# --- prepared rows -------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Prepared:
    """Rows on the right of many blocks (a pass's centres), with what a kernel's block
    function would otherwise compute of them on every call, computed once.

    ``kind`` the kernel whose block function takes it (another kernel uses ``source``);
    ``source`` the rows as given; ``rows`` as the block function uses them (for ``rbf``:
    shifted by ``origin``, their float64 mean, so distances lose nothing to cancellation);
    ``norms`` their squared norms (float64). A block against a :class:`Prepared` equals
    the block against ``source`` bit for bit: the same arithmetic, done once.
    """

    kind: str
    source: Any
    rows: Any
    norms: Any = None
    origin: Any = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.source.shape)

    @property
    def dtype(self) -> Any:
        return self.source.dtype

    @property
    def ndim(self) -> int:
        return int(self.source.ndim)

    @property
    def nbytes(self) -> int:
        """Bytes this preparation adds to its source (the prepared rows and norms)."""
        extra = (self.rows, self.norms, self.origin)
        return int(sum(getattr(a, "nbytes", 0) for a in extra if a is not self.source))


def source_of(b: Any) -> Any:
    """The rows as given: ``b`` itself, or a :class:`Prepared`'s source."""
    return b.source if isinstance(b, Prepared) else b


# --- helpers --------------------------------------------------------------------------------


def is_sparse(a: Any) -> bool:
    """True for a scipy.sparse block."""
    return bool(scipy.sparse.issparse(a))


def dense(a: Any, dtype: Any = None) -> np.ndarray:
    """A dense ndarray of ``a`` (a scipy.sparse block is expanded)."""
    if is_sparse(a):
        a = a.toarray()
    return np.asarray(a, dtype=dtype)


def block_dtype(a: Any, b: Any) -> Any:
    """The block's dtype: float32 when both inputs are float32, float64 otherwise
    (numpy's promotion; another namespace promotes its floating dtypes, anything else
    gives float64)."""
    xp = namespace_of(a, b)
    if is_numpy(xp):
        dtype = np.result_type(a.dtype, b.dtype, np.float32)
        return np.dtype(np.float64) if dtype.itemsize > 8 else dtype
    if all(xp.isdtype(x.dtype, "real floating") for x in (a, b)):
        return xp.result_type(a.dtype, b.dtype, xp.float32)
    return xp.float64


def _as(xp: Any, a: Any, dtype: Any) -> Any:
    """``a`` in ``dtype``, not copied when it already is."""
    return xp.astype(a, dtype, copy=False)


def _cross_product(a: Any, b: Any, dtype: Any, out: Any = None) -> Any:
    """``a @ b.T`` in ``dtype``, on numpy into ``out`` when given and never by ``syrk``.

    scipy.sparse operands stay sparse through the product (only the block is dense).
    """
    if is_sparse(a) or is_sparse(b):
        a_s = a.astype(dtype) if is_sparse(a) else np.asarray(a, dtype=dtype)
        b_s = b.astype(dtype) if is_sparse(b) else np.asarray(b, dtype=dtype)
        product = dense(a_s @ b_s.T, dtype)
        if out is None:
            return np.ascontiguousarray(product)
        out[...] = product
        return out
    xp = namespace_of(a, b)
    if not is_numpy(xp):
        return _as(xp, a, dtype) @ _as(xp, b, dtype).T
    a = np.ascontiguousarray(a, dtype=dtype)
    b = np.ascontiguousarray(b, dtype=dtype)
    if np.shares_memory(a, b):
        b = b.copy()
    if out is None:
        return np.dot(a, b.T)
    return np.dot(a, b.T, out=out)


def sq_norms(a: Any) -> Any:
    """Squared row norms, float64."""
    if is_sparse(a):
        a64s: Any = a.astype(np.float64)
        return np.asarray(a64s.multiply(a64s).sum(axis=1), dtype=np.float64).ravel()
    xp = namespace_of(a)
    if is_numpy(xp):
        a64 = np.asarray(a, dtype=np.float64)
        return np.einsum("ij,ij->i", a64, a64)
    a64 = _as(xp, a, xp.float64)
    return xp.sum(a64 * a64, axis=1)


def _elementwise(block: Any, step: Callable[[Any, slice], Any]) -> Any:
    """``step(rows of the block, their slice)`` over the block: on numpy in place, on
    cache-sized row tiles spread over threads; elsewhere once on the whole block (the
    namespace's own parallelism), its result returned."""
    xp = namespace_of(block)
    if not is_numpy(xp):
        return step(block, slice(None))
    n_rows, n_cols = block.shape
    tile = max(1, _TILE_ELEMENTS // max(n_cols, 1))

    def run(rows: slice) -> None:
        for start in range(rows.start, rows.stop, tile):
            part = slice(start, min(start + tile, rows.stop))
            step(block[part], part)

    map_row_slices(run, n_rows, n_cols)
    return block


def _exp(xp: Any, g: Any) -> Any:
    """``exp(g)``, in place on numpy."""
    return np.exp(g, out=g) if is_numpy(xp) else xp.exp(g)


def _tanh(xp: Any, g: Any) -> Any:
    """``tanh(g)``, in place on numpy."""
    return np.tanh(g, out=g) if is_numpy(xp) else xp.tanh(g)


def _clip_positive(xp: Any, g: Any) -> Any:
    """``min(g, 0)``, in place on numpy; elsewhere ``xp.minimum`` with a Python scalar
    (``array_api_compat``'s generic ``clip`` copies the bound to the device, the block to
    a new array, and masks it: a copy, two syncs and two more blocks per call on CuPy)."""
    return np.minimum(g, 0.0, out=g) if is_numpy(xp) else xp.minimum(g, 0.0)


def _times(xp: Any, a: Any, scale: float) -> Any:
    """``scale * a`` in ``a``'s dtype (the small operand of a block's product: its ``rows
    x d`` entries scaled, not the block's ``rows x m``)."""
    if is_sparse(a):
        return (a * scale).astype(a.dtype)
    return _as(xp, a * scale, a.dtype)


def _clip_negative(xp: Any, g: Any) -> Any:
    """``max(g, 0)``, in place on numpy; elsewhere ``xp.maximum`` with a Python scalar
    (see :func:`_clip_positive`)."""
    return np.maximum(g, 0.0, out=g) if is_numpy(xp) else xp.maximum(g, 0.0)


def _power(xp: Any, g: Any, degree: float) -> Any:
    """``g ** degree`` (an integer degree as an integer power), in place on numpy."""
    exponent: float = int(degree) if float(degree).is_integer() else degree
    return np.power(g, exponent, out=g) if is_numpy(xp) else g**exponent


def all_finite(block: Any) -> bool:
    """True when no entry is NaN or inf (one reduction: a sum of finite values is finite
    unless it overflows itself, and then every entry is looked at)."""
    xp = namespace_of(block)
    total = np.add.reduce(block, axis=None) if is_numpy(xp) else xp.sum(block)
    return bool(xp.isfinite(total)) or bool(xp.all(xp.isfinite(block)))


def max_abs(a: Any) -> float:
    """The largest absolute finite value in a block (dense or sparse; 0 when empty)."""
    values = np.asarray(a.data) if is_sparse(a) else a
    xp = namespace_of(values)
    if not values.shape or 0 in values.shape:
        return 0.0
    finite = xp.where(xp.isfinite(values), xp.abs(values), xp.zeros_like(values))
    return float(xp.max(finite))


# --- block functions: (a, b, values, out=None) -> kappa(a, b) ---------------------------------


def _shift_to_common_origin(a: Any, b: Any) -> tuple[Any, Any]:
    """Subtract b's mean from both (distances are shift-invariant).

    ``||a||^2 + ||b||^2 - 2 <a, b>`` cancels badly when the data sit far from
    the origin, worst in float32; centring the pair first removes most of it.
    The shift is computed in float64 and costs O(chunk * d). Sparse blocks
    are left as they are (a shift would make them dense).
    """
    if is_sparse(a) or is_sparse(b):
        return a, b
    xp = namespace_of(a, b)
    origin = xp.mean(_as(xp, b, xp.float64), axis=0)
    a_s = _shifted(xp, a, origin)
    b_s = a_s if b is a else _shifted(xp, b, origin)
    return a_s, b_s


def _shifted(xp: Any, a: Any, origin: Any) -> Any:
    """``a - origin`` (``origin`` float64, the difference taken in float64) in ``a``'s dtype,
    a new array: on numpy one float64 temporary (the subtraction casts as it reads), and
    its cast for float32 rows (:func:`npt_dask.engine.budget.operand_bytes` counts them)."""
    if is_numpy(xp):
        return _as(xp, np.subtract(a, origin, dtype=np.float64), a.dtype)
    return _as(xp, _as(xp, a, xp.float64) - origin, a.dtype)


def rbf_prepare(b: Any) -> Prepared | None:
    """``b`` shifted to its own float64 mean and its squared norms: what every
    :func:`rbf_block` against ``b`` computes of it (None for sparse rows: no shift)."""
    if is_sparse(b):
        return None
    xp = namespace_of(b)
    origin = xp.mean(_as(xp, b, xp.float64), axis=0)
    rows = _shifted(xp, b, origin)
    return Prepared("rbf", b, rows, sq_norms(rows), origin)


def rbf_block(a: Any, b: Any, values: Values, out: Any = None) -> Any:
    """``exp(-gamma ||a_i - b_j||^2)``; ``b`` may be :func:`rbf_prepare`'s (the same block,
    the shift and norms of ``b`` not recomputed)."""
    if isinstance(b, Prepared) and (is_sparse(a) or b.kind != "rbf"):
        b = b.source  # a sparse block is not shifted (dense rows are)
    xp = namespace_of(a, source_of(b))
    dtype = block_dtype(a, source_of(b))
    given = a
    if isinstance(b, Prepared):
        a = _shifted(xp, a, b.origin)
        b, bb64 = b.rows, b.norms
    else:
        a, b = _shift_to_common_origin(a, b)
        bb64 = sq_norms(b)
    gamma = float(values["gamma"])
    aa = _as(xp, -gamma * sq_norms(a), dtype)  # -gamma ||a_i||^2
    bb = _as(xp, -gamma * bb64, dtype)
    if is_numpy(xp) and a is not given and a is not b:  # shifted: this call's own array
        a *= 2.0 * gamma
    else:
        a = _times(xp, a, 2.0 * gamma)
    block = _cross_product(a, b, dtype, out)  # 2 gamma <a_i, b_j>

    def step(g: Any, rows: slice) -> Any:  # -gamma ||a_i - b_j||^2, at most 0; its exp
        g += aa[rows, None]
        g += bb[None, :]
        return _exp(xp, _clip_positive(xp, g))

    return _elementwise(block, step)


def _numpy_manhattan(a: Any, b: Any, gamma: float, out: np.ndarray) -> None:
    """``exp(-gamma ||a_i - b_j||_1)`` into ``out``: SciPy's ``cdist`` (sklearn's
    ``manhattan_distances`` for sparse blocks) in float64, row slices over threads."""
    sparse = is_sparse(a) or is_sparse(b)
    a64 = scipy.sparse.csr_matrix(a, dtype=np.float64) if sparse else np.asarray(a, np.float64)
    b64 = scipy.sparse.csr_matrix(b, dtype=np.float64) if sparse else np.asarray(b, np.float64)

    def run(rows: slice) -> None:
        if sparse:
            from sklearn.metrics.pairwise import manhattan_distances

            d = manhattan_distances(a64[rows], b64)
        else:
            d = cdist(a64[rows], b64, metric="cityblock")
        d *= -gamma
        np.exp(d, out=d)
        out[rows] = d

    map_row_slices(run, out.shape[0], max(out.shape[1], 1) * max(a.shape[1], 1))


def laplacian_block(a: Any, b: Any, values: Values, out: Any = None) -> Any:
    """``exp(-gamma ||a_i - b_j||_1)``, the distances in float64."""
    dtype = block_dtype(a, b)
    gamma = float(values["gamma"])
    xp = namespace_of(a, b)
    if is_numpy(xp):
        if out is None:
            out = np.empty((a.shape[0], b.shape[0]), dtype=dtype)
        _numpy_manhattan(a, b, gamma, out)
        return out
    a64, b64 = _as(xp, a, xp.float64), _as(xp, b, xp.float64)
    n, tile = a.shape[0], max(1, _BROADCAST_ELEMENTS // max(1, b.shape[0] * a.shape[1]))
    parts = [
        xp.sum(xp.abs(a64[start : min(start + tile, n), None, :] - b64[None, :, :]), axis=2)
        for start in range(0, n, tile)
    ]
    if not parts:
        return xp.empty((0, b.shape[0]), dtype=dtype, device=device_of(a))
    d = xp.concat(parts, axis=0) if len(parts) > 1 else parts[0]
    return _as(xp, xp.exp(d * -gamma), dtype)


def _affine_dot_block(
    a: Any, b: Any, values: Values, finish: Callable[[Any], Any], out: Any = None
) -> Any:
    """``finish(gamma <a, b> + coef0)``: one product, one elementwise pass."""
    gamma, coef0 = float(values["gamma"]), float(values["coef0"])

    def step(g: Any, rows: slice) -> Any:
        g *= gamma
        g += coef0
        return finish(g)

    return _elementwise(_cross_product(a, b, block_dtype(a, b), out), step)


def polynomial_block(a: Any, b: Any, values: Values, out: Any = None) -> Any:
    """``(gamma <a_i, b_j> + coef0) ** degree``."""
    xp, degree = namespace_of(a, b), float(values["degree"])
    return _affine_dot_block(a, b, values, lambda g: _power(xp, g, degree), out)


def sigmoid_block(a: Any, b: Any, values: Values, out: Any = None) -> Any:
    """``tanh(gamma <a_i, b_j> + coef0)``."""
    xp = namespace_of(a, b)
    return _affine_dot_block(a, b, values, lambda g: _tanh(xp, g), out)


def linear_block(a: Any, b: Any, values: Values, out: Any = None) -> Any:
    """``<a_i, b_j>``."""
    return _cross_product(a, b, block_dtype(a, b), out)


def _unit_rows(a: Any, dtype: Any) -> Any:
    """The rows scaled to unit norm (zero rows stay zero, as scikit-learn's normalize)."""
    norms = sq_norms(a)
    xp = namespace_of(norms)
    norms = xp.sqrt(norms)
    norms[norms == 0.0] = 1.0
    if is_sparse(a):
        return (scipy.sparse.diags(1.0 / norms) @ a.astype(np.float64)).astype(dtype).tocsr()
    return _as(xp, _as(xp, a, xp.float64) / norms[:, None], dtype)


def cosine_block(a: Any, b: Any, values: Values, out: Any = None) -> Any:
    """``<a_i, b_j> / (||a_i|| ||b_j||)``."""
    dtype = block_dtype(a, b)
    return _cross_product(_unit_rows(a, dtype), _unit_rows(b, dtype), dtype, out)


# --- diagonal functions: (a, values) -> kappa(a_i, a_i), float64 ------------------------------


def ones_diag(a: Any, values: Values) -> Any:
    """1 for every row (a kernel of distances)."""
    xp = namespace_of(a)
    return xp.ones(a.shape[0], dtype=xp.float64, device=device_of(a))


def polynomial_diag(a: Any, values: Values) -> Any:
    """``(gamma ||a_i||^2 + coef0) ** degree``."""
    d = float(values["gamma"]) * sq_norms(a) + float(values["coef0"])
    return _power(namespace_of(d), d, float(values["degree"]))


def sigmoid_diag(a: Any, values: Values) -> Any:
    """``tanh(gamma ||a_i||^2 + coef0)``."""
    d = float(values["gamma"]) * sq_norms(a) + float(values["coef0"])
    return namespace_of(d).tanh(d)


def linear_diag(a: Any, values: Values) -> Any:
    """``||a_i||^2``."""
    return sq_norms(a)


def cosine_diag(a: Any, values: Values) -> Any:
    """1, or 0 for a zero row."""
    norms = sq_norms(a)
    xp = namespace_of(norms)
    return xp.astype(norms > 0.0, xp.float64)


# --- the registry ------------------------------------------------------------------------------


def _always(values: Values) -> bool:
    return True


def _never(values: Values) -> bool:
    return False


def _polynomial_psd(values: Values) -> bool:
    """An integer degree and a non-negative offset: a sum of products of dot products."""
    return float(values["degree"]).is_integer() and float(values["coef0"]) >= 0.0


@dataclass(frozen=True)
class KernelMath:
    """A named kernel's functions: its block, its diagonal, and ``psd(values)``, whether
    it is positive semi-definite for those values (a polynomial with a non-integer degree
    or a negative ``coef0`` may not be; sigmoid is not in general); ``prepare(b)``, when
    the block function can take right-hand rows prepared once (:class:`Prepared`) for
    many blocks against them."""

    block: BlockFunction
    diag: DiagFunction
    psd: Callable[[Values], bool]
    prepare: Callable[[Any], Prepared | None] | None = None


MATH: Mapping[str, KernelMath] = {
    "rbf": KernelMath(rbf_block, ones_diag, _always, rbf_prepare),
    "laplacian": KernelMath(laplacian_block, ones_diag, _always),
    "polynomial": KernelMath(polynomial_block, polynomial_diag, _polynomial_psd),
    "sigmoid": KernelMath(sigmoid_block, sigmoid_diag, _never),
    "linear": KernelMath(linear_block, linear_diag, _always),
    "cosine": KernelMath(cosine_block, cosine_diag, _always),
}
"""Each named kernel's functions, by name (the names of
:data:`npt_dask.kernels.params.KERNEL_TABLE`, which declares their hyperparameters)."""

if tuple(MATH) != KERNEL_NAMES:  # pragma: no cover - a kernel added to one place only
    raise ImportError(
        f"npt_dask.kernels.params.KERNEL_TABLE has {KERNEL_NAMES}; MATH has {tuple(MATH)}"
    )
