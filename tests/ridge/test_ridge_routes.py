"""Kernel ridge's routes: one registry the plan chooses over, one jitter policy, and the
exact CG route's preconditioner rank chosen from the budget."""

import itertools

import numpy as np
import pytest

import npt_dask as npt
from npt_dask.errors import InputError
from npt_dask.linalg.jitter import dense_attempt, jitter_ladder, jittered_cholesky
from npt_dask.linalg.preconditioners import factor_with_jitter
from npt_dask.ridge.planning import plan_ridge
from npt_dask.ridge.routes import ROUTES
from npt_dask.ridge.routes.base import Route
from npt_dask.ridge.routes.cg import SPECTRUM, ExactCG, expected_iterations, ranks_to_try

MNIST = {"n": 60_000, "m": None, "d": 784, "k": 10, "itemsize": 4, "threads": 2,
         "alpha": 1e-3, "tol": 1e-3}  # fmt: skip


def test_every_route_is_a_route_and_each_problem_has_a_direct_and_an_iterative_one():
    assert all(isinstance(r, Route) for r in ROUTES)
    for exact in (True, False):
        kinds = {(r.solver, r.iterative) for r in ROUTES if r.exact == exact}
        assert {("direct", False), ("cg", True)} <= kinds


def test_route_names_are_unique_and_the_solver_values_come_from_the_registry():
    from npt_dask.params.constraints import Options
    from npt_dask.ridge.params import RIDGE_PARAMS
    from npt_dask.ridge.routes import current_name, route_named, solvers

    names = [r.name for r in ROUTES]
    assert len(set(names)) == len(names)
    assert solvers() == ("auto", "direct", "cg")  # the public values, unchanged
    (solver,) = [p for p in RIDGE_PARAMS if p.name == "solver"]
    (options,) = solver.constraints
    assert isinstance(options, Options)
    assert options.values == solvers()
    assert all(f"{v} (" in solver.help for v in solvers()[1:])
    assert 'solver : {"auto", "direct", "cg"}' in npt.KernelRidge.__doc__
    assert '``"cg"``: with landmarks: preconditioned' in npt.KernelRidgeClassifier.__doc__
    # names recorded before they were unique (stores, plans) are read with their problem
    assert current_name("cg", True) == "exact-cg"
    assert current_name("direct", False) == ("nystrom-direct")
    assert route_named("cg", False) is route_named("nystrom-cg", False)


def test_the_plan_chooses_only_among_registered_routes():
    names = {r.name for r in ROUTES}
    for budget in (2**26, 2**30, 2**34):
        for m in (None, 500):
            try:
                plan = plan_ridge(n=5000, m=m, d=20, k=1, itemsize=8, memory_budget=budget)
            except InputError:
                continue
            assert plan.route in names
            assert plan.total_bytes <= budget


def test_the_iteration_estimate_matches_the_measured_mnist_counts():
    """Iterations to tol 1e-3 on 8,000 MNIST rows (rbf, gamma 0.02, alpha 1e-3) with a
    landmark preconditioner of rank 200, 800, 2,000 were 127, 62, 41."""
    for rank, measured in ((200, 127), (800, 62), (2000, 41)):
        estimate = expected_iterations(SPECTRUM * 8000 / rank, 1e-3, 1e-3)
        assert abs(estimate - measured) <= 0.1 * measured


def test_the_exact_cg_rank_is_the_least_counted_work_of_the_ranks_that_fit():
    from npt_dask.ridge.problem import RidgePlan, RidgeSizes

    budget = 4 * 2**30
    plan = plan_ridge(memory_budget=budget, **MNIST)
    assert plan.route == "exact-cg"
    assert plan.preconditioner_rank == 4096  # pinned: 60,000 MNIST rows at 4 GiB
    assert plan_ridge(memory_budget=12 * 2**30, **MNIST).preconditioner_rank == 3072
    sizes = RidgeSizes(60_000, 60_000, 784, 10, 4, 1, 2, budget, 100, 1e-3, 4096, exact=True,
                       alpha=1e-3)  # fmt: skip
    base = RidgePlan("", True, 60_000, 60_000, 784, 10, "float32", 4096, 1, 2, budget, 100, 1e-3)
    route = ExactCG()
    costs = {}
    for rank in ranks_to_try(60_000):
        p = route.at_rank(sizes, base, rank)
        if route.fits(p, sizes):
            costs[rank] = sizes.cost(p.flops, p.iterations)
    assert plan.preconditioner_rank == min(costs, key=costs.__getitem__)
    # a rank the rule passed over costs more: fewer iterations do not pay for the
    # blocks its factor evicts, or more iterations cost more than its smaller factor saves
    assert len(costs) > 3
    assert f"about {plan.iterations} iterations expected" in plan.reason


def test_a_larger_budget_keeps_more_blocks_and_costs_less_in_all():
    """More budget keeps more blocks: each iteration recomputes fewer, so the rule may take
    a smaller factor and more iterations (80 at 4 GiB, 93 at 12 GiB) for less work."""
    from npt_dask.ridge.problem import RidgeSizes

    small = plan_ridge(memory_budget=4 * 2**30, **MNIST)
    large = plan_ridge(memory_budget=12 * 2**30, **MNIST)
    assert len(large.kept) > len(small.kept)
    assert large.flops["iteration_p"] < small.flops["iteration_p"]
    sizes = RidgeSizes(60_000, 60_000, 784, 10, 4, 1, 2, 4 * 2**30, 100, 1e-3, 4096,
                       exact=True, alpha=1e-3)  # fmt: skip
    assert sizes.cost(large.flops, large.iterations) < sizes.cost(small.flops, small.iterations)


def test_the_jitter_ladder_starts_at_the_floor_grows_tenfold_and_stops_at_most():
    steps = list(jitter_ladder(100, np.float64, most=1e-8))
    eps = np.finfo(np.float64).eps
    assert steps[0] == 0.0
    assert steps[1] == pytest.approx(100 * eps)
    assert all(b == pytest.approx(10 * a) for a, b in itertools.pairwise(steps[1:]))
    assert steps[-1] <= 1e-8 < 10 * steps[-1]
    assert list(jitter_ladder(10, np.float32, floor=1e-3, most=1e-1)) == pytest.approx(
        [1e-3, 1e-2, 1e-1]
    )


def test_the_jittered_cholesky_factors_a_singular_gram_matrix_with_the_least_jitter():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(30, 5))
    k = np.asfortranarray(a @ a.T)  # rank 5: singular
    scale = float(np.mean(np.diag(k)))
    jitter = jittered_cholesky(dense_attempt(k), m=30, scale=scale)
    assert jitter is not None
    assert 0 < jitter < 1e-6 * scale
    upper = np.triu(k)
    assert np.allclose(upper.T @ upper, a @ a.T + jitter * np.eye(30), atol=1e-8 * scale)


def test_a_matrix_that_is_not_psd_is_refused_naming_the_fix():
    k = np.asfortranarray(np.diag([1.0, -5.0, 1.0]))
    with pytest.raises(InputError, match="not positive semi-definite"):
        factor_with_jitter(k)
