"""The CuPy stand-in holds CuPy's rules, and counts what a device would.

The rules run on the stand-in always and on real CuPy where CUDA is (``xp_backend``), so a
rule the stand-in holds that CuPy does not fails there; the counters exist only on the
stand-in (``standin`` fixture).
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import array_api_compat
import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
from dask.array.utils import compute_meta, meta_from_array

from tests.standin.harness import backend

IMPLICIT = r"Implicit conversion to a NumPy array is not allowed"
FOREIGN = r"Unsupported type <class 'numpy\.ndarray'>"


@pytest.fixture
def standin() -> ModuleType:
    with backend("standin") as cupy:
        yield cupy


def _x(cupy: ModuleType) -> object:
    return cupy.asarray(np.arange(12.0).reshape(4, 3))


# --- the rules (stand-in and real CuPy) ------------------------------------------------------


def test_implicit_conversion_to_numpy_is_refused(xp_backend):
    x = _x(xp_backend)
    with pytest.raises(TypeError, match=IMPLICIT):
        np.asarray(x)
    with pytest.raises(TypeError, match=IMPLICIT):
        np.array(x, dtype=float)
    with pytest.raises((BufferError, RuntimeError, TypeError)):
        np.from_dlpack(x)  # a CUDA tensor: numpy cannot import it
    assert x.__dlpack_device__()[0] == 2  # kDLCUDA


@pytest.mark.parametrize(
    "combine",
    [
        lambda x, h: x + h,
        lambda x, h: h + x,
        lambda x, h: x * h[:1],  # a numpy array of one value is still an array
        lambda x, h: x @ h.reshape(3, 1),
        lambda x, h: x < h,
        lambda x, h: np.add(x, h),
        lambda x, h: np.dot(x, h),
        lambda x, h: np.concatenate([x, h.reshape(1, 3)]),
    ],
    ids=["add", "radd", "mul", "matmul", "lt", "np.add", "np.dot", "np.concatenate"],
)
def test_numpy_operands_are_refused(xp_backend, combine):
    x, h = _x(xp_backend), np.ones(3)
    with pytest.raises(TypeError, match=FOREIGN):
        combine(x, h)


def test_module_functions_refuse_numpy_operands(xp_backend):
    cupy = xp_backend
    x, h = _x(cupy), np.ones((4, 3))
    for call in (lambda: cupy.add(x, h), lambda: cupy.concatenate([x, h]),
                 lambda: cupy.where(x > 1, x, h), lambda: cupy.ascontiguousarray(h)):  # fmt: skip
        with pytest.raises(TypeError):
            call()
    with pytest.raises(np.linalg.LinAlgError):
        cupy.linalg.cholesky(np.eye(3))


def test_scalars_mix_with_device_arrays(xp_backend):
    x = _x(xp_backend)
    for y in (x * 2, 2.0 * x, x * np.float64(2.0), np.float32(2) * x, x + True):
        assert isinstance(y, xp_backend.ndarray)
    np.testing.assert_array_equal((x * np.float64(2.0)).get(), np.arange(12.0).reshape(4, 3) * 2)


def test_numpy_functions_dispatch_to_the_device(xp_backend):
    cupy, x = xp_backend, _x(xp_backend)
    for out in (np.sum(x), np.isfinite(x), np.exp(x), np.mean(x, axis=0), np.linalg.norm(x),
                np.concatenate([x, x]), np.maximum(x, 3.0), np.where(x > 3, x, 0.0)):  # fmt: skip
        assert isinstance(out, cupy.ndarray)
    assert float(np.sum(x)) == 66.0
    assert np.isfinite(x).all().item()


def test_arrays_behave_as_cupys(xp_backend):
    cupy, x = xp_backend, _x(xp_backend)
    assert (x.shape, x.ndim, x.size, x.nbytes, x.itemsize) == ((4, 3), 2, 12, 96, 8)
    assert (x.flags.c_contiguous, x.T.flags.f_contiguous) == (True, True)
    assert (x.dtype, x.astype(np.float32).dtype) == (np.float64, np.float32)
    assert len(x) == 4
    assert all(isinstance(row, cupy.ndarray) for row in x)
    assert type(x.get()) is type(cupy.asnumpy(x)) is np.ndarray
    assert (x[1, 2].item(), x[1:3].shape) == (5.0, (2, 3))
    assert x[cupy.asarray([0, 2])].shape == (2, 3)
    assert x[np.array([0, 2])].shape == (2, 3)  # CuPy copies a numpy index to the device
    assert cupy.take(x, np.array([0, 2]), axis=0).shape == (2, 3)  # ... as take does
    assert isinstance(cupy.zeros_like(np.ones(3)), cupy.ndarray)  # a prototype's shape only
    y = x.copy()
    y[0] = np.array([7.0, 8.0, 9.0])  # ... and a numpy value
    y[1] = cupy.zeros(3)
    assert y.sum().item() == 24.0 + 66.0 - 3.0 - 12.0
    assert cupy.get_array_module(x) is cupy
    assert cupy.get_array_module(np.ones(1)) is np
    assert x.device == cupy.cuda.Device(0)
    with pytest.raises(TypeError):
        range(cupy.asarray(3))  # no __index__ on CuPy's arrays
    free, total = cupy.cuda.Device(0).mem_info
    assert 0 < free <= total


def test_array_api_compat_sees_cupy(xp_backend):
    import array_api_compat.cupy

    x = _x(xp_backend)
    assert array_api_compat.is_cupy_array(x)
    assert array_api_compat.array_namespace(x) is array_api_compat.cupy
    assert array_api_compat.device(x) == xp_backend.cuda.Device(0)
    xp = array_api_compat.cupy
    moved = xp.asarray(np.ones(3), device=array_api_compat.device(x))
    assert isinstance(moved, xp_backend.ndarray)
    w, _ = xp.linalg.eigh(x.T @ x)
    assert isinstance(w, xp_backend.ndarray)
    assert w.shape == (3,)


def test_dask_arrays_of_device_chunks(xp_backend):
    cupy = xp_backend
    x = da.from_array(_x(cupy), chunks=(3, 3), asarray=False)
    assert isinstance(x._meta, cupy.ndarray)
    host = da.from_array(np.arange(12.0).reshape(4, 3), chunks=(3, 3))
    moved = host.map_blocks(cupy.asarray, meta=cupy.empty((0, 0)))
    for lazy in (x.sum(axis=0), moved @ moved.T, da.concatenate([x, moved]),
                 da.einsum("ij,ij->i", x, moved), da.tensordot(x, moved, axes=([0], [0])),
                 x[:, 1:], x.map_blocks(lambda b: b * 2)):  # fmt: skip
        assert isinstance(lazy._meta, cupy.ndarray)
        assert isinstance(lazy.compute(), cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(x.sum(axis=0).compute()), [18.0, 22.0, 26.0])
    assert isinstance(meta_from_array(x), cupy.ndarray)
    assert isinstance(compute_meta(np.add, np.float64, x._meta, x._meta), cupy.ndarray)
    with dask.config.set(scheduler="sync"):
        assert isinstance(x.sum().compute(), cupy.ndarray)


def test_dataarrays_wrap_device_chunks(xp_backend):
    cupy = xp_backend
    data = da.from_array(_x(cupy), chunks=(2, 3), asarray=False)
    arr = xr.DataArray(data, dims=("sample", "feature"), coords={"sample": list("abcd")})
    out = (arr * 2).sum("feature")
    assert isinstance(out.data._meta, cupy.ndarray)
    assert isinstance(out.data.compute(), cupy.ndarray)
    assert isinstance(arr.isel(sample=[0, 2]).data.compute(), cupy.ndarray)


def test_failed_cholesky_is_silent_unless_asked(xp_backend):
    import cupyx

    cupy = xp_backend
    bad = cupy.asarray([[1.0, 2.0], [2.0, 1.0]])  # eigenvalues 3 and -1
    factor = cupy.asnumpy(cupy.linalg.cholesky(bad))  # cuSOLVER reports through devInfo only
    assert not (np.isfinite(np.diag(factor)) & (np.diag(factor) > 0)).all()
    with cupyx.errstate(linalg="raise"), pytest.raises(np.linalg.LinAlgError):
        cupy.linalg.cholesky(bad)


# --- the counters (stand-in only) ------------------------------------------------------------


def test_crossings_are_counted(standin):
    cupy = standin
    with cupy._standin.count() as seen:
        x = cupy.asarray(np.ones((10, 4)))  # one host->device copy, 320 bytes
        y = cupy.asarray(x)  # already on the device: nothing
        s = float(x.sum())  # one device->host copy (and its sync)
        b = bool(x[0, 0] > 0)
        _ = x.get(), x[:2].tolist()
        cupy.cuda.Device().synchronize()
        _ = x[x > 0]  # a boolean mask: a sync for the output's size
    assert y is x
    assert (s, b) == (40.0, True)
    assert (seen.h2d, seen.h2d_bytes) == (1, 320)
    assert (seen.d2h, seen.d2h_bytes) == (4, 8 + 1 + 320 + 64)
    assert seen.syncs == 4 + 1 + 1
    with cupy._standin.count() as seen:
        x[np.array([0, 1])]
        x.take([0, 1], axis=0)
        x[0] = np.zeros(4)
    assert (seen.h2d, seen.h2d_bytes) == (3, 16 + 16 + 32)


def test_fortran_copies_are_counted(standin):
    import cupyx.scipy.linalg

    cupy = standin
    low = cupy.asarray(np.tril(np.ones((50, 50))) + 50 * np.eye(50))
    rhs = cupy.asarray(np.ones((50, 2)))
    with cupy._standin.count() as seen:
        out = cupyx.scipy.linalg.solve_triangular(low, rhs, lower=True)
    assert (seen.fortran_copies, seen.fortran_bytes) == (1, 50 * 50 * 8)
    np.testing.assert_allclose(cupy.asnumpy(low @ out), np.ones((50, 2)))
    fortran = cupy.asfortranarray(low)
    with cupy._standin.count() as seen:
        cupyx.scipy.linalg.solve_triangular(fortran, rhs, lower=True)
    assert seen.fortran_copies == 0


def test_peak_counts_the_most_bytes_held_at_once(standin):
    cupy = standin
    keep = cupy.zeros(1000)  # live before the window: not in its peak
    with cupy._standin.count() as seen:
        a = cupy.zeros(1000)  # 8,000
        b = cupy.zeros(2000)  # 24,000 held
        view = b[::2]  # a view shares b's buffer
        del a  # 16,000
        c = cupy.zeros(1500)  # 28,000: the peak
        del b  # the view keeps b's buffer
        d = cupy.zeros(100)  # 28,800 held, but the peak was 28,000 + ... = 28,800
    assert seen.peak == 28_800
    assert seen.live_bytes == 16_000 + 12_000 + 800
    assert seen.allocations == 4
    del view, c, d
    assert cupy._standin.live_bytes() >= keep.nbytes
    pool = cupy.get_default_memory_pool()
    assert pool.used_bytes() == cupy._standin.live_bytes()


def test_counters_are_thread_safe(standin):
    from concurrent.futures import ThreadPoolExecutor

    cupy = standin

    def work(_: int) -> float:
        x = cupy.asarray(np.ones(100))
        return float(x.sum())

    with cupy._standin.count() as seen, ThreadPoolExecutor(4) as pool:
        assert sum(pool.map(work, range(200))) == 200 * 100.0
    assert (seen.h2d, seen.d2h, seen.h2d_bytes) == (200, 200, 200 * 800)
    assert seen.live_bytes == 0


def test_the_standin_is_gone_outside_its_block():
    before = sys.modules.get("cupy")
    with backend("standin") as cupy:
        assert sys.modules["cupy"] is cupy
        assert cupy.__file__.endswith("standin/cupy/__init__.py")
        assert array_api_compat.cupy.ndarray is cupy.ndarray
    assert sys.modules.get("cupy") is before
    assert str(Path(cupy.__file__).parents[1]) not in sys.path


def test_the_table_wraps_numpy(standin):
    cupy = standin
    table = cupy.TABLE
    assert (table["sum"], table["nonzero"], table["zeros"], table["result_type"],
            table["exp"], table["float64"], table["loadtxt"]) == (
        "DEVICE", "SYNC", "CREATE", "HOST", "UFUNC", "TYPE", "SKIP")  # fmt: skip
    assert cupy.result_type(cupy.zeros(2, np.float32), np.float64) == np.float64
    with cupy._standin.count() as seen:
        cupy.nonzero(cupy.arange(3))
    assert seen.syncs == 1
