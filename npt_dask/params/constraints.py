"""The constraint classes of every parameter table, and their helpers.

A parameter is declared as data -- a :class:`Param`: its constraints, default,
help and command-line spelling -- and checked by it with one wording
(scikit-learn's ``_parameter_constraints`` idea, as a small checker of our own)::

    The 'tol' parameter must be a finite real number in the range (0, 1) or None. Got 2.0 instead.

The tables live beside what they check, as scikit-learn keeps
``_parameter_constraints`` beside each estimator: the kernels' in
:mod:`npt_dask.kernels.params`, the NPT fit's in :mod:`npt_dask.npt.params`, kernel
ridge's in :mod:`npt_dask.ridge.params` and :mod:`npt_dask.ridge.search`, each method's
in its module of :mod:`npt_dask.methods`, :func:`npt_dask.project`'s and growth's in
:mod:`npt_dask.npt.projection_store` and :mod:`npt_dask.npt.growth`; an entry several
tables share lives with what it sets (the memory budgets in
:mod:`npt_dask.engine.budget`, ``chunk_size`` in :mod:`npt_dask.runtime.inputs`, the
landmarks in :mod:`npt_dask.engine.centres`). An estimator checks its
parameters by its table when it fits (:func:`check_estimator`), a function its
arguments (:func:`check_table`); the signature takes its defaults from the table
(:func:`table_defaults`), and ``tests/params/test_params.py`` holds the signatures and the
docstrings to the tables.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from npt_dask.errors import InputError, InputTypeError, NPTError
from npt_dask.params.parsing import flag_of, parse_bytes, subject

__all__ = [
    "ARRAY_TYPES",
    "FLAG",
    "INT",
    "NONE",
    "REAL",
    "SEED",
    "ArrayOf",
    "ByteSize",
    "Constraint",
    "HasMethod",
    "InstanceOf",
    "Interval",
    "IsCallable",
    "Options",
    "Param",
    "check_estimator",
    "check_table",
    "table_defaults",
]


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


ARRAY_TYPES = (list, tuple, np.ndarray)


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
        if not isinstance(value, ARRAY_TYPES):
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


REAL = numbers.Real
"""The type of a real-valued :class:`Interval` (``bool`` is refused by every interval)."""

INT = numbers.Integral
"""The type of an integer :class:`Interval`."""

NONE = Options((None,))
"""The constraint of an optional parameter: ``None`` allowed."""

FLAG = Options((True, False))
"""The constraint of a boolean parameter."""

SEED = InstanceOf(
    (np.random.Generator, np.random.RandomState), "a numpy Generator or RandomState instance"
)
"""The constraint of a seed given as a numpy generator (an int seed is an :class:`Interval`)."""


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
