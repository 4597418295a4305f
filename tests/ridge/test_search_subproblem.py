"""The search's subproblem is a share of the rows, not a fixed 10,000: its cost keeps pace
with the fit it chooses for (on 20,000 rows, half of them made the search 19 times the
final fit)."""

from __future__ import annotations

import numpy as np
import pytest

import npt_dask.ridge.search as search_module
from npt_dask import KernelRidgeClassifierCV
from npt_dask.ridge.search import SEARCH_FLOOR, SEARCH_ROWS, SEARCH_SHARE, subproblem_rows


def test_the_subproblem_is_a_fifth_of_the_rows_between_the_floor_and_the_cap():
    assert SEARCH_SHARE == 0.2
    assert subproblem_rows(20_000) == 4_000
    assert subproblem_rows(60_000) == SEARCH_ROWS == 10_000
    assert subproblem_rows(3_000) == SEARCH_FLOOR == 1_000
    assert subproblem_rows(700) == 700  # fewer rows than the floor: all of them
    assert subproblem_rows(20_000, 10_000) == 10_000  # given: as given
    assert subproblem_rows(500, 10_000) == 500


@pytest.fixture
def rows() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(6_000, 2))
    return x, (x[:, 0] * x[:, 1] > 0).astype(int)


def test_the_default_search_scores_a_fifth_of_the_rows_with_one_factorisation_a_pair(
    rows, monkeypatch
):
    """6,000 rows: the search fits on 960 and holds out 240 (not 4,800 and 1,200), one
    kernel per gamma, one Cholesky factorisation per (gamma, alpha)."""
    x, y = rows
    solves: list[int] = []
    real = search_module.solve_symmetric

    def counted(system, rhs, what, **kwargs):
        solves.append(len(system))
        return real(system, rhs, what, **kwargs)

    monkeypatch.setattr(search_module, "solve_symmetric", counted)
    clf = KernelRidgeClassifierCV(alphas=[1e-3, 1e-1], gammas=[0.5, 2.0], landmarks=100,
                                  random_state=0).fit(x, y)  # fmt: skip
    res = clf.cv_results_
    assert len(res["fit_rows"]) + len(res["held_out_rows"]) == 1_200
    assert len(res["held_out_rows"]) == 240
    assert len(solves) == 2 * 2  # gammas x alphas, each of the subproblem's centres
    assert set(solves) == {100}
    assert clf.score(x, y) > 0.9


def test_search_rows_given_is_the_subproblem(rows):
    x, y = rows
    clf = KernelRidgeClassifierCV(alphas=[1e-2], gammas=[1.0], landmarks=50, search_rows=2_000,
                                  random_state=0).fit(x, y)  # fmt: skip
    res = clf.cv_results_
    assert len(res["fit_rows"]) + len(res["held_out_rows"]) == 2_000
