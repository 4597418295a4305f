"""Kernel specs: frozen, validated, serialisable, built one way.

Three kinds of kernel, as scikit-learn's ``KernelPCA`` takes them, each its own class
(:class:`KernelSpec` is their base):

* :class:`NamedKernel`, a kernel of :data:`npt_dask.kernels.params.KERNEL_TABLE` and its
  hyperparameters, stored by name as data (``spec.values``; ``spec.gamma`` reads one): the
  table says which a kernel takes, their defaults and constraints, and
  :mod:`npt_dask.kernels.numerics` evaluates them.
* :class:`~npt_dask.kernels.callables.CallableKernel`, a Python function (its own module).
* :class:`PrecomputedKernel`, ``"precomputed"``: the caller gives the kernel matrix
  itself; its blocks are read, never evaluated (:mod:`npt_dask.engine.operator`), so the spec has
  no function.

Every spec is built by one function, :func:`spec_of`: ``KernelSpec(name, ...)``,
:meth:`KernelSpec.from_dict` and :func:`make_kernel` (scikit-learn style arguments) all
end there, and it calls the class the name asks for. :func:`resolve_kernel` turns fit
parameters into the spec a fit uses (``gamma`` from the data, the one place).

Every kernel block and diagonal is checked once for NaN and inf as it is made (one
reduction over the block, negligible next to its evaluation): an overflow (huge data, a
huge ``gamma``) or a callable returning non-finite values raises
:class:`~npt_dask.errors.KernelValueError` naming the kernel, its parameters and the
data range, instead of reaching the eigensolver.

Layer rule: specs and their checks; the numbers come from :mod:`npt_dask.kernels.numerics`
(arrays of any array API namespace in, the same namespace out). Nothing here knows dask,
xarray or zarr.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from npt_dask.arrays.namespace import is_numpy, namespace_of
from npt_dask.errors import InputError, KernelParameterError, KernelValueError
from npt_dask.kernels.numerics import (
    MATH,
    BlockFunction,
    DiagFunction,
    Prepared,
    all_finite,
    block_dtype,
    max_abs,
    source_of,
)
from npt_dask.kernels.params import (
    KERNEL_ALIASES,
    KERNEL_FIT_ARGUMENTS,
    KERNEL_HYPERPARAMETERS,
    KERNEL_PARAM,
    KERNEL_TABLE,
)

__all__ = [
    "CALLABLE",
    "GAMMA_SCALE",
    "KERNELS",
    "PRECOMPUTED",
    "KernelDef",
    "KernelSpec",
    "NamedKernel",
    "PrecomputedKernel",
    "checks_carried",
    "make_kernel",
    "resolve_kernel",
    "spec_of",
]

PRECOMPUTED = "precomputed"
"""``kernel="precomputed"``: X is the kernel matrix (train x train; test x train to project)."""

CALLABLE = "callable"
"""The name of a spec wrapping a Python function ``f(A, B, **kernel_params)``."""

GAMMA_SCALE = "scale"
"""``gamma="scale"``: ``1 / (n_features * X.var())``, as scikit-learn's SVC."""

_HYPERPARAMETERS = {p.name: p for p in KERNEL_HYPERPARAMETERS}

_CARRIED = contextvars.ContextVar("npt_kernel_checks_carried", default=False)


@contextlib.contextmanager
def checks_carried() -> Iterator[None]:
    """Inside the block (this thread), kernel blocks and diagonals are made without their
    NaN/inf check: the caller checks what it computes from them instead -- a non-finite
    entry makes every product and sum it enters non-finite -- reads that one verdict, and
    on a failed one makes the blocks again outside the block, so the error is the
    kernel's own. For a device, where each check reads a flag back to the host (a
    synchronisation per block); numpy checks as it goes."""
    token = _CARRIED.set(True)
    try:
        yield
    finally:
        _CARRIED.reset(token)


@dataclass(frozen=True)
class KernelDef:
    """A named kernel: the hyperparameters it takes with their defaults
    (:data:`npt_dask.kernels.params.KERNEL_TABLE`) and its functions
    (:data:`npt_dask.kernels.numerics.MATH`)."""

    defaults: Mapping[str, Any]
    block: BlockFunction
    diag: DiagFunction
    psd: Callable[[Mapping[str, Any]], bool]
    prepare: Callable[[Any], Prepared | None] | None = None


KERNELS: Mapping[str, KernelDef] = {
    name: KernelDef(defaults, MATH[name].block, MATH[name].diag, MATH[name].psd, MATH[name].prepare)
    for name, defaults in KERNEL_TABLE.items()
}
"""Registry of kernel names to their hyperparameter defaults, block function, diagonal
and positive semi-definiteness rule."""

_KINDS: dict[str, type[KernelSpec]] = {}
"""The class of each kind (filled as the classes are defined); a name that is not a
special kind's is a :class:`NamedKernel`'s. Read through :func:`kinds`."""

CALLABLE_MODULE = "npt_dask.kernels.callables"
"""The module that defines (and so registers) the callable kind, above this one."""


def kinds() -> dict[str, type[KernelSpec]]:
    """The class of each kind, the callable kind's module loaded by name first (it
    subclasses :class:`KernelSpec` here, so this module cannot import it)."""
    if CALLABLE not in _KINDS:
        importlib.import_module(CALLABLE_MODULE)
    return _KINDS


class _ByKind(type):
    """``KernelSpec(name, ...)`` is :func:`spec_of` (the class that ``name`` asks for)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is KernelSpec:
            return spec_of(*args, **kwargs)
        return super().__call__(*args, **kwargs)


@dataclass(frozen=True)
class KernelSpec(metaclass=_ByKind):
    """A kernel, validated, immutable: one of three kinds, each its own class.

    * :class:`NamedKernel` -- a kernel of the registry (:data:`KERNELS`) and its
      hyperparameters; serialisable (:meth:`to_dict`, :meth:`from_dict`).
    * :class:`~npt_dask.kernels.callables.CallableKernel` -- a Python function
      ``f(A, B, **kernel_params)``, evaluated block by block; never stored (a function is
      code, the stores hold no pickle).
    * :class:`PrecomputedKernel` -- ``kernel="precomputed"``: the caller gives the kernel
      matrix, whose blocks are read, never evaluated.

    What differs by kind is said by the class (its methods and the class attributes
    :attr:`kind`, :attr:`precomputed`, :attr:`storable`, :attr:`feature_local`), so code
    elsewhere asks what a kernel can do, not which kernel it is.
    ``KernelSpec(name, ...)`` builds the class its ``name`` calls for
    (``"precomputed"``, ``"callable"`` or a registry name) through :func:`spec_of`;
    :func:`make_kernel` builds one from scikit-learn style arguments.

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
    precomputed: ClassVar[bool] = False
    """True when blocks are computed from rows of features; False when they are read
    from a given kernel matrix (which then stands where the rows would)."""
    storable: ClassVar[bool] = True
    """True when a model with this kernel can be saved."""
    feature_local: ClassVar[bool] = False
    """True when ``kappa(x, z)`` ignores a feature that is zero in both rows (so such
    columns can be dropped from the training operator)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _KINDS[cls.kind] = cls

    def __post_init__(self) -> None:
        if self.name != self.kind:  # the special kinds: their name is their kind
            raise KernelParameterError(
                f"A {self.kind} kernel is named {self.kind!r}; got {self.name!r}."
            )

    @classmethod
    def spec_keys(cls) -> frozenset[str]:
        """The keys of this kind's :meth:`to_dict` (what :meth:`from_dict` accepts)."""
        return frozenset({"name"})

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
        unknown = set(data) - kinds().get(data["name"], NamedKernel).spec_keys()
        if unknown:
            raise KernelParameterError(f"Unknown kernel spec keys {sorted(unknown)}.")
        return spec_of(**dict(data))

    def describe(self) -> str:
        """``"rbf kernel (gamma=0.5)"``, ``"kernel function mod.f (kernel_params {...})"``."""
        raise NotImplementedError

    def _block(self, a: Any, b: Any, out: Any) -> Any:
        raise NotImplementedError

    def _diag(self, a: Any) -> Any:
        raise NotImplementedError

    def _non_finite(self, found: str, where: str, single: bool, largest: float) -> str:
        """The message of a block with NaN or inf (``found``) on rows ``where``; ``single``:
        the block is float32, whose largest value is ``largest``."""
        raise NotImplementedError

    def _check_ready(self, *blocks: Any) -> None:
        for block in blocks:
            if block.ndim != 2:
                raise InputError(f"Kernel blocks must be 2-D; got shape {block.shape}.")

    def prepare(self, b: Any) -> Any:
        """``b`` prepared for many blocks against it (:class:`~npt_dask.kernels.numerics.
        Prepared`: what the block function computes of ``b`` on every call, done once), or
        ``b`` itself when this kernel has nothing to prepare. ``self(a, prepared)`` equals
        ``self(a, b)``."""
        return b

    def __call__(self, a: Any, b: Any, out: np.ndarray | None = None) -> Any:
        """Kernel block ``kappa(a_i, b_j)``, shape ``(len(a), len(b))``, in the namespace of
        ``a`` and ``b`` (numpy, scipy.sparse, or any array API library).

        The block is float32 when both inputs are float32, float64 otherwise.
        ``out``, a C-contiguous numpy array of that shape and dtype, receives it
        when given (a reused buffer saves the page faults of a fresh one). ``b`` may be
        :meth:`prepare`'s.
        """
        given = source_of(b)
        self._check_ready(a, given)
        if a.shape[1] != given.shape[1]:
            raise InputError(
                f"Kernel blocks need the same number of features; got {a.shape[1]} and "
                f"{given.shape[1]}."
            )
        if out is not None:
            _check_out(out, a, given)
        block = self._block(a, b if isinstance(b, Prepared) else given, out)
        self._check_finite(block, a, given)
        return block

    def diag(self, a: Any) -> Any:
        """Self-similarities ``kappa(a_i, a_i)``, float64, shape ``(len(a),)``."""
        self._check_ready(a)
        values = self._diag(a)
        self._check_finite(values, a, a)
        return values

    def _check_finite(self, block: Any, a: Any, b: Any) -> None:
        """Refuse a block with NaN or inf, naming the kernel and the data (one reduction;
        none inside :func:`checks_carried`, whose caller checks the results)."""
        if _CARRIED.get() or all_finite(block):
            return
        xp = namespace_of(block)
        found = " and ".join(
            word
            for word, hit in (("NaN", xp.any(xp.isnan(block))), ("inf", xp.any(xp.isinf(block))))
            if bool(hit)
        )
        top = max(max_abs(a), max_abs(b))
        where = f"on rows with values up to {top:.3g} ({_dtype_name(block.dtype)} kernel blocks)"
        single = block.dtype == xp.float32
        largest = float(xp.finfo(block.dtype).max)
        raise KernelValueError(self._non_finite(found, where, single, largest))


def _dtype_name(dtype: Any) -> str:
    """``float32`` for numpy's dtype and another namespace's alike."""
    return str(dtype).rpartition(".")[2]


def _check_out(out: Any, a: Any, b: Any) -> None:
    """``out`` is numpy's fast path: a C-contiguous ndarray of the block's shape and dtype."""
    dtype, shape = block_dtype(a, b), (a.shape[0], b.shape[0])
    if (
        not isinstance(out, np.ndarray)
        or not is_numpy(namespace_of(a, b))
        or out.shape != shape
        or out.dtype != dtype
        or not out.flags.c_contiguous
    ):
        raise InputError(
            f"out must be C-contiguous {dtype} of shape {shape}; got "
            f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}."
        )


@dataclass(frozen=True, init=False, repr=False)
class NamedKernel(KernelSpec):
    """A kernel of the registry (:data:`KERNELS`) and its hyperparameters.

    ``values`` holds the hyperparameters the kernel takes
    (:data:`npt_dask.kernels.params.KERNEL_TABLE`), in the table's order, checked
    against their constraints (:data:`npt_dask.kernels.params.KERNEL_HYPERPARAMETERS`);
    ``spec.gamma`` reads one
    (None for one the kernel does not take). A hyperparameter the kernel does not take
    must be None: use :func:`make_kernel` to build a spec from scikit-learn style
    arguments that may carry unused ones. ``gamma=None`` means ``1 / n_features`` and is
    fixed by :meth:`resolve` once the data are known.

    >>> NamedKernel("polynomial", degree=2).to_dict()
    {'name': 'polynomial', 'gamma': None, 'degree': 2.0, 'coef0': 1.0}
    >>> NamedKernel("rbf", gamma=0.5).gamma, NamedKernel("rbf").degree
    (0.5, None)
    """

    values: tuple[tuple[str, Any], ...]

    kind: ClassVar[str] = "named"
    feature_local: ClassVar[bool] = True

    def __init__(self, name: str, **given: Any) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "values", _checked_values(name, given))

    def __getattr__(self, attr: str) -> Any:
        """A hyperparameter's value by name (``spec.gamma``), None when not taken."""
        if attr in _HYPERPARAMETERS:
            return dict(self.__dict__.get("values", ())).get(attr)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")

    def __repr__(self) -> str:
        given = "".join(f", {p}={v!r}" for p, v in self.values)
        return f"NamedKernel(name={self.name!r}{given})"

    @classmethod
    def spec_keys(cls) -> frozenset[str]:
        return frozenset({"name", *_HYPERPARAMETERS})

    @property
    def is_resolved(self) -> bool:
        return all(v is not None and not isinstance(v, str) for _, v in self.values)

    @property
    def is_psd(self) -> bool:
        return KERNELS[self.name].psd(dict(self.values))

    @property
    def needs_variance(self) -> bool:
        return isinstance(self.gamma, str)

    def with_values(self, **changes: Any) -> NamedKernel:
        """The spec with some hyperparameters changed (checked again)."""
        return NamedKernel(self.name, **{**dict(self.values), **changes})

    def resolve(self, n_features: int, variance: float | None = None) -> KernelSpec:
        """The spec with ``gamma`` fixed from the data, the one place it is resolved.

        ``gamma=None`` becomes ``1 / n_features`` (scikit-learn's KernelPCA);
        ``gamma="scale"`` becomes ``1 / (n_features * variance)``, the variance
        of all entries of X (scikit-learn's SVC; 1 when the variance is 0).

        >>> KernelSpec("rbf", gamma="scale").resolve(4, variance=0.5).gamma
        0.5
        """
        if "gamma" not in KERNEL_TABLE[self.name]:
            return self
        if self.gamma is None:
            return self.with_values(gamma=1.0 / n_features)
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
        return self.with_values(gamma=gamma)

    def matches(self, other: KernelSpec, rel_tol: float = 0.0) -> bool:
        """Same name, parameters within ``rel_tol`` (``gamma="scale"`` resolved from a
        variance summed in another order differs in the last bits)."""
        if not isinstance(other, NamedKernel) or other.name != self.name:
            return False
        return all(
            math.isclose(float(v), float(w), rel_tol=rel_tol)
            for (_, v), (_, w) in zip(self.values, other.values, strict=True)
        )

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **dict(self.values)}

    def describe(self) -> str:
        values = ", ".join(f"{p}={v:.3g}" for p, v in self.values)
        return f"{self.name} kernel" + (f" ({values})" if values else "")

    def _check_ready(self, *blocks: Any) -> None:
        if not self.is_resolved:
            raise KernelParameterError(
                f"Kernel {self.name!r} has gamma={self.gamma!r}; call spec.resolve(n_features) "
                "first."
            )
        super()._check_ready(*blocks)

    def prepare(self, b: Any) -> Any:
        prepare = KERNELS[self.name].prepare
        done = None if prepare is None or isinstance(b, Prepared) else prepare(b)
        return b if done is None else done

    def _block(self, a: Any, b: Any, out: Any) -> Any:
        if isinstance(b, Prepared) and b.kind != self.name:
            b = b.source  # prepared for another kernel
        return KERNELS[self.name].block(a, b, dict(self.values), out)

    def _diag(self, a: Any) -> Any:
        return KERNELS[self.name].diag(a, dict(self.values))

    def _non_finite(self, found: str, where: str, single: bool, largest: float) -> str:
        fixes = ["rescale X (e.g. sklearn.preprocessing.StandardScaler)"]
        if "gamma" in KERNEL_TABLE[self.name]:
            fixes.append("lower gamma")
        if single:
            fixes.append("compute in float64 (precision='float64')")
        precision = "float32" if single else "float64"
        return (
            f"The {self.describe()} gave {found} {where}: the kernel overflowed "
            f"{precision} (largest {largest:.3g}). "
            + ", or ".join(fixes).replace("rescale", "Rescale", 1)
            + "."
        )


def _checked_values(name: str, given: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The kernel's hyperparameter values in the table's order: each given one checked
    against its constraint and stored as a float (an allowed word as it is), the others
    at their defaults."""
    if name not in KERNEL_TABLE:
        KERNEL_PARAM.check(name)  # "Unknown kernel ...; choose one of ..."
        raise KernelParameterError(f"Unknown kernel {name!r}.")
    defaults = KERNEL_TABLE[name]
    for param, value in given.items():
        if param not in defaults and value is not None:
            raise KernelParameterError(
                f"The {name!r} kernel takes no '{param}' parameter; got {value!r}. "
                f"Use npt_dask.kernels.make_kernel to drop unused parameters."
            )
    values = []
    for param, default in defaults.items():
        value = given.get(param)
        if value is not None:
            _HYPERPARAMETERS[param].check(value)
            value = value if isinstance(value, str) else float(value)
        values.append((param, default if value is None else value))
    return tuple(values)


@dataclass(frozen=True)
class PrecomputedKernel(KernelSpec):
    """``kernel="precomputed"``: X is the kernel matrix (train x train; test x train to
    project). Its blocks are read (:mod:`npt_dask.engine.operator`), never evaluated: the spec has
    no function, and a model keeps the training matrix's diagonal instead of rows.

    >>> PrecomputedKernel().describe()
    'precomputed kernel'
    """

    name: str = PRECOMPUTED

    kind: ClassVar[str] = PRECOMPUTED
    precomputed: ClassVar[bool] = True

    def describe(self) -> str:
        return "precomputed kernel"

    def _check_ready(self, *blocks: Any) -> None:
        raise KernelParameterError(
            "A precomputed kernel has no function to evaluate: its blocks are read from "
            "the kernel matrix given as X (npt_dask.engine.operator reads them)."
        )


def spec_of(
    name: str,
    *,
    function: Callable[..., Any] | None = None,
    params: tuple[tuple[str, Any], ...] = (),
    **hyperparameters: Any,
) -> KernelSpec:
    """The one constructor path: the spec of the kind ``name`` asks for, each field checked
    against that kind (``function`` and ``params`` are a callable kernel's; the
    hyperparameters a named kernel's).

    >>> spec_of("rbf", gamma=0.5) == KernelSpec("rbf", gamma=0.5) == make_kernel("rbf", gamma=0.5)
    True
    """
    given = sorted(p for p, v in hyperparameters.items() if v is not None)
    if name in (PRECOMPUTED, CALLABLE) and given:
        fix = (
            "pass the kernel function's own parameters as kernel_params."
            if name == CALLABLE
            else "the kernel matrix is given as it is."
        )
        raise KernelParameterError(f"A {name} kernel takes no {given}; {fix}")
    if name == CALLABLE:
        return kinds()[CALLABLE](function=function, params=params)  # type: ignore[call-arg]
    if function is not None or params:
        raise KernelParameterError(
            f"The {name!r} kernel takes no function or kernel_params; pass the function itself "
            "as the kernel (make_kernel(f, kernel_params=...))."
        )
    if name == PRECOMPUTED:
        return PrecomputedKernel()
    return NamedKernel(name, **hyperparameters)


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
    block. For a named kernel, ``kernel_params`` may give any hyperparameter it
    takes (:data:`npt_dask.kernels.params.KERNEL_TABLE`; an argument given both ways
    must agree).

    >>> make_kernel("precomputed").kind
    'precomputed'
    >>> make_kernel(lambda a, b, c: (a @ b.T + c) ** 2, kernel_params={"c": 1.0}).params
    (('c', 1.0),)
    """
    params = dict(kernel_params or {})
    arguments = dict(zip(KERNEL_FIT_ARGUMENTS, (gamma, degree, coef0), strict=True))
    if isinstance(kernel, KernelSpec | Mapping):
        if any(v is not None for v in arguments.values()) or params:
            raise KernelParameterError(
                "Pass kernel parameters either inside the kernel spec or as arguments, not both."
            )
        return kernel if isinstance(kernel, KernelSpec) else KernelSpec.from_dict(kernel)
    if callable(kernel) and not isinstance(kernel, str):
        return spec_of(CALLABLE, function=kernel, params=tuple(params.items()))
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
        return spec_of(PRECOMPUTED)
    KERNEL_PARAM.check(kernel)
    kernel = KERNEL_ALIASES.get(kernel, kernel)
    return spec_of(kernel, **_named_values(kernel, arguments, params))


def _named_values(
    kernel: str, arguments: Mapping[str, Any], params: Mapping[str, Any]
) -> dict[str, Any]:
    """The hyperparameters of the named ``kernel`` from scikit-learn's arguments (those it
    does not take dropped) and ``kernel_params`` (each one it takes)."""
    used = KERNEL_TABLE[kernel]
    given = dict(arguments)
    for key, value in params.items():
        if key not in used:
            raise KernelParameterError(
                f"kernel_params has {key!r}, which the {kernel!r} kernel does not take; "
                f"it takes {sorted(used) or 'no parameters'}."
            )
        if given.get(key) is not None and given[key] != value:
            raise KernelParameterError(
                f"{key} is given twice, as {given[key]!r} and in kernel_params as {value!r}; "
                "give it once."
            )
        given[key] = value
    return {k: v for k, v in given.items() if k in used}


def resolve_kernel(params: Any, n_features: int, variance: Callable[[], float]) -> KernelSpec:
    """The kernel that fit parameters ask for, resolved for data of ``n_features`` columns.

    The one place where ``kernel``, ``gamma``, ``degree``, ``coef0`` and ``kernel_params``
    (the fields of a :class:`~npt_dask.npt.params.FitParams`, ``params``) become the spec a
    fit, an alignment score or a pipeline's "same model?" check uses. ``variance`` gives
    the variance of all entries of X (:func:`npt_dask.runtime.inputs.data_variance`) and is
    called only for ``gamma="scale"``.

    >>> from npt_dask.npt.params import FitParams
    >>> resolve_kernel(FitParams(gamma="scale"), 4, lambda: 0.5).gamma
    0.5
    """
    spec = make_kernel(
        params.kernel, gamma=params.gamma, degree=params.degree, coef0=params.coef0,
        kernel_params=params.kernel_params,
    )  # fmt: skip
    return spec.resolve(n_features, variance() if spec.needs_variance else None)
