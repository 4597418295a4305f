"""Every public route on CuPy-backed dask arrays against the numpy route.

Rows are ``da.from_array(cupy.asarray(x), chunks=..., asarray=False)``; each route's
result is compared with the same call on the numpy rows: within 1e-10 relative in
float64, and within 1e-4 of the largest value in float32 (the float32 bound of the CPU
suite's float32 ridge route: float32 blocks, float64 sums and solves). Lazy per-row outputs
must stay CuPy-backed (``out._meta`` a ``cupy.ndarray``) until computed; the fitted
model's small arrays are numpy.

Skipped unless CuPy imports and a CUDA device is present (marker ``gpu``:
``pytest tests/gpu -m gpu``).
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import pytest


def _cupy() -> Any:
    try:
        import cupy

        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # no CuPy, no driver, no device
        return None


cupy = _cupy()

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(cupy is None, reason="needs CuPy and a CUDA device"),
]

GAMMA = 0.5
F64 = 1e-10
F32 = 1e-4


def _data(n: int = 400, d: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    t = np.sin(x[:, 0]) + 0.1 * rng.normal(size=n)
    z = rng.normal(size=(n // 4, d))
    return x, t, z


def _gpu(x: np.ndarray, chunks: int = 100) -> da.Array:
    return da.from_array(cupy.asarray(x), chunks=(chunks, x.shape[1]), asarray=False)


def _cpu(x: np.ndarray, chunks: int = 100) -> da.Array:
    return da.from_array(x, chunks=(chunks, x.shape[1]))


def _lazy_on_gpu(out: Any) -> bool:
    data = getattr(out, "data", out) if hasattr(out, "dims") else out
    return isinstance(data, da.Array) and isinstance(data._meta, cupy.ndarray)


def _host(a: Any) -> np.ndarray:
    if hasattr(a, "dims"):
        a = a.data
    if isinstance(a, da.Array):
        a = a.compute()
    return cupy.asnumpy(a) if isinstance(a, cupy.ndarray) else np.asarray(a)


def _rel(got: Any, want: Any) -> float:
    got, want = _host(got), _host(want)
    assert got.shape == want.shape
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-300))


def _gram(y: Any) -> np.ndarray:
    """Coordinates up to signs and rotations within equal eigenvalues: ``Y Y^T``."""
    y = _host(y)
    return y @ y.T


# --- the Nonlinear Projection Trick -------------------------------------------------------


FITS = [
    {"solver": "dense", "n_components": 8},
    {"solver": "krylov", "n_components": 8, "random_state": 0},
    {"solver": "krylov", "n_components": 8, "random_state": 0, "cache": "recompute"},
    {"landmarks": 60, "landmark_method": "uniform", "random_state": 0},
    {"landmarks": 60, "landmark_method": "rpcholesky", "random_state": 0},
]


@pytest.mark.parametrize("params", FITS, ids=lambda p: "-".join(str(v) for v in p.values()))
def test_fit_transform_residual_on_cupy_equal_numpy(params):
    import npt_dask as npt

    x, _, z = _data()
    want = npt.fit(_cpu(x), "rbf", gamma=GAMMA, **params)
    got = npt.fit(_gpu(x), "rbf", gamma=GAMMA, **params)
    assert type(got.eigenvalues) is np.ndarray  # the model's small arrays are numpy
    assert _rel(got.eigenvalues, want.eigenvalues) < F64
    y = got.transform(_gpu(z))
    assert _lazy_on_gpu(y)
    assert _rel(_gram(y), _gram(want.transform(_cpu(z)))) < F64
    res = got.residual(_gpu(z))
    assert _lazy_on_gpu(res)
    assert _rel(res, want.residual(_cpu(z))) < F64


def test_fit_from_a_start_on_cupy_equals_numpy():
    import npt_dask as npt

    x, _, _ = _data()
    first = npt.fit(_cpu(x[:200]), "rbf", gamma=GAMMA, n_components=6)
    want = npt.fit(_cpu(x), "rbf", gamma=GAMMA, n_components=6, start=first, random_state=0)
    got = npt.fit(_gpu(x), "rbf", gamma=GAMMA, n_components=6, start=first, random_state=0)
    assert _rel(got.eigenvalues, want.eigenvalues) < F64


def test_float32_fit_is_within_its_bound():
    import npt_dask as npt

    x, _, z = _data()
    x32, z32 = x.astype(np.float32), z.astype(np.float32)
    want = npt.fit(_cpu(x), "rbf", gamma=GAMMA, n_components=6, random_state=0)
    got = npt.fit(_gpu(x32), "rbf", gamma=GAMMA, n_components=6, random_state=0)
    assert _rel(got.eigenvalues, want.eigenvalues) < F32
    assert _rel(_gram(got.transform(_gpu(z32))), _gram(want.transform(_cpu(z)))) < F32


def test_project_to_zarr_from_cupy_equals_numpy(tmp_path):
    import npt_dask as npt

    x, _, z = _data()
    model = npt.fit(_cpu(x), "rbf", gamma=GAMMA, n_components=6, random_state=0)
    want = npt.project(model, _cpu(z), tmp_path / "cpu.zarr", chunk_size=50, progress=False)
    got = npt.project(model, _gpu(z), tmp_path / "gpu.zarr", chunk_size=50, progress=False)
    for name in ("coordinates", "residual"):
        assert _rel(got[name].values, want[name].values) < F64


def test_partial_fit_on_cupy_equals_numpy():
    import npt_dask as npt

    x, _, _ = _data()
    model = npt.fit(_cpu(x[:200]), "rbf", gamma=GAMMA, n_components=None, solver="dense")
    want = model.partial_fit(_cpu(x[200:]), residual_tol=0.01)
    got = model.partial_fit(_gpu(x[200:]), residual_tol=0.01)
    assert _rel(got.eigenvalues, want.eigenvalues) < F64


def test_nonlinear_projection_with_inverse_on_cupy_equals_numpy():
    from npt_dask import NonlinearProjection

    x, _, z = _data()
    common = {"kernel": "rbf", "gamma": GAMMA, "n_components": 6, "random_state": 0,
              "fit_inverse_transform": True}  # fmt: skip
    want = NonlinearProjection(**common).fit(_cpu(x))
    got = NonlinearProjection(**common).fit(_gpu(x))
    y = got.transform(_gpu(z))
    assert _lazy_on_gpu(y)
    assert _rel(_gram(y), _gram(want.transform(_cpu(z)))) < F64
    back = got.inverse_transform(got.transform(_gpu(z)))
    assert _rel(back, want.inverse_transform(want.transform(_cpu(z)))) < 1e-8


# --- kernel ridge -------------------------------------------------------------------------


RIDGES = [
    {"landmarks": None, "solver": "direct"},
    {"landmarks": 60, "solver": "direct"},
    {"landmarks": 60, "solver": "cg", "tol": 1e-10, "max_iter": 500},
    {"landmarks": None, "solver": "cg", "tol": 1e-10, "max_iter": 500},
]


@pytest.mark.parametrize("params", RIDGES, ids=lambda p: f"{p['landmarks']}-{p['solver']}")
def test_kernel_ridge_on_cupy_equals_numpy(params):
    from npt_dask import KernelRidge

    x, t, z = _data()
    common = {"alpha": 0.05, "kernel": "rbf", "gamma": GAMMA, "random_state": 0,
              "chunk_size": 100, **params}  # fmt: skip
    want = KernelRidge(**common).fit(_cpu(x), t)
    got = KernelRidge(**common).fit(_gpu(x), cupy.asarray(t))
    out = got.predict(_gpu(z))
    assert _lazy_on_gpu(out)
    tol = F64 if params["solver"] == "direct" else 1e-8  # CG: its tolerance's reach
    assert _rel(out, want.predict(_cpu(z))) < tol


@pytest.mark.parametrize("landmarks", [None, 60])
def test_kernel_ridge_classifier_on_cupy_equals_numpy(landmarks):
    from npt_dask import KernelRidgeClassifier

    x, t, z = _data()
    y = (t > 0).astype(int)
    common = {"alpha": 0.05, "kernel": "rbf", "gamma": GAMMA, "landmarks": landmarks,
              "random_state": 0, "chunk_size": 100}  # fmt: skip
    want = KernelRidgeClassifier(**common).fit(_cpu(x), y)
    got = KernelRidgeClassifier(**common).fit(_gpu(x), cupy.asarray(y))
    scores = got.decision_function(_gpu(z))
    assert _lazy_on_gpu(scores)
    assert _rel(scores, want.decision_function(_cpu(z))) < F64
    np.testing.assert_array_equal(_host(got.predict(_gpu(z))), _host(want.predict(_cpu(z))))


def test_float32_ridge_is_within_its_bound():
    from npt_dask import KernelRidge

    x, t, z = _data()
    common = {"alpha": 0.05, "kernel": "rbf", "gamma": GAMMA, "landmarks": 60,
              "random_state": 0, "precision": "float32"}  # fmt: skip
    want = KernelRidge(**{**common, "precision": "float64"}).fit(_cpu(x), t)
    got = KernelRidge(**common).fit(_gpu(x.astype(np.float32)), t)
    assert _rel(got.predict(_gpu(z.astype(np.float32))), want.predict(_cpu(z))) < F32


@pytest.mark.parametrize("landmarks", [None, 60])
def test_the_searches_on_cupy_choose_as_numpy(landmarks):
    from npt_dask import KernelRidgeClassifierCV, KernelRidgeCV

    x, t, z = _data()
    common = {"alphas": [0.01, 0.1], "gammas": [0.2, GAMMA], "landmarks": landmarks,
              "random_state": 0}  # fmt: skip
    want = KernelRidgeCV(**common).fit(_cpu(x), t)
    got = KernelRidgeCV(**common).fit(_gpu(x), cupy.asarray(t))
    assert (got.alpha_, got.gamma_) == (want.alpha_, want.gamma_)
    assert _rel(got.predict(_gpu(z)), want.predict(_cpu(z))) < F64
    y = (t > 0).astype(int)
    want = KernelRidgeClassifierCV(**common).fit(_cpu(x), y)
    got = KernelRidgeClassifierCV(**common).fit(_gpu(x), cupy.asarray(y))
    assert (got.alpha_, got.gamma_) == (want.alpha_, want.gamma_)
