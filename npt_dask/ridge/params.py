"""Kernel ridge's parameter tables, as data: :data:`RIDGE_PARAMS` (``KernelRidge``,
``KernelRidgeClassifier``; scikit-learn's ``KernelRidge`` first, with its defaults),
:data:`RIDGE_CV_PARAMS` (the two searching estimators) and the ``checkpoint`` argument of
their ``fit``. Entries a fit of NPT shares are taken from their owners as they are: the
kernel's (:mod:`npt_dask.kernels.params`), the landmarks' and the seed
(:mod:`npt_dask.engine.centres`), the budgets (:mod:`npt_dask.engine.budget`), the device
(:mod:`npt_dask.arrays.device`, the command line's ``--device``),
``chunk_size`` (:mod:`npt_dask.runtime.inputs`) and ``progress``
(:mod:`npt_dask.runtime.progress`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from npt_dask.arrays.device import DEVICE_PARAM
from npt_dask.engine.budget import (
    DEVICE_MEMORY_BUDGET_PARAM,
    MEMORY_BUDGET_PARAM,
)
from npt_dask.engine.centres import (
    LANDMARK_METHOD_PARAM,
    LANDMARKS_PARAM,
    RANDOM_STATE_PARAM,
)
from npt_dask.kernels.params import kernel_param
from npt_dask.params.constraints import (
    INT,
    NONE,
    REAL,
    ArrayOf,
    InstanceOf,
    Interval,
    Options,
    Param,
)
from npt_dask.params.parsing import number_or
from npt_dask.ridge import routes
from npt_dask.ridge.search import (
    SEARCH_PARAMS,
)
from npt_dask.runtime.inputs import (
    CHUNK_SIZE_PARAM,
)
from npt_dask.runtime.progress import PROGRESS_PARAM

__all__ = [
    "CHECKPOINT_PARAM",
    "RIDGE_CV_PARAMS",
    "RIDGE_PARAMS",
    "RidgeSolver",
]


RidgeSolver = str
"""A ``solver=`` value: one that routes of the registry answer to
(:func:`npt_dask.ridge.routes.solvers`: moments and a Cholesky factorisation, preconditioned
conjugate gradient), or ``"auto"``, the plan's choice
(:func:`npt_dask.ridge.planning.plan_ridge`)."""


class RouteSolvers(Options):
    """The ``solver`` option's values, read from the route registry when a value is
    checked (:func:`npt_dask.ridge.routes.solvers`; a route registered later included)."""

    def __init__(self) -> None:  # no fields of its own: the registry holds the values
        pass

    @property
    def values(self) -> tuple[Any, ...]:
        return routes.solvers()


def _solver_help() -> str:
    """The ``solver`` option's help: each value and what its routes do."""
    values = ", ".join(f"{solver} ({text})" for solver, text in routes.solver_words().items())
    return (
        f"{values} or auto (the plan's choice: exact ridge direct whenever the n x n "
        "matrix fits memory_budget; Nystrom from counted flops and memory)"
    )


RIDGE_PARAMS: tuple[Param, ...] = (
    Param(
        "alpha",
        (Interval(REAL, 0, None, "left"), ArrayOf(Interval(REAL, 0, None, "left"))),
        1.0,
        "ridge alpha >= 0 (scikit-learn's KernelRidge meaning), or one per target",
        parse=number_or(float),
    ),
    dataclasses.replace(kernel_param("kernel"), default="linear"),
    kernel_param("gamma"),
    dataclasses.replace(kernel_param("degree"), default=3),
    dataclasses.replace(kernel_param("coef0"), default=1),
    kernel_param("kernel_params"),
    dataclasses.replace(
        LANDMARKS_PARAM,
        help="centres: None (every row, exact kernel ridge), m chosen rows (an int) or "
        "these row indices (Nystrom kernel ridge)",
    ),
    LANDMARK_METHOD_PARAM,
    Param(
        "solver",
        (RouteSolvers(),),
        "auto",
        _solver_help(),
        parse=str,
    ),
    Param(
        "tol",
        (Interval(REAL, 0, 1, "neither"),),
        1e-3,
        "conjugate gradient stops when ||b - H c|| / ||b|| <= tol for every target (the "
        "true residual, checked by one more pass; float32 kernel blocks resolve 1e-6 to 1e-5)",
        parse=number_or(float),
    ),
    Param(
        "max_iter",
        (Interval(INT, 1, None),),
        100,
        "most conjugate-gradient iterations (one pass over the rows each)",
        parse=number_or(int),
    ),
    kernel_param("precision"),
    RANDOM_STATE_PARAM,
    MEMORY_BUDGET_PARAM,
    DEVICE_MEMORY_BUDGET_PARAM,
    DEVICE_PARAM,
    dataclasses.replace(CHUNK_SIZE_PARAM, help="rows per kernel block of the exact route's passes"),
    dataclasses.replace(PROGRESS_PARAM, help="report each pass and iteration on stderr"),
)
"""``npt_dask.KernelRidge``'s parameters, in signature order (scikit-learn's ``KernelRidge``
first, with its defaults)."""


CHECKPOINT_PARAM = Param(
    "checkpoint",
    (InstanceOf((str, os.PathLike), "a file path (str or os.PathLike)"), NONE),
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
