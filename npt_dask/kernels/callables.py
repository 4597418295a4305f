"""Callable kernels: a Python function as a kernel, and how it is to be called.

:class:`CallableKernel` wraps a function ``f(A, B, **kernel_params)`` returning the
``(len(A), len(B))`` block (``make_kernel(f, kernel_params=...)``); it runs block by
block on the workers. A model with one cannot be saved: a function is code, and the
stores hold no pickle. scikit-learn calls its callable once per *pair of rows*; such a
function (two rows in, a number out) is recognised and evaluated pair by pair, as there
(slow: prefer a block function). The convention is found by probing the function on a
few rows whose counts differ from each other and from the number of features (so no
shape can coincide); a function that works both ways with different answers is refused:
declare it with :func:`blockwise` or :func:`pairwise`.

The function receives the blocks as the operator holds them (numpy, scipy.sparse or
another array API namespace) and its answer is taken into the same namespace.

Layer rule: a kind of :class:`~npt_dask.kernels.specs.KernelSpec` (registered by
defining it); arrays in, arrays out, no dask, xarray or zarr.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from npt_dask.arrays.namespace import device_of, is_numpy, namespace_of, to_numpy
from npt_dask.errors import KernelParameterError, KernelValueError
from npt_dask.kernels.numerics import block_dtype, dense, is_sparse, source_of
from npt_dask.kernels.specs import CALLABLE, KernelSpec

__all__ = ["KERNEL_FORM", "CallableKernel", "blockwise", "pairwise"]

KERNEL_FORM = "npt_kernel_form"
"""Attribute of a function declaring its convention: ``"block"`` (``f(A, B)`` returns
the block) or ``"pair"`` (``f(x, z)`` returns a number); set by :func:`blockwise`
and :func:`pairwise`. Undeclared functions are probed (see :func:`_form`)."""

_PROBE_ROWS = (2, 3, 4)  # row counts of the convention probe (two of them, != d)


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

    def _block(self, a: Any, b: Any, out: Any) -> Any:
        assert self.function is not None
        b = source_of(b)  # a function takes the rows as given
        xp = namespace_of(a, b)
        dtype = block_dtype(a, b)
        params = dict(self.params)
        shape = (a.shape[0], b.shape[0])
        if 0 in shape:
            block = xp.empty(shape, dtype=dtype, device=device_of(a))
        elif _form(self.function, a, b, params, self.describe()) == "pair":
            block = xp.astype(pairwise(self.function)(a, b, **params), dtype, copy=False)
        else:
            got, problem = _attempt(self.function, a, b, params, dtype)
            if got is None or tuple(got.shape) != shape:
                what = problem if got is None else f"returned shape {tuple(got.shape)}"
                raise KernelValueError(
                    f"The {self.describe()} {what} for blocks of {shape[0]} and {shape[1]} "
                    f"rows; it must return the {shape} kernel block of numbers."
                )
            block = got
        if not is_numpy(xp):
            return block
        if out is None:
            return np.ascontiguousarray(block)
        out[...] = block
        return out

    def _diag(self, a: Any) -> Any:
        """The diagonal of the block ``f(a, a)``."""
        block = self._block(a, a, None)
        xp = namespace_of(block)
        if is_numpy(xp):
            return np.array(np.diagonal(block), dtype=np.float64)
        return xp.astype(xp.linalg.diagonal(block), xp.float64)

    def _non_finite(self, found: str, where: str, single: bool, largest: float) -> str:
        return (
            f"The {self.describe()} returned {found} {where}; a kernel must return finite "
            "numbers. Fix the function (or its kernel_params) for these rows."
        )


def _plain(value: Any) -> Any:
    """A JSON-friendly stand-in for a kernel parameter (for display and reports)."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    return repr(value)


def _attempt(
    f: Callable[..., Any], a: Any, b: Any, params: Mapping[str, Any], dtype: Any = None
) -> tuple[Any, str]:
    """``f(a, b)`` as a numeric array of the inputs' namespace, or ``None`` and what went
    wrong instead."""
    try:
        value = f(a, b, **params)
    except Exception as exc:
        return None, f"raised {type(exc).__name__}: {exc}"
    if value is None:
        return None, "returned None"
    xp = namespace_of(a, b)
    if is_sparse(value):
        value = dense(value)
    array: Any = None
    try:
        array = xp.asarray(value)
        numeric = xp.isdtype(array.dtype, ("bool", "integral", "real floating"))
    except (TypeError, ValueError):
        numeric = False
    if not numeric:
        return None, f"returned {getattr(array, 'dtype', type(value).__name__)} values, not numbers"
    return (array if dtype is None else xp.astype(array, dtype, copy=False)), ""


def _probe_rows(a: Any, count: int) -> Any:
    """``count`` rows of ``a`` (cycling when it has fewer)."""
    if is_sparse(a) or is_numpy(namespace_of(a)):
        return a[np.arange(count) % a.shape[0]]
    xp = namespace_of(a)
    return xp.take(a, xp.arange(count) % a.shape[0], axis=0)


def _first_row(a: Any) -> Any:
    """The first row of ``a`` as a 1-D array (dense)."""
    return dense(a[:1])[0] if is_sparse(a) else a[0, ...]


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
    block, block_problem = _attempt(f, _probe_rows(a, p), _probe_rows(b, q), params)
    value, pair_problem = _attempt(f, _first_row(a), _first_row(b), params)
    is_block = block is not None and tuple(block.shape) == (p, q)
    is_pair = value is not None and _size(value) == 1
    if is_block and is_pair:
        first, single = to_numpy(block)[0, 0], to_numpy(value).ravel()[0]
        if np.allclose(first, single, rtol=1e-6, atol=0.0, equal_nan=True):
            return "block"  # the same kernel either way: the block call is faster
        raise KernelParameterError(
            f"The {name} gives one value for two rows ({float(single):.6g}) and "
            f"another for the same rows in a block ({float(first):.6g}), so it is not "
            "clear whether it takes blocks or single rows. Say which: "
            "kernel=npt_dask.kernels.blockwise(f) for f(A, B) -> (len(A), len(B)) block, or "
            "kernel=npt_dask.kernels.pairwise(f) for f(x, z) -> number (scikit-learn's form)."
        )
    if is_block:
        return "block"
    if is_pair:
        return "pair"
    got = block_problem or f"returned shape {tuple(getattr(block, 'shape', ()))}"
    got_pair = pair_problem or f"returned shape {tuple(getattr(value, 'shape', ()))}"
    raise KernelValueError(
        f"The {name} {got} for blocks of {p} and {q} rows, and {got_pair} for two single "
        f"rows. A kernel function must return the ({p}, {q}) block of numbers for "
        "f(A, B) (or a number for f(x, z), scikit-learn's per-pair form)."
    )


def _size(a: Any) -> int:
    """The number of entries of an array of any namespace."""
    return int(np.prod(tuple(a.shape), dtype=np.int64))


def blockwise(f: Callable[..., Any]) -> Callable[..., Any]:
    """Declare ``f(A, B, **params)`` a block function: it is called on blocks, never probed.

    >>> import numpy as np
    >>> from npt_dask.kernels import make_kernel
    >>> k = blockwise(lambda a, b: a @ b.T)
    >>> make_kernel(k)(np.eye(2), np.ones((3, 2))).shape
    (2, 3)
    """

    def block(a: Any, b: Any, **params: Any) -> Any:
        return f(a, b, **params)

    return _declared(block, f, "block", "{}")


def _declared(
    wrapper: Callable[..., Any], f: Callable[..., Any], form: str, label: str
) -> Callable[..., Any]:
    setattr(wrapper, KERNEL_FORM, form)
    wrapper.__qualname__ = label.format(getattr(f, "__qualname__", type(f).__name__))
    wrapper.__module__ = getattr(f, "__module__", None) or __name__
    return wrapper


def pairwise(f: Callable[..., Any]) -> Callable[..., Any]:
    """A block function from ``f(x, z, **params) -> float`` on two single rows.

    scikit-learn calls a callable kernel once per pair of rows; npt-dask calls
    it once per block. This wrapper loops over the pairs of a block (slow:
    prefer a vectorised ``f(A, B)``), so the same function serves both. The rows
    and the block are in the inputs' namespace.

    >>> import numpy as np
    >>> k = pairwise(lambda x, z: float(np.dot(x, z)))
    >>> k(np.eye(2), np.ones((3, 2))).shape
    (2, 3)
    """

    def block(a: Any, b: Any, **params: Any) -> Any:
        xp = namespace_of(a, b)
        rows_a, rows_b = _rows(a), _rows(b)
        out = np.empty((len(rows_a), len(rows_b)))
        for i, x in enumerate(rows_a):
            for j, z in enumerate(rows_b):
                raw = f(x, z, **params)
                value = to_numpy(raw)
                if value.dtype.kind not in "biuf" or value.size != 1:
                    raise KernelValueError(
                        f"The kernel function {getattr(f, '__qualname__', f)} returned "
                        f"{raw!r} for rows {i} and {j}; a per-pair kernel must return a "
                        "number."
                    )
                out[i, j] = value.item()
        return out if is_numpy(xp) else xp.asarray(out, device=device_of(a))

    return _declared(block, f, "block", "pairwise({})")


def _rows(a: Any) -> list[Any]:
    """The rows of a block, each 1-D: numpy's (a sparse block expanded), or the
    namespace's own."""
    if is_sparse(a) or is_numpy(namespace_of(a)):
        return list(dense(a))
    return [a[i, ...] for i in range(a.shape[0])]
