"""Kernel functions on numpy blocks, as frozen, validated, serialisable specs.

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

These are :class:`NamedKernel` specs. Two more kinds of kernel, as scikit-learn's
``KernelPCA`` takes them, each its own class (:class:`KernelSpec` is their base):

* :class:`CallableKernel`, a **callable** ``f(A, B, **kernel_params)`` returning the
  ``(len(A), len(B))`` block (``make_kernel(f, kernel_params=...)``); it runs block by
  block on the workers. A model with one cannot be saved: a function is code, and the
  stores hold no pickle. scikit-learn calls its callable once per *pair of
  rows*; such a function (two rows in, a number out) is recognised and
  evaluated pair by pair, as there (slow: prefer a block function). The
  convention is found by probing the function on a few rows whose counts
  differ from each other and from the number of features (so no shape can
  coincide); a function that works both ways with different answers is
  refused: declare it with :func:`blockwise` or :func:`pairwise`.
* :class:`PrecomputedKernel`, ``"precomputed"``: the caller gives the kernel matrix
  itself; its blocks are read, never evaluated (:mod:`npt_dask.gram`), so the spec has
  no function.

Every kernel block and diagonal is checked once for NaN and inf as it is
made (one reduction over the block, negligible next to its evaluation): an
overflow (huge data, a huge ``gamma``) or a callable returning non-finite
values raises :class:`~npt_dask.errors.KernelValueError` naming the kernel,
its parameters and the data range, instead of reaching the eigensolver.

Layer rule: this module sees numpy blocks only. It knows nothing of dask,
xarray or zarr. The dot-product kernels (rbf, polynomial, sigmoid, linear,
cosine) cost one matrix product plus one multi-threaded elementwise pass; the
same-operand product ``A @ A.T`` is never issued (numpy's bundled OpenBLAS
routes it to ``syrk``, which crashes multi-threaded on large blocks).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

import numpy as np
import scipy.sparse
from scipy.spatial.distance import cdist

from npt_dask._parallel import map_row_slices
from npt_dask.errors import InputError, KernelParameterError, KernelValueError
from npt_dask.params import KERNEL_ALIASES, KERNEL_NAMES, check_param

__all__ = [
    "ALIASES",
    "CALLABLE",
    "GAMMA_SCALE",
    "KERNELS",
    "KERNEL_FORM",
    "PRECOMPUTED",
    "CallableKernel",
    "KernelSpec",
    "NamedKernel",
    "PrecomputedKernel",
    "blockwise",
    "make_kernel",
    "pairwise",
    "resolve_kernel",
]

PRECOMPUTED = "precomputed"
"""``kernel="precomputed"``: X is the kernel matrix (train x train; test x train to project)."""

CALLABLE = "callable"
"""The name of a spec wrapping a Python function ``f(A, B, **kernel_params)``."""

KERNEL_FORM = "npt_kernel_form"
"""Attribute of a function declaring its convention: ``"block"`` (``f(A, B)`` returns
the block) or ``"pair"`` (``f(x, z)`` returns a number); set by :func:`blockwise`
and :func:`pairwise`. Undeclared functions are probed (see :func:`_form`)."""

_PROBE_ROWS = (2, 3, 4)  # row counts of the convention probe (two of them, != d)

_TILE_ELEMENTS = 1 << 15  # elements per tile of an elementwise pass (~256 KiB)


def _real(value: float | str | None) -> float:
    """A resolved kernel parameter (the spec was validated and resolved before use)."""
    assert isinstance(value, int | float), f"unresolved kernel parameter {value!r}"
    return float(value)


def _tiled(n_rows: int, n_cols: int, step: Callable[[slice], None]) -> None:
    """Run ``step`` on cache-sized row tiles, the tiles spread over threads."""
    tile = max(1, _TILE_ELEMENTS // max(n_cols, 1))

    def run(rows: slice) -> None:
        for start in range(rows.start, rows.stop, tile):
            step(slice(start, min(start + tile, rows.stop)))

    map_row_slices(run, n_rows, n_cols)


def _is_sparse(a: Any) -> bool:
    return bool(scipy.sparse.issparse(a))


def _dense(a: Any, dtype: Any = None) -> np.ndarray:
    """A dense ndarray of ``a`` (a scipy.sparse block is expanded)."""
    if _is_sparse(a):
        a = a.toarray()
    return np.asarray(a, dtype=dtype)


def _block_dtype(a: np.ndarray, b: np.ndarray) -> np.dtype:
    dtype = np.result_type(a.dtype, b.dtype, np.float32)
    return np.dtype(np.float64) if dtype.itemsize > 8 else dtype


def _cross_product(
    a: np.ndarray, b: np.ndarray, dtype: np.dtype, out: np.ndarray | None = None
) -> np.ndarray:
    """``a @ b.T`` through the general product, never the ``syrk`` path.

    ``out`` (C-contiguous, ``dtype``, shape ``(len(a), len(b))``) receives the
    result when given. scipy.sparse operands stay sparse through the product
    (only the block itself is dense).
    """
    if _is_sparse(a) or _is_sparse(b):
        a_s = a.astype(dtype) if _is_sparse(a) else np.asarray(a, dtype=dtype)
        b_s = b.astype(dtype) if _is_sparse(b) else np.asarray(b, dtype=dtype)
        product = _dense(a_s @ b_s.T, dtype)
        if out is None:
            return np.ascontiguousarray(product)
        out[...] = product
        return out
    a = np.ascontiguousarray(a, dtype=dtype)
    b = np.ascontiguousarray(b, dtype=dtype)
    if np.shares_memory(a, b):
        b = b.copy()
    if out is None:
        return np.dot(a, b.T)
    return np.dot(a, b.T, out=out)


def _sq_norms(a: np.ndarray) -> np.ndarray:
    if _is_sparse(a):
        a64s: Any = a.astype(np.float64)
        return np.asarray(a64s.multiply(a64s).sum(axis=1), dtype=np.float64).ravel()
    a64 = np.asarray(a, dtype=np.float64)
    return np.einsum("ij,ij->i", a64, a64)


# --- block functions: (a, b, spec) -> kappa(a, b); diag functions: (a, spec) -> kappa(a_i, a_i)


def _shift_to_common_origin(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Subtract b's mean from both (distances are shift-invariant).

    ``||a||^2 + ||b||^2 - 2 <a, b>`` cancels badly when the data sit far from
    the origin, worst in float32; centring the pair first removes most of it.
    The shift is computed in float64 and costs O(chunk * d). Sparse blocks
    are left as they are (a shift would make them dense).
    """
    if _is_sparse(a) or _is_sparse(b):
        return a, b
    origin = np.asarray(b, dtype=np.float64).mean(axis=0)
    a_s = (np.asarray(a, dtype=np.float64) - origin).astype(a.dtype, copy=False)
    b_s = a_s if b is a else (np.asarray(b, dtype=np.float64) - origin).astype(b.dtype, copy=False)
    return a_s, b_s


def _rbf_block(a: np.ndarray, b: np.ndarray, spec: NamedKernel, out=None) -> np.ndarray:
    dtype = _block_dtype(a, b)
    a, b = _shift_to_common_origin(a, b)
    out = _cross_product(a, b, dtype, out)
    aa = _sq_norms(a).astype(dtype)
    bb = _sq_norms(b).astype(dtype)
    neg_gamma = dtype.type(-_real(spec.gamma))

    def step(rows: slice) -> None:
        g = out[rows]
        g *= -2.0
        g += aa[rows, None]
        g += bb[None, :]
        np.maximum(g, 0.0, out=g)
        g *= neg_gamma
        np.exp(g, out=g)

    _tiled(out.shape[0], out.shape[1], step)
    return out


def _laplacian_block(a: np.ndarray, b: np.ndarray, spec: NamedKernel, out=None) -> np.ndarray:
    dtype = _block_dtype(a, b)
    sparse = _is_sparse(a) or _is_sparse(b)
    a64 = scipy.sparse.csr_matrix(a, dtype=np.float64) if sparse else np.asarray(a, np.float64)
    b64 = scipy.sparse.csr_matrix(b, dtype=np.float64) if sparse else np.asarray(b, np.float64)
    if out is None:
        out = np.empty((a.shape[0], b.shape[0]), dtype=dtype)

    def run(rows: slice) -> None:
        if sparse:
            from sklearn.metrics.pairwise import manhattan_distances

            d = manhattan_distances(a64[rows], b64)
        else:
            d = cdist(a64[rows], b64, metric="cityblock")
        d *= -_real(spec.gamma)
        np.exp(d, out=d)
        out[rows] = d

    map_row_slices(run, out.shape[0], max(out.shape[1], 1) * max(a.shape[1], 1))
    return out


def _power_inplace(g: np.ndarray, degree: float) -> None:
    if float(degree).is_integer():
        np.power(g, int(degree), out=g)
    else:
        np.power(g, degree, out=g)


def _affine_dot_block(
    a: np.ndarray,
    b: np.ndarray,
    spec: NamedKernel,
    finish: Callable[[np.ndarray], None],
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``finish(gamma <a, b> + coef0)`` in place: one product, one threaded pass."""
    dtype = _block_dtype(a, b)
    out = _cross_product(a, b, dtype, out)

    def step(rows: slice) -> None:
        g = out[rows]
        g *= _real(spec.gamma)
        g += _real(spec.coef0)
        finish(g)

    _tiled(out.shape[0], out.shape[1], step)
    return out


def _polynomial_block(a: np.ndarray, b: np.ndarray, spec: NamedKernel, out=None) -> np.ndarray:
    return _affine_dot_block(a, b, spec, lambda g: _power_inplace(g, _real(spec.degree)), out)


def _sigmoid_block(a: np.ndarray, b: np.ndarray, spec: NamedKernel, out=None) -> np.ndarray:
    return _affine_dot_block(a, b, spec, lambda g: np.tanh(g, out=g), out)


def _linear_block(a: np.ndarray, b: np.ndarray, spec: NamedKernel, out=None) -> np.ndarray:
    return _cross_product(a, b, _block_dtype(a, b), out)


def _unit_rows(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    norms = np.sqrt(_sq_norms(a))
    norms[norms == 0.0] = 1.0  # scikit-learn's normalize leaves zero rows at zero
    if _is_sparse(a):
        return (scipy.sparse.diags(1.0 / norms) @ a.astype(np.float64)).astype(dtype).tocsr()
    return (np.asarray(a, dtype=np.float64) / norms[:, None]).astype(dtype, copy=False)


def _cosine_block(a: np.ndarray, b: np.ndarray, spec: NamedKernel, out=None) -> np.ndarray:
    dtype = _block_dtype(a, b)
    return _cross_product(_unit_rows(a, dtype), _unit_rows(b, dtype), dtype, out)


def _ones_diag(a: np.ndarray, spec: NamedKernel) -> np.ndarray:
    return np.ones(a.shape[0], dtype=np.float64)


def _polynomial_diag(a: np.ndarray, spec: NamedKernel) -> np.ndarray:
    d = _real(spec.gamma) * _sq_norms(a) + _real(spec.coef0)
    _power_inplace(d, _real(spec.degree))
    return d


def _sigmoid_diag(a: np.ndarray, spec: NamedKernel) -> np.ndarray:
    return np.tanh(_real(spec.gamma) * _sq_norms(a) + _real(spec.coef0))


def _linear_diag(a: np.ndarray, spec: NamedKernel) -> np.ndarray:
    return _sq_norms(a)


def _cosine_diag(a: np.ndarray, spec: NamedKernel) -> np.ndarray:
    return (_sq_norms(a) > 0.0).astype(np.float64)


@dataclass(frozen=True)
class _KernelDef:
    block: Callable[..., np.ndarray]  # (a, b, spec, out=None) -> kappa(a, b)
    diag: Callable[[np.ndarray, NamedKernel], np.ndarray]
    defaults: Mapping[str, Any]  # parameter -> default (None: resolved from data)
    psd: bool


KERNELS: Mapping[str, _KernelDef] = {
    "rbf": _KernelDef(_rbf_block, _ones_diag, {"gamma": None}, True),
    "laplacian": _KernelDef(_laplacian_block, _ones_diag, {"gamma": None}, True),
    "polynomial": _KernelDef(
        _polynomial_block, _polynomial_diag, {"gamma": None, "degree": 3, "coef0": 1.0}, False
    ),
    "sigmoid": _KernelDef(_sigmoid_block, _sigmoid_diag, {"gamma": None, "coef0": 1.0}, False),
    "linear": _KernelDef(_linear_block, _linear_diag, {}, True),
    "cosine": _KernelDef(_cosine_block, _cosine_diag, {}, True),
}
assert tuple(KERNELS) == KERNEL_NAMES, "the registry and the parameter table disagree"
"""Registry of kernel names to their block function, diagonal and defaults.

``psd`` records whether the kernel is positive semi-definite for every
parameter value (a polynomial with a non-integer degree or negative ``coef0``
may not be; sigmoid is not in general)."""

GAMMA_SCALE = "scale"
"""``gamma="scale"``: ``1 / (n_features * X.var())``, as scikit-learn's SVC."""

ALIASES: Mapping[str, str] = KERNEL_ALIASES

_PARAMS = ("gamma", "degree", "coef0")


class _ByKind(type):
    """``KernelSpec(name, ...)`` builds the class of that kind (:func:`_spec_of_kind`)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is KernelSpec:
            return _spec_of_kind(*args, **kwargs)
        return super().__call__(*args, **kwargs)


@dataclass(frozen=True)
class KernelSpec(metaclass=_ByKind):
    """A kernel, validated, immutable: one of three kinds, each its own class.

    * :class:`NamedKernel` -- a kernel of the registry (:data:`KERNELS`) and its
      parameters; serialisable (:meth:`to_dict`, :meth:`from_dict`).
    * :class:`CallableKernel` -- a Python function ``f(A, B, **kernel_params)``,
      evaluated block by block; never stored (a function is code, the stores hold no
      pickle).
    * :class:`PrecomputedKernel` -- ``kernel="precomputed"``: the caller gives the kernel
      matrix, whose blocks are read, never evaluated.

    What differs by kind is said by the class (its methods and the class attributes
    :attr:`kind`, :attr:`evaluated`, :attr:`storable`, :attr:`feature_local`), so code
    elsewhere asks what a kernel can do, not which kernel it is.
    ``KernelSpec(name, ...)`` builds the class its ``name`` calls for
    (``"precomputed"``, ``"callable"`` or a registry name); :func:`make_kernel` builds
    one from scikit-learn style arguments.

    Examples
    --------
    >>> import numpy as np
    >>> from npt_dask.kernels import KernelSpec
    >>> k = KernelSpec("rbf", gamma=0.5)
    >>> type(k).__name__, k.to_dict()
    ('NamedKernel', {'name': 'rbf', 'gamma': 0.5})
    >>> KernelSpec.from_dict(k.to_dict()) == k
    True
    >>> x = np.array([[0.0, 0.0], [1.0, 1.0]])
    >>> np.round(k(x, x), 4)
    array([[1.    , 0.3679],
           [0.3679, 1.    ]])
    """

    name: str

    kind: ClassVar[str] = "kernel"
    """``"named"``, ``"callable"`` or ``"precomputed"``."""
    evaluated: ClassVar[bool] = True
    """True when blocks are computed from rows of features; False when they are read
    from a given kernel matrix (which then stands where the rows would)."""
    storable: ClassVar[bool] = True
    """True when a model with this kernel can be saved."""
    feature_local: ClassVar[bool] = False
    """True when ``kappa(x, z)`` ignores a feature that is zero in both rows (so such
    columns can be dropped from the training operator)."""

    def __post_init__(self) -> None:
        if self.name != self.kind:  # the special kinds: their name is their kind
            raise KernelParameterError(
                f"A {self.kind} kernel is named {self.kind!r}; got {self.name!r}."
            )

    @property
    def is_precomputed(self) -> bool:
        """True for ``kernel="precomputed"``: blocks are read from a given matrix."""
        return self.kind == PRECOMPUTED

    @property
    def is_callable(self) -> bool:
        """True for a Python function kernel (evaluated block by block, never stored)."""
        return self.kind == CALLABLE

    @property
    def function_name(self) -> str:
        """``module.qualname`` of a callable kernel's function (``""`` otherwise)."""
        return ""

    @property
    def is_resolved(self) -> bool:
        """True when every parameter has a value (``gamma`` is not pending)."""
        return True

    @property
    def is_psd(self) -> bool:
        """True when the kernel is positive semi-definite for these parameters."""
        return False  # unknown

    @property
    def needs_variance(self) -> bool:
        """True when ``gamma="scale"``: :meth:`resolve` needs the data's variance."""
        return False

    def resolve(self, n_features: int, variance: float | None = None) -> KernelSpec:
        """The spec with every parameter fixed from the data (:meth:`NamedKernel.resolve`)."""
        return self

    def matches(self, other: KernelSpec, rel_tol: float = 0.0) -> bool:
        """Whether ``other`` is the same kernel, its real parameters within ``rel_tol``."""
        return self == other

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-serialisable dict: the name and the kernel's own parameters."""
        return {"name": self.name}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KernelSpec:
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        if data.get("name") == CALLABLE or "function" in data:
            raise KernelParameterError(
                "A callable kernel cannot be rebuilt from a dict (a function is code; "
                "npt-dask stores no pickle). Pass the function itself: make_kernel(f)."
            )
        if "name" not in data:
            raise KernelParameterError("A kernel spec dict needs a 'name' key.")
        kind = _KINDS.get(data["name"], NamedKernel)
        unknown = set(data) - {f.name for f in fields(kind)}
        if unknown:
            raise KernelParameterError(f"Unknown kernel spec keys {sorted(unknown)}.")
        return kind(**dict(data))

    def describe(self) -> str:
        """``"rbf kernel (gamma=0.5)"``, ``"kernel function mod.f (kernel_params {...})"``."""
        raise NotImplementedError

    def _block(self, a: Any, b: Any, out: np.ndarray | None) -> np.ndarray:
        raise NotImplementedError

    def _diag(self, a: Any) -> np.ndarray:
        raise NotImplementedError

    def _non_finite(self, found: str, where: str, dtype: np.dtype) -> str:
        """The message of a block with NaN or inf (``found``) on rows ``where``."""
        raise NotImplementedError

    def _check_ready(self, *blocks: np.ndarray) -> None:
        for block in blocks:
            if block.ndim != 2:
                raise InputError(f"Kernel blocks must be 2-D; got shape {block.shape}.")

    def __call__(self, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Kernel block ``kappa(a_i, b_j)``, shape ``(len(a), len(b))``.

        The block is float32 when both inputs are float32, float64 otherwise.
        ``out``, a C-contiguous array of that shape and dtype, receives it
        when given (a reused buffer saves the page faults of a fresh one).
        """
        self._check_ready(a, b)
        if a.shape[1] != b.shape[1]:
            raise InputError(
                f"Kernel blocks need the same number of features; got {a.shape[1]} and "
                f"{b.shape[1]}."
            )
        if out is not None and (
            out.shape != (a.shape[0], b.shape[0])
            or out.dtype != _block_dtype(a, b)
            or not out.flags.c_contiguous
        ):
            raise InputError(
                f"out must be C-contiguous {_block_dtype(a, b)} of shape "
                f"{(a.shape[0], b.shape[0])}; got {out.dtype} {out.shape}."
            )
        block = self._block(a, b, out)
        self._check_finite(block, a, b)
        return block

    def diag(self, a: np.ndarray) -> np.ndarray:
        """Self-similarities ``kappa(a_i, a_i)``, float64, shape ``(len(a),)``."""
        self._check_ready(a)
        values = self._diag(a)
        self._check_finite(values, a, a)
        return values

    def _check_finite(self, block: np.ndarray, a: Any, b: Any) -> None:
        """Refuse a block with NaN or inf, naming the kernel and the data (one reduction)."""
        if np.isfinite(np.add.reduce(block, axis=None)) or np.isfinite(block).all():
            return  # the sum of finite values is finite unless it overflows itself
        found = " and ".join(
            word for word, hit in (("NaN", np.isnan(block).any()), ("inf", np.isinf(block).any()))
            if hit
        )  # fmt: skip
        top = max(_max_abs(a), _max_abs(b))
        where = f"on rows with values up to {top:.3g} ({block.dtype} kernel blocks)"
        raise KernelValueError(self._non_finite(found, where, block.dtype))


@dataclass(frozen=True)
class NamedKernel(KernelSpec):
    """A kernel of the registry (:data:`KERNELS`) and its parameters.

    Parameters that a kernel does not use must be ``None``; use
    :func:`make_kernel` to build a spec from scikit-learn style arguments that
    may carry unused ones. ``gamma=None`` means ``1 / n_features`` and is
    fixed by :meth:`resolve` once the data are known.

    >>> NamedKernel("polynomial", degree=2).to_dict()
    {'name': 'polynomial', 'gamma': None, 'degree': 2.0, 'coef0': 1.0}
    """

    gamma: float | str | None = None
    degree: float | None = None
    coef0: float | None = None

    kind: ClassVar[str] = "named"
    feature_local: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.name not in KERNELS:
            check_param("kernel", self.name)  # "Unknown kernel ...; choose one of ..."
            raise KernelParameterError(f"Unknown kernel {self.name!r}.")
        defaults = KERNELS[self.name].defaults
        for param in _PARAMS:
            value = getattr(self, param)
            if param not in defaults:
                if value is not None:
                    raise KernelParameterError(
                        f"The {self.name!r} kernel takes no '{param}' parameter; got {value!r}. "
                        f"Use npt_dask.kernels.make_kernel to drop unused parameters."
                    )
                continue
            if value is None:
                object.__setattr__(self, param, defaults[param])
                continue
            check_param(param, value)  # the one parameter table: same limits everywhere
            if param == "gamma" and value == GAMMA_SCALE:
                continue  # resolved from the data by resolve()
            object.__setattr__(self, param, float(value))

    @property
    def is_resolved(self) -> bool:
        values = [getattr(self, p) for p in KERNELS[self.name].defaults]
        return all(v is not None and not isinstance(v, str) for v in values)

    @property
    def is_psd(self) -> bool:
        if self.name == "polynomial":
            return _real(self.degree).is_integer() and _real(self.coef0) >= 0.0
        return KERNELS[self.name].psd

    @property
    def needs_variance(self) -> bool:
        return isinstance(self.gamma, str)

    def resolve(self, n_features: int, variance: float | None = None) -> KernelSpec:
        """The spec with ``gamma`` fixed from the data, the one place it is resolved.

        ``gamma=None`` becomes ``1 / n_features`` (scikit-learn's KernelPCA);
        ``gamma="scale"`` becomes ``1 / (n_features * variance)``, the variance
        of all entries of X (scikit-learn's SVC; 1 when the variance is 0).

        >>> KernelSpec("rbf", gamma="scale").resolve(4, variance=0.5).gamma
        0.5
        """
        if "gamma" not in KERNELS[self.name].defaults:
            return self
        if self.gamma is None:
            return replace(self, gamma=1.0 / n_features)
        if not self.needs_variance:
            return self
        if variance is None:
            raise KernelParameterError("gamma='scale' needs the variance of the data.")
        gamma = 1.0 / (n_features * variance) if variance > 0 else 1.0
        if not (np.isfinite(variance) and np.isfinite(gamma) and gamma > 0):
            raise KernelValueError(
                f"gamma='scale' is 1 / (n_features * var(X)), but var(X) = {variance:.3g} "
                f"over- or underflows float64 (gamma would be {gamma:.3g}): the data are on "
                "an extreme scale. Rescale X (e.g. sklearn.preprocessing.StandardScaler) "
                "or pass gamma as a number."
            )
        return replace(self, gamma=gamma)

    def matches(self, other: KernelSpec, rel_tol: float = 0.0) -> bool:
        """Same name, parameters within ``rel_tol`` (``gamma="scale"`` resolved from a
        variance summed in another order differs in the last bits)."""
        if not isinstance(other, NamedKernel) or other.name != self.name:
            return False
        return all(
            math.isclose(_real(getattr(self, p)), _real(getattr(other, p)), rel_tol=rel_tol)
            for p in KERNELS[self.name].defaults
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        for param in KERNELS[self.name].defaults:
            out[param] = getattr(self, param)
        return out

    def describe(self) -> str:
        values = ", ".join(f"{p}={getattr(self, p):.3g}" for p in KERNELS[self.name].defaults)
        return f"{self.name} kernel" + (f" ({values})" if values else "")

    def _check_ready(self, *blocks: np.ndarray) -> None:
        if not self.is_resolved:
            raise KernelParameterError(
                f"Kernel {self.name!r} has gamma={self.gamma!r}; call spec.resolve(n_features) "
                "first."
            )
        super()._check_ready(*blocks)

    def _block(self, a: Any, b: Any, out: np.ndarray | None) -> np.ndarray:
        return KERNELS[self.name].block(a, b, self, out)

    def _diag(self, a: Any) -> np.ndarray:
        return KERNELS[self.name].diag(a, self)

    def _non_finite(self, found: str, where: str, dtype: np.dtype) -> str:
        fixes = ["rescale X (e.g. sklearn.preprocessing.StandardScaler)"]
        if "gamma" in KERNELS[self.name].defaults:
            fixes.append("lower gamma")
        if dtype == np.float32:
            fixes.append("compute in float64 (precision='float64')")
        return (
            f"The {self.describe()} gave {found} {where}: the kernel overflowed "
            f"{dtype} (largest {np.finfo(dtype).max:.3g}). "
            + ", or ".join(fixes).replace("rescale", "Rescale", 1)
            + "."
        )


@dataclass(frozen=True)
class CallableKernel(KernelSpec):
    """A Python function ``f(A, B, **params)`` returning the ``(len(A), len(B))`` block.

    It runs block by block on the workers; scikit-learn's per-pair form (two rows
    in, a number out) is recognised and evaluated pair by pair (see :func:`_form`).
    A model with one cannot be saved (:attr:`storable` is False).

    >>> import numpy as np
    >>> k = CallableKernel(function=lambda a, b, c: a @ b.T + c, params=(("c", 1.0),))
    >>> k(np.eye(2), np.eye(2)).tolist()
    [[2.0, 1.0], [1.0, 2.0]]
    """

    name: str = CALLABLE
    function: Callable[..., Any] | None = None  # f(A, B, **params)
    params: tuple[tuple[str, Any], ...] = ()  # its kernel_params, as sorted items

    kind: ClassVar[str] = CALLABLE
    storable: ClassVar[bool] = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not callable(self.function):
            raise KernelParameterError(
                f"A callable kernel needs a function f(A, B, **kernel_params); got "
                f"{type(self.function).__name__}."
            )
        object.__setattr__(self, "params", tuple(sorted(dict(self.params).items())))

    @property
    def function_name(self) -> str:
        f = self.function
        module = getattr(f, "__module__", None) or ""
        name = getattr(f, "__qualname__", None) or type(f).__name__
        return f"{module}.{name}" if module else name

    def to_dict(self) -> dict[str, Any]:
        """The function's name and parameters (for display and reports); it cannot be
        turned back into a spec."""
        return {
            "name": self.name,
            "function": self.function_name,
            "kernel_params": {k: _plain(v) for k, v in self.params},
        }

    def describe(self) -> str:
        given = f" with kernel_params {dict(self.params)}" if self.params else ""
        return f"kernel function {self.function_name}{given}"

    def _block(self, a: Any, b: Any, out: np.ndarray | None) -> np.ndarray:
        assert self.function is not None
        dtype = _block_dtype(a, b)
        params = dict(self.params)
        shape = (a.shape[0], b.shape[0])
        if 0 in shape:
            block = np.empty(shape, dtype=dtype)
        elif _form(self.function, a, b, params, self.describe()) == "pair":
            block = pairwise(self.function)(a, b, **params).astype(dtype, copy=False)
        else:
            got, problem = _attempt(self.function, a, b, params, dtype)
            if got is None or got.shape != shape:
                what = problem if got is None else f"returned shape {got.shape}"
                raise KernelValueError(
                    f"The {self.describe()} {what} for blocks of {shape[0]} and {shape[1]} "
                    f"rows; it must return the {shape} kernel block of numbers."
                )
            block = got
        if out is None:
            return np.ascontiguousarray(block)
        out[...] = block
        return out

    def _diag(self, a: Any) -> np.ndarray:
        """The diagonal of the block ``f(a, a)``."""
        return np.array(np.diagonal(self._block(a, a, None)), dtype=np.float64)

    def _non_finite(self, found: str, where: str, dtype: np.dtype) -> str:
        return (
            f"The {self.describe()} returned {found} {where}; a kernel must return finite "
            "numbers. Fix the function (or its kernel_params) for these rows."
        )


@dataclass(frozen=True)
class PrecomputedKernel(KernelSpec):
    """``kernel="precomputed"``: X is the kernel matrix (train x train; test x train to
    project). Its blocks are read (:mod:`npt_dask.gram`), never evaluated: the spec has
    no function, and a model keeps the training matrix's diagonal instead of rows.

    >>> PrecomputedKernel().describe()
    'precomputed kernel'
    """

    name: str = PRECOMPUTED

    kind: ClassVar[str] = PRECOMPUTED
    evaluated: ClassVar[bool] = False

    def describe(self) -> str:
        return "precomputed kernel"

    def _check_ready(self, *blocks: np.ndarray) -> None:
        raise KernelParameterError(
            "A precomputed kernel has no function to evaluate: its blocks are read from "
            "the kernel matrix given as X (npt_dask.gram reads them)."
        )


def _spec_of_kind(
    name: str,
    gamma: float | str | None = None,
    degree: float | None = None,
    coef0: float | None = None,
    function: Callable[..., Any] | None = None,
    params: tuple[tuple[str, Any], ...] = (),
) -> KernelSpec:
    """The spec ``KernelSpec(name, ...)`` asks for, each field checked against its kind."""
    given = sorted(p for p, v in zip(_PARAMS, (gamma, degree, coef0), strict=True) if v is not None)
    if name in (PRECOMPUTED, CALLABLE) and given:
        fix = (
            "pass the kernel function's own parameters as kernel_params."
            if name == CALLABLE
            else "the kernel matrix is given as it is."
        )
        raise KernelParameterError(f"A {name} kernel takes no {given}; {fix}")
    if name == CALLABLE:
        return CallableKernel(function=function, params=params)
    if function is not None or params:
        raise KernelParameterError(
            f"The {name!r} kernel takes no function or kernel_params; pass the function itself "
            "as the kernel (make_kernel(f, kernel_params=...))."
        )
    if name == PRECOMPUTED:
        return PrecomputedKernel()
    return NamedKernel(name, gamma=gamma, degree=degree, coef0=coef0)


_KINDS: Mapping[str, type[KernelSpec]] = {
    PRECOMPUTED: PrecomputedKernel,
    CALLABLE: CallableKernel,
}
"""The class of each special name; every other name is a :class:`NamedKernel`."""


def _plain(value: Any) -> Any:
    """A JSON-friendly stand-in for a kernel parameter (for display and reports)."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    return repr(value)


def _max_abs(a: Any) -> float:
    """The largest absolute value in a block (dense or sparse; 0 when empty)."""
    values = np.asarray(a.data if _is_sparse(a) else a)
    finite = np.abs(values[np.isfinite(values)]) if values.size else values
    return float(finite.max()) if finite.size else 0.0


def _attempt(
    f: Callable[..., Any], a: Any, b: Any, params: Mapping[str, Any], dtype: Any = None
) -> tuple[np.ndarray | None, str]:
    """``f(a, b)`` as a numeric ndarray, or ``None`` and what went wrong instead."""
    try:
        value = f(a, b, **params)
    except Exception as exc:
        return None, f"raised {type(exc).__name__}: {exc}"
    if value is None:
        return None, "returned None"
    array = _dense(value) if _is_sparse(value) else np.asarray(value)
    if array.dtype.kind not in "biuf":
        return None, f"returned {array.dtype} values, not numbers"
    return (array if dtype is None else array.astype(dtype, copy=False)), ""


def _form(f: Callable[..., Any], a: Any, b: Any, params: Mapping[str, Any], name: str) -> str:
    """``"block"`` or ``"pair"``: how the callable kernel ``f`` is to be called.

    A declared form (:data:`KERNEL_FORM`) is used as it is. Otherwise ``f`` is
    probed on ``p`` and ``q`` rows of ``a`` and ``b`` (``p != q``, neither equal
    to the number of features, so a per-pair ``x @ z`` cannot return a block of
    the right shape by coincidence) and on their first rows alone.
    """
    declared = getattr(f, KERNEL_FORM, None)
    if declared in ("block", "pair"):
        return str(declared)
    p, q = [k for k in _PROBE_ROWS if k != a.shape[1]][:2]
    block, block_problem = _attempt(
        f, a[np.arange(p) % a.shape[0]], b[np.arange(q) % b.shape[0]], params
    )
    value, pair_problem = _attempt(f, _dense(a[:1])[0], _dense(b[:1])[0], params)
    is_block = block is not None and block.shape == (p, q)
    is_pair = value is not None and value.size == 1
    if block is not None and value is not None and is_block and is_pair:
        if np.allclose(block[0, 0], value.ravel()[0], rtol=1e-6, atol=0.0, equal_nan=True):
            return "block"  # the same kernel either way: the block call is faster
        raise KernelParameterError(
            f"The {name} gives one value for two rows ({float(value.ravel()[0]):.6g}) and "
            f"another for the same rows in a block ({float(block[0, 0]):.6g}), so it is not "
            "clear whether it takes blocks or single rows. Say which: "
            "kernel=npt_dask.kernels.blockwise(f) for f(A, B) -> (len(A), len(B)) block, or "
            "kernel=npt_dask.kernels.pairwise(f) for f(x, z) -> number (scikit-learn's form)."
        )
    if is_block:
        return "block"
    if is_pair:
        return "pair"
    got = block_problem or f"returned shape {getattr(block, 'shape', ())}"
    got_pair = pair_problem or f"returned shape {getattr(value, 'shape', ())}"
    raise KernelValueError(
        f"The {name} {got} for blocks of {p} and {q} rows, and {got_pair} for two single "
        f"rows. A kernel function must return the ({p}, {q}) block of numbers for "
        "f(A, B) (or a number for f(x, z), scikit-learn's per-pair form)."
    )


def blockwise(f: Callable[..., Any]) -> Callable[..., Any]:
    """Declare ``f(A, B, **params)`` a block function: it is called on blocks, never probed.

    >>> import numpy as np
    >>> k = blockwise(lambda a, b: a @ b.T)
    >>> make_kernel(k)(np.eye(2), np.ones((3, 2))).shape
    (2, 3)
    """

    def block(a: Any, b: Any, **params: Any) -> Any:
        return f(a, b, **params)

    return _declared(block, f, "block", "{}")


def _declared(wrapper: Callable[..., Any], f: Callable[..., Any], form: str, label: str):
    setattr(wrapper, KERNEL_FORM, form)
    wrapper.__qualname__ = label.format(getattr(f, "__qualname__", type(f).__name__))
    wrapper.__module__ = getattr(f, "__module__", None) or __name__
    return wrapper


def pairwise(f: Callable[..., Any]) -> Callable[..., np.ndarray]:
    """A block function from ``f(x, z, **params) -> float`` on two single rows.

    scikit-learn calls a callable kernel once per pair of rows; npt-dask calls
    it once per block. This wrapper loops over the pairs of a block (slow:
    prefer a vectorised ``f(A, B)``), so the same function serves both.

    >>> import numpy as np
    >>> k = pairwise(lambda x, z: float(np.dot(x, z)))
    >>> k(np.eye(2), np.ones((3, 2))).shape
    (2, 3)
    """

    def block(a: Any, b: Any, **params: Any) -> np.ndarray:
        a_d, b_d = _dense(a), _dense(b)
        out = np.empty((a_d.shape[0], b_d.shape[0]))
        for i in range(a_d.shape[0]):
            for j in range(b_d.shape[0]):
                raw = f(a_d[i], b_d[j], **params)
                value = np.asarray(raw)
                if value.dtype.kind not in "biuf" or value.size != 1:
                    raise KernelValueError(
                        f"The kernel function {getattr(f, '__qualname__', f)} returned "
                        f"{raw!r} for rows {i} and {j}; a per-pair kernel must return a "
                        "number."
                    )
                out[i, j] = value.item()
        return out

    return _declared(block, f, "block", "pairwise({})")


def make_kernel(
    kernel: str | KernelSpec | Mapping[str, Any] | Callable[..., Any],
    *,
    gamma: float | str | None = None,
    degree: float | None = None,
    coef0: float | None = None,
    kernel_params: Mapping[str, Any] | None = None,
) -> KernelSpec:
    """Build a :class:`KernelSpec` from scikit-learn style arguments.

    Parameters the kernel does not use are ignored, as in
    ``sklearn.decomposition.KernelPCA``. A spec or a spec dict is returned
    as a spec unchanged; passing parameters alongside one is an error.

    ``kernel`` may also be ``"precomputed"`` (X is the kernel matrix) or a
    function ``f(A, B, **kernel_params)`` returning the ``(len(A), len(B))``
    block. For a named kernel, ``kernel_params`` may give ``gamma``,
    ``degree`` and ``coef0`` (an argument given both ways must agree).

    >>> make_kernel("precomputed").is_precomputed
    True
    >>> make_kernel(lambda a, b, c: (a @ b.T + c) ** 2, kernel_params={"c": 1.0}).params
    (('c', 1.0),)
    """
    params = dict(kernel_params or {})
    if isinstance(kernel, KernelSpec | Mapping):
        if any(v is not None for v in (gamma, degree, coef0)) or params:
            raise KernelParameterError(
                "Pass kernel parameters either inside the kernel spec or as arguments, not both."
            )
        return kernel if isinstance(kernel, KernelSpec) else KernelSpec.from_dict(kernel)
    if callable(kernel) and not isinstance(kernel, str):
        return CallableKernel(function=kernel, params=tuple(params.items()))
    if not isinstance(kernel, str):
        raise KernelParameterError(
            f"kernel must be a name, 'precomputed', a function f(A, B, **kernel_params), a "
            f"KernelSpec or a dict; got {type(kernel).__name__}."
        )
    if kernel == PRECOMPUTED:
        if params:
            raise KernelParameterError(
                f"kernel_params {sorted(params)} given with a precomputed kernel, which has none."
            )
        return PrecomputedKernel()
    check_param("kernel", kernel)
    kernel = ALIASES.get(kernel, kernel)
    given: dict[str, Any] = {"gamma": gamma, "degree": degree, "coef0": coef0}
    used = KERNELS[kernel].defaults
    for key, value in params.items():
        if key not in used:
            raise KernelParameterError(
                f"kernel_params has {key!r}, which the {kernel!r} kernel does not take; "
                f"it takes {sorted(used) or 'no parameters'}."
            )
        if given[key] is not None and given[key] != value:
            raise KernelParameterError(
                f"{key} is given twice, as {given[key]!r} and in kernel_params as {value!r}; "
                "give it once."
            )
        given[key] = value
    return NamedKernel(kernel, **{k: v for k, v in given.items() if k in used})


def resolve_kernel(params: Any, n_features: int, variance: Callable[[], float]) -> KernelSpec:
    """The kernel that fit parameters ask for, resolved for data of ``n_features`` columns.

    The one place where ``kernel``, ``gamma``, ``degree``, ``coef0`` and ``kernel_params``
    (the fields of a :class:`~npt_dask.params.FitParams`, ``params``) become the spec a
    fit, an alignment score or a pipeline's "same model?" check uses. ``variance`` gives
    the variance of all entries of X (:func:`npt_dask._inputs.data_variance`) and is
    called only for ``gamma="scale"``.

    >>> from npt_dask.params import FitParams
    >>> resolve_kernel(FitParams(gamma="scale"), 4, lambda: 0.5).gamma
    0.5
    """
    spec = make_kernel(
        params.kernel, gamma=params.gamma, degree=params.degree, coef0=params.coef0,
        kernel_params=params.kernel_params,
    )  # fmt: skip
    return spec.resolve(n_features, variance() if spec.needs_variance else None)
