"""npt_dask.KernelRidge / KernelRidgeClassifier: exact and Nyström, direct and iterative.

References are independent of the code under test: scikit-learn's ``KernelRidge``
(and its own test module), a dense numpy Nyström solve built here from
``pairwise_kernels``, and today's eigen-frame route (ridge on the full-rank
landmark NPT coordinates).
"""

from __future__ import annotations

import importlib
import warnings

import dask.array as da
import numpy as np
import pytest
import scipy.sparse
import xarray as xr
from sklearn.kernel_ridge import KernelRidge as SkKernelRidge
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.preprocessing import LabelBinarizer
from sklearn.utils.estimator_checks import parametrize_with_checks

import npt_dask as npt
from npt_dask import KernelRidge, KernelRidgeClassifier
from npt_dask.errors import CheckpointError, ConvergenceWarning, InputError, RidgeWarning
from npt_dask.kernels import blockwise
from npt_dask.methods import Ridge
from npt_dask.ridge.search import TIE_TOL
from tests.ridge.conftest import ridge_data

GAMMA = 0.3


def _rel(got, ref):
    return float(np.abs(np.asarray(got) - ref).max() / np.abs(ref).max())


def _nystrom_reference(x, t, z, idx, alpha, weights=None, kernel="rbf", **params):
    """Dense numpy Nyström kernel ridge: (K_nm^T W K_nm + alpha K_mm) c = K_nm^T W t."""
    knm = pairwise_kernels(x, x[idx], metric=kernel, **params)
    kmm = pairwise_kernels(x[idx], x[idx], metric=kernel, **params)
    w = np.ones(len(x)) if weights is None else weights
    c = np.linalg.solve(knm.T @ (w[:, None] * knm) + alpha * kmm, knm.T @ (w[:, None] * t))
    return pairwise_kernels(z, x[idx], metric=kernel, **params) @ c


# --------------------------------------------------------------- exact = scikit-learn


@pytest.mark.parametrize(
    ("kernel", "params"),
    [("rbf", {"gamma": GAMMA}), ("laplacian", {"gamma": 0.2}), ("poly", {"degree": 2}),
     ("linear", {}), ("cosine", {})],
)  # fmt: skip
def test_exact_direct_equals_scikit_learn(kernel, params):
    x, t, z = ridge_data()
    ref = SkKernelRidge(alpha=0.3, kernel=kernel, **params).fit(x, t).predict(z)
    got = KernelRidge(alpha=0.3, kernel=kernel, **params).fit(x, t).predict(z)
    assert _rel(got, ref) < 1e-8


def test_exact_with_weights_and_per_target_alpha_equals_scikit_learn():
    x, t, z = ridge_data()
    w = np.random.default_rng(1).uniform(0.2, 3.0, len(x))
    ref = SkKernelRidge(alpha=[0.1, 2.0], kernel="rbf", gamma=GAMMA)
    ref = ref.fit(x, t, sample_weight=w).predict(z)
    est = KernelRidge(alpha=[0.1, 2.0], kernel="rbf", gamma=GAMMA)
    assert _rel(est.fit(x, t, sample_weight=w).predict(z), ref) < 1e-8


@pytest.mark.parametrize("alpha", [1e-3, 0.1])
def test_exact_is_scikit_learns_solve_whenever_the_kernel_matrix_fits(alpha):
    """At an n where counted flops once made auto take CG (at tol 1e-3), exact ridge
    is scikit-learn's: predictions and dual coefficients within 1e-8, the classifier's
    decisions too."""
    x, t, z = ridge_data(n=1500, d=3, k=1)
    sk = SkKernelRidge(alpha=alpha, kernel="rbf", gamma=0.5).fit(x, t[:, 0])
    est = KernelRidge(alpha=alpha, kernel="rbf", gamma=0.5).fit(x, t[:, 0])
    assert est.solver_ == "direct"
    assert "fits memory_budget" in est.plan_["reason"]
    assert _rel(est.predict(z), sk.predict(z)) < 1e-8
    assert _rel(est.dual_coef_, sk.dual_coef_) < 1e-8
    labels = (t[:, 0] > 0).astype(int)
    ref = SkKernelRidge(alpha=alpha, kernel="rbf", gamma=0.5).fit(x, 2.0 * labels - 1.0)
    clf = KernelRidgeClassifier(alpha=alpha, kernel="rbf", gamma=0.5).fit(x, labels)
    assert clf.solver_ == "direct"
    assert _rel(clf.decision_function(z), ref.predict(z)) < 1e-8


@pytest.mark.parametrize("n", [1000, 1500, 20_000, 60_000])
def test_the_plan_takes_exact_ridges_direct_route_whatever_n_when_it_fits(n):
    from npt_dask.ridge.planning import plan_ridge

    kw = {"n": n, "m": None, "d": 3, "k": 1, "itemsize": 8, "threads": 2}
    fits = plan_ridge(memory_budget=64 * n * n, **kw)
    assert fits.route == "exact-direct"
    assert sum(fits.memory.values()) <= 64 * n * n
    if n >= 20_000:  # below, CG's preconditioner holds more than the matrix
        tight = plan_ridge(memory_budget=sum(fits.memory.values()) - 1, **kw)
        assert tight.route == "exact-cg"
        assert "raise memory_budget to" in tight.reason


def test_exact_ridge_says_once_when_the_kernel_matrix_does_not_fit():
    """Only a budget below the n x n matrix makes auto iterate, and one warning says so:
    the tolerance, and the budget that gives scikit-learn's exact solve."""
    x, t, _ = ridge_data(n=1500, d=3, k=1)
    budget = 8 * 1500**2  # the CG route fits, the matrix and its solve (16 n^2 bytes) not
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = KernelRidge(alpha=0.1, kernel="rbf", gamma=0.5, memory_budget=budget,
                          chunk_size=300).fit(x, t[:, 0])  # fmt: skip
    said = [str(w.message) for w in caught if w.category is RidgeWarning]
    assert est.solver_ == "cg"
    assert len(said) == 1
    assert "tol=0.001" in said[0]
    assert "raise memory_budget to" in said[0]
    assert "landmarks" in said[0]
    for solver in ("cg", "direct"):  # asked for: no word about it
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            KernelRidge(alpha=0.1, kernel="rbf", gamma=0.5, solver=solver).fit(x[:300], t[:300])
        assert not [w for w in caught if w.category is RidgeWarning]


@pytest.mark.parametrize("container", ["dask", "xarray", "sparse"])
def test_exact_takes_lazy_labelled_and_sparse_rows(container):
    x, t, z = ridge_data()
    ref = SkKernelRidge(alpha=0.3, kernel="rbf", gamma=GAMMA).fit(x, t[:, 0]).predict(z)
    if container == "dask":
        fit_x, pred_z = da.from_array(x, chunks=(70, -1)), da.from_array(z, chunks=(13, -1))
    elif container == "xarray":
        fit_x = xr.DataArray(x, dims=("sample", "feature"))
        pred_z = xr.DataArray(z, dims=("sample", "feature"), coords={"sample": np.arange(40) + 7})
    else:
        fit_x, pred_z = scipy.sparse.csr_matrix(x), scipy.sparse.csr_matrix(z)
    est = KernelRidge(alpha=0.3, kernel="rbf", gamma=GAMMA, chunk_size=64).fit(fit_x, t[:, 0])
    got = est.predict(pred_z)
    if container == "dask":
        assert isinstance(got, da.Array)
        got = got.compute()
    if container == "xarray":
        assert got.dims == ("sample",)
        np.testing.assert_array_equal(got["sample"], np.arange(40) + 7)
    assert _rel(np.asarray(got), ref) < 1e-8


def test_precomputed_exact_and_nystrom():
    x, t, z = ridge_data()
    k = pairwise_kernels(x, metric="rbf", gamma=GAMMA)
    kz = pairwise_kernels(z, x, metric="rbf", gamma=GAMMA)
    ref = SkKernelRidge(alpha=0.3, kernel="precomputed").fit(k, t).predict(kz)
    for solver in ("direct", "cg"):
        est = KernelRidge(alpha=0.3, kernel="precomputed", solver=solver, tol=1e-10,
                          max_iter=300, chunk_size=64).fit(k, t)  # fmt: skip
        assert _rel(est.predict(kz), ref) < 1e-7, solver
    idx = np.arange(0, 300, 5)
    nys = KernelRidge(alpha=0.3, kernel="precomputed", landmarks=idx).fit(k, t).predict(kz)
    assert _rel(nys, _nystrom_reference(x, t, z, idx, 0.3, gamma=GAMMA)) < 1e-8


def test_scikit_learns_own_kernel_ridge_tests_pass(monkeypatch):
    """scikit-learn's sklearn/tests/test_kernel_ridge.py with its KernelRidge replaced."""
    module = importlib.import_module("sklearn.tests.test_kernel_ridge")
    monkeypatch.setattr(module, "KernelRidge", KernelRidge)
    ran = 0
    for name in dir(module):
        test = getattr(module, name)
        if not (name.startswith("test_") and callable(test)):
            continue
        marks = getattr(test, "pytestmark", [])
        params = [m for m in marks if m.name == "parametrize"]
        if params:
            _, values = params[0].args
            for value in values:
                test(value)
                ran += 1
        else:
            test()
            ran += 1
    assert ran >= 8


# --------------------------------------------------------------- Nyström


@pytest.mark.parametrize("chunks", [None, (37, 101, 90, 72)])
def test_nystrom_direct_equals_dense_numpy(chunks):
    x, t, z = ridge_data()
    idx = np.sort(np.random.default_rng(2).choice(len(x), 60, replace=False))
    w = np.random.default_rng(3).uniform(0.5, 2.0, len(x))
    fit_x = x if chunks is None else da.from_array(x, chunks=(chunks, -1))
    est = KernelRidge(alpha=0.2, kernel="rbf", gamma=GAMMA, landmarks=idx, solver="direct")
    got = est.fit(fit_x, t, sample_weight=w).predict(z)
    got = got.compute() if isinstance(got, da.Array) else got
    ref = _nystrom_reference(x, t, z, idx, 0.2, w, gamma=GAMMA)
    assert _rel(got, ref) < 1e-8
    assert est.solver_ == "direct"
    np.testing.assert_array_equal(est.landmarks_, idx)


def test_nystrom_direct_equals_todays_eigen_frame_route():
    """Ridge (no intercept) on the full-rank uncentred landmark NPT coordinates is the
    same Nyström kernel ridge."""
    x, t, z = ridge_data()
    idx = np.sort(np.random.default_rng(4).choice(len(x), 50, replace=False))
    model = npt.fit(x, "rbf", gamma=GAMMA, landmarks=idx, center=False, n_components=None,
                    targets=t)  # fmt: skip
    assert model.n_components == len(idx)
    frame = Ridge(alpha=0.2, fit_intercept=False).fit_moments(model.moments)
    ref = frame.predict(model.transform(z))
    got = KernelRidge(alpha=0.2, kernel="rbf", gamma=GAMMA, landmarks=idx).fit(x, t).predict(z)
    assert _rel(got, ref) < 1e-8


@pytest.mark.parametrize("landmarks", [None, 60])
def test_iterative_equals_direct_to_its_tolerance(landmarks):
    x, t, z = ridge_data(n=400)
    common = {"alpha": 0.05, "kernel": "rbf", "gamma": GAMMA, "landmarks": landmarks,
              "random_state": 0, "chunk_size": 96}  # fmt: skip
    direct = KernelRidge(solver="direct", **common).fit(x, t)
    ref = direct.predict(z)
    for tol in (1e-4, 1e-8):
        cg = KernelRidge(solver="cg", tol=tol, max_iter=500, **common).fit(x, t)
        assert cg.solver_ == "cg"
        assert cg.n_iter_ > 1
        assert cg.residuals_[-1] <= tol
        # the relative error of the solution is within the residual times the conditioning
        # the preconditioner leaves; predictions are far closer than that bound
        assert _rel(cg.predict(z), ref) < 100 * tol


def test_float32_route_is_within_its_stated_tolerance():
    """float32 kernel blocks (and CG's products) with float64 sums and solves: decision
    values within 1e-4 of the largest (the docstring's figure) of the float64 solve; CG at
    a tol float32 resolves (1e-5: its true residual is checked, 1e-6 is not reached)."""
    x, t, z = ridge_data(n=400)
    for landmarks, solver in [(60, "direct"), (60, "cg"), (None, "cg")]:
        common = {"alpha": 0.05, "kernel": "rbf", "gamma": GAMMA, "landmarks": landmarks,
                  "solver": solver, "tol": 1e-5, "max_iter": 300, "random_state": 0}  # fmt: skip
        ref = KernelRidge(precision="float64", **common).fit(x, t).predict(z)
        single = KernelRidge(precision="float32", **common).fit(x.astype(np.float32), t)
        assert single.dtype_ == np.float32
        assert _rel(single.predict(z.astype(np.float32)), ref) < 1e-4, (landmarks, solver)


# --------------------------------------------------------------- classifier


@pytest.mark.parametrize("classes", [2, 4])
def test_classifier_matches_scikit_learn_decisions(classes):
    x, _, z = ridge_data()
    labels = np.array(["ant", "bee", "cat", "dog"])[:classes]
    y = labels[(np.floor(x[:, 0] * 2) % classes).astype(int)]
    targets = LabelBinarizer(neg_label=-1).fit_transform(y).astype(float)
    ref = SkKernelRidge(alpha=0.3, kernel="rbf", gamma=GAMMA).fit(x, targets).predict(z)
    clf = KernelRidgeClassifier(alpha=0.3, kernel="rbf", gamma=GAMMA).fit(x, y)
    got = clf.decision_function(z)
    ref = ref[:, 0] if classes == 2 else ref
    assert _rel(got, ref) < 1e-8
    expected = labels[(ref > 0).astype(int)] if classes == 2 else labels[ref.argmax(axis=1)]
    np.testing.assert_array_equal(clf.predict(z), expected)
    np.testing.assert_array_equal(clf.classes_, labels)


def test_classifier_lazy_input_gives_lazy_labels():
    x, _, z = ridge_data()
    y = (x[:, 0] > 0).astype(int)
    clf = KernelRidgeClassifier(alpha=0.3, kernel="rbf", gamma=GAMMA, landmarks=40, random_state=0)
    clf.fit(da.from_array(x, chunks=(64, -1)), y)
    out = clf.predict(da.from_array(z, chunks=(16, -1)))
    assert isinstance(out, da.Array)
    np.testing.assert_array_equal(out.compute(), clf.predict(z))


def _expected_failures(estimator):
    """The search draws its subproblem's rows: rows repeated by hand are drawn otherwise
    than rows weighted, so the chosen (gamma, alpha) may differ (the full fit with a
    given pair is equivalent: KernelRidge passes these checks)."""
    if isinstance(estimator, npt.KernelRidgeCV | npt.KernelRidgeClassifierCV):
        why = "the hyperparameter search samples rows; repeats and weights sample apart"
        return {
            "check_sample_weight_equivalence_on_dense_data": why,
            "check_sample_weight_equivalence_on_sparse_data": why,
        }
    return {}


@parametrize_with_checks(
    [KernelRidge(), KernelRidgeClassifier(), npt.KernelRidgeCV(), npt.KernelRidgeClassifierCV()],
    expected_failed_checks=_expected_failures,
)
def test_scikit_learn_estimator_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RidgeWarning)  # alpha=0 / singular checks
        check(estimator)


# --------------------------------------------------------------- one pass, once a block


def _counting_kernel():
    calls: list[tuple[int, int]] = []

    def rbf(a, b):
        calls.append((len(a), len(b)))
        return pairwise_kernels(a, b, metric="rbf", gamma=GAMMA)

    return blockwise(rbf), calls


def test_each_block_is_evaluated_once_per_iteration():
    x, t, _ = ridge_data(n=400)
    kernel, calls = _counting_kernel()
    est = KernelRidge(alpha=0.05, kernel=kernel, landmarks=60, solver="cg", tol=1e-12,
                      max_iter=7, random_state=0)  # fmt: skip
    with pytest.warns(ConvergenceWarning):
        est.fit(x, t)
    chunks = -(-400 // est.plan_["row_chunk"])
    passes = [c for c in calls if c[1] == 60 and c[0] != 60]  # row chunks x centres
    assert est.n_iter_ == 7
    # the right-hand side, one a step, and the true residual of the stopped iterates; and
    # one block of the iteration estimate's sampled rows against the centres
    assert len(passes) == chunks * (1 + est.n_iter_ + 1) + 1
    assert est.solve_details_["passes"] == est.n_iter_ + 1
    calls.clear()
    exact = KernelRidge(alpha=0.05, kernel=kernel, solver="cg", tol=1e-12, max_iter=4,
                        chunk_size=100, memory_budget=10**6, random_state=0)  # fmt: skip
    with pytest.warns(ConvergenceWarning):
        exact.fit(x, t)
    kept = exact.plan_["kept_blocks"]
    assert 0 < kept < 10  # of the upper triangle of 4 x 4 blocks
    blocks = [c for c in calls if c == (100, 100)]
    passes = exact.n_iter_ + 1  # the steps, and the true residual of the stopped iterates
    assert exact.solve_details_["passes"] == passes
    assert len(blocks) == kept + (10 - kept) * passes  # kept ones once, others a pass


def test_direct_route_reads_each_block_once():
    x, t, _ = ridge_data(n=400)
    kernel, calls = _counting_kernel()
    est = KernelRidge(alpha=0.05, kernel=kernel, landmarks=60, solver="direct").fit(x, t)
    chunks = -(-400 // est.plan_["row_chunk"])
    assert len([c for c in calls if c[1] == 60]) == chunks


# --------------------------------------------------------------- resumable


def test_a_stopped_iterative_fit_resumes_to_the_same_answer(tmp_path):
    x, t, _ = ridge_data(n=400)
    common = {"alpha": 0.05, "kernel": "rbf", "gamma": GAMMA, "landmarks": 60, "solver": "cg",
              "tol": 1e-12, "random_state": 0}  # fmt: skip
    with pytest.warns(ConvergenceWarning):
        straight = KernelRidge(max_iter=12, **common).fit(x, t)
    path = tmp_path / "cg.npz"
    with pytest.warns(ConvergenceWarning):
        KernelRidge(max_iter=5, **common).fit(x, t, checkpoint=path)
    with pytest.warns(ConvergenceWarning):
        resumed = KernelRidge(max_iter=12, **common).fit(x, t, checkpoint=path)
    np.testing.assert_array_equal(resumed.dual_coef_, straight.dual_coef_)
    assert resumed.n_iter_ == 12
    np.testing.assert_array_equal(resumed.residuals_, straight.residuals_)
    with pytest.raises(CheckpointError, match="another problem"):
        KernelRidge(max_iter=12, **{**common, "alpha": 0.5}).fit(x, t, checkpoint=path)
    with pytest.raises(CheckpointError, match="another problem"):
        KernelRidge(max_iter=12, **common).fit(x, t + 1.0, checkpoint=path)


# --------------------------------------------------------------- bad input, before any pass


@pytest.mark.parametrize(
    ("params", "fit", "match"),
    [
        ({"landmarks": 500}, {}, "more than the 300 rows"),
        ({"alpha": -1.0}, {}, "'alpha' parameter"),
        ({"alpha": 0.0, "solver": "cg"}, {}, "alpha=0 has no iterative route"),
        ({"max_iter": 0}, {}, "'max_iter' parameter"),
        ({}, {"y": np.zeros(299)}, "inconsistent numbers of samples: \\[300, 299\\]"),
        ({}, {"x_nan": True}, "NaN"),
        ({}, {"y_nan": True}, "NaN"),
        ({}, {"sample_weight": -np.ones(300)}, ">= 0"),
    ],
)
def test_bad_input_is_refused_before_any_pass(params, fit, match):
    x, t, _ = ridge_data()
    kernel, calls = _counting_kernel()
    y = fit.get("y", t)
    if fit.get("x_nan"):
        x = x.copy()
        x[3, 1] = np.nan
    if fit.get("y_nan"):
        y = y.copy()
        y[5, 0] = np.nan
    est = KernelRidge(kernel=kernel, **params)
    with pytest.raises((ValueError, TypeError), match=match):
        est.fit(x, y, sample_weight=fit.get("sample_weight"))
    assert [c for c in calls if c[0] > 4] == []  # the form probe aside, no block evaluated


def _lazy(values, container):
    lazy = da.from_array(values, chunks=64)
    dims = ["sample", "target"][: values.ndim]
    return lazy if container == "dask" else xr.DataArray(lazy, dims=dims)


@pytest.mark.parametrize("container", ["dask", "xarray"])
@pytest.mark.parametrize(("solver", "landmarks"), [("direct", None), ("cg", None), ("cg", 60)])
def test_lazy_targets_and_weights_that_are_not_finite_are_refused_before_any_pass(
    container, solver, landmarks
):
    """Lazy targets and weights are read (one compute) and refused as numpy ones are."""
    x, t, _ = ridge_data()
    kernel, calls = _counting_kernel()
    est = KernelRidge(kernel=kernel, solver=solver, landmarks=landmarks, random_state=0)
    for bad in (np.nan, np.inf):
        y = t.copy()
        y[5, 0] = bad
        with pytest.raises(InputError, match="y contains NaN or infinity"):
            est.fit(x, _lazy(y, container))
        w = np.ones(300)
        w[7] = bad
        with pytest.raises(InputError, match="sample_weight must be finite"):
            est.fit(x, _lazy(t, container), sample_weight=_lazy(w, container))
    assert [c for c in calls if c[0] > 4] == []


def test_the_plan_says_which_route_and_why():
    x, t, _ = ridge_data()
    est = KernelRidge(alpha=0.1, kernel="rbf", gamma=GAMMA, landmarks=60, random_state=0)
    est.fit(x, t)
    plan = est.plan_
    assert (plan["route"], est.solver_) == ("nystrom-direct", "direct")
    assert plan["reason"].startswith(est.solver_)
    assert set(plan["memory"]) >= {"blocks"}
    assert plan["flops"]
    tiny = KernelRidge(alpha=0.1, kernel="rbf", gamma=GAMMA, memory_budget=2**20)
    with pytest.raises(InputError, match="memory_budget"):
        tiny.fit(x, t)


# --------------------------------------------------------------- labelled rows, scale, progress


def test_targets_and_weights_are_matched_by_label():
    x, t, z = ridge_data()
    rows = xr.DataArray(x, dims=("sample", "feature"), coords={"sample": np.arange(300) * 3})
    perm = np.random.default_rng(5).permutation(300)
    y = xr.DataArray(t[:, 0], dims=("sample",), coords={"sample": np.arange(300) * 3})
    w = xr.DataArray(np.linspace(0.5, 2.0, 300), dims=("sample",), coords=y.coords)
    common = {"alpha": 0.3, "kernel": "rbf", "gamma": GAMMA, "landmarks": 50, "random_state": 0}
    ref = KernelRidge(**common).fit(x, t[:, 0], sample_weight=w.values).predict(z)
    shuffled = KernelRidge(**common).fit(rows, y.isel(sample=perm), sample_weight=w[perm])
    np.testing.assert_allclose(shuffled.predict(z), ref, rtol=1e-10)
    other = y.assign_coords(sample=np.arange(300) * 3 + 1)
    with pytest.raises(InputError, match="label their rows differently"):
        KernelRidge(**common).fit(rows, other)


def test_rows_on_another_scale_are_warned_about_at_predict():
    x, t, z = ridge_data()
    est = KernelRidge(alpha=0.3, kernel="rbf", gamma=GAMMA).fit(x, t)
    with pytest.warns(npt.KernelScaleWarning, match="unlike every training row"):
        est.predict(z * 1000.0)


def test_progress_reports_the_pass_and_every_iteration(capsys):
    x, t, _ = ridge_data(n=400)
    KernelRidge(alpha=0.3, kernel="rbf", gamma=GAMMA, landmarks=60, solver="direct",
                progress=True).fit(x, t)  # fmt: skip
    err = capsys.readouterr().err
    assert "KernelRidge: moments pass" in err
    assert "KernelRidge: direct route: factoring the 60 x 60 system" in err
    assert "npt ridge" not in err  # the command line's name, not Python's
    KernelRidge(alpha=0.3, kernel="rbf", gamma=GAMMA, landmarks=60, solver="cg", tol=1e-6,
                max_iter=50, progress=True).fit(x, t)  # fmt: skip
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "cg: iteration" in ln]
    assert len(lines) >= 3
    assert all(ln.lstrip("\r").startswith("KernelRidge: cg: iteration") for ln in lines)
    assert "relative residual" in lines[-1]


# --------------------------------------------------------------- gamma and alpha chosen


def test_the_search_scores_every_pair_as_an_independent_refit_does():
    """Each (gamma, alpha) is scored as scikit-learn's KernelRidge fitted on the search's
    rows (alpha scaled by rows / n) scores on its held-out rows; the best pair is fitted."""
    x, t, z = ridge_data(n=400)
    est = npt.KernelRidgeCV(alphas=[1e-3, 1e-1, 10.0], gammas=[0.05, 0.3, 3.0],
                            search_rows=300, random_state=0).fit(x, t)  # fmt: skip
    res = est.cv_results_
    fit_rows, held = np.array(res["fit_rows"]), np.array(res["held_out_rows"])
    assert len(fit_rows) + len(held) == 300
    assert set(fit_rows).isdisjoint(held)
    from sklearn.metrics import r2_score

    for g, gamma in enumerate(res["gammas"]):
        for a, alpha in enumerate(res["alphas"]):
            ref = SkKernelRidge(alpha=alpha * len(fit_rows) / 400, kernel="rbf", gamma=gamma)
            ref.fit(x[fit_rows], t[fit_rows])
            assert res["scores"][g][a] == pytest.approx(r2_score(t[held], ref.predict(x[held])),
                                                        abs=1e-9)  # fmt: skip
    g, a = np.unravel_index(np.argmax(res["scores"]), (3, 3))
    assert (est.gamma_, est.alpha_) == (res["gammas"][g], res["alphas"][a])
    twin = KernelRidge(alpha=est.alpha_, kernel="rbf", gamma=est.gamma_).fit(x, t)
    np.testing.assert_allclose(est.predict(z), twin.predict(z), rtol=1e-12)


def test_a_search_with_as_many_landmarks_as_rows_scores_exact_ridge():
    """m >= the subproblem's fit rows: every row is a centre, and the search solves exact
    kernel ridge (as scikit-learn's KernelRidge on those rows scores), not Nyström's
    normal equations at three times the flops."""
    x, t, _ = ridge_data(n=400)
    est = npt.KernelRidgeCV(alphas=[1e-3, 1e-1], gammas=[0.3], landmarks=350, search_rows=300,
                            random_state=0).fit(x, t)  # fmt: skip
    res = est.cv_results_
    fit_rows, held = np.array(res["fit_rows"]), np.array(res["held_out_rows"])
    assert res["centres"] == len(fit_rows)
    from sklearn.metrics import r2_score

    for a, alpha in enumerate(res["alphas"]):
        ref = SkKernelRidge(alpha=alpha * len(fit_rows) / 400, kernel="rbf", gamma=0.3)
        ref.fit(x[fit_rows], t[fit_rows])
        assert res["scores"][0][a] == pytest.approx(r2_score(t[held], ref.predict(x[held])),
                                                    abs=1e-9)  # fmt: skip


def test_the_classifier_search_takes_gamma_from_the_scale_heuristic_and_landmarks():
    x, _, _ = ridge_data(n=500)
    y = (np.sin(2 * x[:, 0]) > 0).astype(int)
    clf = npt.KernelRidgeClassifierCV(landmarks=80, random_state=0).fit(x, y)
    res = clf.cv_results_
    scale = 1.0 / (x.shape[1] * x[np.sort(res["fit_rows"] + res["held_out_rows"])].var())
    np.testing.assert_allclose(res["gammas"], np.array([0.25, 0.5, 1, 2, 4]) * scale)
    assert res["centres"] == 80
    g, a = res["gammas"].index(clf.gamma_), res["alphas"].index(clf.alpha_)
    assert clf.best_score_ == res["scores"][g][a]
    best = max(max(row) for row in res["scores"])
    assert 1 - clf.best_score_ <= (1 - best) * (1 + TIE_TOL) + 1e-12
    assert clf.landmarks_.shape == (80,)
    assert clf.score(x, y) > 0.8


_KILLED_FIT = """
import sys, time
import numpy as np
from npt_dask.ridge.checkpoint import Checkpoint
import npt_dask.ridge.checkpoint as checkpoint
import npt_dask.ridge.normal_solve as solvers
from npt_dask import KernelRidge

checkpoint_path, out, slow = sys.argv[1], sys.argv[2], sys.argv[3] == "slow"
if slow:  # the parent kills this process between iterations
    save = Checkpoint.save

    def slow_save(*args, **kwargs):
        save(*args, **kwargs)
        time.sleep(0.5)

    Checkpoint.save = slow_save
rng = np.random.default_rng(0)
x = rng.normal(size=(400, 5))
t = np.column_stack([np.sin(x.sum(axis=1)), np.cos(x[:, 0])])
est = KernelRidge(alpha=0.05, kernel="rbf", gamma=0.3, landmarks=60, solver="cg", tol=1e-12,
                  max_iter=40, random_state=0)
est.fit(x, t, checkpoint=None if checkpoint_path == "none" else checkpoint_path)
np.save(out, est.dual_coef_)
np.save(out + ".iterations.npy", np.array([est.n_iter_]))
"""


def _iteration(path):
    import json

    with np.load(path, allow_pickle=False) as data:
        return json.loads(bytes(data["meta"]).decode())["iteration"]


def test_a_killed_iterative_job_resumes_to_the_same_answer(tmp_path):
    """kill -9 between two iterations, then the same command again: the same iterates as a
    process never interrupted (three fresh processes: the same threads and libraries)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "cg.npz"

    def fit(checkpoint, out, slow=False):
        args = [sys.executable, "-c", _KILLED_FIT, str(checkpoint), str(out), "slow" * slow]
        return subprocess.Popen(args)

    child = fit(path, tmp_path / "killed.npy", slow=True)
    try:
        deadline = time.monotonic() + 120
        while not (path.exists() and _iteration(path) >= 3):
            assert child.poll() is None, "the fit ended before it could be killed"
            assert time.monotonic() < deadline, "no third iteration within two minutes"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    stopped = _iteration(path)
    assert 3 <= stopped < 40
    assert not (tmp_path / "killed.npy").exists()
    assert fit(path, tmp_path / "resumed.npy").wait() == 0
    assert fit("none", tmp_path / "straight.npy").wait() == 0
    resumed, straight = np.load(tmp_path / "resumed.npy"), np.load(tmp_path / "straight.npy")
    np.testing.assert_array_equal(resumed, straight)
    assert _iteration(path) == int(np.load(tmp_path / "straight.npy.iterations.npy")[0])
    assert not list(tmp_path.glob(".cg.npz.*"))  # no temporary left behind by the kill


# --------------------------------------------------------------- the pipeline stage


def test_pipeline_kernel_ridge_stage_without_a_model(tmp_path):
    """A config whose only stage is kernel_ridge fits no NPT model; its accuracy is the
    estimator's on the same split; the stage's CG checkpoint is removed once it is done."""
    from sklearn.datasets import make_moons
    from sklearn.model_selection import train_test_split

    from npt_dask.interface.pipeline import PipelineConfig, run

    values = {
        "name": "krr",
        "data": {"source": "moons", "n_samples": 300, "noise": 0.2, "test_fraction": 0.25},
        "methods": [{"name": "kernel_ridge", "kernel": "rbf", "gamma": 2.0, "alpha": 0.01,
                     "landmarks": 60, "solver": "cg", "tol": 1e-8, "random_state": 0}],
        "output": {"dir": str(tmp_path / "out"), "plots": False},
    }  # fmt: skip
    config = PipelineConfig.from_dict(values)
    assert config.model is None
    assert PipelineConfig.from_dict(config.to_dict()) == config
    report = run(config, progress=False)
    assert report["model"] is None
    assert not (tmp_path / "out" / "model.zarr").exists()
    stage = report["methods"]["kernel_ridge"]
    x, y = make_moons(300, noise=0.2, random_state=0)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    ref = KernelRidgeClassifier(kernel="rbf", gamma=2.0, alpha=0.01, landmarks=60,
                                solver="cg", tol=1e-8, random_state=0).fit(xtr, ytr)  # fmt: skip
    assert stage["test_accuracy"] == pytest.approx(ref.score(xte, yte))
    assert stage["route"] == "cg"
    assert not list((tmp_path / "out").glob("*.cg.npz"))  # the stage is done: removed
    again = run(config, progress=False)["methods"]["kernel_ridge"]
    assert again["test_accuracy"] == stage["test_accuracy"]


def test_pipeline_kernel_ridge_stage_takes_the_models_kernel(tmp_path):
    from npt_dask.interface.pipeline import PipelineConfig, run

    values = {
        "name": "krr",
        "data": {"source": "moons", "n_samples": 200, "noise": 0.2, "test_fraction": 0.25},
        "model": {"kernel": "rbf", "gamma": 1.5, "n_components": 10},
        "methods": [{"name": "kernel_ridge", "alphas": [0.01, 1.0], "random_state": 0}],
        "output": {"dir": str(tmp_path / "out"), "plots": False},
    }
    stage = run(PipelineConfig.from_dict(values), progress=False)["methods"]["kernel_ridge"]
    assert stage["gamma"] == 1.5
    assert stage["search"]["gammas"] == [1.5]
    assert stage["alpha"] in (0.01, 1.0)
    assert stage["test_accuracy"] > 0.8


# --------------------------------------------------------------- the command line


def test_npt_ridge_command_scores_the_test_rows_as_the_estimator_does(tmp_path, capsys):
    import json

    from npt_dask.interface.cli import main

    x, _, _ = ridge_data(n=340)
    y = (np.sin(2 * x[:, 0]) > 0).astype(int)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    args = ["ridge", str(tmp_path / "d.npz"), "--rows", "0:300", "--test-rows", "300:340",
            "--kernel", "rbf", "--gamma", "0.3", "--alpha", "0.05", "--landmarks", "60",
            "--solver", "cg", "--tol", "1e-8", "--random-state", "0",
            "--checkpoint", str(tmp_path / "cg.npz"), "--predictions", str(tmp_path / "p.npy"),
            "--quiet"]  # fmt: skip
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    ref = KernelRidgeClassifier(alpha=0.05, kernel="rbf", gamma=0.3, landmarks=60, solver="cg",
                                tol=1e-8, random_state=0).fit(x[:300], y[:300])  # fmt: skip
    assert out["test_score"] == pytest.approx(ref.score(x[300:], y[300:]))
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), ref.predict(x[300:]))
    assert out["route"] == "cg"
    assert (tmp_path / "cg.npz").exists()
    assert main([*args[:-1], "--overwrite", "--alpha", "-1"]) == 2
    assert "The --alpha option of KernelRidgeClassifier must be" in capsys.readouterr().err


def test_the_certificate_is_lemma_5_against_the_landmarks_span():
    """Each sampled row's residual is sqrt(k(x, x) - k^T K_mm^-1 k) (dense numpy); the
    landmarks themselves have none; the summary is the landmark route's."""
    x, t, _ = ridge_data(n=300)
    est = KernelRidge(alpha=0.1, kernel="rbf", gamma=GAMMA, landmarks=40, random_state=0)
    est.fit(x, t)
    cert = est.certificate(x, rows=300, random_state=1)
    centres = x[est.landmarks_]
    k = pairwise_kernels(x, centres, metric="rbf", gamma=GAMMA)
    kmm = pairwise_kernels(centres, metric="rbf", gamma=GAMMA)
    ref = np.sqrt(np.maximum(1.0 - np.einsum("ij,ij->i", k, np.linalg.solve(kmm, k.T).T), 0))
    assert cert["rows_sampled"] == 300
    assert cert["mean"] == pytest.approx(ref.mean(), rel=1e-6)
    assert cert["max"] == pytest.approx(ref.max(), rel=1e-6)
    assert ref[est.landmarks_].max() < 1e-6
    with pytest.raises(InputError, match="every training row is a centre"):
        KernelRidge(alpha=0.1, kernel="rbf", gamma=GAMMA).fit(x, t).certificate(x)


def test_progress_from_python_is_labelled_by_the_estimator(capsys):
    x, t, _ = ridge_data(n=300)
    npt.KernelRidgeClassifier(alpha=0.3, kernel="rbf", gamma=GAMMA, landmarks=40,
                              solver="direct", progress=True).fit(x, t[:, 0] > 0)  # fmt: skip
    err = capsys.readouterr().err
    assert "KernelRidgeClassifier: moments pass" in err
    assert "npt ridge" not in err


def test_a_dataarrays_features_are_matched_by_name_not_position(tmp_path):
    """Lazy labelled input: the feature coordinate is recorded at fit and matched at
    predict (another order reordered, other names refused), also after save/load."""
    import xarray as xr

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    y = x[:, 0] - 2 * x[:, 2]
    X = xr.DataArray(da.from_array(x, chunks=50), dims=("sample", "feature"),
                     coords={"feature": ["a", "b", "c"]})  # fmt: skip
    est = KernelRidge(alpha=0.1, kernel="rbf", gamma=0.5).fit(X, y)
    assert list(est.feature_names_in_) == ["a", "b", "c"]
    want = np.asarray(est.predict(X[:20]))
    turned = X[:20].isel(feature=[2, 1, 0])
    np.testing.assert_allclose(np.asarray(est.predict(turned)), want, rtol=0, atol=1e-12)
    back = npt.load_ridge(est.save(tmp_path / "m.zarr"))
    np.testing.assert_allclose(np.asarray(back.predict(turned)), want, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="feature names"):
        est.predict(X[:20].assign_coords(feature=["a", "b", "z"]))
