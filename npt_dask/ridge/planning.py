"""The kernel ridge plan: which route of the registry, from counted flops and memory.

Pure arithmetic on sizes; no data, no dask. :func:`plan_ridge` is the one place that
decides how a kernel ridge fit runs and what it holds, and says why; it chooses over
the registry :data:`npt_dask.ridge.routes.ROUTES` (each route's flops by stage and
memory by part: :mod:`npt_dask.ridge.problem`), and :func:`solve_ridge` runs the route the
:class:`RidgePlan` names. The plan is recorded in the estimator's ``plan_``.

Two problems (n rows, m centres, d features, k targets, sample weights W):

* **Nyström kernel ridge** (``landmarks`` = m centres):
  ``(K_nm^T W K_nm + alpha K_mm) c = K_nm^T W Y``;
* **exact kernel ridge** (``landmarks=None``, every row a centre):
  ``(W^1/2 K W^1/2 + alpha I) c' = W^1/2 Y``, ``c = W^1/2 c'`` (scikit-learn's).

The routes of each are in :mod:`npt_dask.ridge.routes` (direct, cg), a multiply-add
counting two flops and "p" marking work in the kernel precision.

``solver="auto"`` weighs the routes of the problem's kind that fit ``memory_budget``:

* **exact**: a route that is exact to rounding (direct: scikit-learn's solve) whenever
  one fits, whatever n; an iterative route only when none does, and the plan's
  ``reason`` (which the estimators turn into one :class:`~npt_dask.errors.RidgeWarning`)
  says so: the tolerance, and the budget the exact solve needs (or landmarks).
* **Nyström**: the least counted work, an iterative route's counted
  :data:`CG_MARGIN` times (its iteration count is an estimate, and it stops on ``tol``),
  float32 work at half the float64 cost (BLAS's single-precision rate is about twice
  the double), ties to the route listed first.

An iterative route needs alpha > 0; ``solver=`` a value routes answer to takes the
route of least weighted work among the ones that answer to it and fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from npt_dask.engine.budget import check_budgets
from npt_dask.errors import InputError
from npt_dask.params.parsing import format_bytes
from npt_dask.ridge import routes as registry
from npt_dask.ridge.checkpoint import Checkpoint
from npt_dask.ridge.problem import RidgePlan, RidgeProblem, RidgeSizes, RidgeSolution
from npt_dask.ridge.routes import route_named
from npt_dask.ridge.routes.base import Route

__all__ = [
    "CG_MARGIN",
    "RidgePlan",
    "plan_ridge",
    "solve_ridge",
]

CG_MARGIN = 2.0
"""``solver="auto"`` takes an iterative route over a direct one that fits only when it is
counted at least this many times cheaper: its iteration count is an estimate, and it
stops on a residual of ``tol`` (of the normal equations, whose condition number is large:
its predictions differ from the direct solve's by more than ``tol``), where the direct one
is exact to rounding."""


def plan_ridge(
    *,
    n: int,
    m: int | None,
    d: int,
    k: int,
    itemsize: int,
    alphas: int = 1,
    solver: str = "auto",
    memory_budget: int,
    threads: int = 1,
    max_iter: int = 100,
    tol: float = 1e-3,
    chunk_size: int = 4096,
    positive_alpha: bool = True,
    workers: int = 1,
    alpha: float = 0.0,
    device_budget: int | None = None,
) -> RidgePlan:
    """The plan of a kernel ridge fit: n rows, ``m`` centres (None: every row), d features,
    k targets, ``alphas`` distinct ridge values (the smallest ``alpha``, when known, for
    the iterations an exact CG expects), kernel blocks of ``itemsize`` bytes, ``threads``
    task threads in ``workers`` processes (the direct route keeps one running sum per
    process, its threads in each task's BLAS calls).

    ``solver`` is a value routes answer to (:func:`npt_dask.ridge.routes.solvers`:
    ``"direct"``, ``"cg"``) or ``"auto"`` (see the module doc). ``positive_alpha=False``
    (alpha = 0) leaves only the direct routes, as scikit-learn solves it.
    ``device_budget``: bytes of device memory when the rows live on a device (each
    route's :data:`~npt_dask.ridge.problem.DEVICE_PARTS` held there, checked against it,
    the rest against ``memory_budget``: :func:`npt_dask.engine.budget.check_budgets`); None
    (numpy) counts both parts against ``memory_budget``. Raises
    :class:`~npt_dask.errors.InputError` when no route fits, naming the sizes and the fix.

    >>> plan = plan_ridge(n=60_000, m=20_000, d=784, k=10, itemsize=4,
    ...                   memory_budget=12 * 2**30, threads=2)
    >>> plan.route, plan.chains, plan.blas_threads
    ('nystrom-direct', 1, 2)
    >>> plan_ridge(n=60_000, m=20_000, d=784, k=10, itemsize=4,
    ...            memory_budget=4 * 2**30, threads=2).route
    'nystrom-cg'
    """
    exact = m is None
    sizes = RidgeSizes(n, n if m is None else int(m), d, k, itemsize, max(1, alphas),
                       max(1, threads), int(memory_budget), int(max_iter), float(tol),
                       int(chunk_size), max(1, workers), exact, positive_alpha,
                       float(alpha), device_budget)  # fmt: skip
    base = RidgePlan(
        "", exact, n, sizes.m, d, k, "float32" if itemsize == 4 else "float64", sizes.chunk, 1,
        sizes.threads, sizes.budget, sizes.max_iter, sizes.tol,
    )  # fmt: skip
    routes = [r for r in registry.ROUTES if r.exact == exact]
    plans = [(r, r.plan(sizes, base)) for r in routes]
    plan = _asked(solver, plans, sizes) if solver != "auto" else _auto(plans, sizes)
    check_budgets(plan.host_bytes, plan.device_bytes, sizes.budget, device_budget,
                  _problem_words(sizes))  # fmt: skip
    return plan


def _problem_words(s: RidgeSizes) -> str:
    """The problem, as a refusal names it."""
    if s.exact:
        return f"Exact kernel ridge of n={s.n:,} rows"
    return f"Nystrom kernel ridge with m={s.m:,} centres"


def _device_refusal(plans: Sequence[tuple[Route, RidgePlan]], s: RidgeSizes) -> None:
    """With a device, no route fitting is refused by the budgets' own words (host and
    device, each with its fix), for the route of least device memory."""
    if s.device_budget is None:
        return
    plan = min((p for _, p in plans), key=lambda p: (p.device_bytes, p.host_bytes))
    check_budgets(plan.host_bytes, plan.device_bytes, s.budget, s.device_budget,
                  _problem_words(s))  # fmt: skip


def _held(plan: RidgePlan) -> str:
    return format_bytes(plan.total_bytes)


def _what(exact: bool) -> str:
    return "the n x n kernel matrix" if exact else "the m x m normal matrix"


def _describe(plan: RidgePlan, s: RidgeSizes) -> str:
    return f"{s.cost(plan.flops, plan.iterations):.3g} flops, {_held(plan)}"


def _asked(solver: str, plans: Sequence[tuple[Route, RidgePlan]], s: RidgeSizes) -> RidgePlan:
    """The route ``solver`` names, refused (naming the fix) when it cannot run: of several
    that answer to it, the fitting one of least weighted work (ties: the first listed)."""
    named = [(r, p) for r, p in plans if r.solver == solver]
    if not named:
        kind = "exact kernel ridge (landmarks=None)" if s.exact else "Nystrom kernel ridge"
        others = sorted({r.solver for r, _ in plans})
        raise InputError(f"solver={solver!r} has no route for {kind}: use one of "
                         f"{['auto', *others]}.")  # fmt: skip
    fitting = [(r, p) for r, p in named if r.fits(p, s)]
    route, plan = min(fitting, key=lambda item: _weighted(item, s)) if fitting else named[0]
    budget = format_bytes(s.budget)
    if route.iterative and not s.positive_alpha:
        raise InputError(
            "alpha=0 has no iterative route (conjugate gradient needs a positive definite "
            "system, alpha > 0): use solver='direct' or 'auto', which solves it as "
            "scikit-learn does (least squares when singular), or give alpha > 0."
        )
    if route.fits(plan, s):
        if route.iterative:
            return replace(plan, reason=f"{route.solver}: solver={solver!r}; {_describe(plan, s)} "
                                        f"at {plan.iterations} expected iterations")  # fmt: skip
        return replace(plan, reason=f"{route.solver}: solver={solver!r}; {_describe(plan, s)}")
    _device_refusal([(route, plan)], s)
    if route.iterative:
        raise InputError(
            f"The iterative route holds {_held(plan)} (preconditioner and blocks in "
            f"flight), above memory_budget={budget}. Raise memory_budget, or use fewer "
            "landmarks."
        )
    fix = " or solver='cg'" if s.positive_alpha else ""
    raise InputError(
        f"The direct route holds {_what(s.exact)} ({_held(plan)} in all), above "
        f"memory_budget={budget}. Raise memory_budget{fix}"
        + ("" if s.exact else ", or use fewer landmarks")
        + ("." if s.positive_alpha else " (alpha=0 has no iterative route: CG needs "
           "alpha > 0).")
    )  # fmt: skip


def _auto(plans: Sequence[tuple[Route, RidgePlan]], s: RidgeSizes) -> RidgePlan:
    """``solver="auto"``: the fitting route of least weighted work (see the module doc)."""
    if not s.positive_alpha:  # alpha = 0: the direct routes only, as scikit-learn
        direct = [(r, p) for r, p in plans if not r.iterative]
        route, plan = direct[0]
        if not route.fits(plan, s):
            return _asked(route.solver, direct, s)
        return replace(plan, reason=f"{route.solver}: alpha = 0 (solved directly, as "
                                    f"scikit-learn does); {_describe(plan, s)}")  # fmt: skip
    fitting = [(r, p) for r, p in plans if r.fits(p, s)]
    if not fitting:
        _device_refusal(plans, s)
        needs = ", ".join(f"{r.solver} needs {_held(p)}" + ("" if r.iterative else
                          f" ({_what(s.exact)})") for r, p in plans)  # fmt: skip
        raise InputError(
            f"No route fits memory_budget={format_bytes(s.budget)}: {needs}. Raise "
            "memory_budget or use fewer landmarks."
        )
    if s.exact:
        return _auto_exact(plans, fitting, s)
    route, plan = min(fitting, key=lambda item: _weighted(item, s))  # ties: the first listed
    return replace(plan, reason=_nystrom_reason(route, plan, plans, fitting, s))


def _weighted(item: tuple[Route, RidgePlan], s: RidgeSizes) -> float:
    """A route's counted work, an iterative one's :data:`CG_MARGIN` times."""
    route, plan = item
    return s.cost(plan.flops, plan.iterations) * (CG_MARGIN if route.iterative else 1.0)


def _nystrom_reason(
    route: Route, plan: RidgePlan, plans: Sequence[tuple[Route, RidgePlan]],
    fitting: Sequence[tuple[Route, RidgePlan]], s: RidgeSizes,
) -> str:  # fmt: skip
    """Why the Nyström route won: the others' counted work, or that they do not fit."""
    cost = s.cost(plan.flops, plan.iterations)
    others = []
    for r, p in plans:
        if r is route:
            continue
        if all(r is not f for f, _ in fitting):
            others.append(
                f"{r.solver} ({_what(False) if not r.iterative else 'its memory'}, "
                f"{_held(p)}) does not fit memory_budget={format_bytes(s.budget)}"
            )
        else:
            margin = f" x {CG_MARGIN:g}" if r.iterative else ""
            others.append(f"{r.solver} counts {s.cost(p.flops, p.iterations):.3g} flops{margin}")
    its = f" at {plan.iterations} expected iterations" if route.iterative else ""
    return (f"{route.solver}: least counted work, {cost:.3g} flops{its}"
            + (f" ({CG_MARGIN:g} x for an iterative route)" if route.iterative else "")
            + ("; " + "; ".join(others) if others else "")
            + f"; it holds {_held(plan)}")  # fmt: skip


def _auto_exact(
    plans: Sequence[tuple[Route, RidgePlan]], fitting: Sequence[tuple[Route, RidgePlan]],
    s: RidgeSizes,
) -> RidgePlan:  # fmt: skip
    """Exact kernel ridge: a direct route whenever one fits the budget; an iterative one
    only when none does, its reason saying so (the tolerance, what the exact solve needs,
    the rank and iterations it expects)."""
    exact_ones = [(r, p) for r, p in fitting if not r.iterative]
    budget = format_bytes(s.budget)
    if exact_ones:
        route, plan = min(exact_ones, key=lambda item: s.cost(item[1].flops, 0))
        return replace(plan, reason=f"{route.solver}: the n x n kernel matrix fits memory_budget="
                                    f"{budget} (exact, as scikit-learn; it holds "
                                    f"{_held(plan)})")  # fmt: skip
    direct = min((p for r, p in plans if not r.iterative), key=lambda p: p.total_bytes)
    route, plan = min(fitting, key=lambda item: s.cost(item[1].flops, item[1].iterations))
    rank = (f"; a rank-{plan.preconditioner_rank:,} preconditioner (chosen from the budget), "
            f"about {plan.iterations} iterations expected" if plan.preconditioner_rank
            else "")  # fmt: skip
    return replace(
        plan,
        reason=f"{route.solver}: the n x n kernel matrix ({_held(direct)} with its solve) does "
        f"not fit memory_budget={budget}, so the fit is iterative and stops at a relative "
        f"residual of tol={s.tol:g}, not scikit-learn's exact solve; for that raise "
        f"memory_budget to {_held(direct)}, or use landmarks (Nyström) for a direct solve in "
        f"less memory; it holds {_held(plan)}{rank}",
    )


def solve_ridge(
    problem: RidgeProblem, *, checkpoint: Checkpoint | None = None, progress: bool = False
) -> RidgeSolution:
    """Run the route the plan chose."""
    plan = problem.plan
    route = route_named(plan.route, plan.exact)
    return route.solve(problem, checkpoint=checkpoint, progress=progress)
