"""Checks from the table everywhere: the methods on coordinates,
the kernel ridge estimators, ``npt.project``, ``partial_fit`` and ``npt grow`` declare
their parameters as data beside them (tables of :class:`npt_dask.params.constraints.Param`),
and refuse each bad value the table generates with the table's one error, before any work.

The bad values come from the declarations (``Param.invalid_values``), as the fit's do
(tests/params/test_params.py); each is refused with exactly the class and message that the
table's own ``check`` gives.
"""

from __future__ import annotations

import inspect
from typing import Any

import dask.array as da
import numpy as np
import pytest

import npt_dask as npt
from npt_dask.errors import InputError, InputTypeError, KernelParameterError, NPTError
from npt_dask.interface import cli
from npt_dask.methods import (
    PCAL1,
    ChunkedLinearSVM,
    FisherDiscriminant,
    Ridge,
    RidgeClassifier,
    kernel_svm,
)
from npt_dask.methods.kfd import FISHER_PARAMS
from npt_dask.methods.ksvm import KERNEL_SVM_PARAMS, SVM_PARAMS, linear_svm
from npt_dask.methods.linear_ridge import LINEAR_RIDGE_PARAMS
from npt_dask.methods.pcal1 import PCAL1_PARAMS
from npt_dask.npt.growth import GROW_PARAMS
from npt_dask.npt.projection_store import PROJECT_PARAMS
from npt_dask.params.constraints import ArrayOf, Param, table_defaults
from npt_dask.ridge.params import RIDGE_CV_PARAMS, RIDGE_PARAMS
from npt_dask.ridge.search import SEARCH_PARAMS

ESTIMATORS: dict[type, tuple[Param, ...]] = {
    Ridge: LINEAR_RIDGE_PARAMS,
    RidgeClassifier: LINEAR_RIDGE_PARAMS,
    ChunkedLinearSVM: SVM_PARAMS,
    FisherDiscriminant: FISHER_PARAMS,
    PCAL1: PCAL1_PARAMS,
}
FUNCTIONS: dict[Any, tuple[Param, ...]] = {
    kernel_svm: KERNEL_SVM_PARAMS,
    npt.project: PROJECT_PARAMS,
    npt.NPTModel.partial_fit: GROW_PARAMS,
    npt.NonlinearProjection.partial_fit: GROW_PARAMS,
}


def _bad(tables: dict[Any, tuple[Param, ...]]) -> list[tuple[Any, Param, Any]]:
    return [(owner, p, v) for owner, table in tables.items() for p in table
            for v in p.invalid_values()]  # fmt: skip


def _id(case: tuple[Any, Param, Any]) -> str:
    owner, param, value = case
    return f"{getattr(owner, '__qualname__', owner)}-{param.name}={value!r}"


def _expected(param: Param, value: Any, owner: str | None) -> tuple[type, str]:
    with pytest.raises((ValueError, TypeError)) as info:
        param.check(value, owner)
    return type(info.value), str(info.value)


def _refused(run: Any) -> tuple[type, str]:
    with pytest.raises((ValueError, TypeError)) as info:
        run()
    assert isinstance(info.value, NPTError)
    return type(info.value), str(info.value)


def _unreadable(n: int = 40, d: int = 3) -> da.Array:
    """Lazy rows whose every read fails: a check made after any work would say so."""

    def fail(block: np.ndarray) -> np.ndarray:
        raise AssertionError("the data were read before the parameters were checked")

    return da.zeros((n, d), chunks=(20, d)).map_blocks(fail, dtype=float)


LABELS = np.repeat([0, 1], 20)
BAD_ESTIMATOR_VALUES = _bad(ESTIMATORS)


def test_every_table_yields_bad_values_of_every_kind():
    assert {p.name for _, p, _ in BAD_ESTIMATOR_VALUES} >= {"alpha", "C", "reg", "perturbation"}
    assert (Ridge, LINEAR_RIDGE_PARAMS[0], 0.0) in BAD_ESTIMATOR_VALUES  # an open bound
    values = [(p.name, v) for p in GROW_PARAMS for v in p.invalid_values()]
    assert ("residual_tol", -1.0) in values
    assert ("max_landmarks", 2.5) in values


@pytest.mark.parametrize("case", BAD_ESTIMATOR_VALUES, ids=[_id(c) for c in BAD_ESTIMATOR_VALUES])
def test_each_method_refuses_by_its_table_before_reading(case):
    cls, param, value = case
    est = cls(**{param.name: value})
    want = _expected(param, value, cls.__name__)
    assert want[1].startswith(f"The '{param.name}' parameter of {cls.__name__} must be")
    y = None if cls is PCAL1 else (np.arange(40.0) if cls is Ridge else LABELS)
    assert _refused(lambda: est.fit(_unreadable(), y)) == want


@pytest.mark.parametrize("cls", list(ESTIMATORS), ids=lambda c: c.__name__)
def test_each_methods_signature_is_its_table(cls):
    table = ESTIMATORS[cls]
    assert cls().get_params() == table_defaults(table)


def test_the_data_bounds_are_checked_in_the_tables_words():
    """Bounds only the data give (r directions, n_classes - 1) use the same entry."""
    y = np.random.default_rng(0).normal(size=(40, 3))
    _, message = _refused(lambda: PCAL1(n_components=4).fit(y))
    assert message.startswith("The 'n_components' parameter of PCAL1 must be an int in the ")
    assert "[1, 3]" in message
    assert "Y has r = 3 columns." in message
    _, message = _refused(lambda: FisherDiscriminant(n_components=2).fit(y, LABELS))
    assert "parameter of FisherDiscriminant must be an int in the range [1, 1]" in message
    assert "n_classes - 1 = 1" in message


# --- the kernel ridge estimators (RIDGE_PARAMS, SEARCH_PARAMS) ----------------------------

KERNEL_RIDGE: dict[type, tuple[Param, ...]] = {
    npt.KernelRidge: RIDGE_PARAMS,
    npt.KernelRidgeClassifier: RIDGE_PARAMS,
    npt.KernelRidgeCV: RIDGE_CV_PARAMS,
    npt.KernelRidgeClassifierCV: RIDGE_CV_PARAMS,
}
BAD_KERNEL_RIDGE_VALUES = _bad(KERNEL_RIDGE)


def test_the_kernel_ridge_tables_yield_bad_arrays():
    """The array parameters' entries are declared (finite, in range), so the table yields
    bad arrays as it yields bad numbers; the search's table is the CV estimators'."""
    assert set(SEARCH_PARAMS) <= set(RIDGE_CV_PARAMS)
    bad = {(cls, p.name, repr(v)) for cls, p, v in BAD_KERNEL_RIDGE_VALUES}
    for cls, name in [(npt.KernelRidge, "alpha"), (npt.KernelRidgeCV, "alphas"),
                      (npt.KernelRidgeClassifierCV, "gammas")]:  # fmt: skip
        for value in ([], [[1]], ["x"], [float("nan")], [float("inf")]):
            assert (cls, name, repr(value)) in bad, (cls, name, value)
    assert (npt.KernelRidge, "alpha", "[-1.0]") in bad
    assert (npt.KernelRidgeCV, "alphas", "[-1.0]") in bad
    assert (npt.KernelRidgeCV, "gammas", "[0.0]") in bad  # gammas > 0: an open bound
    assert all(isinstance(c, ArrayOf) for p in SEARCH_PARAMS[:2] for c in p.constraints[:1])


@pytest.mark.parametrize(
    "case", BAD_KERNEL_RIDGE_VALUES, ids=[_id(c) for c in BAD_KERNEL_RIDGE_VALUES]
)
def test_each_kernel_ridge_estimator_refuses_by_its_table_before_reading(case):
    cls, param, value = case
    est = cls(**{param.name: value})
    want = _expected(param, value, cls.__name__)
    if param.message is None:  # the kernel's own wording ("Unknown kernel") aside
        assert want[1].startswith(f"The '{param.name}' parameter of {cls.__name__} must be")
    y = np.arange(40.0) if issubclass(cls, npt.KernelRidge) else LABELS
    assert _refused(lambda: est.fit(_unreadable(), y)) == want


@pytest.mark.parametrize("cls", list(KERNEL_RIDGE), ids=lambda c: c.__name__)
def test_each_kernel_ridge_signature_is_its_table(cls):
    """The signature, in order and with its defaults, is the table: the CV estimators'
    explicit __init__ (scikit-learn's rule) cannot drift from KernelRidge's entries."""
    table = KERNEL_RIDGE[cls]
    assert list(inspect.signature(cls).parameters) == [p.name for p in table]
    assert cls().get_params() == table_defaults(table)


def test_an_array_and_a_number_share_one_wording():
    """``alpha=[-1]`` was "alpha must be finite and >= 0", ``alpha=
    ['x']`` and ``gammas=['x']`` a bare ValueError; each is now the table's one error."""
    x, y = np.random.default_rng(2).normal(size=(30, 2)), np.arange(30.0)

    def refused(est: Any) -> tuple[type, str]:
        return _refused(lambda: est.fit(x, y))

    number, array = refused(npt.KernelRidge(alpha=-1.0)), refused(npt.KernelRidge(alpha=[-1.0]))
    assert number[0] is array[0] is InputError
    assert number[1].replace("Got -1.0", "Got [-1.0]") == array[1]
    assert refused(npt.KernelRidge(alpha=["x"]))[0] is InputTypeError
    assert refused(npt.KernelRidgeCV(alphas=["x"]))[0] is InputTypeError
    assert refused(npt.KernelRidgeCV(alphas=[[1], [2, 3]]))[0] is InputTypeError
    assert refused(npt.KernelRidgeCV(gammas=["x"]))[0] is InputTypeError
    kind, message = refused(npt.KernelRidgeCV(gammas=[-1.0]))
    assert kind is KernelParameterError
    assert message.startswith("The 'gammas' parameter of KernelRidgeCV must be")


BAD_FUNCTION_VALUES = _bad(FUNCTIONS)


@pytest.fixture(scope="module")
def model():
    x = np.random.default_rng(1).normal(size=(40, 3))
    return npt.fit(x, gamma=0.5, n_components=None)


@pytest.mark.parametrize("case", BAD_FUNCTION_VALUES, ids=[_id(c) for c in BAD_FUNCTION_VALUES])
def test_each_function_refuses_by_its_table_before_any_work(case, model, tmp_path):
    function, param, value = case
    want = _expected(param, value, "kernel_svm" if function is kernel_svm else None)
    kwargs = {param.name: value}
    out = tmp_path / "p.zarr"
    calls = {
        kernel_svm: lambda: kernel_svm(**kwargs),
        npt.project: lambda: npt.project(model, _unreadable(), out, **kwargs),
        npt.NPTModel.partial_fit: lambda: model.partial_fit(_unreadable(), **kwargs),
        npt.NonlinearProjection.partial_fit: lambda: npt.NonlinearProjection(
            n_components=None
        ).partial_fit(_unreadable(), **kwargs),
    }
    assert _refused(calls[function]) == want
    assert not out.exists()


@pytest.mark.parametrize("function", list(FUNCTIONS), ids=lambda f: f.__qualname__)
def test_each_functions_signature_defaults_are_its_table(function):
    signature = inspect.signature(function).parameters
    for name, default in table_defaults(FUNCTIONS[function]).items():
        assert signature[name].default == default, name


def test_linear_svm_checks_its_solver_by_the_table():
    want = _expected(KERNEL_SVM_PARAMS[1], "sgd", "linear_svm")
    assert _refused(lambda: linear_svm("sgd", 1.0)) == want


def test_the_kernel_svm_table_holds_every_solver_the_pipeline_takes():
    """``"chunked"`` is a solver of the table: linear_svm builds ChunkedLinearSVM, and a
    pipeline's ksvm stage refuses a solver the table lacks by the table, before any work."""
    from npt_dask.interface.pipeline.methods import check_params

    assert isinstance(linear_svm("chunked", 2.0, epochs=3), ChunkedLinearSVM)
    check_params("ksvm", {"solver": "chunked", "C": 3})
    want = _expected(KERNEL_SVM_PARAMS[1], "sgd", "[[methods]] ksvm")
    assert _refused(lambda: check_params("ksvm", {"solver": "sgd"})) == want


def test_the_pair_pass_checks_its_cache_by_the_fit_table():
    from npt_dask.engine.operator import KernelOperator
    from npt_dask.kernels import make_kernel
    from npt_dask.npt.params import fit_param

    x = da.ones((10, 2), chunks=5)
    want = _expected(fit_param("cache"), "sometimes", "KernelOperator")
    call = lambda: KernelOperator(x, make_kernel("rbf", gamma=1.0), cache="sometimes")  # noqa: E731
    assert _refused(call) == want


GROW_BAD = [(p, v) for p in GROW_PARAMS for v in p.invalid_values() if p.parse is not None]


@pytest.mark.parametrize(("param", "value"), GROW_BAD, ids=[f"{p.name}={v!r}" for p, v in GROW_BAD])
def test_npt_grow_refuses_by_the_table_before_reading_the_model(param, value, tmp_path, capsys):
    """The command line parses with the table's parser and refuses in its flags' words;
    the model path does not exist: a check made after reading it would say that instead."""
    data = tmp_path / "x.npy"
    np.save(data, np.zeros((5, 3)))
    args = ["grow", str(tmp_path / "none.zarr"), str(data), "--out", str(tmp_path / "g.zarr")]
    assert cli.main([*args, param.flag, str(value)]) == 2
    _, message = _expected(param, param.parse(str(value)), None)  # type: ignore[misc]
    words = message.replace(f"The '{param.name}' parameter", f"The {param.flag} option")
    assert capsys.readouterr().err.strip() == f"npt grow: error: {words}"
