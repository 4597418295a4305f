"""The kernels' parameters: the named kernels and their hyperparameters, the kernel
argument of every fit, and the precision of kernel blocks, as data (constraints,
defaults, help).

:mod:`npt_dask.kernels.specs` builds its specs from :data:`KERNEL_TABLE` and checks them
by these entries; every table that takes a kernel (the NPT fit's
:mod:`npt_dask.npt.params`, kernel ridge's :mod:`npt_dask.ridge.params`) takes these
entries as they are (:func:`kernel_param`), so a kernel is refused in one wording
wherever it is given. The constraint classes are :mod:`npt_dask.params.constraints`'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from npt_dask.errors import KernelParameterError
from npt_dask.params.constraints import (
    NONE,
    REAL,
    InstanceOf,
    Interval,
    IsCallable,
    Options,
    Param,
)
from npt_dask.params.parsing import number_or, optional, parse_json

__all__ = [
    "DEFAULT_KERNEL",
    "DEFAULT_RTOL",
    "DEFAULT_TOL",
    "KERNEL_ALIASES",
    "KERNEL_ARGUMENTS",
    "KERNEL_FIT_ARGUMENTS",
    "KERNEL_HYPERPARAMETERS",
    "KERNEL_NAMES",
    "KERNEL_PARAM",
    "KERNEL_PARAMS_PARAM",
    "KERNEL_TABLE",
    "PRECISION_PARAM",
    "KernelArguments",
    "Precision",
    "kernel_named",
    "kernel_param",
]

DEFAULT_TOL = {"float64": 1e-8, "float32": 1e-6}
"""Krylov residual tolerance by kernel precision: float32 blocks carry about
6e-8 relative rounding per entry, and a block recomputed on another thread
layout may round differently, so a residual of 1e-8 can be out of reach."""


DEFAULT_RTOL = {"float64": 1e-10, "float32": 1e-6}
"""Eigenvalues kept above ``rtol * lambda_1`` by kernel precision (Lemma 1: r <= rank);
float32 blocks round at about 6e-8 relative, so smaller eigenvalues are noise there."""


Precision = Literal["float32", "float64"]
"""The kernel block dtype."""


# --- kernels: names and hyperparameters, declared once ------------------------------------
# npt_dask.kernels builds its specs from these. A new kernel is an entry of KERNEL_TABLE
# and its block and diagonal functions (npt_dask/kernels/numerics.py); a new
# hyperparameter is its Param in KERNEL_HYPERPARAMETERS, the kernels that take it (with
# its default) in KERNEL_TABLE, and its use in those functions. Nothing else changes: a
# hyperparameter outside KERNEL_FIT_ARGUMENTS reaches a fit as kernel_params.

KERNEL_HYPERPARAMETERS: tuple[Param, ...] = (
    Param(
        "gamma",
        (Interval(REAL, 0, None, "neither"), Options(("scale",)), NONE),
        None,
        "kernel coefficient; 'scale' is 1 / (d var X) as scikit-learn's SVC, None is 1 / d",
        KernelParameterError,
        number_or(float, "scale"),
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
        (Interval(REAL, 0, None, "neither"), NONE),
        None,
        "polynomial degree (None: the kernel's default, 3)",
        KernelParameterError,
        number_or(float),
        hint="A degree of 0 makes the kernel constant (a zero kernel matrix after "
        "centring); use degree >= 1.",
    ),
    Param(
        "coef0",
        (Interval(REAL, None, None), NONE),
        None,
        "polynomial/sigmoid offset (None: the kernel's default, 1)",
        KernelParameterError,
        number_or(float),
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


KERNEL_PARAM = Param(
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


KERNEL_PARAMS_PARAM = Param(
    "kernel_params",
    (InstanceOf((dict,), "a dict"), NONE),
    None,
    "parameters of a callable kernel, or gamma/degree/coef0 of a named one (JSON here)",
    parse=parse_json,
)
"""The ``kernel_params`` argument of a fit."""

KERNEL_ARGUMENTS: tuple[Param, ...] = (
    KERNEL_PARAM,
    *(_HYPERPARAMETER[name] for name in KERNEL_FIT_ARGUMENTS),
    KERNEL_PARAMS_PARAM,
)
"""The kernel's arguments of a fit, in signature order: ``kernel``, its hyperparameters
(:data:`KERNEL_FIT_ARGUMENTS`) and ``kernel_params``."""

PRECISION_PARAM = Param(
    "precision",
    (Options(get_args(Precision)), NONE),
    None,
    "kernel block dtype (None: float32 for float32 input, else float64)",
    parse=optional,
)
"""The kernel block dtype of a fit (:data:`Precision`)."""

_BY_NAME = {p.name: p for p in (*KERNEL_ARGUMENTS, PRECISION_PARAM)}


def kernel_param(name: str) -> Param:
    """The kernels' entry ``name`` (``kernel``, ``gamma``, ``degree``, ``coef0``,
    ``kernel_params``, ``precision``): what a fit's table takes as it is or with its own
    default and help."""
    return _BY_NAME[name]


@dataclass(frozen=True)
class KernelArguments:
    """A kernel's arguments, checked by their entries (:data:`KERNEL_ARGUMENTS`, in that
    order), as :func:`npt_dask.kernels.resolve_kernel` takes them. ``kernel`` may also be
    a :class:`~npt_dask.kernels.KernelSpec` or its dict (validated by the kernel module).

    >>> KernelArguments("rbf", gamma="scale").gamma
    'scale'
    """

    kernel: Any = DEFAULT_KERNEL
    gamma: float | str | None = None
    degree: float | None = None
    coef0: float | None = None
    kernel_params: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        for param in KERNEL_ARGUMENTS:
            value = getattr(self, param.name)
            if param is KERNEL_PARAM and (isinstance(value, Mapping) or hasattr(value, "to_dict")):
                continue  # a KernelSpec or its dict: validated by the kernel module
            param.check(value)
