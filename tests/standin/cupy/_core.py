"""The stand-in ``cupy.ndarray``: a numpy array that refuses to meet numpy.

Rules (each from CuPy's source, ``cupy/_core/core.pyx`` unless said otherwise):

* ``__array__`` raises CuPy's ``TypeError`` (so ``np.asarray(x)`` does).
* Operators and module functions take stand-in arrays, Python and numpy scalars; a numpy
  ``ndarray`` operand (0-d included) is a ``TypeError: Unsupported type <class
  'numpy.ndarray'>`` (``_scalar.pyx`` ``CScalar``), as is any other array-like.
* numpy ufuncs (NEP 13) and functions (NEP 18) called on stand-in arrays run the stand-in's
  own function of the same name (which then refuses numpy operands).
* Indexing converts a numpy or list index, and ``x[...] = value`` a numpy or list value, to
  the device (``_routines_indexing.pyx`` ``_prepare_slice_list``/``_scatter_op``): accepted,
  counted as host→device copies. A boolean mask is a synchronisation (the output's size).
* Crossing to the host is explicit and counted: ``get``, ``item``, ``tolist``,
  ``float``/``int``/``bool``/``complex``, ``repr``/``str``, pickling. No ``__index__``
  (CuPy has none), no buffer protocol, no ``__array_interface__``, no ``__array_namespace__``
  (CuPy 13; ``array_api_compat.cupy`` is its namespace).
* ``__dlpack_device__`` is ``(2, 0)`` (kDLCUDA); ``__dlpack__`` exports to the CPU only when
  asked for ``dl_device=(1, 0)`` (a counted copy), else numpy's ``BufferError``.
* numpy's floating-point warnings are silenced (CUDA kernels raise none).
"""

from __future__ import annotations

import contextlib
import numbers
import operator
from typing import Any

import numpy as np
from cupy import _standin

IMPLICIT = (
    "Implicit conversion to a NumPy array is not allowed. "
    "Please use `.get()` to construct a NumPy array explicitly."
)


def unsupported(value: Any) -> TypeError:
    return TypeError(f"Unsupported type {type(value)}")


def is_scalar(value: Any) -> bool:
    return isinstance(value, numbers.Number | np.generic) and not isinstance(value, np.ndarray)


class Flags:
    """``x.flags``: ``c_contiguous``, ``f_contiguous``, ``owndata`` (also by key)."""

    def __init__(self, a: np.ndarray) -> None:
        self.c_contiguous = bool(a.flags.c_contiguous)
        self.f_contiguous = bool(a.flags.f_contiguous)
        self.owndata = a.base is None

    def __getitem__(self, key: str) -> bool:
        names = {"C_CONTIGUOUS": "c_contiguous", "F_CONTIGUOUS": "f_contiguous",
                 "OWNDATA": "owndata", "C": "c_contiguous", "F": "f_contiguous"}  # fmt: skip
        return bool(getattr(self, names[key]))

    def __repr__(self) -> str:
        return (f"  C_CONTIGUOUS : {self.c_contiguous}\n  F_CONTIGUOUS : "
                f"{self.f_contiguous}\n  OWNDATA : {self.owndata}")  # fmt: skip


class MemoryPointer:
    """``x.data``: the buffer's address and device (``cupy.cuda.MemoryPointer``)."""

    def __init__(self, a: np.ndarray) -> None:
        from cupy import cuda

        self.ptr = int(a.__array_interface__["data"][0])
        self.device = cuda.Device(0)
        self.device_id = 0


class ndarray:
    """A stand-in CUDA array: a numpy array behind CuPy's rules (see the module doc)."""

    __slots__ = ("__weakref__", "_a", "_key")
    __array_priority__ = 100

    def __init__(self, shape: Any, dtype: Any = float, memptr: Any = None,
                 strides: Any = None, order: str = "C") -> None:  # fmt: skip
        self._adopt(np.empty(shape, dtype=supported(np.dtype(dtype)), order=order))

    def _adopt(self, a: np.ndarray) -> None:
        self._a = a
        self._key = _standin.hold(a)

    @classmethod
    def _wrap(cls, a: np.ndarray) -> ndarray:
        obj = cls.__new__(cls)
        obj._adopt(a)
        return obj

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown, or never adopted
            _standin.release(self._key)

    # --- attributes ------------------------------------------------------------------------
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: Flags(self._a))
    data = property(lambda self: MemoryPointer(self._a))
    T = property(lambda self: wrap(self._a.T, {id(self._a): self}))
    mT = property(lambda self: wrap(np.swapaxes(self._a, -1, -2)))
    real = property(lambda self: wrap(self._a.real))
    imag = property(lambda self: wrap(self._a.imag))

    @property
    def base(self) -> Any:
        return None if self._a.base is None else wrap(_standin._root(self._a))

    @property
    def device(self) -> Any:
        from cupy import cuda

        return cuda.Device(0)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        a = self._a
        return {"shape": a.shape, "typestr": a.dtype.str, "descr": a.dtype.descr,
                "data": (int(a.__array_interface__["data"][0]), False),
                "strides": None if a.flags.c_contiguous else a.strides,
                "stream": 1, "version": 3}  # fmt: skip

    # --- crossings to the host (counted) ---------------------------------------------------
    def get(self, stream: Any = None, order: str = "C", out: Any = None,
            blocking: bool = True) -> np.ndarray:  # fmt: skip
        _standin.device_to_host(self._a.nbytes)
        host = np.array(self._a, order=order, copy=True)
        if out is not None:
            out[...] = host
            return out
        return host

    def set(self, arr: Any, stream: Any = None) -> None:
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray, got {type(arr)}")
        _standin.host_to_device(arr.nbytes)
        self._a[...] = arr

    def item(self) -> Any:
        if self._a.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        return self.get().item()

    def tolist(self) -> Any:
        return self.get().tolist()

    def tobytes(self, order: str = "C") -> bytes:
        return self.get().tobytes(order)

    def __float__(self) -> float:
        return float(self.get())

    def __int__(self) -> int:
        return int(self.get())

    def __complex__(self) -> complex:
        return complex(self.get())

    def __bool__(self) -> bool:
        if self._a.size == 1:
            return bool(self.get())
        if self._a.size == 0:
            return False
        raise ValueError("The truth value of an array with more than one element is "
                         "ambiguous. Use a.any() or a.all()")  # fmt: skip

    def __repr__(self) -> str:
        return repr(self.get())

    def __str__(self) -> str:
        return str(self.get())

    def __format__(self, spec: str) -> str:
        return format(self.get(), spec)

    def __reduce__(self) -> Any:
        from cupy import array

        return array, (self.get(),)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError(IMPLICIT)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)  # kDLCUDA, device 0

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None,
                   dl_device: Any = None, copy: Any = None) -> Any:  # fmt: skip
        if dl_device is not None and dl_device[0] == 1 and copy is not False:
            return self.get().__dlpack__(max_version=max_version)
        raise BufferError("Unsupported device in DLTensor.")

    # --- device copies ---------------------------------------------------------------------
    def copy(self, order: str = "C") -> ndarray:
        return wrap(self._a.copy(order=order))

    def __copy__(self) -> ndarray:
        return self.copy()

    def __deepcopy__(self, memo: Any) -> ndarray:
        return self.copy()

    # --- containers ------------------------------------------------------------------------
    def __len__(self) -> int:
        if self._a.ndim == 0:
            raise TypeError("len() of unsized object")
        return len(self._a)

    def __iter__(self) -> Any:
        if self._a.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self._a.shape[0]))

    def __getitem__(self, key: Any) -> ndarray:
        return wrap(self._a[device_index(key)], {id(self._a): self})

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, ndarray):
            value = value._a
        elif isinstance(value, np.ndarray | list | tuple):
            value = np.asarray(value)
            _standin.host_to_device(value.nbytes)
        elif not is_scalar(value):
            raise unsupported(value)
        self._a[device_index(key)] = value

    # --- numpy protocols -------------------------------------------------------------------
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        import cupy

        func = getattr(cupy, ufunc.__name__, None)
        if not isinstance(func, cupy.ufunc):
            return NotImplemented
        outs = kwargs.get("out", ())
        for x in (*inputs, *outs):
            if not (is_scalar(x) or isinstance(x, ndarray | np.ndarray)):
                return NotImplemented
        if "out" in kwargs:
            if len(outs) != 1:
                raise ValueError("The 'out' parameter must have exactly one array value")
            kwargs["out"] = outs[0]
        if ufunc.__name__ in {"greater", "greater_equal", "less", "less_equal", "equal",
                              "not_equal"}:  # fmt: skip
            inputs = tuple(x.item() if isinstance(x, np.ndarray) and x.ndim == 0 else x
                           for x in inputs)  # fmt: skip
        target = func if method == "__call__" else getattr(func, method, None)
        return NotImplemented if target is None else target(*inputs, **kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        import cupy

        module: Any = cupy
        for part in func.__module__.split(".")[1:]:
            module = getattr(module, part, None)
        ours = getattr(module, func.__name__, None)
        if ours is None or ours is func:
            return NotImplemented
        if not all(issubclass(t, ndarray | np.ndarray) for t in types):
            return NotImplemented
        return ours(*args, **kwargs)


def device_index(key: Any) -> Any:
    """An index for the wrapped array: stand-in arrays unwrapped (a boolean mask syncs), numpy
    arrays and lists copied to the device (counted), ints/slices/None/Ellipsis as they are."""
    if isinstance(key, tuple):
        return tuple(device_index(k) for k in key)
    if isinstance(key, ndarray):
        if key.dtype == bool:
            _standin.record(syncs=1)
        return key._a
    if isinstance(key, np.ndarray | list):
        key = np.asarray(key)
        _standin.host_to_device(key.nbytes)
        if key.dtype == bool:
            _standin.record(syncs=1)
        return key
    if key is None or key is Ellipsis or isinstance(key, slice | int | np.integer):
        return key
    raise IndexError("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) "
                     "and integer or boolean arrays are valid indices")  # fmt: skip


def indices_on_device(args: tuple[Any, ...], kwargs: dict[str, Any], at: int) -> tuple[Any, Any]:
    """``take``'s indices (positional ``at`` or ``indices=``) copied to the device when they
    are a numpy array or a list (CuPy's ``_take``: ``core.array(indices)``; counted)."""

    def moved(value: Any) -> Any:
        if isinstance(value, np.ndarray | list):
            value = np.asarray(value)
            _standin.host_to_device(value.nbytes)
            return ndarray._wrap(value)
        return value

    if len(args) > at:
        args = (*args[:at], moved(args[at]), *args[at + 1 :])
    elif "indices" in kwargs:
        kwargs = {**kwargs, "indices": moved(kwargs["indices"])}
    return args, kwargs


def unwrap(value: Any, seen: dict[int, ndarray] | None = None) -> Any:
    """``value`` for numpy: stand-in arrays as their numpy arrays (noted in ``seen``), lists,
    tuples and dicts element by element; a numpy array or other array-like refused."""
    if isinstance(value, ndarray):
        if seen is not None:
            seen[id(value._a)] = value
        return value._a
    if is_scalar(value) or isinstance(value, type | np.dtype):
        return value
    if isinstance(value, list | tuple):
        return type(value)(unwrap(v, seen) for v in value)
    if isinstance(value, dict):
        return {k: unwrap(v, seen) for k, v in value.items()}
    if (
        isinstance(value, np.ndarray)
        or hasattr(value, "__array__")
        or hasattr(value, "__array_function__")
    ):
        raise unsupported(value)
    return value


def supported(dtype: np.dtype) -> np.dtype:
    """``dtype`` if the device holds it: booleans and numbers only (no object, string or
    structured arrays: ``TypeError`` as CuPy 13's ``Unsupported dtype``, which dask's
    ``arg_chunk`` catches to fall back to a dict)."""
    if dtype.kind not in "biufc":
        raise TypeError(f"Unsupported dtype: {dtype}")
    return dtype


def wrap(value: Any, seen: dict[int, ndarray] | None = None) -> Any:
    """numpy's result as the device's: arrays and numpy scalars as stand-in arrays (an
    input returned as it is stays that input), tuples and lists element by element."""
    if isinstance(value, np.ndarray):
        if seen and id(value) in seen:
            return seen[id(value)]
        supported(value.dtype)
        return ndarray._wrap(value)
    if isinstance(value, np.generic):
        return ndarray._wrap(np.asarray(value))
    if isinstance(value, tuple | list):
        return (tuple if isinstance(value, tuple) else list)(wrap(v, seen) for v in value)
    return value


def call(fn: Any, args: Any, kwargs: Any, seen: dict[int, ndarray] | None = None) -> Any:
    """``fn`` on the device: operands unwrapped (numpy refused), ``out=`` written in place
    and returned, the result wrapped (an operand returned as it is stays that operand)."""
    seen = {} if seen is None else seen
    out = kwargs.get("out")
    if out is not None and not isinstance(out, ndarray):
        raise TypeError("Output arguments must be cupy.ndarray")
    a, k = unwrap(args, seen), unwrap(kwargs, seen)
    with np.errstate(all="ignore"):
        result = fn(*a, **k)
    return out if out is not None else wrap(result, seen)


def _operand(value: Any) -> Any:
    if isinstance(value, ndarray):
        return value._a
    if is_scalar(value):
        return value
    raise unsupported(value)


def _binary(fn: Any, reflected: bool = False, inplace: bool = False) -> Any:
    def op(self: ndarray, other: Any) -> Any:
        if getattr(other, "__array_ufunc__", 0) is None:
            return NotImplemented
        b = _operand(other)
        with np.errstate(all="ignore"):
            if inplace:
                self._a[...] = fn(self._a, b)
                return self
            return wrap(fn(b, self._a) if reflected else fn(self._a, b))

    return op


def _compare(fn: Any) -> Any:
    def op(self: ndarray, other: Any) -> Any:
        if not (isinstance(other, ndarray) or is_scalar(other) or isinstance(other, np.ndarray)):
            return NotImplemented
        return wrap(fn(self._a, _operand(other)))

    return op


def _unary(fn: Any) -> Any:
    def op(self: ndarray) -> ndarray:
        with np.errstate(all="ignore"):
            return wrap(fn(self._a))

    return op


BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
          "truediv": operator.truediv, "floordiv": operator.floordiv, "mod": operator.mod,
          "pow": operator.pow, "matmul": operator.matmul, "and": operator.and_,
          "or": operator.or_, "xor": operator.xor, "lshift": operator.lshift,
          "rshift": operator.rshift}  # fmt: skip
COMPARE = {"lt": operator.lt, "le": operator.le, "eq": operator.eq, "ne": operator.ne,
           "gt": operator.gt, "ge": operator.ge}  # fmt: skip
UNARY = {"neg": operator.neg, "pos": operator.pos, "abs": operator.abs,
         "invert": operator.invert}  # fmt: skip
for _name, _fn in BINARY.items():
    setattr(ndarray, f"__{_name}__", _binary(_fn))
    setattr(ndarray, f"__r{_name}__", _binary(_fn, reflected=True))
    setattr(ndarray, f"__i{_name}__", _binary(_fn, inplace=True))
ndarray.__divmod__ = _binary(divmod)  # type: ignore[attr-defined]
for _name, _fn in COMPARE.items():
    setattr(ndarray, f"__{_name}__", _compare(_fn))
for _name, _fn in UNARY.items():
    setattr(ndarray, f"__{_name}__", _unary(_fn))
ndarray.__hash__ = None  # type: ignore[assignment]

# Methods computed on the device: numpy's method on the wrapped array, operands unwrapped
# (numpy refused), result wrapped. SYNC_METHODS also count a synchronisation (output size).
METHODS = ("all", "any", "argmax", "argmin", "argpartition", "argsort", "astype", "choose",
           "clip", "conj", "conjugate", "cumprod", "cumsum", "diagonal", "dot", "fill",
           "flatten", "max", "mean", "min", "partition", "prod", "ptp", "put", "ravel",
           "repeat", "reshape", "round", "searchsorted", "sort", "squeeze", "std", "sum",
           "swapaxes", "take", "trace", "transpose", "var", "view")  # fmt: skip
SYNC_METHODS = ("nonzero", "compress")
INDEXED = {"take": 1}  # function -> position of the indices CuPy copies from the host


def _method(name: str, sync: bool) -> Any:
    def method(self: ndarray, *args: Any, **kwargs: Any) -> Any:
        if sync:
            _standin.record(syncs=1)
        if name in INDEXED:
            args, kwargs = indices_on_device(args, kwargs, INDEXED[name] - 1)
        return call(getattr(self._a, name), args, kwargs, {id(self._a): self})

    method.__name__ = name
    return method


for _name in METHODS:
    setattr(ndarray, _name, _method(_name, sync=False))
for _name in SYNC_METHODS:
    setattr(ndarray, _name, _method(_name, sync=True))
ndarray.__module__ = "cupy"
ndarray.__qualname__ = "ndarray"
