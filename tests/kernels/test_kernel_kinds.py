"""Kernels by kind, a plan the solver obeys, errors that
carry their parameter.

Each kind of kernel is its own class; what differs by kind is said by the class
(``evaluated``, ``storable``, ``feature_local`` and its methods), and the graph code
dispatches on it once (:func:`npt_dask.engine.operator.block_source`,
:func:`npt_dask.npt.projector.rows_kind`).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.metrics.pairwise import rbf_kernel

import npt_dask as npt
from npt_dask.engine.operator import KernelBlocks, KernelOperator, PrecomputedBlocks, block_source
from npt_dask.errors import InputError, KernelParameterError
from npt_dask.interface.cli.messages import for_the_command_line
from npt_dask.kernels import (
    CallableKernel,
    KernelSpec,
    NamedKernel,
    PrecomputedKernel,
    make_kernel,
)
from npt_dask.npt.eigen import block_krylov_eigh, dense_eigh
from npt_dask.npt.params import check_param
from npt_dask.npt.planning import plan_fit, takes_explicit_path
from npt_dask.npt.projector import FeatureRows, KernelRows, rows_kind


def _block(a, b):
    return a @ b.T


@pytest.mark.parametrize(
    ("built", "kind", "precomputed", "storable", "feature_local"),
    [
        (KernelSpec("rbf", gamma=0.5), NamedKernel, False, True, True),
        (make_kernel("poly", degree=2), NamedKernel, False, True, True),
        (KernelSpec("precomputed"), PrecomputedKernel, True, True, False),
        (make_kernel("precomputed"), PrecomputedKernel, True, True, False),
        (make_kernel(_block), CallableKernel, False, False, False),
        (KernelSpec("callable", function=_block), CallableKernel, False, False, False),
    ],
)
def test_each_kind_is_its_own_class(built, kind, precomputed, storable, feature_local):
    assert type(built) is kind
    assert isinstance(built, KernelSpec)
    assert (built.precomputed, built.storable, built.feature_local) == (
        precomputed,
        storable,
        feature_local,
    )


def test_dict_round_trip_dispatches_on_the_name():
    for spec in (NamedKernel("laplacian", gamma=0.25), PrecomputedKernel()):
        back = KernelSpec.from_dict(spec.to_dict())
        assert back == spec
        assert type(back) is type(spec)
    with pytest.raises(KernelParameterError, match="cannot be rebuilt"):
        KernelSpec.from_dict(make_kernel(_block).to_dict())
    with pytest.raises(KernelParameterError, match="Unknown kernel spec keys"):
        KernelSpec.from_dict({"name": "precomputed", "gamma": 1.0})


def test_kinds_survive_pickling_for_the_workers():
    for spec in (NamedKernel("rbf", gamma=0.5), PrecomputedKernel()):
        back = pickle.loads(pickle.dumps(spec))
        assert back == spec
        assert type(back) is type(spec)


def test_matches_compares_parameters_within_tolerance():
    a = NamedKernel("rbf", gamma=0.1)
    assert a.matches(NamedKernel("rbf", gamma=0.1 * (1 + 1e-12)), rel_tol=1e-9)
    assert not a.matches(NamedKernel("rbf", gamma=0.1 * (1 + 1e-6)), rel_tol=1e-9)
    assert not a.matches(NamedKernel("laplacian", gamma=0.1), rel_tol=1e-9)
    assert not a.matches(PrecomputedKernel())
    assert PrecomputedKernel().matches(PrecomputedKernel())


def test_a_precomputed_kernel_has_nothing_to_evaluate():
    with pytest.raises(KernelParameterError, match="no function to evaluate"):
        PrecomputedKernel()(np.eye(2), np.eye(2))


def test_the_graph_code_dispatches_once_on_the_kind():
    import dask.array as da

    x = da.from_array(np.random.default_rng(0).normal(size=(30, 3)), chunks=(7, 3))
    k = da.from_array(rbf_kernel(np.asarray(x), gamma=0.3), chunks=(7, 30))
    assert isinstance(block_source(x, NamedKernel("rbf", gamma=0.3)), KernelBlocks)
    assert isinstance(block_source(k, PrecomputedKernel()), PrecomputedBlocks)
    assert isinstance(rows_kind(NamedKernel("rbf", gamma=0.3), 3), FeatureRows)
    assert isinstance(rows_kind(PrecomputedKernel(), 30), KernelRows)
    # both sources give the same operator (irregular chunks), to rounding
    v = np.random.default_rng(1).normal(size=(30, 4))
    evaluated = KernelOperator(x, NamedKernel("rbf", gamma=0.3), cache="recompute")
    given = KernelOperator(k, PrecomputedKernel(), cache="memory")
    np.testing.assert_allclose(evaluated.matmat(v), given.matmat(v), rtol=1e-12, atol=1e-12)


# --- the plan's explicit-path decision ----------------------------------------------------


def test_the_plan_decides_the_explicit_path_once():
    n, r = 1000, 300  # r >= 0.25 n: the solver's own rule would take the explicit path
    plan = plan_fit(n=n, d=5, n_components=r, row_chunks=[250] * 4, itemsize=8,
                    solver="krylov", memory_budget=2**30)  # fmt: skip
    assert plan.explicit == takes_explicit_path(n, r, plan.max_basis)
    assert plan.to_dict()["explicit"] == plan.explicit
    small = plan_fit(n=n, d=5, n_components=20, row_chunks=[250] * 4, itemsize=8,
                     solver="krylov", memory_budget=2**30)  # fmt: skip
    assert not small.explicit


@pytest.mark.parametrize("decided", [True, False])
def test_the_solver_obeys_the_explicit_path_it_is_given(decided):
    rng = np.random.default_rng(3)
    a = rng.normal(size=(120, 120))
    k = a @ a.T.copy() / 120
    r = 40  # 0.33 n: by its own rule the solver would take the explicit path
    assert takes_explicit_path(120, r, 120)
    out = block_krylov_eigh(lambda v: k @ v, 120, r, tol=1e-10, random_state=0,
                            explicit_path=decided)  # fmt: skip
    assert bool(out.info.get("dense", False)) is decided
    ref = dense_eigh(k, r)
    np.testing.assert_allclose(out.eigenvalues, ref.eigenvalues, rtol=1e-8)


# --- errors carry their parameter ---------------------------------------------------------


def test_parameter_errors_name_their_parameter_and_keep_it_through_pickling():
    with pytest.raises(InputError) as caught:
        check_param("tol", 2.0)
    assert caught.value.param == "tol"
    back = pickle.loads(pickle.dumps(caught.value))
    assert (type(back), back.param, str(back)) == (type(caught.value), "tol", str(caught.value))
    assert for_the_command_line(caught.value).startswith("The --tol option must be")


def test_the_command_line_spells_only_what_the_error_says_it_carries():
    plain = InputError("The 'tol' parameter must be small; pass resume=False.")
    assert for_the_command_line(plain) == str(plain)  # nothing carried: unchanged
    carried = InputError("pass resume=False.", spellings={"resume=False": "--overwrite"})
    assert for_the_command_line(carried) == "pass --overwrite."


def test_projecting_into_another_models_store_says_overwrite_on_the_command_line(tmp_path):
    x = np.random.default_rng(0).normal(size=(60, 3))
    model = npt.fit(x, gamma=0.5, n_components=3, random_state=0)
    other = npt.fit(x, gamma=0.7, n_components=3, random_state=0)
    out = str(tmp_path / "p.zarr")
    npt.project(model, x, out)
    with pytest.raises(npt.ProjectionError) as caught:
        npt.project(other, x, out)
    assert "resume=False" in str(caught.value)
    assert "--overwrite" in for_the_command_line(caught.value)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"name": "rbf", "function": _block}, "takes no function"),
        ({"name": "precomputed", "gamma": 1.0}, "takes no \\['gamma'\\]"),
        ({"name": "callable", "function": _block, "gamma": 1.0}, "kernel_params"),
    ],
)
def test_fields_of_another_kind_are_a_kernel_parameter_error(fields, match):
    with pytest.raises(KernelParameterError, match=match):
        KernelSpec(**fields)


# --- review findings ----------------------------------------------------------------------


def test_rpcholesky_stopping_early_plans_for_the_rows_it_chose():
    """Ten distinct rows repeated: RPCholesky stops at 10 of the 50 landmarks asked for;
    the fit is planned for those 10 (it once rechunked them by the plan for 50)."""
    rng = np.random.default_rng(0)
    distinct = rng.normal(size=(10, 4))
    x = distinct[rng.integers(0, 10, size=2000)]
    model = npt.fit(x, gamma=0.5, n_components=9, landmarks=50,
                    landmark_method="rpcholesky", random_state=0)  # fmt: skip
    assert model.n_samples == 10
    assert model.diagnostics.plan["n"] == 10
    # every row is one of the landmarks, r = 9 spans them: its residual is rounding
    assert model.diagnostics.landmarks["certificate"]["max"] < 1e-6


def test_eager_rows_come_back_without_a_scheduler():
    import xarray as xr

    from npt_dask.runtime.inputs import rows_like

    values = np.arange(12.0).reshape(6, 2)
    assert rows_like(np.zeros((6, 3)), values) is values
    eager = rows_like(xr.DataArray(np.zeros((6, 3)), dims=("sample", "f")), values)
    assert eager.data is values
    lazy = rows_like(
        xr.DataArray(np.zeros((6, 3)), dims=("sample", "f")).chunk({"sample": 4}), values
    )
    assert lazy.chunks == ((4, 2), (2,))
    np.testing.assert_array_equal(lazy.compute().data, values)


@pytest.mark.parametrize("center", [False, True])
def test_a_model_with_zero_chunks_saves_and_loads(tmp_path, center):
    """Uncentred models store all-zero row means, and a chunk of all-zero training rows is
    all zeros too; zarr skips writing such chunks unless told, and the load's check for
    missing chunks then called the store damaged."""
    x = np.random.default_rng(0).normal(size=(60, 3))
    x[:20] = 0.0  # the first stored chunk of training rows is all zeros
    model = npt.fit(x, kernel="linear", n_components=2, center=center, chunk_size=20)
    model.save(tmp_path / "m.zarr")
    back = npt.load(tmp_path / "m.zarr")
    np.testing.assert_array_equal(back.transform(x), model.transform(x))


def test_rpcholesky_stopping_early_names_the_rank_it_found():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10, 4))[rng.integers(0, 10, size=2000)]
    with pytest.raises(InputError, match=r"stopped at 10 of 50 landmarks.*at most 9 components"):
        npt.fit(x, gamma=0.5, n_components=20, landmarks=50,
                landmark_method="rpcholesky", random_state=0)  # fmt: skip


def test_the_callable_kind_is_there_without_importing_its_module():
    """A fresh interpreter that imports only the specs module makes a callable kernel (the
    kind's module is loaded by name, :func:`npt_dask.kernels.specs.kinds`)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from npt_dask.kernels.specs import make_kernel\n"
        "assert 'npt_dask.kernels.callables' not in sys.modules\n"
        "assert make_kernel(lambda a, b: a @ b.T).name == 'callable'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
