"""Parameters as text: command-line words parsed into values, byte sizes with units,
and the names an error gives a parameter (``"The 'tol' parameter"``, ``--tol``).

Pure functions of strings and numbers; the constraint classes that check the values are
:mod:`npt_dask.params.constraints`'.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from npt_dask.errors import InputError

__all__ = [
    "budget_bytes",
    "flag_of",
    "format_bytes",
    "number_or",
    "optional",
    "parse_bool",
    "parse_bytes",
    "parse_json",
    "subject",
]


def flag_of(name: str) -> str:
    """The command-line option of the parameter ``name``: ``--chunk-size``."""
    return "--" + name.replace("_", "-")


def subject(name: str, owner: str | None = None) -> str:
    """How an error names the parameter ``name``: ``"The 'tol' parameter"``, or ``"The
    'C' parameter of ChunkedLinearSVM"`` with an ``owner`` (the command line says ``"The
    --tol option"`` instead)."""
    return f"The '{name}' parameter" + (f" of {owner}" if owner else "")


def optional(text: str) -> Any:
    """A command-line word, or None for "none", "null" or nothing."""
    return None if text.lower() in ("none", "null", "") else text


def number_or(kind: Callable[[str], Any], *words: str) -> Callable[[str], Any]:
    """A parser of a command-line number of ``kind``, None, or one of ``words``
    (``gamma``: a float or ``"scale"``); anything else is left for :meth:`Param.check`."""

    def parse(text: str) -> Any:
        value = optional(text)
        if value is None or value in words:
            return value
        try:
            return kind(value)
        except ValueError:
            return text  # left for check() to refuse with the common message

    return parse


def parse_json(text: str) -> Any:
    """A command-line JSON object (``kernel_params``), or None for "none"."""
    value = optional(text)
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
    value = optional(text)
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


def parse_bool(text: str) -> Any:
    """A command-line boolean: true/false, 1/0, yes/no (anything else is left for
    :meth:`Param.check` to refuse)."""
    low = text.lower()
    return {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(
        low, text
    )
