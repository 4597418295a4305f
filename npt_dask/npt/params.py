"""The fit's parameter table and the kernels': constraints, defaults and help, as data.

Every entry point of a fit -- :func:`npt_dask.fit`, the
:class:`~npt_dask.NonlinearProjection` estimator, ``npt fit`` on the command
line and a pipeline's ``[model]`` table -- validates its arguments here, with
one wording, and takes its defaults from here::

    The 'tol' parameter must be a finite real number in the range (0, 1) or None. Got 2.0 instead.

The fit is :mod:`npt_dask.npt`'s, but this table lives in ``runtime``, below the
layers that read it: the kernels build their specs from :data:`KERNEL_TABLE`
(:mod:`npt_dask.kernels.specs`), kernel ridge takes its kernel, landmark and
budget entries from :data:`PARAMS` (:mod:`npt_dask.ridge.base`), and the
methods on coordinates take :data:`DEFAULT_CHUNK_SIZE` and :class:`FitParams`.
The constraint classes are :mod:`npt_dask.params.constraints`'s.

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

from npt_dask.arrays.device import DEVICES, GPU_INSTALL
from npt_dask.errors import InputError, InputTypeError, KernelParameterError
from npt_dask.params.constraints import (
    INT,
    NONE,
    REAL,
    ByteSize,
    HasMethod,
    InstanceOf,
    Interval,
    IsCallable,
    Options,
    Param,
)
from npt_dask.params.parsing import (
    budget_bytes,
    number_or,
    optional,
    parse_bool,
    parse_bytes,
    parse_json,
)

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_KERNEL",
    "DEFAULT_RTOL",
    "DEFAULT_TOL",
    "DEVICE_PARAM",
    "ESTIMATOR_PARAMS",
    "KERNEL_ALIASES",
    "KERNEL_FIT_ARGUMENTS",
    "KERNEL_HYPERPARAMETERS",
    "KERNEL_NAMES",
    "KERNEL_TABLE",
    "PARAMS",
    "SOLVER_ALIASES",
    "Basis",
    "Cache",
    "FitParams",
    "LandmarkMethod",
    "OnNegative",
    "Precision",
    "Solver",
    "SolverAlias",
    "check_param",
    "estimator_defaults",
    "fit_defaults",
    "fit_param",
    "kernel_named",
    "names",
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
        (InstanceOf((dict,), "a dict"), NONE),
        None,
        "parameters of a callable kernel, or gamma/degree/coef0 of a named one (JSON here)",
        parse=parse_json,
    ),
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
    Param(
        "chunk_size",
        (Interval(INT, 1, None), NONE),
        DEFAULT_CHUNK_SIZE,
        "rows per kernel block (None keeps a dask input's row chunks)",
        parse=number_or(int),
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
        (Interval(INT, 1, None), ByteSize(), NONE),
        None,
        "bytes the fit may hold beyond the input rows: an int, or a size with units "
        "('40GB', '1.5GiB'; the same units everywhere) (None: a sixth of physical memory)",
        parse=parse_bytes,
    ),
    Param(
        "device_memory_budget",
        (Interval(INT, 1, None), ByteSize(), NONE),
        None,
        "bytes of device (GPU) memory the kernel blocks and device matrices may hold when "
        "the rows live on a device, units as memory_budget (None: a share of the device's "
        "free memory; rows in host memory count against memory_budget alone)",
        parse=parse_bytes,
    ),
    Param(
        "precision",
        (Options(get_args(Precision)), NONE),
        None,
        "kernel block dtype (None: float32 for float32 input, else float64)",
        parse=optional,
    ),
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
    Param(
        "random_state",
        (Interval(INT, 0, None), _SEED, NONE),
        None,
        "seed of the Krylov start block",
        parse=number_or(int),
    ),
    Param(
        "landmarks",
        (
            Interval(INT, 2, None),
            InstanceOf((np.ndarray, list, tuple), "an array of row indices"),
            NONE,
        ),
        None,
        "fit on m chosen rows (an int) or these row indices; every row is then projected",
        parse=number_or(int),
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
        (HasMethod("transform", "a fitted NPTModel"), NONE),
        None,
        "warm start: the Krylov solver starts from this model's coordinates of X",
    ),
    Param("progress", (Options((True, False)),), False, "report each Krylov pass on stderr"),
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


DEVICE_PARAM = Param(
    "device",
    (Options(DEVICES), NONE),
    None,
    "where the rows' arithmetic runs: 'gpu' moves their chunks to the CUDA device "
    f"through CuPy ({GPU_INSTALL}); 'cpu' or None leaves them in host memory",
    parse=optional,
)
"""``npt fit``/``ridge``/``project --device`` and a pipeline's top-level ``device`` key
(:func:`npt_dask.arrays.device.to_device` moves the rows)."""
