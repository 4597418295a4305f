"""The registry of kernel ridge routes: the one list the plan chooses over.

Each route (:class:`npt_dask.ridge.routes.base.Route`) lives in its own module and says its
unique name, the public ``solver=`` value it answers to and a one-line description, its
counted flops, its memory (host and device) and its solve. Adding a route is its module
and one line here; :func:`npt_dask.ridge.planning.plan_ridge` weighs every route of the
problem's kind (Nyström or exact) that fits the budget, and the ``solver`` option's
values, the command line's ``--solver`` and the estimators' docstrings are read from
here (:func:`solvers`, :func:`solver_words`, :func:`solver_doc`). An iterative route
gives the one iteration driver (:mod:`npt_dask.ridge.iterations`) its method
(:class:`npt_dask.ridge.state.Method`), whose state the checkpoint keeps through the same
protocol (:mod:`npt_dask.ridge.state`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager

from npt_dask.ridge.routes.base import OLD_NAMES, Route
from npt_dask.ridge.routes.cg import ExactCG, NystromCG
from npt_dask.ridge.routes.direct import ExactDirect, NystromDirect

__all__ = [
    "ROUTES",
    "current_name",
    "registered",
    "route_named",
    "solver_doc",
    "solver_words",
    "solvers",
]

ROUTES: tuple[Route, ...] = (
    NystromDirect(),
    ExactDirect(),
    NystromCG(),
    ExactCG(),
)
"""Every route, in the order that breaks ties of counted work (direct ones first)."""


def route_named(name: str, exact: bool) -> Route:
    """The route ``name`` (an old name of :func:`current_name` too) of the exact (or the
    Nyström) problem."""
    name = current_name(name, exact)
    return next(r for r in ROUTES if r.name == name and r.exact == exact)


def current_name(name: str, exact: bool) -> str:
    """A route's name as the registry spells it now: a name recorded before routes had
    unique names (``"direct"``, ``"cg"``) read with its problem."""
    return OLD_NAMES.get((name, bool(exact)), name)


def solvers() -> tuple[str, ...]:
    """The ``solver=`` values: ``"auto"`` and each value a route answers to, in the
    registry's order."""
    return ("auto", *dict.fromkeys(r.solver for r in ROUTES))


def solver_words() -> dict[str, str]:
    """Each public solver value and what its routes do (with landmarks; exact kernel
    ridge), in one line: what the docstrings and the command line's help say of it."""
    words = {}
    for solver in solvers()[1:]:
        words[solver] = "; ".join(f"{'exact' if r.exact else 'with landmarks'}: {r.description}"
                                  for r in ROUTES if r.solver == solver)  # fmt: skip
    return words


def solver_doc(doc: str | None) -> str | None:
    """An estimator's docstring with its ``{solver}`` line made the ``solver`` entry of
    its numpydoc parameters, from the registry: the values, and a line for each."""
    if doc is None:
        return None
    values = ", ".join(f'"{v}"' for v in solvers())
    lines = [f'    solver : {{{values}}}, default "auto"']
    for solver, text in solver_words().items():
        lines.append(textwrap.fill(f'``"{solver}"``: {text};', 92, initial_indent=" " * 8,
                                   subsequent_indent=" " * 8))  # fmt: skip
    return doc.replace("    {solver}", "\n".join(lines))


@contextmanager
def registered(route: Route) -> Iterator[Route]:
    """``route`` in the registry for the ``with`` block (a route defined outside the
    package, a test's): the plan weighs it, ``solver=`` takes the value it answers to.
    Its name must be new."""
    global ROUTES
    if any(r.name == route.name for r in ROUTES):
        raise ValueError(f"A route named {route.name!r} is registered already.")
    before = ROUTES
    ROUTES = (*before, route)
    try:
        yield route
    finally:
        ROUTES = before
