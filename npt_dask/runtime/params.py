"""The one table of fit parameters: constraints, defaults and help, declared as data.

Every entry point of a fit -- :func:`npt_dask.fit`, the
:class:`~npt_dask.NonlinearProjection` estimator, ``npt fit`` on the command
line and a pipeline's ``[model]`` table -- validates its arguments here, with
one wording, and takes its defaults from here (scikit-learn's
``_parameter_constraints`` idea, as a small checker of our own)::

    The 'tol' parameter must be a finite real number in the range (0, 1) or None. Got 2.0 instead.

Nothing here touches data: :class:`FitParams` is the validated, frozen record
of what the caller asked for; what is derived from the data and the machine
(``gamma="scale"``, the memory budget, the block width) is resolved later,
in one place each (:meth:`npt_dask.kernels.KernelSpec.resolve`,
:func:`npt_dask.npt.planning.plan_fit`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, get_args

import numpy as np

from npt_dask.arrays.device import DEVICES, GPU_INSTALL
from npt_dask.errors import InputError, InputTypeError, KernelParameterError, NPTError

__all__ = [
    "CHECKPOINT_PARAM",
    "COORDINATE_CHUNK",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_RTOL",
    "DEFAULT_TOL",
    "DEVICE_PARAM",
    "ESTIMATOR_PARAMS",
    "FISHER_PARAMS",
    "GROW_PARAMS",
    "HELD_OUT",
    "KERNEL_ALIASES",
    "KERNEL_FIT_ARGUMENTS",
    "KERNEL_HYPERPARAMETERS",
    "KERNEL_NAMES",
    "KERNEL_SVM_PARAMS",
    "KERNEL_TABLE",
    "LINEAR_RIDGE_PARAMS",
    "PARAMS",
    "PCAL1_PARAMS",
    "PROJECT_PARAMS",
    "RIDGE_CV_PARAMS",
    "RIDGE_PARAMS",
    "SEARCH_PARAMS",
    "SEARCH_ROWS",
    "SOLVER_ALIASES",
    "SVM_PARAMS",
    "ArrayOf",
    "Basis",
    "ByteSize",
    "Cache",
    "FitParams",
    "Interval",
    "LandmarkMethod",
    "OnNegative",
    "Options",
    "Param",
    "Precision",
    "RidgeSolver",
    "Solver",
    "SolverAlias",
    "budget_bytes",
    "check_estimator",
    "check_param",
    "check_table",
    "estimator_defaults",
    "fit_defaults",
    "format_bytes",
    "parse_bytes",
    "table_defaults",
]

DEFAULT_CHUNK_SIZE = 4096
"""Rows per kernel block (a 4096^2 float64 block is 128 MiB)."""

DEFAULT_TOL = {"float64": 1e-8, "float32": 1e-6}
"""Krylov residual tolerance by kernel precision: float32 blocks carry about
6e-8 relative rounding per entry, and a block recomputed on another thread
layout may round differently, so a residual of 1e-8 can be out of reach."""

DEFAULT_RTOL = {"float64": 1e-10, "float32": 1e-6}
"""Eigenvalues kept above ``rtol * lambda_1`` by kernel precision (Lemma 1: r <= rank);
float32 blocks round at about 6e-8 relative, so smaller eigenvalues are noise there."""

Solver = Literal["auto", "dense", "krylov"]
"""The eigensolvers (``"auto"``: dense for the full rank, up to
:data:`npt_dask.npt.planning.DENSE_MAX_SAMPLES` rows, or from ``n_components >=
AUTO_DENSE_FRACTION * n`` when the explicit matrix fits the memory budget)."""

SolverAlias = Literal["arpack", "randomized"]
"""scikit-learn's ``eigen_solver`` names for the iterative solver (:data:`SOLVER_ALIASES`)."""

Cache = Literal["auto", "recompute", "memory"]
"""What a Krylov fit does with kernel blocks between passes."""

Basis = Literal["auto", "driver", "chunked"]
"""Where the Krylov basis lives."""

Precision = Literal["float32", "float64"]
"""The kernel block dtype."""

LandmarkMethod = Literal["uniform", "rpcholesky"]
"""How ``landmarks=m`` chooses its rows."""

OnNegative = Literal["warn", "raise"]
"""What a significantly negative eigenvalue does."""

SOLVER_ALIASES: Mapping[str, Solver] = dict.fromkeys(get_args(SolverAlias), "krylov")
"""scikit-learn's ``eigen_solver`` names, accepted as aliases of ours (both
iterative solvers for the top eigenpairs; ours is exact to ``tol``)."""


# --- constraints --------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A real or integer range; ``closed`` is "both", "left", "right" or "neither"."""

    kind: type
    low: float | None
    high: float | None
    closed: str = "both"

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, self.kind):
            return False
        if isinstance(value, numbers.Real) and not math.isfinite(float(value)):
            return False
        x = float(value)  # type: ignore[arg-type]  # a numbers.Real, checked above
        low_ok = self.low is None or (
            x >= self.low if self.closed in ("both", "left") else x > self.low
        )
        high_ok = self.high is None or (
            x <= self.high if self.closed in ("both", "right") else x < self.high
        )
        return bool(low_ok and high_ok)

    def type_ok(self, value: Any) -> bool:
        return not isinstance(value, bool) and isinstance(value, self.kind)

    def outside(self) -> tuple[Any, ...]:
        """Values of the right type just outside the range (an open bound itself)."""
        real = self.kind is not numbers.Integral
        out: list[Any] = [float("nan"), float("inf")] if real else [2.5]  # 2.5: not an int
        for bound, step, open_ in (
            (self.low, -1, self.closed in ("right", "neither")),
            (self.high, 1, self.closed in ("left", "neither")),
        ):
            if bound is not None:
                value = bound if open_ else bound + step
                out.append(float(value) if real else int(value))
        return tuple(out)

    def describe(self, *, plural: bool = False) -> str:
        """``"a finite real number in the range (0, inf)"`` (``plural``: ``"finite real
        numbers in ..."``, the entries of an :class:`ArrayOf`)."""
        integral = self.kind is numbers.Integral
        if plural:
            name = "ints" if integral else "finite real numbers"
        else:
            name = "an int" if integral else "a finite real number"
        left = "[" if self.closed in ("both", "left") and self.low is not None else "("
        right = "]" if self.closed in ("both", "right") and self.high is not None else ")"
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        return f"{name} in the range {left}{low}, {high}{right}"


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values (strings, booleans, None)."""

    values: tuple[Any, ...]

    def accepts(self, value: Any) -> bool:
        return any(value is v or (_same_kind(value, v) and value == v) for v in self.values)

    def type_ok(self, value: Any) -> bool:
        return self.accepts(value)

    def describe(self) -> str:
        if len(self.values) == 1:
            return repr(self.values[0])
        return "one of " + ", ".join(repr(v) for v in self.values)


def _same_kind(a: Any, b: Any) -> bool:
    """Same type (True is not 1), strings of any str subclass alike (DEFAULT_KERNEL)."""
    return type(a) is type(b) or (isinstance(a, str) and isinstance(b, str))


_ARRAY = (list, tuple, np.ndarray)


@dataclass(frozen=True)
class ArrayOf:
    """A non-empty 1-D array (a list, tuple or numpy array; a 0-d array is one value) of
    real numbers that ``element`` accepts, each: candidate alphas, one alpha per target.

    The entries are checked by the same range as one value and refused in the same words;
    an array of anything but real numbers (strings, ragged lists) is of the wrong type.
    """

    element: Interval

    @staticmethod
    def _numbers(value: Any) -> np.ndarray | None:
        """``value`` as a numeric numpy array, or None if it is not an array of numbers."""
        if not isinstance(value, _ARRAY):
            return None
        try:
            array = np.asarray(value)
        except (ValueError, TypeError):  # ragged: [[1], [2, 3]]
            return None
        return array if array.dtype.kind in "iuf" else None

    def accepts(self, value: Any) -> bool:
        array = self._numbers(value)
        if array is None or array.ndim > 1 or array.size == 0:
            return False
        return all(self.element.accepts(v) for v in array.ravel().tolist())

    def type_ok(self, value: Any) -> bool:
        return self._numbers(value) is not None

    def outside(self) -> tuple[Any, ...]:
        """Arrays this refuses: empty, 2-D, of strings, and with each value the element
        refuses (its range's edges)."""
        low, high = self.element.low, self.element.high
        candidates: list[Any] = [1, 0.5, low, high]
        if low is not None and high is not None:
            candidates += [(low + high) / 2, (low + high) // 2]
        inside = next((v for v in candidates if v is not None and self.element.accepts(v)), None)
        cases: list[Any] = [[], ["x"], *([v] for v in self.element.outside())]
        if inside is not None:
            cases.insert(1, [[inside]])  # 2-D: one good value, as a row
        return tuple(cases)

    def describe(self) -> str:
        return f"a non-empty 1-D array of {self.element.describe(plural=True)}"


@dataclass(frozen=True)
class IsCallable:
    """A function (a callable kernel ``f(A, B, **kernel_params)``)."""

    label: str

    def accepts(self, value: Any) -> bool:
        return callable(value) and not isinstance(value, type)

    def type_ok(self, value: Any) -> bool:
        return self.accepts(value)

    def describe(self) -> str:
        return self.label


@dataclass(frozen=True)
class HasMethod:
    """Any object with the named method (a fitted model, without importing its class)."""

    method: str
    label: str

    def accepts(self, value: Any) -> bool:
        return callable(getattr(value, self.method, None))

    def type_ok(self, value: Any) -> bool:
        return self.accepts(value)

    def describe(self) -> str:
        return self.label


@dataclass(frozen=True)
class InstanceOf:
    """Any instance of the given types (a kernel spec, a random generator)."""

    types: tuple[type, ...]
    label: str

    def accepts(self, value: Any) -> bool:
        return isinstance(value, self.types) and not isinstance(value, bool)

    def type_ok(self, value: Any) -> bool:
        return self.accepts(value)

    def describe(self) -> str:
        return self.label


@dataclass(frozen=True)
class ByteSize:
    """A byte count written with units, as the command line takes it: a string that
    :func:`parse_bytes` reads as at least one byte (``"40GB"``, ``"1.5GiB"``, ``"512MB"``).
    An int is the :class:`Interval` beside it."""

    def accepts(self, value: Any) -> bool:
        if not isinstance(value, str):
            return False
        size = parse_bytes(value)
        return isinstance(size, int) and size >= 1

    def type_ok(self, value: Any) -> bool:
        return isinstance(value, str)

    def describe(self) -> str:
        return "a size with units such as '40GB', '1.5GiB' or '512MB'"


Constraint = Interval | ArrayOf | Options | InstanceOf | HasMethod | IsCallable | ByteSize


@dataclass(frozen=True)
class Param:
    """One fit parameter: its constraints, default, help and command-line spelling.

    ``error`` is the exception class of a value outside the constraints
    (kernel parameters raise :class:`~npt_dask.errors.KernelParameterError`);
    a value of the wrong type raises :class:`~npt_dask.errors.InputTypeError`.
    ``parse`` turns a command-line string into a value (``None`` for a
    parameter the command line does not take).
    """

    name: str
    constraints: tuple[Constraint, ...]
    default: Any
    help: str
    error: type[NPTError] = InputError
    parse: Callable[[str], Any] | None = None
    message: str | None = None  # a wording of its own (the kernel name: "Unknown kernel")
    hint: str = ""  # the fix of a wrong number, appended to the common wording
    hints: tuple[tuple[str, str], ...] = ()  # the fix of a known wrong word, by the word

    def hint_for(self, value: Any) -> str:
        """The fix to append for ``value``: a word's own (``gamma="auto"``), or for a value
        that is not a word the parameter's hint (a word gets no hint about numbers)."""
        if isinstance(value, str):
            return dict(self.hints).get(value, "")
        return self.hint

    @property
    def flag(self) -> str:
        """The command-line option: ``--chunk-size`` for ``chunk_size``."""
        return flag_of(self.name)

    def invalid_values(self) -> tuple[Any, ...]:
        """Values the constraints refuse: each range's edges (an array's: also empty, 2-D
        and of strings), and a string of no option (scikit-learn's
        ``generate_invalid_param_val``, for tests of every entry point)."""
        found = [
            v for c in self.constraints if isinstance(c, Interval | ArrayOf) for v in c.outside()
        ]
        found.append("invalid")
        return tuple(v for v in found if not any(c.accepts(v) for c in self.constraints))

    def within(self, high: float, hint: str = "") -> Param:
        """This entry with its ranges' upper bound at ``high``: a bound only the data give
        (at most r directions), checked once they are known, in the same words."""
        constraints = tuple(
            dataclasses.replace(c, high=high) if isinstance(c, Interval) else c
            for c in self.constraints
        )
        return dataclasses.replace(self, constraints=constraints, hint=hint or self.hint)

    def describe(self) -> str:
        parts = [c.describe() for c in self.constraints]
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]

    def check(self, value: Any, owner: str | None = None) -> Any:
        """``value`` if the constraints accept it, else one clear error (naming ``owner``,
        the estimator or function, when given)."""
        if any(c.accepts(value) for c in self.constraints):
            return value
        typed = any(
            isinstance(c, Interval | ArrayOf) and c.type_ok(value) for c in self.constraints
        )  # right type, wrong range: a value error; otherwise a type error
        options = all(isinstance(c, Options) for c in self.constraints)
        error = self.error if typed or options or isinstance(value, str) else InputTypeError
        self.refuse(value, owner, error=error)

    def refuse(
        self, value: Any, owner: str | None = None, *, error: type[NPTError] | None = None
    ) -> NoReturn:
        """Raise the one error of a value outside the constraints: also for what a caller
        checks beyond them (the entries of an array of alphas), in the same words."""
        error = self.error if error is None else error
        if self.message is not None:
            choices = self.describe().removeprefix("one of ")
            raise error(self.message.format(value=value, choices=choices), param=self.name)
        hint = self.hint_for(value)
        raise error(
            f"{subject(self.name, owner)} must be {self.describe()}. Got {value!r} instead."
            + (f" {hint}" if hint else ""),
            param=self.name,
        )


def flag_of(name: str) -> str:
    """The command-line option of the parameter ``name``: ``--chunk-size``."""
    return "--" + name.replace("_", "-")


def subject(name: str, owner: str | None = None) -> str:
    """How an error names the parameter ``name``: ``"The 'tol' parameter"``, or ``"The
    'C' parameter of ChunkedLinearSVM"`` with an ``owner`` (the command line says ``"The
    --tol option"`` instead)."""
    return f"The '{name}' parameter" + (f" of {owner}" if owner else "")


def _optional(text: str) -> Any:
    return None if text.lower() in ("none", "null", "") else text


def _number_or(kind: Callable[[str], Any], *words: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = _optional(text)
        if value is None or value in words:
            return value
        try:
            return kind(value)
        except ValueError:
            return text  # left for check() to refuse with the common message

    return parse


def _json_or_none(text: str) -> Any:
    value = _optional(text)
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise InputError(
            f"{text!r} is not valid JSON ({exc}); write a JSON object with quoted keys, "
            """e.g. '{"gamma": 0.1}'."""
        ) from None


_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_UNITS |= {u + "b": f for u, f in _UNITS.items() if u not in ("", "b")}
_UNITS |= {u + "ib": 1024 ** (i + 1) for i, u in enumerate("kmgt")}


def parse_bytes(text: str) -> Any:
    """A byte count from ``"2GB"``, ``"1.5GiB"``, ``"512MB"`` or ``"1000"`` (None for "none").

    >>> parse_bytes("2GB"), parse_bytes("1GiB"), parse_bytes("1000")
    (2000000000, 1073741824, 1000)
    """
    value = _optional(text)
    if value is None:
        return None
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", value.lower())
    if match is None or match.group(2) not in _UNITS:
        return text  # left for check() to refuse with the common message
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def budget_bytes(value: int | str | None) -> int | None:
    """A checked ``memory_budget`` as a byte count: an int as it is, a size with units
    read by :func:`parse_bytes` (``"40GB"``), None as None.

    >>> budget_bytes("40GB"), budget_bytes(2**30), budget_bytes(None)
    (40000000000, 1073741824, None)
    """
    if value is None:
        return None
    size = parse_bytes(value) if isinstance(value, str) else value
    return int(size)


def format_bytes(size: float) -> str:
    """A byte count for people: ``"1000 bytes"``, ``"2.3 MiB"``, ``"4.0 GiB"``.

    >>> format_bytes(1000), format_bytes(3 * 2**20), format_bytes(2**33)
    ('1000 bytes', '3.0 MiB', '8.0 GiB')
    """
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} bytes"


def _bool(text: str) -> Any:
    low = text.lower()
    return {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(
        low, text
    )


_REAL = numbers.Real
_INT = numbers.Integral
_NONE = Options((None,))
_SEED = InstanceOf(
    (np.random.Generator, np.random.RandomState), "a numpy Generator or RandomState instance"
)

# --- kernels: names and hyperparameters, declared once ------------------------------------
# npt_dask.kernels builds its specs from these. A new kernel is an entry of KERNEL_TABLE
# and its block and diagonal functions (npt_dask/kernels/numerics.py); a new
# hyperparameter is its Param in KERNEL_HYPERPARAMETERS, the kernels that take it (with
# its default) in KERNEL_TABLE, and its use in those functions. Nothing else changes: a
# hyperparameter outside KERNEL_FIT_ARGUMENTS reaches a fit as kernel_params.

KERNEL_HYPERPARAMETERS: tuple[Param, ...] = (
    Param(
        "gamma",
        (Interval(_REAL, 0, None, "neither"), Options(("scale",)), _NONE),
        None,
        "kernel coefficient; 'scale' is 1 / (d var X) as scikit-learn's SVC, None is 1 / d",
        KernelParameterError,
        _number_or(float, "scale"),
        hint="gamma = 0 makes the kernel constant; use gamma='scale' for data of any scale.",
        hints=(
            (
                "auto",
                "gamma='auto' is scikit-learn's SVC name of 1 / n_features: that is "
                "gamma=None here (gamma='scale' is 1 / (n_features * X.var()), as in SVC).",
            ),
        ),
    ),
    Param(
        "degree",
        (Interval(_REAL, 0, None, "neither"), _NONE),
        None,
        "polynomial degree (None: the kernel's default, 3)",
        KernelParameterError,
        _number_or(float),
        hint="A degree of 0 makes the kernel constant (a zero kernel matrix after "
        "centring); use degree >= 1.",
    ),
    Param(
        "coef0",
        (Interval(_REAL, None, None), _NONE),
        None,
        "polynomial/sigmoid offset (None: the kernel's default, 1)",
        KernelParameterError,
        _number_or(float),
    ),
)
"""Every named kernel's hyperparameters: constraints (checked the same way everywhere),
help and command-line parsing. A named kernel's values are checked here and stored as
floats (a word a constraint allows, ``gamma="scale"``, stays a word)."""

KERNEL_TABLE: Mapping[str, Mapping[str, Any]] = {
    "rbf": {"gamma": None},
    "laplacian": {"gamma": None},
    "polynomial": {"gamma": None, "degree": 3, "coef0": 1.0},
    "sigmoid": {"gamma": None, "coef0": 1.0},
    "linear": {},
    "cosine": {},
}
"""Each named kernel and the hyperparameters it takes, in order, with their defaults
(scikit-learn's; ``gamma=None`` is resolved from the data: ``1 / n_features``)."""

KERNEL_NAMES = tuple(KERNEL_TABLE)
"""The kernels :mod:`npt_dask.kernels` implements (its numerics are checked against this)."""

KERNEL_ALIASES: Mapping[str, str] = {"poly": "polynomial"}
"""scikit-learn's other names (``KernelPCA(kernel="poly")``)."""

KERNEL_FIT_ARGUMENTS = ("gamma", "degree", "coef0")
"""The hyperparameters that are arguments of a fit, as in scikit-learn (the others are
given in ``kernel_params``)."""

_HYPERPARAMETER = {p.name: p for p in KERNEL_HYPERPARAMETERS}


class _UnnamedKernel(str):
    """A ``str`` equal to ``"rbf"`` whose identity says the caller named no kernel."""

    __slots__ = ()

    def __copy__(self) -> str:  # the one object, also through scikit-learn's clone
        return self

    def __deepcopy__(self, memo: Any) -> str:
        return self


DEFAULT_KERNEL: str = _UnnamedKernel("rbf")
"""The kernel argument's default: ``"rbf"`` (stored, printed and compared as ``"rbf"``),
unless a warm start brings its own kernel. Only this object means "no kernel named":
``kernel="rbf"`` passed by the caller names rbf (:func:`kernel_named`)."""


def kernel_named(kernel: Any) -> bool:
    """Whether the caller named a kernel (anything but :data:`DEFAULT_KERNEL` itself)."""
    return kernel is not DEFAULT_KERNEL


_KERNEL_PARAM = Param(
    "kernel",
    (
        Options((*KERNEL_NAMES, *KERNEL_ALIASES, "precomputed")),
        IsCallable("a function f(A, B, **kernel_params)"),
    ),
    DEFAULT_KERNEL,
    "kernel name (scikit-learn's definitions) or 'precomputed' (X is the kernel matrix)",
    KernelParameterError,
    str,
    "Unknown kernel {value!r}; choose one of {choices}.",
)

PARAMS: tuple[Param, ...] = (
    _KERNEL_PARAM,
    *(_HYPERPARAMETER[name] for name in KERNEL_FIT_ARGUMENTS),
    Param(
        "kernel_params",
        (InstanceOf((dict,), "a dict"), _NONE),
        None,
        "parameters of a callable kernel, or gamma/degree/coef0 of a named one (JSON here)",
        parse=_json_or_none,
    ),
    Param(
        "n_components",
        (Interval(_INT, 1, None), _NONE),
        None,
        "dimension r (None: the full effective rank, dense solver)",
        parse=_number_or(int),
    ),
    Param("center", (Options((True, False)),), True, "centre in feature space", parse=_bool),
    Param(
        "solver",
        (Options((*get_args(Solver), *get_args(SolverAlias))),),
        "auto",
        "eigensolver: dense (the explicit n x n matrix), krylov (streamed blocks) or auto: "
        "dense for n_components=None or n <= 2,000 rows, and for n_components >= 0.15 n "
        "when the n x n matrix fits memory_budget, krylov otherwise; scikit-learn's "
        "'arpack' and 'randomized' mean krylov",
        parse=str,
    ),
    Param(
        "tol",
        (Interval(_REAL, 0, 1, "neither"), _NONE),
        None,
        "Krylov stopping rule ||K u - lambda u|| / lambda_1 (None: "
        f"{DEFAULT_TOL['float64']:g}, float32 blocks {DEFAULT_TOL['float32']:g})",
        parse=_number_or(float),
    ),
    Param(
        "rtol",
        (Interval(_REAL, 0, 1, "left"), _NONE),
        None,
        "drop eigenvalues <= rtol * lambda_1 (None: "
        f"{DEFAULT_RTOL['float64']:g}, float32 {DEFAULT_RTOL['float32']:g})",
        parse=_number_or(float),
    ),
    Param(
        "chunk_size",
        (Interval(_INT, 1, None), _NONE),
        DEFAULT_CHUNK_SIZE,
        "rows per kernel block (None keeps a dask input's row chunks)",
        parse=_number_or(int),
    ),
    Param(
        "cache",
        (Options(get_args(Cache)),),
        "auto",
        "keep kernel blocks between Krylov passes, recompute them, or as many as fit",
        parse=str,
    ),
    Param(
        "memory_budget",
        (Interval(_INT, 1, None), ByteSize(), _NONE),
        None,
        "bytes the fit may hold beyond the input rows: an int, or a size with units "
        "('40GB', '1.5GiB'; the same units everywhere) (None: a sixth of physical memory)",
        parse=parse_bytes,
    ),
    Param(
        "precision",
        (Options(get_args(Precision)), _NONE),
        None,
        "kernel block dtype (None: float32 for float32 input, else float64)",
        parse=_optional,
    ),
    Param(
        "block_size",
        (Interval(_INT, 1, None), _NONE),
        None,
        "Krylov block width (None: chosen by the fit plan)",
        parse=_number_or(int),
    ),
    Param(
        "max_basis",
        (Interval(_INT, 2, None), _NONE),
        None,
        "most Krylov basis columns before a thick restart (None: the fit plan's)",
        parse=_number_or(int),
    ),
    Param(
        "basis",
        (Options(get_args(Basis)),),
        "auto",
        "where the Krylov basis lives: in this process, row-chunked on the workers or local "
        "disk, or (auto) chunked only when the fit plan does not fit it here",
        parse=str,
    ),
    Param(
        "max_passes",
        (Interval(_INT, 1, None),),
        50,
        "most Krylov passes over the kernel",
        parse=_number_or(int),
    ),
    Param(
        "on_negative",
        (Options(get_args(OnNegative)),),
        "warn",
        "what a significantly negative eigenvalue (non-PSD kernel) does",
        parse=str,
    ),
    Param(
        "random_state",
        (Interval(_INT, 0, None), _SEED, _NONE),
        None,
        "seed of the Krylov start block",
        parse=_number_or(int),
    ),
    Param(
        "landmarks",
        (
            Interval(_INT, 2, None),
            InstanceOf((np.ndarray, list, tuple), "an array of row indices"),
            _NONE,
        ),
        None,
        "fit on m chosen rows (an int) or these row indices; every row is then projected",
        parse=_number_or(int),
    ),
    Param(
        "landmark_method",
        (Options(get_args(LandmarkMethod)),),
        "uniform",
        "how landmarks=m chooses rows: uniformly, or by randomly pivoted partial Cholesky",
        parse=str,
    ),
    Param(
        "start",
        (HasMethod("transform", "a fitted NPTModel"), _NONE),
        None,
        "warm start: the Krylov solver starts from this model's coordinates of X",
    ),
    Param("progress", (Options((True, False)),), False, "report each Krylov pass on stderr"),
)
"""Every fit parameter, in signature order."""

_BY_NAME = {p.name: p for p in PARAMS}

ESTIMATOR_PARAMS: tuple[Param, ...] = (
    Param("alpha", (Interval(_REAL, 0, None, "left"),), 1.0, "ridge of the pre-image map"),
    Param("fit_inverse_transform", (Options((True, False)),), False, "learn inverse_transform"),
    Param("remove_zero_eig", (Options((True, False)),), False, "drop zero-eigenvalue columns"),
    Param(
        "eigen_solver",
        (Options(("auto", "dense", "krylov", *SOLVER_ALIASES)), _NONE),
        None,
        "KernelPCA's name of solver (None: solver decides)",
    ),
    Param(
        "max_iter",
        (Interval(_INT, 1, None), _NONE),
        None,
        "KernelPCA's name of max_passes (None: max_passes decides)",
    ),
    Param(
        "iterated_power",
        (Interval(_INT, 0, None), Options(("auto",))),
        "auto",
        "KernelPCA's randomized-solver power iterations: accepted, no effect",
    ),
    Param("copy_X", (Options((True, False)),), True, "keep a copy of numpy training rows"),
    Param(
        "n_jobs",
        (Interval(_INT, None, None), _NONE),
        None,
        "KernelPCA's thread count: accepted, no effect (dask's scheduler sets threads)",
    ),
)
"""``NonlinearProjection``'s parameters beyond the fit (scikit-learn's KernelPCA)."""

_BY_NAME_ALL = _BY_NAME | {p.name: p for p in ESTIMATOR_PARAMS}


def fit_defaults() -> dict[str, Any]:
    """``{name: default}`` of every fit parameter."""
    return {p.name: p.default for p in PARAMS}


def estimator_defaults() -> dict[str, Any]:
    """:func:`fit_defaults` as an estimator's signature takes them: plain values
    (scikit-learn's ``check_parameters_default_constructible`` refuses a ``str``
    subclass), so :data:`DEFAULT_KERNEL` is the plain ``"rbf"`` (an estimator has no
    ``start`` whose kernel could win over it)."""
    return {**fit_defaults(), "kernel": str(DEFAULT_KERNEL)}


def check_param(name: str, value: Any) -> Any:
    """Validate one parameter (fit or estimator) by the table; returns the value unchanged."""
    return _BY_NAME_ALL[name].check(value)


@dataclass(frozen=True)
class FitParams:
    """A validated set of fit parameters (defaults from :data:`PARAMS`).

    ``kernel`` may also be a :class:`~npt_dask.kernels.KernelSpec` or its
    dict.

    Examples
    --------
    >>> from npt_dask.runtime.params import FitParams
    >>> FitParams.from_kwargs(n_components=5, gamma="scale").gamma
    'scale'
    >>> FitParams.from_kwargs(tol=2.0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    npt_dask.errors.InputError: The 'tol' parameter must be a finite real number in the ...
    """

    kernel: Any = DEFAULT_KERNEL
    gamma: float | str | None = None
    degree: float | None = None
    coef0: float | None = None
    kernel_params: dict[str, Any] | None = None
    n_components: int | None = None
    center: bool = True
    solver: Solver | SolverAlias = "auto"
    tol: float | None = None
    rtol: float | None = None
    chunk_size: int | None = DEFAULT_CHUNK_SIZE
    cache: Cache = "auto"
    memory_budget: int | str | None = None  # a size with units is kept as its byte count
    precision: Precision | None = None
    block_size: int | None = None
    max_basis: int | None = None
    basis: Basis = "auto"
    max_passes: int = 50
    on_negative: OnNegative = "warn"
    random_state: Any = None
    landmarks: Any = dataclasses.field(default=None, compare=False)
    landmark_method: LandmarkMethod = "uniform"
    start: Any = dataclasses.field(default=None, compare=False)
    progress: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "solver", SOLVER_ALIASES.get(self.solver, self.solver))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "kernel" and (isinstance(value, Mapping) or hasattr(value, "to_dict")):
                continue  # a KernelSpec or its dict: validated by the kernel module
            if f.name == "precision" and value is not None and not isinstance(value, str):
                value = _precision_name(value)
                object.__setattr__(self, "precision", value)
            check_param(f.name, value)
        object.__setattr__(self, "memory_budget", budget_bytes(self.memory_budget))

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> FitParams:
        """Build from keyword arguments; unknown names are an error."""
        unknown = sorted(set(kwargs) - set(_BY_NAME))
        if unknown:
            raise InputTypeError(f"Unknown fit parameter(s) {unknown}; known: {sorted(_BY_NAME)}.")
        return cls(**kwargs)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, section: str) -> FitParams:
        """Build from a config table, naming ``section`` for unknown keys."""
        unknown = sorted(set(values) - set(_BY_NAME))
        if unknown:
            raise InputError(
                f"Unknown key(s) {unknown} in [{section}]; allowed: {sorted(_BY_NAME)}."
            )
        return cls(**dict(values))

    def to_dict(self) -> dict[str, Any]:
        """Plain values (a kernel spec as its dict, a generator as its repr)."""
        out = dataclasses.asdict(self)
        if callable(self.kernel) and not hasattr(self.kernel, "to_dict"):
            out["kernel"] = getattr(self.kernel, "__qualname__", repr(self.kernel))
        elif not isinstance(self.kernel, str | Mapping):
            out["kernel"] = self.kernel.to_dict()
        if not isinstance(self.random_state, int | type(None)):
            out["random_state"] = repr(self.random_state)
        if self.landmarks is not None and not isinstance(self.landmarks, int):
            out["landmarks"] = [int(i) for i in np.asarray(self.landmarks)]
        if self.start is not None:
            out["start"] = getattr(self.start, "identity", repr(self.start))
        return out

    def replace(self, **changes: Any) -> FitParams:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)


def _precision_name(value: Any) -> Any:
    try:
        return str(np.dtype(value))
    except TypeError:
        return value


def names() -> Iterable[str]:
    """Parameter names in signature order."""
    return (p.name for p in PARAMS)


# --- kernel ridge (npt_dask.ridge.estimators) ---------------------------------------------

RidgeSolver = Literal["auto", "direct", "cg"]
"""Kernel ridge routes: moments and a Cholesky factorisation, preconditioned conjugate
gradient, or (auto) the plan's choice (:func:`npt_dask.ridge.planning.plan_ridge`)."""

RIDGE_PARAMS: tuple[Param, ...] = (
    Param(
        "alpha",
        (Interval(_REAL, 0, None, "left"), ArrayOf(Interval(_REAL, 0, None, "left"))),
        1.0,
        "ridge alpha >= 0 (scikit-learn's KernelRidge meaning), or one per target",
        parse=_number_or(float),
    ),
    dataclasses.replace(_BY_NAME["kernel"], default="linear"),
    _BY_NAME["gamma"],
    dataclasses.replace(_BY_NAME["degree"], default=3),
    dataclasses.replace(_BY_NAME["coef0"], default=1),
    _BY_NAME["kernel_params"],
    dataclasses.replace(
        _BY_NAME["landmarks"],
        help="centres: None (every row, exact kernel ridge), m chosen rows (an int) or "
        "these row indices (Nystrom kernel ridge)",
    ),
    _BY_NAME["landmark_method"],
    Param(
        "solver",
        (Options(get_args(RidgeSolver)),),
        "auto",
        "direct (moments and a Cholesky factorisation), cg (preconditioned conjugate "
        "gradient) or auto (the plan's choice: exact ridge direct whenever the n x n matrix "
        "fits memory_budget; Nystrom from counted flops and memory)",
        parse=str,
    ),
    Param(
        "tol",
        (Interval(_REAL, 0, 1, "neither"),),
        1e-3,
        "conjugate gradient stops when ||b - H c|| / ||b|| <= tol for every target (the "
        "true residual, checked by one more pass; float32 kernel blocks resolve 1e-6 to 1e-5)",
        parse=_number_or(float),
    ),
    Param(
        "max_iter",
        (Interval(_INT, 1, None),),
        100,
        "most conjugate-gradient iterations (one pass over the rows each)",
        parse=_number_or(int),
    ),
    _BY_NAME["precision"],
    dataclasses.replace(_BY_NAME["random_state"], help="seed of the landmark draw"),
    _BY_NAME["memory_budget"],
    dataclasses.replace(
        _BY_NAME["chunk_size"], help="rows per kernel block of the exact route's passes"
    ),
    dataclasses.replace(_BY_NAME["progress"], help="report each pass and iteration on stderr"),
)
"""``npt_dask.KernelRidge``'s parameters, in signature order (scikit-learn's ``KernelRidge``
first, with its defaults)."""


def check_table(
    table: Iterable[Param], values: Mapping[str, Any], *, owner: str | None = None
) -> dict[str, Any]:
    """Every value of ``values`` checked by its entry of ``table`` (one wording; ``owner``
    names the estimator or function in it). scikit-learn's ``validate_params``: an
    estimator checks its ``get_params()`` when it fits, a function its arguments."""
    by_name = {p.name: p for p in table}
    return {name: by_name[name].check(value, owner) for name, value in values.items()}


def check_estimator(table: Iterable[Param], estimator: Any) -> None:
    """An estimator's parameters (its attributes of the table's names) checked by
    ``table``, the error naming its class: what its ``fit`` does before any work."""
    values = {p.name: getattr(estimator, p.name) for p in table}
    check_table(table, values, owner=type(estimator).__name__)


def table_defaults(table: Iterable[Param]) -> dict[str, Any]:
    """``{name: default}`` of a table: the signature defaults of its estimator or function."""
    return {p.name: p.default for p in table}


SEARCH_ROWS = 10_000
"""``KernelRidgeCV``'s subproblem: this many rows (all of them when the data have fewer)."""

HELD_OUT = 0.2
"""Share of the subproblem's rows held out to score each (gamma, alpha)."""

SEARCH_PARAMS: tuple[Param, ...] = (
    Param(
        "alphas",
        (ArrayOf(Interval(_REAL, 0, None, "left")),),
        tuple(float(a) for a in np.logspace(-6, 1, 8)),
        "candidate alphas (the full problem's), scored on held-out rows of a subproblem",
    ),
    Param(
        "gammas",
        (ArrayOf(Interval(_REAL, 0, None, "neither")), _NONE),
        None,
        "candidate gammas (None: multiples of gamma='scale' for kernels that take one)",
        KernelParameterError,
    ),
    Param(
        "search_rows",
        (Interval(_INT, 2, None),),
        SEARCH_ROWS,
        "rows of the subproblem the search scores candidates on",
        parse=_number_or(int),
    ),
    Param(
        "held_out",
        (Interval(_REAL, 0, 1, "neither"),),
        HELD_OUT,
        "share of the subproblem's rows held out to score the candidates",
        parse=_number_or(float),
    ),
)
"""``KernelRidgeCV``'s search parameters (the rest are :data:`RIDGE_PARAMS`)."""

CHECKPOINT_PARAM = Param(
    "checkpoint",
    (InstanceOf((str, os.PathLike), "a file path (str or os.PathLike)"), _NONE),
    None,
    "CG's state file: written after every iteration, a killed fit resumes from it",
    hint="Pass a file path such as 'cg.npz' (a killed fit called again with it resumes), "
    "or None for no checkpoint.",
)
"""The ``checkpoint`` argument of the kernel ridge estimators' ``fit``."""


RIDGE_CV_PARAMS: tuple[Param, ...] = (
    *SEARCH_PARAMS,
    *(
        dataclasses.replace(p, default="rbf") if p.name == "kernel" else p
        for p in RIDGE_PARAMS
        if p.name not in ("alpha", "gamma")
    ),
)
"""``KernelRidgeCV``'s and ``KernelRidgeClassifierCV``'s parameters, in signature order:
the search's, then :data:`RIDGE_PARAMS` but the ``alpha`` and ``gamma`` the search
chooses, ``kernel`` defaulting to ``"rbf"`` (a search over gammas needs a kernel that
takes one)."""


# --- methods on coordinates, npt.project, growth ------------------------------------------

COORDINATE_CHUNK = 8192
"""Rows per chunk when a method cuts numpy coordinates (r columns each) into chunks."""

_FLAG = Options((True, False))


_COORDINATE_ROWS = Param(
    "chunk_size",
    (Interval(_INT, 1, None),),
    COORDINATE_CHUNK,
    "rows per chunk for numpy input (dask and xarray input keep their chunks)",
)
_PERSIST = Param(
    "persist",
    (_FLAG, _NONE),
    None,
    "keep Y in (cluster) memory across passes, or re-read it each pass (None: persist up "
    "to 512 MiB)",
)
_C = Param("C", (Interval(_REAL, 0, None, "neither"),), 1.0, "the SVM's C (> 0)")

LINEAR_RIDGE_PARAMS: tuple[Param, ...] = (
    Param(
        "alpha",
        (
            Interval(_REAL, 0, None, "neither"),
            InstanceOf(_ARRAY, "a 1-D array of candidate alphas > 0"),
        ),
        1.0,
        "the ridge (> 0), or candidates scored by the criterion",
    ),
    Param("fit_intercept", (_FLAG,), True, "fit an unpenalised intercept"),
    Param("criterion", (Options(("gcv", "loo")),), "gcv", "how candidate alphas are scored"),
    _COORDINATE_ROWS,
)
"""``npt_dask.methods.Ridge`` and ``RidgeClassifier`` (ridge on coordinates)."""

SVM_PARAMS: tuple[Param, ...] = (
    _C,
    Param("epochs", (Interval(_INT, 1, None),), 10, "passes over the data"),
    Param("average", (_FLAG,), True, "averaged SGD"),
    _COORDINATE_ROWS,
    _PERSIST,
    Param(
        "random_state",
        (Interval(_INT, 0, None), _NONE),
        None,
        "seed of the chunk order, the row shuffles and SGD",
    ),
)
"""``npt_dask.methods.ChunkedLinearSVM``."""

KERNEL_SVM_PARAMS: tuple[Param, ...] = (
    _C,
    Param(
        "solver",
        (Options(("svc", "liblinear")),),
        "svc",
        "SVC(kernel='linear'), the kernel SVM exactly, or LinearSVC's hinge loss (large n)",
    ),
    Param("svm_params", (InstanceOf((dict,), "a dict"), _NONE), None, "more arguments of the SVM"),
)
"""``npt_dask.methods.kernel_svm`` and ``linear_svm`` (functions: checked on each call)."""

FISHER_PARAMS: tuple[Param, ...] = (
    Param(
        "n_components",
        (Interval(_INT, 1, None), _NONE),
        None,
        "discriminant directions kept, at most n_classes - 1 (None: that many)",
    ),
    Param(
        "reg",
        (Interval(_REAL, 0, None, "left"),),
        1e-8,
        "ridge on the within scatter, relative to its mean eigenvalue",
    ),
    _COORDINATE_ROWS,
)
"""``npt_dask.methods.FisherDiscriminant`` (the upper bound of ``n_components`` comes
from the data: checked by the same entry once the classes are known)."""

PCAL1_PARAMS: tuple[Param, ...] = (
    Param("n_components", (Interval(_INT, 1, None),), 1, "directions, at most r"),
    Param("n_init", (Interval(_INT, 1, None),), 4, "starts per direction"),
    Param("max_iter", (Interval(_INT, 1, None),), 100, "iterations per start"),
    Param("center", (_FLAG,), True, "subtract the mean of Y first"),
    Param(
        "perturbation",
        (Interval(_REAL, 0, None, "neither"),),
        1e-6,
        "size of the random nudge off zero projections",
    ),
    _COORDINATE_ROWS,
    _PERSIST,
    Param(
        "random_state",
        (Interval(_INT, 0, None), InstanceOf((np.random.Generator,), "a numpy Generator"), _NONE),
        None,
        "seed of the random starts and nudges",
    ),
)
"""``npt_dask.methods.PCAL1`` (the upper bound of ``n_components``, r, comes from the
data: checked by the same entry once r is known)."""

PROJECT_PARAMS: tuple[Param, ...] = (
    Param(
        "client",
        (HasMethod("as_current", "a distributed.Client"), _NONE),
        None,
        "run on this client (None: the current scheduler)",
    ),
    dataclasses.replace(
        _BY_NAME["chunk_size"],
        default=None,
        help="rows per task and per stored chunk (None: the model's chunk size)",
    ),
    Param("resume", (_FLAG,), True, "continue an interrupted projection (False overwrites)"),
    Param("progress", (_FLAG,), True, "show a progress bar on stderr"),
    Param("key", (InstanceOf((str,), "a string"), _NONE), None, "array name in a .npz file"),
    Param("var", (InstanceOf((str,), "a string"), _NONE), None, "variable of an xarray zarr store"),
)
"""``npt_dask.project``'s keyword parameters (``chunk_size``: the fit's rule)."""

GROW_PARAMS: tuple[Param, ...] = (
    Param(
        "residual_tol",
        (Interval(_REAL, 0, None, "left"), _NONE),
        None,
        "add a row when more than this share of k(x, x) is outside the model's span "
        "(None: 0.01; 0: every new direction)",
        parse=_number_or(float),
    ),
    Param(
        "max_landmarks",
        (Interval(_INT, 2, None), _NONE),
        None,
        "most training rows the model may reach",
        parse=_number_or(int),
    ),
)
"""``partial_fit`` and ``npt grow``: growth's parameters (``max_landmarks`` below the
model's rows is refused once the model is known)."""

DEVICE_PARAM = Param(
    "device",
    (Options(DEVICES), _NONE),
    None,
    "where the rows' arithmetic runs: 'gpu' moves their chunks to the CUDA device "
    f"through CuPy ({GPU_INSTALL}); 'cpu' or None leaves them in host memory",
    parse=_optional,
)
"""``npt fit``/``ridge``/``project --device`` and a pipeline's top-level ``device`` key
(:func:`npt_dask.arrays.device.to_device` moves the rows)."""
