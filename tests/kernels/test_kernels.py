"""Kernels against scikit-learn's pairwise kernels; spec validation."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics.pairwise import pairwise_kernels

from npt_dask import KernelParameterError, KernelSpec, make_kernel
from npt_dask.arrays.threads import set_elementwise_threads
from npt_dask.kernels import KERNELS
from tests.conftest import KERNEL_VALUES


def _sk_params(spec: KernelSpec) -> dict:
    return {k: v for k, v in spec.to_dict().items() if k != "name"}


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_block_and_diag_match_sklearn(name, dtype, rng):
    a = rng.normal(size=(301, 9)).astype(dtype)
    b = rng.normal(size=(157, 9)).astype(dtype)
    a[3] = 0.0  # a zero row: cosine must follow sklearn's normalize
    spec = make_kernel(name, **KERNEL_VALUES[name]).resolve(9)
    ref = pairwise_kernels(
        a.astype(np.float64), b.astype(np.float64), metric=name, **_sk_params(spec)
    )
    got = spec(a, b)
    assert got.dtype == dtype
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())
    diag_ref = np.diag(pairwise_kernels(a.astype(np.float64), metric=name, **_sk_params(spec)))
    np.testing.assert_allclose(spec.diag(a), diag_ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_same_operand_block_is_symmetric(name, rng):
    """kappa(A, A) goes through the general product (no syrk) and is symmetric."""
    a = rng.normal(size=(400, 5))
    spec = make_kernel(name).resolve(5)
    k = spec(a, a)
    np.testing.assert_allclose(k, k.T, atol=1e-12)
    np.testing.assert_allclose(np.diag(k), spec.diag(a), atol=1e-10)


def test_threading_does_not_change_results(rng):
    a, b = rng.normal(size=(1000, 20)), rng.normal(size=(900, 20))
    spec = KernelSpec("rbf", gamma=0.05)
    threaded = spec(a, b)
    set_elementwise_threads(1)
    try:
        single = spec(a, b)
    finally:
        set_elementwise_threads(2)
    np.testing.assert_array_equal(threaded, single)


def test_defaults_follow_sklearn():
    spec = make_kernel("polynomial").resolve(4)
    assert spec.to_dict() == {"name": "polynomial", "gamma": 0.25, "degree": 3.0, "coef0": 1.0}
    assert make_kernel("sigmoid").resolve(10).to_dict() == {
        "name": "sigmoid",
        "gamma": 0.1,
        "coef0": 1.0,
    }
    assert make_kernel("rbf", degree=5, coef0=2).to_dict() == {"name": "rbf", "gamma": None}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_round_trip_dict(name):
    spec = make_kernel(name, **KERNEL_VALUES[name]).resolve(3)
    data = spec.to_dict()
    assert KernelSpec.from_dict(data) == spec
    assert make_kernel(data) == spec
    data["name"] = "changed"
    assert spec.name == name  # to_dict returns a fresh dict


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "gaussian"}, "Unknown kernel"),
        ({"name": "rbf", "gamma": -1.0}, "gamma"),
        ({"name": "rbf", "gamma": float("nan")}, "finite"),
        ({"name": "rbf", "gamma": "0.1"}, "real number"),
        ({"name": "polynomial", "degree": -2}, "degree"),
        ({"name": "linear", "gamma": 0.1}, "takes no 'gamma'"),
    ],
)
def test_invalid_specs(kwargs, match):
    with pytest.raises(KernelParameterError, match=match):
        KernelSpec(**kwargs)


def test_spec_errors_are_value_errors():
    with pytest.raises(ValueError, match="Unknown kernel"):
        make_kernel("nope")
    with pytest.raises(ValueError, match="not both"):
        make_kernel(KernelSpec("rbf"), gamma=1.0)
    with pytest.raises(ValueError, match="kernel must be a name"):
        make_kernel(3.0)
    with pytest.raises(ValueError, match="returned shape"):  # a per-pair function, unwrapped
        make_kernel(lambda a, b: float(a[0] @ b[0]))(np.ones((2, 2)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="resolve"):
        KernelSpec("rbf")(np.ones((2, 2)), np.ones((2, 2)))


def test_spec_is_frozen():
    spec = KernelSpec("rbf", gamma=1.0)
    with pytest.raises(AttributeError):
        spec.gamma = 2.0


def test_psd_flags():
    assert KernelSpec("rbf").is_psd
    assert not KernelSpec("sigmoid").is_psd
    assert KernelSpec("polynomial", degree=2, coef0=1).is_psd
    assert not KernelSpec("polynomial", degree=2.5, coef0=1).is_psd


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_out_buffer_is_filled_and_checked(name, rng):
    a, b = rng.normal(size=(50, 4)), rng.normal(size=(30, 4))
    spec = make_kernel(name).resolve(4)
    out = np.full((50, 30), np.nan)
    got = spec(a, b, out=out)
    assert got is out or np.shares_memory(got, out)
    np.testing.assert_allclose(out, spec(a, b), atol=1e-14)
    with pytest.raises(ValueError, match="C-contiguous"):
        spec(a, b, out=np.empty((30, 50)).T)
    with pytest.raises(ValueError, match="float64"):
        spec(a, b, out=np.empty((50, 30), dtype=np.float32))


def test_scratch_and_populated_buffers():
    from npt_dask.arrays.buffers import clear_scratch, populated_empty, scratch

    big = populated_empty((1 << 22,), np.float64)  # 32 MiB: the populated path
    big[:] = 1.0
    assert big.sum() == 1 << 22
    one = scratch("t", (100, 10), np.float32)
    two = scratch("t", (10, 10), np.float64)
    assert np.shares_memory(one, two)  # reused, not reallocated
    clear_scratch()
    assert not np.shares_memory(scratch("t", (10, 10), np.float64), two)
