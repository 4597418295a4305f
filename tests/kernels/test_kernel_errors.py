"""Kernel values that are not a kernel: callables of the wrong form or output, overflow.

Every kernel block is checked once for NaN/inf
where it is made (:meth:`npt_dask.kernels.KernelSpec.__call__`), so the error
names the kernel instead of surfacing as "no positive eigenvalue" or a
``LinAlgError`` from the eigensolver; references are dense numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

import npt_dask as npt
from npt_dask.errors import KernelParameterError, KernelValueError
from npt_dask.kernels import blockwise, make_kernel, pairwise

RNG = np.random.default_rng(20)
X = RNG.normal(size=(30, 4))


def _centred_top(k: np.ndarray, r: int) -> np.ndarray:
    n = len(k)
    c = np.eye(n) - 1.0 / n
    return np.linalg.eigvalsh(c @ k @ c)[::-1][:r]


# --- block or pair, whatever the shapes


def test_per_pair_dot_with_as_many_rows_as_features_is_the_linear_kernel():
    x = RNG.normal(size=(24, 24))  # n == d: x @ z on whole blocks has the block's shape
    model = npt.fit(x, kernel=lambda a, b: a @ b, n_components=3, chunk_size=24)
    np.testing.assert_allclose(model.eigenvalues, _centred_top(x @ x.T, 3), rtol=1e-10)


@pytest.mark.parametrize("d", [2, 3, 4])
def test_per_pair_dot_whatever_the_block_sizes(d):
    x = RNG.normal(size=(11, d))
    spec = make_kernel(lambda a, b: np.dot(a, b))
    for rows in (1, 2, 3, 4, 11):
        np.testing.assert_allclose(spec(x[:rows], x[:d]), x[:rows] @ x[:d].T, rtol=1e-12)


def test_a_function_that_works_both_ways_with_different_values_must_be_declared():
    def f(a, b):
        return a @ b.T + a.ndim  # blocks: <a, b> + 2; two rows: <x, z> + 1

    with pytest.raises(KernelParameterError, match=r"f.*blockwise\(f\).*pairwise\(f\)"):
        npt.fit(X, kernel=f, n_components=2)
    as_blocks = make_kernel(blockwise(f))(X, X)
    as_pairs = make_kernel(pairwise(f))(X, X)
    np.testing.assert_allclose(as_blocks, X @ X.T + 2, rtol=1e-12)
    np.testing.assert_allclose(as_pairs, X @ X.T + 1, rtol=1e-12)


def test_a_declared_block_function_is_not_probed():
    shapes = []

    def f(a, b):
        shapes.append((len(a), len(b)))
        return a @ b.T

    make_kernel(blockwise(f))(X[:7], X[:5])
    assert shapes == [(7, 5)]


# --- what a callable returns


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (np.nan, r"bad_kernel returned NaN"),
        (np.inf, r"bad_kernel returned inf"),
        (None, r"bad_kernel returned None"),
        ("a", r"bad_kernel returned <U1 values, not numbers"),
    ],
)
def test_a_callable_returning_no_finite_numbers_is_named(value, match):
    def bad_kernel(a, b):
        return None if value is None else np.full((len(a), len(b)), value)

    with pytest.raises(KernelValueError, match=match):
        npt.fit(X, kernel=bad_kernel, n_components=2)


def test_a_callable_going_nan_on_some_rows_only_is_named():
    def bad_kernel(a, b):
        k = a @ b.T
        k[np.abs(k) > 10] = np.nan
        return k

    with pytest.raises(KernelValueError, match="bad_kernel returned NaN"):
        npt.fit(RNG.normal(size=(40, 30)), kernel=bad_kernel, n_components=2)


def test_a_per_pair_callable_returning_none_on_a_later_pair_is_named():
    def bad_pair(x, z):
        return None if x[0] > 1.0 else float(x @ z)

    with pytest.raises(KernelValueError, match=r"bad_pair returned None for rows"):
        make_kernel(bad_pair)(np.array([[0.0, 1.0], [2.0, 1.0]]), X[:3, :2])


# --- overflow


@pytest.mark.filterwarnings("ignore::npt_dask.KernelScaleWarning")  # its float64 sample
def test_float32_data_that_overflow_name_the_kernel_range_and_precision():
    x = (X * 1e30).astype(np.float32)
    with pytest.raises(KernelValueError, match=r"rbf kernel.*e\+30.*float32.*'float64'"):
        npt.fit(x, n_components=2)


def test_a_huge_gamma_names_the_parameters():
    with pytest.raises(KernelValueError, match=r"polynomial kernel \(gamma=1e\+200.*lower gamma"):
        npt.fit(X, kernel="polynomial", gamma=1e200, n_components=2)


def test_gamma_scale_of_data_whose_variance_overflows_says_so():
    with pytest.raises(KernelValueError, match=r"gamma='scale'.*var\(X\) = inf") as info:
        npt.fit(X * 1e200, gamma="scale", n_components=2)
    assert "Got 0.0" not in str(info.value)


def test_transform_of_rows_that_overflow_the_kernel_refuses():
    model = npt.fit(X, kernel="polynomial", n_components=2)
    with pytest.raises(KernelValueError, match=r"polynomial kernel.*e\+120"):
        model.transform(X[:3] * 1e120)
    np.testing.assert_allclose(model.transform(X[:3]), model.train_coordinates()[:3], atol=1e-8)
