"""Each fixed choice and default is declared once.

The fixed choices of a fit are ``Literal`` types in :mod:`npt_dask.npt.params`;
the table's constraints, ``FitParams``' annotations and ``npt.fit``'s signature
all name the same type, so a new choice is added in one place.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import typing
from pathlib import Path

import numpy as np
import pytest

import npt_dask as npt
from npt_dask.npt import params
from npt_dask.npt.params import PARAMS, FitParams
from npt_dask.params.constraints import Options

CHOICES = {
    "solver": (params.Solver, params.SolverAlias),
    "cache": (params.Cache,),
    "basis": (params.Basis,),
    "precision": (params.Precision,),
    "landmark_method": (params.LandmarkMethod,),
    "on_negative": (params.OnNegative,),
}


def _literal_values(annotation: object) -> set[object]:
    """The strings a ``Literal`` (or a union of Literals and None) allows."""
    if typing.get_origin(annotation) is typing.Literal:
        return set(typing.get_args(annotation))
    return set().union(*(_literal_values(a) for a in typing.get_args(annotation)))


@pytest.mark.parametrize("name", sorted(CHOICES))
def test_table_fields_and_signature_share_one_literal(name):
    declared = set().union(*(typing.get_args(t) for t in CHOICES[name]))
    (param,) = [p for p in PARAMS if p.name == name]
    options = {v for c in param.constraints if isinstance(c, Options) for v in c.values}
    assert options - {None} == declared
    hints = typing.get_type_hints(FitParams)
    assert _literal_values(hints[name]) == declared
    signature = typing.get_type_hints(npt.fit)
    assert _literal_values(signature[name]) == declared


def test_solver_aliases_are_the_alias_literal():
    assert set(params.SOLVER_ALIASES) == set(typing.get_args(params.SolverAlias))
    assert FitParams(solver="arpack").solver == "krylov"


def test_defaults_read_from_the_table():
    from npt_dask.npt.eigen import select_eigenpairs

    rtol = inspect.signature(select_eigenpairs).parameters["rtol"].default
    assert rtol == params.DEFAULT_RTOL["float64"]
    (tol,) = [p for p in PARAMS if p.name == "tol"]
    assert f"{params.DEFAULT_TOL['float32']:g}" in tol.help


def test_float32_fit_drops_eigenvalues_below_the_float32_rtol():
    """The float32 default (1e-6) applies: a rank-2 kernel keeps 2 components, not noise."""
    x = np.random.default_rng(0).normal(size=(40, 2)).astype(np.float32)
    model = npt.fit(x, "linear", center=False)
    assert model.n_components == 2
    assert model.eigenvalues[-1] > params.DEFAULT_RTOL["float32"] * model.eigenvalues[0]


def _fit_params_keywords(function: typing.Callable[..., object]) -> list[tuple[str, str]]:
    """``(keyword, value)`` of the ``FitParams(...)`` call in ``function``'s source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    calls = [
        node for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "FitParams"
    ]  # fmt: skip
    assert len(calls) == 1, "fit builds one FitParams"
    return [(str(k.arg), ast.unparse(k.value)) for k in calls[0].keywords]


def test_fit_signature_is_the_table_and_passes_every_parameter_on():
    """``npt.fit`` builds its FitParams explicitly from its own arguments (a reader can
    follow each one), so its signature must hold exactly the table's
    names and the call must pass each, under its own name (a parameter added to the table
    and not to the signature or the call, or the reverse, fails here)."""
    signature = list(inspect.signature(npt.fit).parameters)
    assert set(signature) == {"X", "labels", "targets", *params.names()}
    assert _fit_params_keywords(npt.fit) == [(n, n) for n in params.names()]

    def forgetful(kernel: str = "rbf", gamma: float | None = None) -> FitParams:
        return FitParams(kernel=kernel, degree=gamma)  # gamma not passed on: caught

    assert _fit_params_keywords(forgetful) == [("kernel", "kernel"), ("degree", "gamma")]
    x = np.random.default_rng(0).normal(size=(40, 3))
    model = npt.fit(x, gamma=0.3, n_components=4, tol=1e-9, random_state=0, center=False)
    assert (model.kernel.gamma, model.n_components, model.center) == (0.3, 4, False)
    assert model.diagnostics.tol == 1e-9


# --- one label check ----------------------------------------------------------------------

METHODS = Path(npt.__file__).parent / "methods"


def _label_readers() -> dict[str, tuple[bool, bool]]:
    """For each module of ``npt_dask/methods``: whether it reads labels (``as_labels``)
    and whether it checks them by the one check (``class_labels``, or ``class_index``:
    the same check, with each row's class position)."""
    out = {}
    for path in sorted(METHODS.glob("*.py")):
        calls = {
            ast.unparse(node.func).rpartition(".")[2]
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call)
        }
        out[path.name] = ("as_labels" in calls, bool({"class_labels", "class_index"} & calls))
    return out


def test_every_method_that_reads_labels_checks_them_in_one_place():
    """A method reading class labels refuses bad ones by ``labels.class_labels`` (or
    ``labels.class_index``, the same check), and
    none counts classes itself (``np.unique``: the check's own decision)."""
    readers = _label_readers()
    assert {"alignment.py", "kfd.py"} <= {name for name, (reads, _) in readers.items() if reads}
    assert [name for name, (reads, checks) in readers.items() if reads and not checks] == []
    counting = [p.name for p in sorted(METHODS.glob("*.py")) if "np.unique(" in p.read_text()]
    assert counting == []


@pytest.mark.parametrize(
    "labels",
    [
        np.zeros(40, dtype=int),  # one class
        np.where(np.arange(40) < 20, 0.5, 1.5),  # non-integer floats: continuous targets
        np.where(np.arange(40) < 20, 0.0, np.nan),  # NaN
    ],
    ids=["one-class", "continuous", "nan"],
)
def test_the_same_bad_labels_get_the_same_error(labels):
    """Kernel-target alignment refuses bad labels as the other label readers do (Fisher's
    discriminant here): the same class and words, only the owner named differs."""
    from npt_dask.methods import FisherDiscriminant, kernel_target_alignment
    from npt_dask.runtime.labels import class_labels

    x = np.random.default_rng(0).normal(size=(40, 3))
    refused = []
    for run, owner in [
        (lambda: kernel_target_alignment(x, labels, "rbf", gamma=0.5), "Kernel-target alignment"),
        (lambda: FisherDiscriminant().fit(x, labels), "FisherDiscriminant"),
        (lambda: class_labels(labels, name="y", owner="OWNER"), "OWNER"),
    ]:
        with pytest.raises(npt.InputError) as info:
            run()
        refused.append((type(info.value), str(info.value).replace(owner, "OWNER")))
    assert refused[0] == refused[1] == refused[2]


def test_solver_help_states_the_auto_rule_of_the_plan():
    """The table's solver help (``npt fit --help``) says when ``solver="auto"`` takes the
    dense solver, with the plan's own numbers (planning decides; params cannot import it)."""
    from npt_dask.npt.planning import AUTO_DENSE_FRACTION, DENSE_MAX_SAMPLES

    (solver,) = [p for p in PARAMS if p.name == "solver"]
    assert "n_components=None" in solver.help
    assert f"n <= {DENSE_MAX_SAMPLES:,} rows" in solver.help
    assert f"n_components >= {AUTO_DENSE_FRACTION:g} n" in solver.help
    assert "fits memory_budget" in solver.help


# --- every table, its owner's signature and docstring --------------------------------------


def _owners() -> list[typing.Any]:
    """``(name, estimator class or function, its table)`` for every owner of a table."""
    from npt_dask import methods
    from npt_dask.methods import kfd, ksvm, linear_ridge, pcal1
    from npt_dask.ridge import params as kernel_ridge

    fit_only = {"block_size", "max_basis", "basis", "max_passes", "on_negative", "start"}
    fit_only.add("progress")  # npt.fit's; the estimator keeps their defaults
    fit_table = (*(p for p in PARAMS if p.name not in fit_only), *params.ESTIMATOR_PARAMS)
    ridge, ridge_cv = kernel_ridge.RIDGE_PARAMS, kernel_ridge.RIDGE_CV_PARAMS
    owners = [
        (npt.NonlinearProjection, fit_table),
        (npt.KernelRidge, ridge),
        (npt.KernelRidgeClassifier, ridge),
        (npt.KernelRidgeCV, ridge_cv),
        (npt.KernelRidgeClassifierCV, ridge_cv),
        (methods.Ridge, linear_ridge.LINEAR_RIDGE_PARAMS),
        (methods.RidgeClassifier, linear_ridge.LINEAR_RIDGE_PARAMS),
        (methods.ChunkedLinearSVM, ksvm.SVM_PARAMS),
        (methods.FisherDiscriminant, kfd.FISHER_PARAMS),
        (methods.PCAL1, pcal1.PCAL1_PARAMS),
        (methods.kernel_svm, ksvm.KERNEL_SVM_PARAMS),
        (npt.project, npt.npt.projection_store.PROJECT_PARAMS),
    ]
    return [pytest.param(o.__name__, o, table, id=o.__name__) for o, table in owners]  # type: ignore[attr-defined]


def _documented(owner: object) -> dict[str, str]:
    """``{name: its type line}`` of the Parameters section of ``owner``'s numpydoc
    docstring (``a, b : float`` documents both; ``**kwargs`` is left out)."""
    lines = (inspect.getdoc(owner) or "").splitlines()
    if "Parameters" not in lines:
        return {}
    start = lines.index("Parameters") + 2
    found: dict[str, str] = {}
    for i, line in enumerate(lines[start:], start):
        if i + 1 < len(lines) and set(lines[i + 1]) == {"-"}:
            break  # the next section's header
        if line and not line[0].isspace():
            head, _, kind = line.partition(" : ")
            for name in head.split(","):
                if name.strip() and not name.strip().startswith("*"):
                    found[name.strip()] = kind
    return found


def _documented_default(kind: str) -> tuple[bool, object]:
    """``(True, value)`` when a type line says ``default <a Python literal>``."""
    _, said, text = kind.rpartition("default ")
    try:
        return bool(said), ast.literal_eval(text.strip().strip("`"))
    except (ValueError, SyntaxError):
        return False, None


def _signature_defaults(owner: object) -> dict[str, object]:
    """``{name: default}`` of ``owner``'s signature (an estimator's ``__init__``), but
    ``*args``/``**kwargs``."""
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    signature = inspect.signature(owner)  # type: ignore[arg-type]
    return {n: p.default for n, p in signature.parameters.items() if p.kind not in kinds}


def _plain(value: object) -> object:
    return str(value) if isinstance(value, str) else value  # DEFAULT_KERNEL is "rbf"


@pytest.mark.parametrize(("name", "owner", "table"), _owners())
def test_every_table_entry_is_in_its_owners_signature_with_its_default(name, owner, table):
    signature = _signature_defaults(owner)
    missing = [p.name for p in table if p.name not in signature]
    assert not missing, f"{name}'s signature lacks {missing}, which its table declares"
    wrong = {
        p.name: (signature[p.name], p.default)
        for p in table
        if not np.array_equal(_plain(signature[p.name]), _plain(p.default))
    }
    assert not wrong, f"{name}'s signature defaults differ from its table's: {wrong}"
    if isinstance(owner, type):  # an estimator's parameters are its table's, no more
        extra = sorted(set(signature) - {p.name for p in table})
        assert not extra, f"{name}'s signature has {extra}, which its table does not declare"


@pytest.mark.parametrize(("name", "owner", "table"), _owners())
def test_every_table_entry_is_in_its_owners_docstring(name, owner, table):
    documented = _documented(owner)
    missing = [p.name for p in table if p.name not in documented]
    assert not missing, f"{name}'s docstring Parameters lack {missing}"
    undeclared = sorted(set(documented) - set(_signature_defaults(owner)))
    assert not undeclared, f"{name}'s docstring documents {undeclared}, not parameters"
    if isinstance(owner, type):
        extra = sorted(set(documented) - {p.name for p in table})
        assert not extra, f"{name}'s docstring documents {extra}, which its table lacks"
    for p in table:
        said, value = _documented_default(documented[p.name])
        assert not said or np.array_equal(value, _plain(p.default)), (
            f"{name}'s docstring says {p.name} defaults to {value!r}; its table: {p.default!r}"
        )


def test_the_docstring_check_sees_a_missing_parameter():
    class Documented:
        """An estimator.

        Parameters
        ----------
        alpha : float, default 1.0
            The ridge.
        tol, max_iter : float
            Stopping.

        Attributes
        ----------
        beta : float
        """

        def __init__(self, alpha: float = 1.0, tol: float = 1e-3, max_iter: int = 5) -> None:
            pass

    documented = _documented(Documented)
    assert documented == {"alpha": "float, default 1.0", "tol": "float", "max_iter": "float"}
    assert _documented_default("float, default 1.0") == (True, 1.0)
    Documented.__doc__ = (Documented.__doc__ or "").replace("tol, max_iter", "tol")
    assert "max_iter" not in _documented(Documented)
