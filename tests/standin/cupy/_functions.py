"""Which numpy names the stand-in ``cupy`` exports, and how (the table the README shows).

Every public numpy callable is one of:

* ``DEVICE`` (the default): computed by numpy on the unwrapped stand-in arrays; a numpy
  ``ndarray`` operand (or any other array-like) is refused with CuPy's ``TypeError``;
  results are stand-in arrays (a numpy scalar result becomes a 0-d array, as CuPy's).
* ``SYNC``: as ``DEVICE``, plus one synchronisation: the output's shape depends on the
  values (CuPy reads a count back before it allocates).
* ``CREATE``: allocates on the device from shapes and scalars (``zeros``, ``arange`` ...).
* ``LIKE``: allocates on the device in the shape of a prototype, which may be a numpy array
  (CuPy's ``_new_like_order_and_strides`` reads only its dtype, shape and strides).
* ``HOST``: answers host metadata (dtypes, shapes): any operand accepted (a stand-in is read
  for its dtype and shape, no crossing), the answer returned as numpy gives it.
* ``SKIP``: not in the stand-in (I/O, printing, datetimes, polynomials, numpy internals).

numpy's ufuncs become :class:`ufunc` objects (``__call__``, ``reduce``, ``accumulate``,
``outer``, ``at``) with the ``DEVICE`` rule; scalar types, ``dtype``, ``finfo``, ``iinfo``
and the constants are numpy's own (as in CuPy). The host↔device entries (``asarray``,
``array``, ``asanyarray``, ``asnumpy``, ``get_array_module``, ``from_dlpack``) are written
out in ``cupy/__init__.py``.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
from cupy import _standin
from cupy._core import INDEXED, call, indices_on_device, ndarray, unwrap, wrap

SYNC = frozenset({"argwhere", "bincount", "compress", "extract", "flatnonzero", "intersect1d",
                  "nonzero", "setdiff1d", "setxor1d", "trim_zeros", "union1d", "unique",
                  "unique_all", "unique_counts", "unique_inverse", "unique_values"})  # fmt: skip
CREATE = frozenset({"arange", "diag_indices", "empty", "eye", "full", "geomspace",
                    "identity", "indices", "linspace", "logspace", "ones", "tri",
                    "tril_indices", "triu_indices", "zeros", "bartlett", "blackman",
                    "hamming", "hanning", "kaiser"})  # fmt: skip
LIKE = frozenset({"empty_like", "full_like", "ones_like", "zeros_like"})
HOST = frozenset({"broadcast_shapes", "can_cast", "common_type", "isdtype", "iscomplexobj",
                  "isfortran", "isrealobj", "isscalar", "issubdtype", "iterable",
                  "may_share_memory", "min_scalar_type", "mintypecode", "ndim", "promote_types",
                  "result_type", "shape", "shares_memory", "size", "typename"})  # fmt: skip
SKIP = frozenset({"array2string", "array_repr", "array_str", "asarray_chkfinite", "asmatrix",
                  "base_repr", "binary_repr", "bmat", "busday_count", "busday_offset",
                  "datetime_as_string", "datetime_data", "format_float_positional",
                  "format_float_scientific", "from_dlpack", "frombuffer", "fromfile",
                  "fromfunction", "fromiter", "frompyfunc", "fromregex", "fromstring",
                  "genfromtxt", "get_include", "get_printoptions", "getbufsize", "geterr",
                  "geterrcall", "info", "is_busday", "load", "loadtxt", "nested_iters", "poly",
                  "polyadd", "polyder", "polydiv", "polyfit", "polyint", "polymul", "polysub",
                  "polyval", "printoptions", "roots", "save", "savetxt", "savez",
                  "savez_compressed", "set_printoptions", "setbufsize", "seterr", "seterrcall",
                  "show_config", "show_runtime", "test", "asarray", "array", "asanyarray",
                  "astype"})  # fmt: skip
TYPES = frozenset({"dtype", "finfo", "iinfo"})
CONSTANTS = ("e", "euler_gamma", "inf", "nan", "newaxis", "pi", "s_", "index_exp")


class ufunc:
    """A numpy ufunc on the device (the ``DEVICE`` rule for each of its methods)."""

    def __init__(self, np_ufunc: np.ufunc) -> None:
        self._np = np_ufunc
        self.__name__ = np_ufunc.__name__
        self.nin, self.nout, self.nargs = np_ufunc.nin, np_ufunc.nout, np_ufunc.nargs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return call(self._np, args, kwargs)

    def reduce(self, *args: Any, **kwargs: Any) -> Any:
        return call(self._np.reduce, args, kwargs)

    def accumulate(self, *args: Any, **kwargs: Any) -> Any:
        return call(self._np.accumulate, args, kwargs)

    def reduceat(self, *args: Any, **kwargs: Any) -> Any:
        return call(self._np.reduceat, args, kwargs)

    def outer(self, *args: Any, **kwargs: Any) -> Any:
        return call(self._np.outer, args, kwargs)

    def at(self, *args: Any, **kwargs: Any) -> None:
        call(self._np.at, args, kwargs)

    def __repr__(self) -> str:
        return f"<ufunc '{self.__name__}'>"


ufunc.__module__ = "cupy"


def device(fn: Any, name: str, sync: bool = False) -> Any:
    def f(*args: Any, **kwargs: Any) -> Any:
        if sync:
            _standin.record(syncs=1)
        if name in INDEXED:
            args, kwargs = indices_on_device(args, kwargs, INDEXED[name])
        return call(fn, args, kwargs)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"The stand-in's ``{name}`` (numpy's on the device)."
    return f


def create(fn: Any, name: str) -> Any:
    def f(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("like", None)
        return call(fn, args, kwargs)

    f.__name__ = f.__qualname__ = name
    return f


def like(fn: Any, name: str) -> Any:
    def f(prototype: Any, *args: Any, **kwargs: Any) -> Any:
        shape = prototype._a if isinstance(prototype, ndarray) else prototype
        if not isinstance(shape, np.ndarray):
            raise TypeError(f"Unsupported type {type(prototype)}")
        return call(lambda *a, **k: fn(shape, *a, **k), args, kwargs)

    f.__name__ = f.__qualname__ = name
    return f


def _meta(value: Any) -> Any:
    """A stand-in array as numpy sees its metadata (no crossing: dtype/shape only)."""
    if isinstance(value, ndarray):
        return value._a
    if isinstance(value, list | tuple):
        return type(value)(_meta(v) for v in value)
    return value


def host(fn: Any, name: str) -> Any:
    def f(*args: Any, **kwargs: Any) -> Any:
        if name == "isscalar":
            return not isinstance(args[0], ndarray) and bool(fn(*args))
        return fn(*_meta(args), **_meta(kwargs))

    f.__name__ = f.__qualname__ = name
    return f


def kind(name: str, obj: Any) -> str:
    """How the stand-in exports numpy's ``name`` (see the module doc)."""
    if name in SKIP or name.startswith("_") or isinstance(obj, types.ModuleType):
        return "SKIP"
    if isinstance(obj, np.ufunc):
        return "UFUNC"
    if isinstance(obj, type):
        return "TYPE" if issubclass(obj, np.generic) or name in TYPES else "SKIP"
    if name in CONSTANTS:
        return "CONSTANT"
    if not callable(obj):
        return "SKIP"
    for table, label in ((SYNC, "SYNC"), (CREATE, "CREATE"), (LIKE, "LIKE"), (HOST, "HOST")):
        if name in table:
            return label
    return "DEVICE"


def build(namespace: dict[str, Any], source: Any = np) -> dict[str, str]:
    """Fill ``namespace`` with the stand-in's version of every public name of ``source``;
    the table name → kind."""
    table: dict[str, str] = {}
    for name in dir(source):
        obj = getattr(source, name)
        label = kind(name, obj)
        table[name] = label
        if label == "UFUNC":
            namespace[name] = ufunc(obj)
        elif label in ("TYPE", "CONSTANT"):
            namespace[name] = obj
        elif label in ("DEVICE", "SYNC"):
            namespace[name] = device(obj, name, sync=label == "SYNC")
        elif label == "CREATE":
            namespace[name] = create(obj, name)
        elif label == "LIKE":
            namespace[name] = like(obj, name)
        elif label == "HOST":
            namespace[name] = host(obj, name)
    return table


def submodule(source: Any) -> dict[str, Any]:
    """``DEVICE`` wrappers of every public function of ``source`` (``numpy.fft`` ...)."""
    out: dict[str, Any] = {}
    for attr in dir(source):
        obj = getattr(source, attr)
        if attr.startswith("_") or isinstance(obj, type | types.ModuleType) or not callable(obj):
            continue
        out[attr] = device(obj, attr)
    return out


__all__ = ["build", "call", "submodule", "ufunc", "unwrap", "wrap"]
