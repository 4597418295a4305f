"""The registry of kernel ridge routes: the one list the plan chooses over.

Each route (:class:`npt_dask.ridge.routes.base.Route`) lives in its own module and says its
counted flops, its memory (host and device) and its solve. Adding a route is its module
and one line here; :func:`npt_dask.ridge.planning.plan_ridge` weighs every route of the
problem's kind (Nyström or exact) that fits the budget.
"""

from __future__ import annotations

from npt_dask.ridge.routes.base import Route
from npt_dask.ridge.routes.cg import ExactCG, NystromCG
from npt_dask.ridge.routes.direct import ExactDirect, NystromDirect

__all__ = ["ROUTES", "route_named"]

ROUTES: tuple[Route, ...] = (
    NystromDirect(),
    ExactDirect(),
    NystromCG(),
    ExactCG(),
)
"""Every route, in the order that breaks ties of counted work (direct ones first)."""


def route_named(name: str, exact: bool) -> Route:
    """The route ``name`` of the exact (or the Nyström) problem."""
    return next(r for r in ROUTES if r.name == name and r.exact == exact)
