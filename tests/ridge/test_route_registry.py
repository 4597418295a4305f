"""The route registry takes any route: a second iterative method, defined here and
registered at test time, is selectable by ``solver=``, checkpoints and resumes through
the solver-state protocol, reports its own ``n_iter_``, and solves the dense reference.

The method is preconditioned steepest descent (x += a z, z = P^-1 r, a = r^T z / z^T H z:
no conjugation, so it takes more iterations than CG on the same system), on the
Nyström system with Falkon's preconditioner. References: the dense normal equations
from ``pairwise_kernels``, and CG on the same problem.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from sklearn.metrics.pairwise import pairwise_kernels

from npt_dask import KernelRidge, KernelRidgeClassifier
from npt_dask.errors import CheckpointError, ConvergenceWarning, NPTError
from npt_dask.ridge import routes
from npt_dask.ridge.routes import registered, solvers
from npt_dask.ridge.routes.cg import NystromCG
from npt_dask.ridge.state import COLUMNS, FLAGS, PER_TARGET

GAMMA, ALPHA, M = 0.3, 0.05, 40
_FIT = {"alpha": ALPHA, "landmarks": M, "kernel": "rbf", "gamma": GAMMA, "tol": 1e-10,
        "random_state": 0}  # fmt: skip


@dataclass
class DescentState:
    """Steepest descent's state: the protocol's fields only (``p`` is ``P^-1 r``)."""

    x: Any
    r: Any
    p: Any
    b: Any
    b_norm: np.ndarray
    best: np.ndarray
    best_x: Any
    iteration: int = 0
    converged: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    verified: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    breakdown: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    history: list[float] = field(default_factory=list)

    @property
    def active(self) -> np.ndarray:
        return ~(self.converged | self.breakdown)

    @property
    def unverified(self) -> np.ndarray:
        return self.converged & ~self.verified


def _relative(r: np.ndarray, b_norm: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(r, axis=0)
    return np.divide(norms, b_norm, out=np.zeros_like(norms), where=b_norm > 0)


class SteepestDescent:
    """Preconditioned steepest descent as a :class:`npt_dask.ridge.state.Method` (numpy)."""

    label, title, divergence = "descent", "Steepest descent", 1e4
    names = (*COLUMNS, *PER_TARGET, *FLAGS)

    def start(self, b: Any, precondition: Callable[[Any], Any], tol: float) -> DescentState:
        b = np.asarray(b, dtype=np.float64)
        norms = np.linalg.norm(b, axis=0)
        k = b.shape[1]
        done = norms == 0
        return DescentState(x=np.zeros_like(b), r=b.copy(), p=precondition(b), b=b,
                            b_norm=norms, best=np.ones(k), best_x=np.zeros_like(b),
                            converged=done.copy(), verified=done.copy(),
                            breakdown=np.zeros(k, dtype=bool))  # fmt: skip

    def step(self, state: DescentState, q: Any, precondition: Callable[[Any], Any],
             tol: float, cols: np.ndarray) -> DescentState:  # fmt: skip
        p, r = state.p[:, cols], state.r[:, cols]
        a = np.einsum("ij,ij->j", r, p) / np.einsum("ij,ij->j", p, q)
        state.x[:, cols] += a * p
        state.r[:, cols] = r - a * q
        state.p[:, cols] = precondition(state.r[:, cols])
        state.iteration += 1
        rel = _relative(state.r, state.b_norm)
        better = cols[rel[cols] < state.best[cols]]
        state.best[better] = rel[better]
        state.best_x[:, better] = state.x[:, better]
        state.converged[cols] |= rel[cols] <= tol
        state.history.append(float(rel[cols].max(initial=0.0)))
        return state

    def verify(self, state: DescentState, hx: Any, precondition: Callable[[Any], Any],
               tol: float, cols: np.ndarray) -> DescentState:  # fmt: skip
        state.r[:, cols] = state.b[:, cols] - hx
        ok = _relative(state.r, state.b_norm)[cols] <= tol
        state.verified[cols[ok]] = True
        again = cols[~ok]
        state.converged[again] = False
        state.p[:, again] = precondition(state.r[:, again])
        return state

    def retarget(self, state: DescentState, tol: float) -> DescentState:
        state.converged = (_relative(state.r, state.b_norm) <= tol) & ~state.breakdown
        state.verified = (state.b_norm == 0) & state.converged
        return state

    def state_like(self, state: DescentState, like: Any) -> DescentState:
        return state  # numpy only

    def arrays(self, state: DescentState) -> dict[str, np.ndarray]:
        return {name: np.asarray(getattr(state, name)) for name in self.names}

    def from_arrays(self, arrays: Mapping[str, np.ndarray], iteration: int,
                    history: list[float]) -> DescentState:  # fmt: skip
        extra = sorted(set(arrays) - set(self.names))
        if extra:
            raise ValueError(f"arrays {extra} that steepest descent does not keep")
        return DescentState(**{n: arrays[n] for n in self.names}, iteration=iteration,
                            history=history)  # fmt: skip


class NystromDescent(NystromCG):
    """Nyström kernel ridge by preconditioned steepest descent: the CG route's passes and
    Falkon's preconditioner, another method."""

    name, solver = "nystrom-descent", "descent"
    description = "preconditioned steepest descent, one pass per iteration"
    method = SteepestDescent()


@pytest.fixture
def descent():
    with registered(NystromDescent()) as route:
        yield route


def _data(n=200, d=4):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d))
    return x, np.column_stack([np.sin(x.sum(axis=1)), np.cos(x[:, 0])])


def _dense(x, t, landmarks):
    """The Nyström normal equations' solution, dense numpy."""
    c = x[landmarks]
    knm = pairwise_kernels(x, c, metric="rbf", gamma=GAMMA)
    kmm = pairwise_kernels(c, c, metric="rbf", gamma=GAMMA)
    return np.linalg.solve(knm.T @ knm + ALPHA * kmm, knm.T @ t)


def _fit(solver, max_iter=2000, checkpoint=None, **more):
    x, t = _data()
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        est = KernelRidge(solver=solver, max_iter=max_iter, **_FIT, **more)
        est.fit(x, t, checkpoint=checkpoint)
    return est, said.getvalue()


def test_a_registered_route_is_selectable_and_solves_the_dense_reference(descent):
    assert solvers() == ("auto", "direct", "cg", "descent")
    assert descent in routes.ROUTES
    est, _ = _fit("descent")
    cg, _ = _fit("cg")
    assert est.plan_["route"] == "nystrom-descent"
    assert est.solver_ == "descent"
    x, t = _data()
    want = _dense(x, t, est.landmarks_)
    np.testing.assert_allclose(est.dual_coef_, want, rtol=1e-6, atol=1e-8 * abs(want).max())
    # n_iter_ is the route's own count: one residual per iteration, more than CG's
    assert est.n_iter_ == len(est.residuals_) > 2 * cg.n_iter_
    assert cg.plan_["route"] == "nystrom-cg"
    assert KernelRidgeClassifier(solver="descent", **_FIT).get_params()["solver"] == "descent"


def test_an_unregistered_solver_value_is_refused():
    assert "descent" not in solvers()
    x, t = _data()
    with pytest.raises(NPTError, match="solver"):
        KernelRidge(solver="descent", **_FIT).fit(x, t)


def test_the_route_checkpoints_and_resumes_through_the_protocol(descent, tmp_path):
    path = tmp_path / "descent.npz"
    with pytest.warns(ConvergenceWarning, match="Steepest descent stopped after max_iter=5"):
        stopped, _ = _fit("descent", max_iter=5, checkpoint=path)
    assert stopped.n_iter_ == 5
    with np.load(path) as saved:
        assert set(saved.files) == {
            *COLUMNS,
            *PER_TARGET,
            *FLAGS,
            "history",
            "centres",
            "probe",
            "meta",
        }  # fmt: skip (no CG's rz)
    resumed, said = _fit("descent", checkpoint=path, progress=True)
    assert "descent: resuming at iteration 5 from" in said
    straight, _ = _fit("descent")
    assert resumed.n_iter_ == straight.n_iter_ > 5
    np.testing.assert_allclose(resumed.dual_coef_, straight.dual_coef_, rtol=1e-10,
                               atol=1e-12 * abs(straight.dual_coef_).max())  # fmt: skip


def test_another_routes_checkpoint_is_not_continued(descent, tmp_path):
    """CG's state and steepest descent's are pinned apart by the route in the
    fingerprint: neither continues the other's file."""
    path = tmp_path / "cg.npz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        _fit("cg", max_iter=3, checkpoint=path)
    with pytest.raises(CheckpointError, match="another problem"):
        _fit("descent", checkpoint=path)
