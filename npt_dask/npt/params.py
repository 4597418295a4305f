"""The NPT fit's parameter table: constraints, defaults and help, as data.

Every entry point of a fit -- :func:`npt_dask.fit`, the
:class:`~npt_dask.NonlinearProjection` estimator, ``npt fit`` on the command
line and a pipeline's ``[model]`` table -- validates its arguments here, with
one wording, and takes its defaults from here::

    The 'tol' parameter must be a finite real number in the range (0, 1) or None. Got 2.0 instead.

The entries a fit shares with other tables live with what they set, and this table
takes them as they are: the kernel's arguments and the block precision
(:mod:`npt_dask.kernels.params`), ``chunk_size`` (:mod:`npt_dask.runtime.inputs`),
``cache`` (:mod:`npt_dask.engine.operator`), the memory budgets
(:mod:`npt_dask.engine.budget`), the landmarks and the seed
(:mod:`npt_dask.engine.centres`), ``progress`` (:mod:`npt_dask.runtime.progress`), the
device (:mod:`npt_dask.arrays.device`: the command line's ``--device`` and a pipeline's
top-level ``device`` are the same entry).
The constraint classes are :mod:`npt_dask.params.constraints`'.

Nothing here touches data: :class:`FitParams` is the validated, frozen record
of what the caller asked for; what is derived from the data and the machine
(``gamma="scale"``, the memory budget, the block width) is resolved later,
in one place each (:meth:`npt_dask.kernels.KernelSpec.resolve`,
:func:`npt_dask.npt.planning.plan_fit`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from npt_dask.arrays.device import DEVICE_PARAM
from npt_dask.engine.budget import DEVICE_MEMORY_BUDGET_PARAM, MEMORY_BUDGET_PARAM
from npt_dask.engine.centres import (
    LANDMARK_METHOD_PARAM,
    LANDMARKS_PARAM,
    RANDOM_STATE_PARAM,
    LandmarkMethod,
)
from npt_dask.engine.operator import CACHE_PARAM, Cache
from npt_dask.errors import InputError, InputTypeError
from npt_dask.kernels.params import (
    DEFAULT_KERNEL,
    DEFAULT_RTOL,
    DEFAULT_TOL,
    KERNEL_ARGUMENTS,
    PRECISION_PARAM,
    Precision,
)
from npt_dask.params.constraints import (
    INT,
    NONE,
    REAL,
    HasMethod,
    Interval,
    Options,
    Param,
)
from npt_dask.params.parsing import (
    budget_bytes,
    number_or,
    parse_bool,
)
from npt_dask.runtime.inputs import CHUNK_SIZE_PARAM, DEFAULT_CHUNK_SIZE
from npt_dask.runtime.progress import PROGRESS_PARAM

__all__ = [
    "ESTIMATOR_PARAMS",
    "PARAMS",
    "SOLVER_ALIASES",
    "Basis",
    "FitParams",
    "OnNegative",
    "Solver",
    "SolverAlias",
    "check_param",
    "estimator_defaults",
    "fit_defaults",
    "fit_param",
    "names",
]


Solver = Literal["auto", "dense", "krylov"]
"""The eigensolvers (``"auto"``: dense for the full rank, up to
:data:`npt_dask.npt.planning.DENSE_MAX_SAMPLES` rows, or from ``n_components >=
AUTO_DENSE_FRACTION * n`` when the explicit matrix fits the memory budget)."""

SolverAlias = Literal["arpack", "randomized"]
"""scikit-learn's ``eigen_solver`` names for the iterative solver (:data:`SOLVER_ALIASES`)."""


Basis = Literal["auto", "driver", "chunked"]
"""Where the Krylov basis lives."""


OnNegative = Literal["warn", "raise"]
"""What a significantly negative eigenvalue does."""

SOLVER_ALIASES: Mapping[str, Solver] = dict.fromkeys(get_args(SolverAlias), "krylov")
"""scikit-learn's ``eigen_solver`` names, accepted as aliases of ours (both
iterative solvers for the top eigenpairs; ours is exact to ``tol``)."""


PARAMS: tuple[Param, ...] = (
    *KERNEL_ARGUMENTS,
    Param(
        "n_components",
        (Interval(INT, 1, None), NONE),
        None,
        "dimension r (None: the full effective rank, dense solver)",
        parse=number_or(int),
    ),
    Param("center", (Options((True, False)),), True, "centre in feature space", parse=parse_bool),
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
        (Interval(REAL, 0, 1, "neither"), NONE),
        None,
        "Krylov stopping rule ||K u - lambda u|| / lambda_1 (None: "
        f"{DEFAULT_TOL['float64']:g}, float32 blocks {DEFAULT_TOL['float32']:g})",
        parse=number_or(float),
    ),
    Param(
        "rtol",
        (Interval(REAL, 0, 1, "left"), NONE),
        None,
        "drop eigenvalues <= rtol * lambda_1 (None: "
        f"{DEFAULT_RTOL['float64']:g}, float32 {DEFAULT_RTOL['float32']:g})",
        parse=number_or(float),
    ),
    CHUNK_SIZE_PARAM,
    CACHE_PARAM,
    MEMORY_BUDGET_PARAM,
    DEVICE_MEMORY_BUDGET_PARAM,
    PRECISION_PARAM,
    Param(
        "block_size",
        (Interval(INT, 1, None), NONE),
        None,
        "Krylov block width (None: chosen by the fit plan)",
        parse=number_or(int),
    ),
    Param(
        "max_basis",
        (Interval(INT, 2, None), NONE),
        None,
        "most Krylov basis columns before a thick restart (None: the fit plan's)",
        parse=number_or(int),
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
        (Interval(INT, 1, None),),
        50,
        "most Krylov passes over the kernel",
        parse=number_or(int),
    ),
    Param(
        "on_negative",
        (Options(get_args(OnNegative)),),
        "warn",
        "what a significantly negative eigenvalue (non-PSD kernel) does",
        parse=str,
    ),
    dataclasses.replace(RANDOM_STATE_PARAM, help="seed of the Krylov start block"),
    LANDMARKS_PARAM,
    LANDMARK_METHOD_PARAM,
    Param(
        "start",
        (HasMethod("transform", "a fitted NPTModel"), NONE),
        None,
        "warm start: the Krylov solver starts from this model's coordinates of X",
    ),
    PROGRESS_PARAM,
    DEVICE_PARAM,
)
"""Every fit parameter, in signature order."""

_BY_NAME = {p.name: p for p in PARAMS}


def fit_param(name: str) -> Param:
    """The fit table's entry ``name``: what another table (kernel ridge's,
    :func:`npt_dask.project`'s) takes as it is or with its own default and help."""
    return _BY_NAME[name]


ESTIMATOR_PARAMS: tuple[Param, ...] = (
    Param("alpha", (Interval(REAL, 0, None, "left"),), 1.0, "ridge of the pre-image map"),
    Param("fit_inverse_transform", (Options((True, False)),), False, "learn inverse_transform"),
    Param("remove_zero_eig", (Options((True, False)),), False, "drop zero-eigenvalue columns"),
    Param(
        "eigen_solver",
        (Options(("auto", "dense", "krylov", *SOLVER_ALIASES)), NONE),
        None,
        "KernelPCA's name of solver (None: solver decides)",
    ),
    Param(
        "max_iter",
        (Interval(INT, 1, None), NONE),
        None,
        "KernelPCA's name of max_passes (None: max_passes decides)",
    ),
    Param(
        "iterated_power",
        (Interval(INT, 0, None), Options(("auto",))),
        "auto",
        "KernelPCA's randomized-solver power iterations: accepted, no effect",
    ),
    Param("copy_X", (Options((True, False)),), True, "keep a copy of numpy training rows"),
    Param(
        "n_jobs",
        (Interval(INT, None, None), NONE),
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
    >>> from npt_dask.npt.params import FitParams
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
    device_memory_budget: int | str | None = None  # the same, for the device
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
    device: str | None = None  # "gpu": the rows moved to the CUDA device at the entrance

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
        object.__setattr__(self, "device_memory_budget", budget_bytes(self.device_memory_budget))

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
