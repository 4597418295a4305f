"""Every public route on device-backed dask arrays, equal to the same route on numpy.

One parametrised set (``xp_backend``): the strict CuPy stand-in (``tests/standin``) in
every run, real CuPy where CUDA is (marker ``gpu``: ``pytest tests/gpu -m gpu``). Rows are
``da.from_array(cupy.asarray(x), chunks=..., asarray=False)``: 400 rows in irregular chunks
(100, 100, 90, 110), 100 test rows in (40, 35, 25). Each route's result is compared with
the same call on the numpy rows: within 1e-10 relative in float64 (:data:`F64`, relative to
the largest value), within 1e-4 of the largest value in float32 (:data:`F32`: float32 kernel
blocks against the float64 route), CG routes within 1e-8 (their tolerance's reach, 1e-10 on
the normal equations). Lazy per-row outputs must stay device-backed (``_meta`` a
``cupy.ndarray``) until computed; the fitted models' small arrays are numpy.

On the stand-in each device call is metered (``cupy._standin.count``): host→device and
device→host copies, synchronisations, Fortran copies and the live-bytes peak, by route and
phase, in :data:`COUNTS` (``NPT_STANDIN_SURVEY=path.json`` writes them at the end).

The last section states the device's cost as tests (stand-in only): the model moved to the
device once per call, the rows once per fit, no Fortran copies of factors, each route's
device peak within its plan's ``device_bytes``.

A route that fails today is marked ``xfail(strict=True)`` with where it stops, so the
suite stays green and a fix turns the mark into a failure that says to remove it.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import dask.array as da
import numpy as np
import pytest
import scipy.sparse
import xarray as xr
from sklearn.metrics.pairwise import rbf_kernel

import npt_dask as npt
from npt_dask.methods import (
    PCAL1,
    ChunkedLinearSVM,
    FisherDiscriminant,
    Ridge,
    RidgeClassifier,
    alignment_scores,
    class_scatter,
    explained_variance_ratio,
    kernel_svm,
    l1_dispersion,
    ridge_moments,
)

GAMMA = 0.5
F64 = 1e-10
F32 = 1e-4
CG = 1e-8
CHUNKS = (100, 100, 90, 110)
Z_CHUNKS = (40, 35, 25)
COUNTS: dict[str, dict[str, dict[str, int]]] = {}
"""Stand-in counts: test id -> phase -> counter (h2d, d2h, syncs, fortran_copies, peak ...)."""


def fails(where: str) -> Any:
    """A route that does not work on the device today: ``where`` it stops (file:line)."""
    return pytest.mark.xfail(strict=True, reason=f"stops at {where}")


# --- data and helpers ----------------------------------------------------------------------


@functools.cache
def _data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5))
    z = rng.normal(size=(100, 5))
    t = np.sin(x[:, 0]) + 0.1 * rng.normal(size=400)
    labels = np.digitize(x[:, 0] + 0.3 * x[:, 1], [-0.5, 0.5])  # 3 classes
    z_labels = np.digitize(z[:, 0] + 0.3 * z[:, 1], [-0.5, 0.5])
    weights = rng.uniform(0.5, 2.0, size=400)
    return {"x": x, "z": z, "t": t, "y": labels, "z_labels": z_labels, "w": weights}


def _chunks(a: np.ndarray, rows: tuple[int, ...]) -> tuple[Any, ...]:
    return (rows, *a.shape[1:])


def dev(cupy: ModuleType, a: np.ndarray, rows: tuple[int, ...] = CHUNKS) -> da.Array:
    """``a`` as a dask array of device chunks."""
    return da.from_array(cupy.asarray(a), chunks=_chunks(a, rows), asarray=False)


def host(a: np.ndarray, rows: tuple[int, ...] = CHUNKS) -> da.Array:
    return da.from_array(a, chunks=_chunks(a, rows))


def on_device(out: Any, cupy: ModuleType) -> bool:
    """A lazy output whose chunks are device arrays."""
    data = out.data if isinstance(out, xr.DataArray) else out
    return isinstance(data, da.Array) and isinstance(data._meta, cupy.ndarray)


def to_numpy(a: Any) -> np.ndarray:
    if isinstance(a, xr.DataArray):
        a = a.data
    if isinstance(a, da.Array):
        a = a.compute()
    if hasattr(a, "get") and not isinstance(a, np.ndarray | dict):
        a = a.get()
    return np.asarray(a)


def rel(got: Any, want: Any) -> float:
    got, want = to_numpy(got), to_numpy(want)
    assert got.shape == want.shape
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-300))


def gram(y: Any) -> np.ndarray:
    """Coordinates up to signs and rotations within equal eigenvalues: ``Y Y^T``."""
    y = to_numpy(y).astype(np.float64)
    return y @ y.T


@pytest.fixture
def cupy(xp_backend: ModuleType) -> ModuleType:
    return xp_backend


@pytest.fixture
def meter(request: Any, cupy: ModuleType) -> Any:
    """``with meter("fit"):`` counts what the block moves (stand-in only) into COUNTS."""
    record = COUNTS.setdefault(request.node.name, {})
    if hasattr(cupy, "_standin"):
        gc.collect()  # once a test: garbage of earlier tests dies before the first window

    @contextlib.contextmanager
    def count(phase: str) -> Iterator[None]:
        if not hasattr(cupy, "_standin"):  # real CuPy: nothing to count
            yield
            return
        with cupy._standin.count(collect=False) as seen:
            try:
                yield
            finally:
                record[phase] = {"h2d": seen.h2d, "h2d_bytes": seen.h2d_bytes,
                                 "d2h": seen.d2h, "d2h_bytes": seen.d2h_bytes,
                                 "syncs": seen.syncs, "fortran_copies": seen.fortran_copies,
                                 "peak": seen.peak, "done": False}  # fmt: skip
        record[phase]["done"] = True

    return count


# --- the Nonlinear Projection Trick --------------------------------------------------------

KEEP = {"chunk_size": None}  # fits keep the rows' own (irregular) chunks
FITS = {
    "dense": {**KEEP, "solver": "dense", "n_components": 8},
    "krylov": {**KEEP, "solver": "krylov", "n_components": 8, "random_state": 0},
    "krylov-recompute": {**KEEP, "solver": "krylov", "n_components": 8, "random_state": 0,
                         "cache": "recompute"},
    "krylov-chunked-basis": {**KEEP, "solver": "krylov", "n_components": 4, "random_state": 0,
                             "basis": "chunked"},
    "landmarks-uniform": {**KEEP, "landmarks": 60, "landmark_method": "uniform",
                          "random_state": 0},
    "landmarks-rpcholesky": {**KEEP, "landmarks": 60, "landmark_method": "rpcholesky",
                             "random_state": 0},
}  # fmt: skip
FIT_FAILS: dict[str, str] = {}


def _routes(table: dict[str, Any], failing: dict[str, str]) -> list[Any]:
    """The table's routes, those in ``failing`` marked with where they stop."""
    return [pytest.param(k, marks=fails(failing[k])) if k in failing else k for k in table]


@functools.cache
def _npt_reference(name: str) -> tuple[Any, np.ndarray, np.ndarray]:
    """The numpy fit of ``FITS[name]``, its test coordinates and residuals. The chunked
    basis is the reference's one exception: on the host it takes ten times the driver
    basis's time at this size (12 s against 1 s for the same 10 passes), for the same
    eigenpairs (1e-15 apart), so the driver basis stands in for it."""
    d = _data()
    params = {**FITS[name], "basis": "driver"} if name == "krylov-chunked-basis" else FITS[name]
    model = npt.fit(host(d["x"]), "rbf", gamma=GAMMA, **params)
    z = host(d["z"], Z_CHUNKS)
    return model, to_numpy(model.transform(z)), to_numpy(model.residual(z))


@pytest.mark.parametrize("name", _routes(FITS, FIT_FAILS))
def test_fit_transform_residual(cupy, meter, name):
    d = _data()
    want, want_y, want_res = _npt_reference(name)
    with meter("fit"):
        got = npt.fit(dev(cupy, d["x"]), "rbf", gamma=GAMMA, **FITS[name])
    assert type(got.eigenvalues) is np.ndarray  # the model's small arrays are numpy
    assert rel(got.eigenvalues, want.eigenvalues) < F64
    y, res = got.transform(dev(cupy, d["z"], Z_CHUNKS)), got.residual(dev(cupy, d["z"], Z_CHUNKS))
    assert on_device(y, cupy)
    assert on_device(res, cupy)
    with meter("transform"):
        y = to_numpy(y)
    assert rel(gram(y), gram(want_y)) < F64
    assert rel(res, want_res) < F64


def test_float32_fit_is_within_its_bound(cupy, meter):
    d = _data()
    want, want_y, _ = _npt_reference("krylov")
    with meter("fit"):
        got = npt.fit(dev(cupy, d["x"].astype(np.float32)), "rbf", gamma=GAMMA,
                      **FITS["krylov"])  # fmt: skip
    assert rel(got.eigenvalues, want.eigenvalues) < F32
    y = got.transform(dev(cupy, d["z"].astype(np.float32), Z_CHUNKS))
    assert on_device(y, cupy)
    assert rel(gram(y), gram(want_y)) < F32


@pytest.mark.parametrize("basis", ["driver", "chunked"])
def test_fit_from_a_start(cupy, meter, basis):
    d = _data()
    first = npt.fit(host(d["x"][:200], (100, 100)), "rbf", gamma=GAMMA, n_components=4)
    common = {**KEEP, "n_components": 4, "start": first, "basis": basis, "solver": "krylov",
              "random_state": 0}  # fmt: skip
    with meter("fit"):
        got = npt.fit(dev(cupy, d["x"]), "rbf", gamma=GAMMA, **common)
    want = npt.fit(host(d["x"]), "rbf", gamma=GAMMA, **common)
    assert rel(got.eigenvalues, want.eigenvalues) < F64


@pytest.mark.parametrize(
    ("kind", "where"),
    [
        ("labels", "host"),
        ("labels", "device"),
        ("targets", "host"),
        ("targets", "device"),
    ],
)
def test_fit_moments(cupy, meter, kind, where):
    d = _data()
    values = d["y"] if kind == "labels" else d["t"][:, None]
    common = {**KEEP, "landmarks": 60, "random_state": 0}
    given = cupy.asarray(values) if where == "device" else values
    with meter("fit"):
        got = npt.fit(dev(cupy, d["x"]), "rbf", gamma=GAMMA, **common, **{kind: given})
    want = npt.fit(host(d["x"]), "rbf", gamma=GAMMA, **common, **{kind: values})
    for name in ("n", "t_sum", "t_norm2"):
        assert rel(getattr(got.moments, name), getattr(want.moments, name)) < F64
    assert rel(_invariants(got.moments), _invariants(want.moments)) < F64


def _invariants(m: Any) -> np.ndarray:
    """What the moments say whatever the coordinates' signs and rotation: the spectrum of
    ``Y^T Y``, and ``T^T Y (Y^T Y + I)^{-1} Y^T T`` (the ridge fit's explained part)."""
    gram, cross = to_numpy(m.gram), to_numpy(m.cross)
    inner = cross.T @ np.linalg.solve(gram + np.eye(len(gram)), cross)
    return np.concatenate([np.linalg.eigvalsh(gram), inner.ravel()])


@pytest.mark.parametrize("name", _routes(FITS, FIT_FAILS))
def test_fit_with_device_gpu(cupy, meter, name):
    """``npt.fit(numpy rows, device="gpu")``: the rows fitted on the device, the model and a
    numpy transform equal to the CPU fit."""
    d = _data()
    params = {**FITS[name], "chunk_size": 100}
    want = npt.fit(d["x"], "rbf", gamma=GAMMA, **params)
    with meter("fit"):
        got = npt.fit(d["x"], "rbf", gamma=GAMMA, device="gpu", **params)
    assert isinstance(got.x_train._meta, cupy.ndarray)  # fitted there
    assert type(got.eigenvalues) is np.ndarray
    assert rel(got.eigenvalues, want.eigenvalues) < F64
    y = got.transform(d["z"])
    assert type(y) is np.ndarray
    assert rel(gram(y), gram(want.transform(d["z"]))) < F64


def test_nonlinear_projection_with_device_gpu(cupy, meter):
    """``NonlinearProjection(device="gpu")``: fit and transform on the device, numpy in and
    numpy out, equal to the same estimator on the CPU."""
    d = _data()
    params = {"kernel": "rbf", "gamma": GAMMA, "n_components": 8, "chunk_size": 100,
              "eigen_solver": "arpack", "random_state": 0}  # fmt: skip
    want = npt.NonlinearProjection(**params)
    want_train = want.fit_transform(d["x"])
    with meter("fit"):
        got = npt.NonlinearProjection(**params, device="gpu")
        train = got.fit_transform(d["x"])
    assert isinstance(got.model_.x_train._meta, cupy.ndarray)
    with meter("transform"):
        y = got.transform(d["z"])
    assert type(train) is np.ndarray
    assert type(y) is np.ndarray
    assert rel(gram(train), gram(want_train)) < F64
    assert rel(gram(y), gram(want.transform(d["z"]))) < F64
    assert got.get_params()["device"] == "gpu"


def test_transform_past_the_rank_pads_on_the_device(cupy, meter):
    d = _data()
    want = _npt_reference("landmarks-uniform")[0]
    got = npt.fit(dev(cupy, d["x"]), "rbf", gamma=GAMMA, **FITS["landmarks-uniform"])
    y = got.transform(dev(cupy, d["z"], Z_CHUNKS), columns=70)
    assert on_device(y, cupy)
    with meter("transform"):
        y = to_numpy(y)
    assert y.shape == (100, 70)
    assert not y[:, 60:].any()
    assert rel(gram(y), gram(want.transform(host(d["z"], Z_CHUNKS), columns=70))) < F64


def test_project_onto(cupy, meter):
    d = _data()
    model = _npt_reference("dense")[0]
    beta = model.coordinates_of(np.linspace(-1, 1, 400))
    out = model.project_onto(dev(cupy, d["z"], Z_CHUNKS), beta)
    assert on_device(out, cupy)
    with meter("project_onto"):
        out = to_numpy(out)
    assert rel(out, model.project_onto(host(d["z"], Z_CHUNKS), beta)) < F64


def test_project_to_zarr(cupy, meter, tmp_path):
    d = _data()
    model = _npt_reference("dense")[0]
    with meter("project"):
        got = npt.project(model, dev(cupy, d["z"], Z_CHUNKS), tmp_path / "gpu.zarr",
                          progress=False)  # fmt: skip
    want = npt.project(model, host(d["z"], Z_CHUNKS), tmp_path / "cpu.zarr", progress=False)
    for name in ("coordinates", "residual"):
        assert rel(got[name].values, want[name].values) < F64


def test_project_to_zarr_resumes_across_namespaces(cupy, tmp_path):
    """A store written from device rows (digests hashed there) is checked with host rows,
    and one written from host rows with device rows; changed rows are refused by either."""
    d = _data()
    model = _npt_reference("dense")[0]
    changed = d["z"].copy()
    changed[45, 0] += 1e-9  # chunk 1 of (40, 40, 20)
    for first, second in ((dev, host), (host, dev)):
        out = tmp_path / f"{first.__name__}.zarr"

        def project(rows: Any, make: Any = None, out: Any = out) -> Any:
            given = make(cupy, rows, Z_CHUNKS) if make is dev else host(rows, Z_CHUNKS)
            return npt.project(model, given, out, chunk_size=40, progress=False)

        want = project(d["z"], first)["coordinates"].values
        again = project(d["z"], second)  # a finished store: every chunk checked again
        np.testing.assert_array_equal(again["coordinates"].values, want)
        with pytest.raises(npt.errors.ProjectionError, match="chunk 1 differ"):
            project(changed, second)


def test_a_device_written_store_resumes_with_sparse_host_rows(cupy, tmp_path):
    """The digests of a store written from device rows are of the rows' values: sparse
    host rows of the same values resume it, changed ones are refused."""
    d = _data()
    model = _npt_reference("dense")[0]
    out = tmp_path / "gpu.zarr"

    def sparse(z: np.ndarray) -> da.Array:
        return host(z, (40, 40, 20)).map_blocks(scipy.sparse.csr_matrix)

    want = npt.project(model, dev(cupy, d["z"], Z_CHUNKS), out, chunk_size=40, progress=False)
    again = npt.project(model, sparse(d["z"]), out, chunk_size=40, progress=False)
    np.testing.assert_array_equal(again["coordinates"].values, want["coordinates"].values)
    changed = d["z"].copy()
    changed[45, 0] += 1e-9
    with pytest.raises(npt.errors.ProjectionError, match="chunk 1 differ"):
        npt.project(model, sparse(changed), out, chunk_size=40, progress=False)


@pytest.mark.parametrize("what", ["rows", "kernel"])
def test_device_projections_refuse_what_numpy_refuses(cupy, tmp_path, what):
    """Non-finite rows or kernel values: the lazy transform and npt.project on a device
    raise numpy's error (one verdict a chunk, worded again on the error path)."""
    d = _data()
    z = d["z"].copy()
    if what == "rows":
        model = _npt_reference("dense")[0]
        z[50, 2] = np.inf
    else:  # the polynomial kernel overflows float64 on these rows (of one chunk only:
        model = npt.fit(host(d["x"]), kernel="polynomial", n_components=2, **KEEP)
        z[50:60] *= 1e120  # the error names its rows, whichever chunk's task runs first)

    def error(call: Any) -> tuple[type, str]:
        with pytest.raises(npt.errors.InputError) as caught:
            call()
        return type(caught.value), str(caught.value)

    want = error(lambda: model.transform(host(z, Z_CHUNKS)).compute())
    assert error(lambda: model.transform(dev(cupy, z, Z_CHUNKS)).compute()) == want
    want = error(lambda: npt.project(model, host(z, Z_CHUNKS), tmp_path / "cpu.zarr"))
    got = error(lambda: npt.project(model, dev(cupy, z, Z_CHUNKS), tmp_path / "gpu.zarr"))
    if what == "rows":  # numpy's chunks are checked as the eager check reads them, whose
        want = (want[0], want[1].replace("Input", "data"))  # own words the device gives
    assert got == want


def test_the_other_projections_stay_on_the_device(cupy, meter):
    """energy_split, transform_with_residual and residual of device rows: device-backed,
    equal to numpy's."""
    d = _data()
    model = _npt_reference("krylov")[0]
    z_dev, z_host = dev(cupy, d["z"], Z_CHUNKS), host(d["z"], Z_CHUNKS)
    energy = model.energy_split(z_dev)
    y, res = model.transform_with_residual(z_dev)
    for out in (energy, y, res):
        assert on_device(out, cupy)
    with meter("energy_split"):
        energy = to_numpy(energy)
    assert rel(energy, model.energy_split(z_host)) < F64
    want_y, want_res = model.transform_with_residual(z_host)
    assert rel(gram(y), gram(want_y)) < F64
    assert rel(res, want_res) < F64


def test_a_precomputed_model_projects_device_kernel_rows(cupy, meter, tmp_path):
    """Test x train kernel rows on a device (their columns chunked like the training
    rows); the residual's k(z, z) given on the host or on the device."""
    d = _data()
    k = rbf_kernel(d["x"], gamma=GAMMA)
    k_test = rbf_kernel(d["z"], d["x"], gamma=GAMMA)
    model = npt.fit(host(k).rechunk({1: CHUNKS}), "precomputed", n_components=8, **KEEP)
    rows = dev(cupy, k_test, Z_CHUNKS)
    given = (np.ones(100), dev(cupy, np.ones((100, 1)), Z_CHUNKS)[:, 0])
    y, *res = (model.transform(rows), *(model.residual(rows, diag=g) for g in given))
    for out in (y, *res):
        assert on_device(out, cupy)
    assert rel(y, model.transform(k_test)) < F64
    for r in res:
        assert rel(r, model.residual(k_test, diag=np.ones(100))) < F64
    with pytest.warns(npt.errors.ResidualWarning):
        got = npt.project(model, rows, tmp_path / "gpu.zarr", progress=False)
    assert rel(got["coordinates"].values, model.transform(k_test)) < F64


def test_save_load_identity_of_a_device_fit(cupy, meter, tmp_path):
    d = _data()
    got = npt.fit(dev(cupy, d["x"]), "rbf", gamma=GAMMA, **FITS["dense"])
    with meter("save"):
        got.save(tmp_path / "gpu.zarr")
    loaded = npt.load(tmp_path / "gpu.zarr")
    assert loaded.identity == got.identity
    np.testing.assert_array_equal(loaded.eigenvalues, got.eigenvalues)
    y = loaded.transform(host(d["z"], Z_CHUNKS))
    assert rel(gram(y), gram(_npt_reference("dense")[1])) < F64


def test_a_device_fit_on_host_rows(cupy, meter):
    d = _data()
    got = npt.fit(dev(cupy, d["x"]), "rbf", gamma=GAMMA, **FITS["dense"])
    with meter("transform"):
        y = to_numpy(got.transform(host(d["z"], Z_CHUNKS)))
    assert rel(gram(y), gram(_npt_reference("dense")[1])) < F64


def test_a_host_fit_on_device_rows(cupy, meter):
    d = _data()
    model, want_y, want_res = _npt_reference("dense")
    y = model.transform(dev(cupy, d["z"], Z_CHUNKS))
    res = model.residual(dev(cupy, d["z"], Z_CHUNKS))
    assert on_device(y, cupy)
    assert on_device(res, cupy)
    with meter("transform"):
        assert rel(gram(y), gram(want_y)) < F64
    assert rel(res, want_res) < F64


def test_a_dataarray_of_device_chunks(cupy, meter):
    d = _data()
    coords = {"sample": np.arange(400)}
    rows = xr.DataArray(dev(cupy, d["x"]), dims=("sample", "feature"), coords=coords)
    with meter("fit"):
        got = npt.fit(rows, "rbf", gamma=GAMMA, **FITS["dense"])
    z = xr.DataArray(dev(cupy, d["z"], Z_CHUNKS), dims=("sample", "feature"),
                     coords={"sample": np.arange(100) + 1000})  # fmt: skip
    y, res = got.transform(z), got.residual(z)
    for out in (y, res):
        assert isinstance(out, xr.DataArray)
        assert on_device(out, cupy)
        assert list(out["sample"].values[:2]) == [1000, 1001]
    assert rel(gram(y), gram(_npt_reference("dense")[1])) < F64
    assert rel(res, _npt_reference("dense")[2]) < F64


def test_partial_fit_on_device_rows(cupy, meter):
    d = _data()
    model = npt.fit(host(d["x"][:200], (100, 100)), "rbf", gamma=GAMMA, n_components=None,
                    solver="dense", **KEEP)  # fmt: skip
    with meter("partial_fit"):
        got = model.partial_fit(dev(cupy, d["x"][200:], (90, 110)), residual_tol=0.01)
    want = model.partial_fit(host(d["x"][200:], (90, 110)), residual_tol=0.01)
    assert rel(got.eigenvalues, want.eigenvalues) < F64


def test_partial_fit_of_a_device_fit(cupy, meter):
    """A model fitted on device rows grows by device rows: its training rows and the batch
    are gathered to the host once each (growth's maths is the driver's), the grown model
    is host numpy and equals the numpy growth."""
    d = _data()
    params = {"n_components": None, "solver": "dense", **KEEP}
    model = npt.fit(dev(cupy, d["x"][:200], (100, 100)), "rbf", gamma=GAMMA, **params)
    with meter("partial_fit"):
        got = model.partial_fit(dev(cupy, d["x"][200:], (90, 110)), residual_tol=0.01)
        values = got.eigenvalues  # the rotation, once
    want = npt.fit(host(d["x"][:200], (100, 100)), "rbf", gamma=GAMMA, **params).partial_fit(
        host(d["x"][200:], (90, 110)), residual_tol=0.01
    )
    assert type(values) is np.ndarray
    assert got.rows_added == want.rows_added > 0
    assert rel(values, want.eigenvalues) < F64
    z = dev(cupy, d["z"], Z_CHUNKS)
    assert rel(gram(got.transform(z)), gram(want.transform(host(d["z"], Z_CHUNKS)))) < F64


def test_npt_grow_of_a_device_fit(cupy, meter, tmp_path):
    from npt_dask.interface.cli import main

    d = _data()
    got = npt.fit(dev(cupy, d["x"][:200], (100, 100)), "rbf", gamma=GAMMA, n_components=None,
                  solver="dense", **KEEP)  # fmt: skip
    got.save(tmp_path / "m0.zarr")
    np.save(tmp_path / "day1.npy", d["x"][200:])
    with meter("grow"):
        code = main(["grow", str(tmp_path / "m0.zarr"), str(tmp_path / "day1.npy"),
                     "--out", str(tmp_path / "m1.zarr"), "--residual-tol", "0.01"])  # fmt: skip
    assert code == 0
    want = npt.fit(host(d["x"][:200], (100, 100)), "rbf", gamma=GAMMA, n_components=None,
                   solver="dense", **KEEP).partial_fit(d["x"][200:], residual_tol=0.01)  # fmt: skip
    assert rel(npt.load(tmp_path / "m1.zarr").eigenvalues, want.eigenvalues) < F64


@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_nonlinear_projection_with_its_inverse(cupy, meter, kernel):
    from npt_dask import NonlinearProjection

    d = _data()
    common = {"kernel": kernel, "gamma": GAMMA, "n_components": 4, "random_state": 0,
              "fit_inverse_transform": True, **KEEP}  # fmt: skip
    with meter("fit"):
        got = NonlinearProjection(**common).fit(dev(cupy, d["x"]))
    want = NonlinearProjection(**common).fit(host(d["x"]))
    y = got.transform(dev(cupy, d["z"], Z_CHUNKS))
    assert on_device(y, cupy)
    assert rel(gram(y), gram(want.transform(host(d["z"], Z_CHUNKS)))) < F64
    back = got.inverse_transform(got.transform(dev(cupy, d["z"], Z_CHUNKS)))
    with meter("inverse_transform"):
        back = to_numpy(back)
    assert rel(back, want.inverse_transform(want.transform(host(d["z"], Z_CHUNKS)))) < 1e-8


# --- kernel ridge --------------------------------------------------------------------------

RIDGES = {
    "exact-direct": ({"landmarks": None, "solver": "direct"}, F64),
    "exact-cg": ({"landmarks": None, "solver": "cg", "tol": 1e-10, "max_iter": 500}, CG),
    "nystrom-direct": ({"landmarks": 60, "solver": "direct"}, F64),
    "nystrom-cg": ({"landmarks": 60, "solver": "cg", "tol": 1e-10, "max_iter": 500}, CG),
    "nystrom-rpcholesky": ({"landmarks": 60, "landmark_method": "rpcholesky",
                            "solver": "direct"}, F64),
}  # fmt: skip
RIDGE_FAILS: dict[str, str] = {}


def _ridge(name: str, **extra: Any) -> dict[str, Any]:
    return {"alpha": 0.05, "kernel": "rbf", "gamma": GAMMA, "random_state": 0, **KEEP,
            **RIDGES[name][0], **extra}  # fmt: skip


@functools.cache
def _ridge_reference(name: str) -> np.ndarray:
    from npt_dask import KernelRidge

    d = _data()
    return to_numpy(KernelRidge(**_ridge(name)).fit(host(d["x"]), d["t"]).predict(
        host(d["z"], Z_CHUNKS)))  # fmt: skip


@pytest.mark.parametrize("name", _routes(RIDGES, RIDGE_FAILS))
def test_kernel_ridge(cupy, meter, name):
    from npt_dask import KernelRidge

    d = _data()
    with meter("fit"):
        got = KernelRidge(**_ridge(name)).fit(dev(cupy, d["x"]), d["t"])
    out = got.predict(dev(cupy, d["z"], Z_CHUNKS))
    assert on_device(out, cupy)
    with meter("predict"):
        out = to_numpy(out)
    assert rel(out, _ridge_reference(name)) < RIDGES[name][1]


def test_float32_kernel_ridge_is_within_its_bound(cupy, meter):
    from npt_dask import KernelRidge

    d = _data()
    with meter("fit"):
        got = KernelRidge(**_ridge("nystrom-direct", precision="float32")).fit(
            dev(cupy, d["x"].astype(np.float32)), d["t"])  # fmt: skip
    out = got.predict(dev(cupy, d["z"].astype(np.float32), Z_CHUNKS))
    assert rel(out, _ridge_reference("nystrom-direct")) < F32


def test_checkpointed_kernel_ridge(cupy, meter, tmp_path):
    from npt_dask import KernelRidge

    d = _data()
    with meter("fit"):
        got = KernelRidge(**_ridge("nystrom-cg")).fit(dev(cupy, d["x"]), d["t"],
                                                      checkpoint=tmp_path / "cg.npz")  # fmt: skip
    assert rel(got.predict(dev(cupy, d["z"], Z_CHUNKS)), _ridge_reference("nystrom-cg")) < CG


@pytest.mark.parametrize(
    "landmarks",
    [pytest.param(None, id="exact"), pytest.param(60, id="nystrom")],
)  # fmt: skip
def test_precomputed_kernel_ridge(cupy, meter, landmarks):
    from npt_dask import KernelRidge

    d = _data()
    k, kz = rbf_kernel(d["x"], gamma=GAMMA), rbf_kernel(d["z"], d["x"], gamma=GAMMA)
    common = {"alpha": 0.05, "kernel": "precomputed", "landmarks": landmarks,
              "random_state": 0, **KEEP}  # fmt: skip
    with meter("fit"):
        got = KernelRidge(**common).fit(dev(cupy, k), d["t"])
    out = got.predict(dev(cupy, kz, Z_CHUNKS))
    assert on_device(out, cupy)
    want = KernelRidge(**common).fit(host(k), d["t"]).predict(host(kz, Z_CHUNKS))
    assert rel(out, want) < F64


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("exact-direct", "targets"),
        ("nystrom-direct", "targets"),
        ("exact-direct", "weights"),
        ("nystrom-direct", "weights-on-host"),
    ],
)
def test_kernel_ridge_targets_and_weights_in_either_namespace(cupy, meter, name, what):
    from npt_dask import KernelRidge

    d = _data()
    t = cupy.asarray(d["t"]) if what == "targets" else d["t"]
    w = {"weights": cupy.asarray(d["w"]), "weights-on-host": d["w"]}.get(what)
    with meter("fit"):
        got = KernelRidge(**_ridge(name)).fit(dev(cupy, d["x"]), t, sample_weight=w)
    want = KernelRidge(**_ridge(name)).fit(host(d["x"]), d["t"], sample_weight=d["w"] if w
                                           is not None else None)  # fmt: skip
    z = dev(cupy, d["z"], Z_CHUNKS)
    assert rel(got.predict(z), want.predict(host(d["z"], Z_CHUNKS))) < F64


CLASSIFIERS = {k: RIDGES[k] for k in ("exact-direct", "nystrom-direct", "nystrom-cg")}


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("exact-direct", "host"),
        ("exact-direct", "device"),
        ("nystrom-direct", "host"),
        ("nystrom-cg", "host"),
    ],
)
def test_kernel_ridge_classifier(cupy, meter, name, where):
    from npt_dask import KernelRidgeClassifier

    d = _data()
    params = _ridge(name)
    labels = cupy.asarray(d["y"]) if where == "device" else d["y"]
    with meter("fit"):
        got = KernelRidgeClassifier(**params).fit(dev(cupy, d["x"]), labels)
    want = KernelRidgeClassifier(**params).fit(host(d["x"]), d["y"])
    z = dev(cupy, d["z"], Z_CHUNKS)
    scores = got.decision_function(z)
    assert on_device(scores, cupy)
    tol = CLASSIFIERS[name][1]
    assert rel(scores, want.decision_function(host(d["z"], Z_CHUNKS))) < tol
    predicted = got.predict(z)
    assert on_device(predicted, cupy)
    with meter("predict"):
        predicted = to_numpy(predicted)
    np.testing.assert_array_equal(predicted, to_numpy(want.predict(host(d["z"], Z_CHUNKS))))


@pytest.mark.parametrize(
    ("task", "landmarks"),
    [
        pytest.param("regression", None, id="regression-exact"),
        pytest.param("regression", 60, id="regression-nystrom"),
        pytest.param("classification", None, id="classification-exact"),
        pytest.param("classification", 60, id="classification-nystrom"),
        pytest.param("regression-device-targets", 60, id="regression-device-targets"),
        pytest.param("classification-device-labels", None, id="classification-device-labels"),
    ],
)  # fmt: skip
def test_the_searches_choose_as_numpy(cupy, meter, task, landmarks):
    from npt_dask import KernelRidgeClassifierCV, KernelRidgeCV

    d = _data()
    search, targets = (KernelRidgeCV, d["t"]) if task.startswith("regression") else (
        KernelRidgeClassifierCV, d["y"])  # fmt: skip
    given = cupy.asarray(targets) if "device" in task else targets
    common = {"alphas": [0.01, 0.1], "gammas": [0.2, GAMMA], "landmarks": landmarks,
              "random_state": 0, **KEEP}  # fmt: skip
    with meter("fit"):
        got = search(**common).fit(dev(cupy, d["x"]), given)
    want = search(**common).fit(host(d["x"]), targets)
    assert (got.alpha_, got.gamma_) == (want.alpha_, want.gamma_)
    z = dev(cupy, d["z"], Z_CHUNKS)
    out = got.predict(z)
    assert on_device(out, cupy)
    assert rel(out, want.predict(host(d["z"], Z_CHUNKS))) < F64


# --- methods on device coordinates ---------------------------------------------------------


@functools.cache
def _coordinate_model() -> Any:
    return npt.fit(host(_data()["x"]), "rbf", gamma=GAMMA, n_components=8, **KEEP)


def _coordinates(cupy: ModuleType | None) -> tuple[da.Array, da.Array]:
    """Training and test coordinates of one host model: on the device, or on the host."""
    d, model = _data(), _coordinate_model()
    if cupy is None:
        return model.transform(host(d["x"])), model.transform(host(d["z"], Z_CHUNKS))
    return model.transform(dev(cupy, d["x"])), model.transform(dev(cupy, d["z"], Z_CHUNKS))


ALPHAS = [1e-3, 1e-2, 0.1, 1.0, 10.0]
METHODS = {
    "ridge": (lambda: Ridge(alpha=0.1), "t", "predict"),
    "ridge-loo": (lambda: Ridge(alpha=ALPHAS, criterion="loo"), "t", "predict"),
    "ridge-classifier": (lambda: RidgeClassifier(alpha=0.1), "y", "decision_function"),
    "ridge-classifier-loo": (
        lambda: RidgeClassifier(alpha=ALPHAS, criterion="loo"),
        "y",
        "decision_function",
    ),
    "fisher": (lambda: FisherDiscriminant(), "y", "transform"),
    "pcal1": (lambda: PCAL1(n_components=2, n_init=2, random_state=0), None, "transform"),
    "linear-svm": (
        lambda: ChunkedLinearSVM(C=1.0, epochs=3, random_state=0),
        "y",
        "decision_function",
    ),
}
METHOD_CLASSIFIERS = ("ridge-classifier", "ridge-classifier-loo", "fisher", "linear-svm")


@pytest.mark.parametrize("name", list(METHODS))
def test_methods_on_device_coordinates(cupy, meter, name):
    make, target, output = METHODS[name]
    d = _data()
    y = None if target is None else d[target]
    (train, test), (train_h, test_h) = _coordinates(cupy), _coordinates(None)
    with meter("fit"):
        got = make().fit(train, y)
    want = make().fit(train_h, y)
    if hasattr(want, "alpha_"):
        assert got.alpha_ == want.alpha_
    out = getattr(got, output)(test)
    assert on_device(out, cupy)
    with meter(output):
        out = to_numpy(out)
    want_out = to_numpy(getattr(want, output)(test_h))
    if name in ("fisher", "pcal1"):  # directions have no sign
        out, want_out = np.abs(out), np.abs(want_out)
    assert rel(out, want_out) < F64
    if name in METHOD_CLASSIFIERS:
        predicted = got.predict(test)
        assert on_device(predicted, cupy)
        np.testing.assert_array_equal(to_numpy(predicted), to_numpy(want.predict(test_h)))


@pytest.mark.parametrize("name", ["ridge-classifier", "fisher", "linear-svm", "ridge"])
@pytest.mark.parametrize("where", ["device", "device-dask", "device-with-host-rows"])
def test_methods_take_labels_and_targets_on_the_device(cupy, meter, name, where):
    """Labels (targets) as a device array or a dask array of device chunks, with device
    coordinates or host ones: the classes come to the host once, the fit = numpy's."""
    make, target, _ = METHODS[name]
    values = _data()[target]
    given = cupy.asarray(values)
    if where == "device-dask":
        given = da.from_array(given, chunks=((150, 250),), asarray=False)
    (train, test), (train_h, test_h) = _coordinates(cupy), _coordinates(None)
    if where == "device-with-host-rows":
        train, test = train_h, test_h
    with meter("fit"):
        got = make().fit(train, given)
    want = make().fit(train_h, values)
    if name == "ridge":
        assert rel(got.coef_, want.coef_) < F64
        return
    np.testing.assert_array_equal(got.classes_, want.classes_)
    assert isinstance(got.classes_, np.ndarray)  # a fitted model's small arrays: host numpy
    np.testing.assert_array_equal(to_numpy(got.predict(test)), to_numpy(want.predict(test_h)))


@pytest.mark.parametrize("name", ["ridge-classifier", "fisher", "linear-svm"])
def test_string_classes_of_device_coordinates(cupy, name):
    """Classes that are strings live on the host: the labels come back in host memory
    (each chunk's positions cross once), equal to numpy's."""
    make = METHODS[name][0]
    labels = np.array(["low", "mid", "high"])[_data()["y"]]
    (train, test), (train_h, test_h) = _coordinates(cupy), _coordinates(None)
    got = make().fit(train, labels).predict(test)
    assert isinstance(got._meta, np.ndarray)
    assert got.dtype == labels.dtype
    np.testing.assert_array_equal(got.compute(), make().fit(train_h, labels).predict(test_h))


def test_methods_on_a_dataarray_of_device_coordinates(cupy):
    """A DataArray wrapping device chunks in, a DataArray wrapping device chunks out."""
    d = _data()
    (train, test), (train_h, test_h) = _coordinates(cupy), _coordinates(None)

    def wrapped(y: da.Array) -> xr.DataArray:
        return xr.DataArray(y, dims=("sample", "component"))

    got = RidgeClassifier(alpha=0.1).fit(wrapped(train), d["y"])
    want = RidgeClassifier(alpha=0.1).fit(train_h, d["y"])
    for method in ("decision_function", "predict"):
        out = getattr(got, method)(wrapped(test))
        assert isinstance(out, xr.DataArray)
        assert on_device(out, cupy)
        assert rel(out, getattr(want, method)(test_h)) < F64


def test_an_empty_chunk_of_device_coordinates(cupy):
    """A row chunk with no rows adds nothing (its moments are zeros of the right shapes)."""
    d = _data()
    y = to_numpy(_coordinates(None)[0])
    chunks = (100, 0, 300)
    on_dev = da.from_array(cupy.asarray(y), chunks=(chunks, 8), asarray=False)
    for make, target in ((lambda: Ridge(alpha=ALPHAS), "t"),
                         (lambda: RidgeClassifier(alpha=0.1), "y")):  # fmt: skip
        got = make().fit(on_dev, d[target])
        want = make().fit(da.from_array(y, chunks=(chunks, 8)), d[target])
        assert rel(got.coef_, want.coef_) < F64


def test_fit_moments_then_predict_device_coordinates(cupy, meter):
    d = _data()
    lm = npt.fit(host(d["x"]), "rbf", gamma=GAMMA, landmarks=60, random_state=0, labels=d["y"],
                 **KEEP)  # fmt: skip
    clf = RidgeClassifier(alpha=1e-3).fit_moments(lm.moments)
    want = to_numpy(clf.predict(lm.transform(host(d["z"], Z_CHUNKS))))
    out = clf.predict(lm.transform(dev(cupy, d["z"], Z_CHUNKS)))
    assert on_device(out, cupy)
    with meter("predict"):
        np.testing.assert_array_equal(to_numpy(out), want)


@pytest.mark.parametrize("name", ["class_scatter", "ridge_moments", "l1_dispersion"])
def test_one_pass_statistics_of_device_coordinates(cupy, meter, name):
    d = _data()
    (train, _), (train_h, _) = _coordinates(cupy), _coordinates(None)
    call = {
        "class_scatter": lambda y: class_scatter(y, d["y"])["within"],
        "ridge_moments": lambda y: ridge_moments(y, d["t"])["gram"],
        "l1_dispersion": lambda y: l1_dispersion(y, np.eye(8)[:2]),
    }[name]
    with meter(name):
        got = call(train)
    assert rel(got, call(train_h)) < F64


def test_alignment_and_variance_of_device_rows(cupy, meter):
    d = _data()
    with meter("alignment"):
        got = alignment_scores(dev(cupy, d["x"]), d["y"], "rbf", gamma=GAMMA)
    want = alignment_scores(host(d["x"]), d["y"], "rbf", gamma=GAMMA)
    for key in want:
        assert abs(got[key] - want[key]) <= F64 * abs(want[key])
    model = npt.fit(dev(cupy, d["x"]), "rbf", gamma=GAMMA, **FITS["dense"])
    with meter("variance"):
        ratio = explained_variance_ratio(model)
    assert rel(ratio, explained_variance_ratio(_npt_reference("dense")[0])) < F64


@pytest.mark.parametrize("solver", ["chunked", "svc", "liblinear"])
def test_kernel_svm_pipeline_on_device_rows(cupy, meter, solver):
    """The chunked solver streams the device coordinates (labels device-backed); the
    in-memory ones (scikit-learn's) read them in host memory, brought there once."""
    d = _data()
    svm_params = {"epochs": 3, "random_state": 0} if solver == "chunked" else None
    params = {"C": 1.0, "solver": solver, "kernel": "rbf", "gamma": GAMMA, "n_components": 8,
              "random_state": 0, "svm_params": svm_params, **KEEP}  # fmt: skip
    with meter("fit"):
        pipe = kernel_svm(**params).fit(dev(cupy, d["x"]), d["y"])
    out = pipe.predict(dev(cupy, d["z"], Z_CHUNKS))
    assert on_device(out, cupy) == (solver == "chunked")
    want = kernel_svm(**params).fit(host(d["x"]), d["y"]).predict(host(d["z"], Z_CHUNKS))
    np.testing.assert_array_equal(to_numpy(out), to_numpy(want))


# --- the command line and pipelines --------------------------------------------------------


@pytest.fixture
def files(tmp_path):
    d = _data()
    for name in ("x", "z", "y", "z_labels"):
        np.save(tmp_path / f"{name}.npy", d[name])
    return tmp_path


def _cli(*args: Any) -> int:
    from npt_dask.interface.cli import main

    return main([str(a) for a in args])


def test_cli_fit_on_the_device(cupy, meter, files):
    fit = ["fit", files / "x.npy", "--gamma", GAMMA, "--n-components", 6, "--quiet", "--out"]
    with meter("fit"):
        assert _cli(*fit, files / "gpu.zarr", "--device", "gpu") == 0
    assert _cli(*fit, files / "cpu.zarr", "--device", "cpu") == 0
    got, want = npt.load(files / "gpu.zarr"), npt.load(files / "cpu.zarr")
    assert rel(got.eigenvalues, want.eigenvalues) < F64


def test_cli_project_on_the_device(cupy, meter, files):
    _npt_reference("dense")[0].save(files / "m.zarr")
    project = ["project", files / "m.zarr", files / "z.npy", "--quiet", "--out"]
    with meter("project"):
        assert _cli(*project, files / "gpu.zarr", "--device", "gpu") == 0
    assert _cli(*project, files / "cpu.zarr", "--device", "cpu") == 0
    got, want = xr.open_zarr(files / "gpu.zarr"), xr.open_zarr(files / "cpu.zarr")
    assert rel(got["coordinates"].values, want["coordinates"].values) < F64


def test_cli_grow_on_the_device(cupy, meter, files):
    d = _data()
    npt.fit(host(d["x"][:200], (100, 100)), "rbf", gamma=GAMMA, n_components=None,
            solver="dense", **KEEP).save(files / "m0.zarr")  # fmt: skip
    np.save(files / "day1.npy", d["x"][200:])
    grow = ["grow", files / "m0.zarr", files / "day1.npy", "--residual-tol", 0.01, "--out"]
    with meter("grow"):
        assert _cli(*grow, files / "gpu.zarr", "--device", "gpu") == 0
    assert _cli(*grow, files / "cpu.zarr", "--device", "cpu") == 0
    got, want = npt.load(files / "gpu.zarr"), npt.load(files / "cpu.zarr")
    assert got.n_samples == want.n_samples
    assert rel(got.eigenvalues, want.eigenvalues) < F64


EVERY_STAGE = [{"name": "kpca"}, {"name": "ridge"}, {"name": "kfd"},
               {"name": "kpcal1", "n_components": 1, "n_init": 2},
               {"name": "ksvm", "solver": "chunked", "epochs": 3, "label": "ksvm-chunked"},
               {"name": "ksvm", "solver": "svc", "label": "ksvm-svc"},
               {"name": "alignment"}]  # fmt: skip


def _numbers(report: Any, prefix: str = "") -> dict[str, float]:
    """A report's numbers by path (``seconds`` left out)."""
    if isinstance(report, dict):
        report = {k: v for k, v in report.items() if k != "seconds"}
        items = report.items()
    elif isinstance(report, list):
        items = enumerate(report)  # type: ignore[assignment]
    else:
        return {prefix: report} if isinstance(report, int | float) else {}
    return {k: v for key, value in items for k, v in _numbers(value, f"{prefix}/{key}").items()}


def test_pipeline_of_every_stage_on_the_device(cupy, meter, tmp_path):
    """``device = "gpu"`` with every method and a grow stage: every number of the report
    (methods and growth) = the CPU run's."""
    from distributed import LocalCluster

    from npt_dask.interface.pipeline import PipelineConfig, run

    rng = np.random.default_rng(1)
    npt.fit(rng.normal(size=(60, 2)), "rbf", gamma=2.0, n_components=None,
            solver="dense").save(tmp_path / "m0.zarr")  # fmt: skip
    np.save(tmp_path / "day1.npy", rng.normal(size=(40, 2)))
    config = {"name": "moons-gpu", "data": {"source": "moons", "n_samples": 120,
                                            "data_dir": str(tmp_path)},
              "model": {"kernel": "rbf", "gamma": 2.0, "n_components": 3},
              "grow": {"model": str(tmp_path / "m0.zarr"), "files": ["day1.npy"]},
              "methods": EVERY_STAGE}  # fmt: skip
    reports = {}
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster,
        cluster.get_client() as client,
    ):
        for device in ("gpu", "cpu"):
            out = {"dir": str(tmp_path / device), "plots": False}
            cfg = PipelineConfig.from_dict({**config, "device": device, "output": out})
            with meter(f"run-{device}") if device == "gpu" else contextlib.nullcontext():
                reports[device] = run(cfg, client=client, progress=False)
    gpu, cpu = ({k: _numbers(reports[d][k]) for k in ("methods", "grow")} for d in ("gpu", "cpu"))
    for part in ("methods", "grow"):
        assert gpu[part].keys() == cpu[part].keys()
        assert len(cpu[part]) >= (len(EVERY_STAGE) if part == "methods" else 1)
        for key, want in cpu[part].items():
            np.testing.assert_allclose(gpu[part][key], want, rtol=F64, atol=F64, err_msg=key)


def test_cli_ridge_on_the_device(cupy, meter, files):
    ridge = ["ridge", files / "x.npy", "--labels", files / "y.npy", "--test", files / "z.npy",
             "--test-labels", files / "z_labels.npy", "--kernel", "rbf", "--gamma", GAMMA,
             "--alpha", 0.1, "--quiet", "--predictions"]  # fmt: skip
    with meter("ridge"):
        assert _cli(*ridge, files / "gpu.npy", "--device", "gpu") == 0
    assert _cli(*ridge, files / "cpu.npy", "--device", "cpu") == 0
    np.testing.assert_array_equal(np.load(files / "gpu.npy"), np.load(files / "cpu.npy"))


def test_pipeline_on_the_device(cupy, meter, tmp_path):
    from distributed import LocalCluster

    from npt_dask.interface.pipeline import PipelineConfig, run

    config = {"name": "moons-gpu", "data": {"source": "moons", "n_samples": 120},
              "model": {"kernel": "rbf", "gamma": 2.0, "n_components": 3},
              "methods": [{"name": "kpca"}]}  # fmt: skip
    reports = {}
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster,
        cluster.get_client() as client,
    ):
        for device in ("gpu", "cpu"):
            out = {"dir": str(tmp_path / device), "plots": False}
            cfg = PipelineConfig.from_dict({**config, "device": device, "output": out})
            with meter(f"run-{device}") if device == "gpu" else contextlib.nullcontext():
                reports[device] = run(cfg, client=client, progress=False)
    gpu, cpu = (reports[k]["methods"]["kpca"] for k in ("gpu", "cpu"))
    assert gpu.keys() == cpu.keys()
    for key in set(cpu) - {"seconds"}:
        np.testing.assert_allclose(np.asarray(gpu[key], float), np.asarray(cpu[key], float),
                                   rtol=F64)  # fmt: skip


# --- the device's cost (stand-in counters) -------------------------------------------------


def _counted(cupy: ModuleType) -> Any:
    if not hasattr(cupy, "_standin"):
        pytest.skip("counted on the stand-in only")
    return cupy._standin.count(collect=False)


def test_a_transform_moves_the_model_to_the_device_once(cupy):
    d = _data()
    model = _npt_reference("dense")[0]
    copies = []
    for rows in ((50, 50), (20,) * 5):
        with _counted(cupy) as seen:
            model.transform(dev(cupy, d["z"], rows)).compute()
        copies.append(seen.h2d)
    assert copies[0] == copies[1]  # per call, not per chunk


def test_a_lazy_device_transform_reads_one_flag_per_chunk(cupy):
    """What crosses back while a device transform computes: each chunk's verdict (one
    byte, one sync: its rows, kernel values and coordinates finite), nothing else."""
    d = _data()
    model = _npt_reference("dense")[0]
    for rows in ((50, 50), (20,) * 5):
        y = model.transform(dev(cupy, d["z"], rows))
        with _counted(cupy) as seen:
            y.compute()  # the model's training panels move in it, once each
        assert (seen.h2d, seen.d2h, seen.d2h_bytes, seen.syncs) == (4, *(len(rows),) * 3)


def test_npt_project_crosses_each_chunk_once(cupy, tmp_path):
    """npt.project of device rows: per chunk one copy back (its values in the store's
    dtype, its verdict and its digest's sum together); per call the model's move to the
    device, the eager finiteness check (one flag) and the scale sample (one read)."""
    from npt_dask.arrays.host import count_crossings

    d = _data()
    model = _npt_reference("dense")[0]
    h2d = []
    for rows in (50, 20):
        z = dev(cupy, d["z"], (rows,) * (100 // rows))
        with _counted(cupy) as seen, count_crossings() as crossed:
            npt.project(model, z, tmp_path / f"{rows}.zarr", chunk_size=rows, progress=False)
        chunks = 100 // rows
        assert (seen.d2h, seen.syncs) == (chunks + 2, chunks + 2)
        packet = rows * (model.n_components + 1) * 8 + 8 + 1  # values, digest sum, verdict
        assert crossed.sizes.count(packet) == chunks
        h2d.append(seen.h2d)
    assert h2d[0] == h2d[1]


def test_a_device_fit_comes_to_the_host_once_per_call(cupy):
    """A model fitted on a device, projecting host rows: its training panels come to the
    host once per call (with the fit's own check of each: one flag), not per chunk."""
    d = _data()
    model = npt.fit(dev(cupy, d["x"]), "rbf", gamma=GAMMA, **FITS["dense"])
    moved = []
    for rows in ((50, 50), (20,) * 5):
        y = model.transform(host(d["z"], rows))
        with _counted(cupy) as seen:
            y.compute()
        moved.append((seen.h2d, seen.d2h))
    assert moved[0] == moved[1]
    assert moved[0][0] == 0
    assert len(CHUNKS) <= moved[0][1] <= 2 * len(CHUNKS)


def test_a_loaded_model_moves_to_the_device_once(cupy, tmp_path):
    """A model read from a store streams its training blocks into every task on the
    host; for device rows they are read and moved once per call."""
    d = _data()
    _npt_reference("dense")[0].save(tmp_path / "m.zarr")
    model = npt.load(tmp_path / "m.zarr")
    copies = []
    for rows in ((50, 50), (20,) * 5):
        z = dev(cupy, d["z"], rows)
        with _counted(cupy) as seen:
            y = model.transform(z).compute()
        copies.append(seen.h2d)
    assert copies[0] == copies[1]
    assert rel(gram(y), gram(_npt_reference("dense")[1])) < F64


def test_saving_a_device_fit_crosses_its_rows_chunk_by_chunk(cupy, tmp_path):
    """The training rows of a device fit reach the store through the host boundary one
    chunk at a time (twice: hashed, then written), never gathered."""
    from npt_dask.arrays.host import count_crossings

    d = _data()
    got = npt.fit(dev(cupy, d["x"]), "rbf", gamma=GAMMA, **FITS["dense"])
    with count_crossings() as crossed:
        got.save(tmp_path / "gpu.zarr")
    rows = sorted(s for s in crossed.sizes if s > 1)  # (the fit's rows check each: 1 flag)
    assert rows == sorted(5 * c for c in CHUNKS * 2)


@pytest.mark.parametrize("tol", [1e-3, 1e-10])
def test_host_rows_with_device_gpu_cross_once_whatever_the_passes(cupy, monkeypatch, tol):
    """``device="gpu"`` moves the rows' chunks at the entrance and holds them there: each
    row of X crosses once, in a fit of few passes or of many."""
    d = _data()
    moved: list[int] = []
    asarray = cupy.asarray

    def counted(a: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(a, np.ndarray) and a.ndim == 2 and a.shape[1] == d["x"].shape[1]:
            moved.append(a.shape[0])  # rows of X (V and the centres have other widths)
        return asarray(a, *args, **kwargs)

    monkeypatch.setattr(cupy, "asarray", counted)
    params = {**FITS["krylov-recompute"], "tol": tol, "chunk_size": 100}
    model = npt.fit(d["x"], "rbf", gamma=GAMMA, device="gpu", **params)
    assert model.diagnostics.passes > (1 if tol > 1e-5 else 5)
    assert sum(moved) == 400


@pytest.mark.parametrize("name", ["landmarks-uniform", "landmarks-rpcholesky", "labels", "targets"])
def test_centres_and_extras_move_once_whatever_the_chunks(cupy, name):
    """A landmark fit moves its centres, weights, projection terms and row-aligned extras
    (targets, the labels' indicator) to the device once per fit: the host-to-device copies
    do not grow with the number of row chunks (the 40 landmarks one panel either way)."""
    d = _data()
    method = "rpcholesky" if name == "landmarks-rpcholesky" else "uniform"
    extra = {"labels": {"labels": cupy.asarray(d["y"])},
             "targets": {"targets": cupy.asarray(d["t"][:, None])}}.get(name, {})  # fmt: skip
    copies = []
    for rows in (CHUNKS, (50,) * 8):
        x = dev(cupy, d["x"], rows)
        with _counted(cupy) as seen:
            npt.fit(x, "rbf", gamma=GAMMA, landmarks=40, landmark_method=method, random_state=0,
                    **KEEP, **extra)  # fmt: skip
        copies.append(seen.h2d)
    assert copies[0] == copies[1]


def test_rows_cross_to_the_device_once_per_fit(cupy):
    d = _data()
    moved = []

    def to_device(block: np.ndarray) -> Any:
        moved.append(block.shape[0])
        return cupy.asarray(block)

    rows = host(d["x"]).map_blocks(to_device, meta=cupy.empty((0, 0)))
    model = npt.fit(rows, "rbf", gamma=GAMMA, **{**FITS["krylov"], "cache": "recompute"})
    assert model.diagnostics.passes > 1
    assert sum(moved) == 400  # each row once, whatever the passes


def test_device_direct_ridge_holds_what_its_plan_says(cupy):
    from npt_dask import KernelRidge

    d = _data()
    with _counted(cupy) as seen:
        got = KernelRidge(**_ridge("exact-direct")).fit(dev(cupy, d["x"]), d["t"])
    assert seen.peak <= got.plan_["device_bytes"]


@pytest.mark.parametrize("name", ["exact-direct", "exact-cg", "nystrom-direct", "nystrom-cg"])
def test_device_triangular_solves_copy_no_factor(cupy, name):
    """cuBLAS reads a Fortran-order factor: a C-order one goes as its transpose, no copy a
    solve (the direct routes' two solves, CG's preconditioner on every iteration)."""
    from npt_dask import KernelRidge

    d = _data()
    with _counted(cupy) as seen, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CG stopped at max_iter
        KernelRidge(**_ridge(name, max_iter=5)).fit(dev(cupy, d["x"]), d["t"])
    assert seen.fortran_copies == 0


RIDGE_COSTS = {**RIDGES, "nystrom-direct-float32": ({"landmarks": 60, "solver": "direct",
                                                     "precision": "float32"}, F32)}  # fmt: skip


@pytest.mark.parametrize("name", [k for k in RIDGE_COSTS if k != "nystrom-rpcholesky"])
def test_device_ridge_routes_hold_what_their_plan_says(cupy, name):
    """Each route's device peak (the rows, weights and targets given inside the window)
    within its plan's device bytes: the direct routes build their systems in place."""
    from npt_dask import KernelRidge

    d = _data()
    params = {**_ridge("exact-direct"), **RIDGE_COSTS[name][0], "max_iter": 5}
    with _counted(cupy) as seen, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CG stopped at max_iter
        got = KernelRidge(**params).fit(dev(cupy, d["x"]), d["t"], sample_weight=d["w"])
    assert 0 < seen.peak <= got.plan_["device_bytes"]


def _cg_window(cupy: ModuleType, name: str, max_iter: int) -> Any:
    from npt_dask import KernelRidge

    d = _data()
    params = {**_ridge(name), "tol": 1e-14, "max_iter": max_iter}
    with _counted(cupy) as seen, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CG stopped at max_iter
        got = KernelRidge(**params).fit(dev(cupy, d["x"]), d["t"], sample_weight=d["w"])
    assert got.n_iter_ == max_iter
    assert seen.fortran_copies == 0
    return seen


@pytest.mark.parametrize(("name", "evaluated"), [("exact-cg", 0), ("nystrom-cg", 1)])
def test_a_device_cg_iteration_crosses_k_numbers_whatever_the_chunks(
    cupy, name, evaluated, monkeypatch
):
    """The iterates live on the device: an iteration crosses a few k-vectors of scalars each
    way (the step's dots back, its coefficients and indices there), never a vector of n
    or m, whatever the number of row chunks: the centres, weights, slots and rows were
    moved once per fit. The one crossing a chunk allowed is the kernel's own, per block it
    evaluates (``evaluated`` a chunk a pass: Nystrom's blocks; exact CG keeps its blocks
    here): at most the block's finiteness flag and its clip's bound (kernels/)."""
    from npt_dask.ridge.routes import base as routes_base

    added = []  # what 3 iterations more cross, with 4 and with 8 row chunks a pass
    for rows in (100, 50):
        monkeypatch.setattr(routes_base, "_MAX_ROWS", rows)  # Nystrom's
        monkeypatch.setitem(KEEP, "chunk_size", rows)  # the exact route's
        few, more = _cg_window(cupy, name, 3), _cg_window(cupy, name, 6)
        added.append({f: getattr(more, f) - getattr(few, f)
                      for f in ("h2d", "h2d_bytes", "d2h", "d2h_bytes")})  # fmt: skip
    fewer, more_chunks = added
    blocks = 3 * evaluated * (8 - 4)  # blocks evaluated in 3 passes beyond 4 chunks' own
    assert more_chunks["d2h"] - fewer["d2h"] <= blocks
    assert more_chunks["d2h_bytes"] - fewer["d2h_bytes"] <= blocks  # at most a flag a block
    assert more_chunks["h2d_bytes"] - fewer["h2d_bytes"] <= 8 * blocks  # and a bound
    k = 1
    assert (fewer["d2h_bytes"] - 3 * 4 * evaluated) / 3 <= 8 * 6 * k  # k-vectors of scalars
    assert (fewer["h2d_bytes"] - 3 * 8 * 4 * evaluated) / 3 <= 8 * 16 * k


def test_a_failed_device_cholesky_is_no_factor(cupy):
    """cuSOLVER fails silently: the failing pivot's non-positive value on the diagonal, the
    input's own values after it (positive here). That is no factor, on the device as on
    the host, and exact ridge solves by least squares with scikit-learn's warning there."""
    from npt_dask import KernelRidge
    from npt_dask.errors import RidgeWarning
    from npt_dask.linalg.cholesky import cholesky

    a = np.eye(5)
    a[1, 2] = a[2, 1] = 2.0  # [[1, 2], [2, 1]] inside: eigenvalue -1
    raw = cupy.linalg.cholesky(cupy.asarray(a))
    assert bool((cupy.diag(raw)[3:] > 0).all())  # what follows the failing pivot looks fine
    assert cholesky(cupy.asarray(a)) is None
    assert cholesky(a) is None
    d = _data()
    x = np.vstack([d["x"][:200], d["x"][:200]])  # every row twice: K is singular
    params = {**_ridge("exact-direct"), "alpha": 0.0, "kernel": "linear"}
    with pytest.warns(RidgeWarning, match="least-squares"):
        got = KernelRidge(**params).fit(dev(cupy, x), d["t"])
    with pytest.warns(RidgeWarning, match="least-squares"):
        want = KernelRidge(**params).fit(host(x), d["t"])
    z = dev(cupy, d["z"], Z_CHUNKS)
    assert rel(got.predict(z), want.predict(host(d["z"], Z_CHUNKS))) < F64


def test_the_device_parameter_moves_the_rows_and_gives_back_numpy(cupy, meter):
    """``device="gpu"``: numpy rows are moved at each call's entrance, the results come
    back as they came (numpy, or a lazy host array for lazy host rows); rows already on the
    device and their lazy results stay there."""
    from npt_dask import KernelRidge, KernelRidgeClassifier

    d = _data()
    for name in ("exact-direct", "nystrom-cg"):
        want = KernelRidge(**_ridge(name)).fit(d["x"], d["t"])
        with meter(f"fit-{name}"):
            got = KernelRidge(**_ridge(name), device="gpu").fit(d["x"], d["t"])
        assert type(got.dual_coef_) is np.ndarray
        out = got.predict(d["z"])
        assert type(out) is np.ndarray
        assert rel(out, want.predict(d["z"])) < RIDGES[name][1]
        lazy = got.predict(host(d["z"], Z_CHUNKS))
        assert isinstance(lazy._meta, np.ndarray)
        assert rel(lazy, out) < F64
        assert on_device(got.predict(dev(cupy, d["z"], Z_CHUNKS)), cupy)
    labels = KernelRidgeClassifier(**_ridge("exact-direct"), device="gpu").fit(d["x"], d["y"])
    predicted = labels.predict(d["z"])
    assert type(predicted) is np.ndarray
    np.testing.assert_array_equal(
        predicted, KernelRidgeClassifier(**_ridge("exact-direct")).fit(d["x"], d["y"]).predict(
            d["z"]))  # fmt: skip


@pytest.mark.parametrize("rows", [CHUNKS, (50,) * 8], ids=["4-chunks", "8-chunks"])
@pytest.mark.parametrize("name", list(FITS))
def test_device_fits_hold_what_their_plan_says(cupy, name, rows):
    """What a fit holds on the device beyond its input rows (made before the window)."""
    x = dev(cupy, _data()["x"], rows)
    with _counted(cupy) as seen:
        got = npt.fit(x, "rbf", gamma=GAMMA, **FITS[name])
    assert 0 < seen.peak <= got.diagnostics.plan["device_bytes"]


def _fitted_on_host(make: Any, target: str | None) -> Any:
    """A method fitted on the host coordinates (its predictions are then counted alone)."""
    d = _data()
    return make().fit(to_numpy(_coordinates(None)[0]), None if target is None else d[target])


COSTS: dict[str, tuple[Any, int | None]] = {
    # name: (call on (train, test) device coordinates, library crossings: passes; None:
    # the same for any chunking, not fixed)
    "ridge": (lambda y, z: Ridge(alpha=0.1).fit(y, _data()["t"]), 1),
    "ridge-loo": (lambda y, z: Ridge(alpha=ALPHAS, criterion="loo").fit(y, _data()["t"]), 2),
    "ridge-classifier": (lambda y, z: RidgeClassifier(alpha=0.1).fit(y, _data()["y"]), 1),
    "ridge-classifier-loo": (
        lambda y, z: RidgeClassifier(alpha=ALPHAS, criterion="loo").fit(y, _data()["y"]),
        2,
    ),
    "fisher": (lambda y, z: FisherDiscriminant().fit(y, _data()["y"]), 1),
    "class_scatter": (lambda y, z: class_scatter(y, _data()["y"]), 1),
    "ridge_moments": (lambda y, z: ridge_moments(y, _data()["t"]), 1),
    "l1_dispersion": (lambda y, z: l1_dispersion(y, np.eye(8)[:2]), 1),
    "pcal1": (lambda y, z: PCAL1(n_components=2, n_init=2, random_state=0).fit(y), None),
    "alignment": (lambda y, z: alignment_scores(y, _data()["y"], "rbf", gamma=GAMMA), 1),
    "linear-svm": (lambda y, z: METHODS["linear-svm"][0]().fit(y, _data()["y"]), -1),
    **{
        f"{name}.{output}": (
            lambda y, z, name=name, output=output: getattr(
                _fitted_on_host(*METHODS[name][:2]), output
            )(z).compute(),
            0,
        )
        for name, output in [("ridge", "predict"), ("ridge-classifier", "predict"),
                             ("fisher", "predict"), ("fisher", "transform"),
                             ("pcal1", "transform"), ("linear-svm", "predict")]
    },
}  # fmt: skip


@pytest.mark.parametrize("name", list(COSTS))
def test_methods_cross_once_per_pass(cupy, name):
    """What a method moves between host and device per call, whatever the chunking (4 or
    8 row chunks of the same coordinates, already on the device):

    * host->device: the same copies for any chunking (targets or class positions once a
      fit, a pass's small arrays once a pass, coefficients once a prediction);
    * device->host through the library's one crossing point (``arrays.host.to_host``):
      one per pass, the pass's sums (a prediction: none, its result stays on the
      device; the chunked SVM: each chunk once, as scikit-learn's SGD reads it on the
      host);
    * the finite verdict of each chunk read (``runtime.inputs.check_finite_block``: one
      value through the same crossing point, a lazy result's price of raising as numpy
      does), once per chunk and pass, and at most one scalar a call;
    * any other device->host copy is one byte -- never an array.
    """
    from npt_dask.arrays.host import count_crossings

    call, passes = COSTS[name]
    train, test = (to_numpy(c) for c in _coordinates(None))
    seen_by: dict[int, Any] = {}
    for chunks in (4, 8):
        y = da.from_array(cupy.asarray(train), chunks=(400 // chunks, 8), asarray=False)
        z = da.from_array(cupy.asarray(test), chunks=(100 // chunks, 8), asarray=False)
        y, z = y.persist(), z.persist()
        with _counted(cupy) as seen, count_crossings() as crossed:
            call(y, z)
        others, other_bytes = seen.d2h - crossed.count, seen.d2h_bytes - 8 * sum(crossed.sizes)
        assert other_bytes <= others  # each at most one byte
        verdicts = crossed.sizes.count(1)
        assert verdicts % chunks <= 1  # each chunk's, once a pass (and a scalar a call)
        if passes is not None:
            assert crossed.count - verdicts == (chunks if passes == -1 else passes)
            assert verdicts <= chunks * max(passes, 1) + 1
        seen_by[chunks] = (seen, crossed.count - verdicts, sum(crossed.sizes))
    (four, crossed4, _), (eight, crossed8, _) = seen_by[4], seen_by[8]
    assert (four.h2d, four.h2d_bytes) == (eight.h2d, eight.h2d_bytes)  # per call, not chunk
    if passes != -1:
        assert crossed4 == crossed8  # the sums' crossings: per pass, not per chunk


def test_device_routes_on_a_cluster(cupy, meter):
    """Under a distributed client (in-process workers), centres kept on the cluster."""
    from distributed import LocalCluster

    from npt_dask import KernelRidge

    d = _data()
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster,
        cluster.get_client(),
    ):
        with meter("fit"):
            got = npt.fit(dev(cupy, d["x"]), "rbf", gamma=GAMMA, **FITS["krylov"])
        y = got.transform(dev(cupy, d["z"], Z_CHUNKS))
        assert on_device(y, cupy)
        with meter("transform"):
            y = to_numpy(y)
        with meter("ridge"):
            ridge = KernelRidge(**_ridge("exact-direct")).fit(dev(cupy, d["x"]), d["t"])
            out = to_numpy(ridge.predict(dev(cupy, d["z"], Z_CHUNKS)))
    assert rel(gram(y), gram(_npt_reference("krylov")[1])) < F64
    assert rel(out, _ridge_reference("exact-direct")) < F64
