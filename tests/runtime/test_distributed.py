"""The same fit and projection on a multi-process distributed cluster."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client, LocalCluster

import npt_dask as npt
from npt_dask.runtime.scheduler import current_client
from tests.conftest import align_signs


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c


@pytest.mark.parametrize("cache", ["recompute", "memory"])
def test_krylov_on_cluster_matches_dense(client, cache):
    rng = np.random.default_rng(5)
    x, z = rng.normal(size=(700, 6)), rng.normal(size=(90, 6))
    assert current_client() is client
    remote = npt.fit(
        x,
        "rbf",
        gamma=0.2,
        n_components=7,
        solver="krylov",
        chunk_size=128,
        cache=cache,
        random_state=0,
    )
    y_remote, r_remote = remote.transform_with_residual(z)
    assert remote.diagnostics.converged
    assert remote.diagnostics.cache == cache
    dense = npt.fit(x, "rbf", gamma=0.2, n_components=7, solver="dense")
    np.testing.assert_allclose(remote.eigenvalues, dense.eigenvalues, rtol=1e-10)
    ref = dense.transform(z)
    np.testing.assert_allclose(align_signs(y_remote, ref), ref, atol=1e-7)
    np.testing.assert_allclose(r_remote, dense.residual(z), atol=1e-7)


def test_project_on_cluster_matches_local(client, tmp_path):
    rng = np.random.default_rng(6)
    x, z = rng.normal(size=(600, 5)), rng.normal(size=(900, 5))
    model = npt.fit(x, "rbf", gamma=0.3, n_components=5, solver="dense")
    stored = npt.load(model.save(tmp_path / "m.zarr"))
    for m, name in ((model, "mem"), (stored, "store")):
        ds = npt.project(
            m, z, tmp_path / f"{name}.zarr", client=client, chunk_size=200, progress=False
        )
        np.testing.assert_allclose(ds["coordinates"].values, model.transform(z), atol=1e-12)


def test_landmark_pass_on_cluster_reports_progress_and_matches_the_projection(client, capsys):
    """On a cluster, the training pass reports each row chunk from the
    driver, and its certificate and moments are the projection's (another code path)."""
    assert current_client() is client
    x = np.random.default_rng(16).normal(size=(600, 4))
    labels = (x[:, 0] > 0).astype(int)
    model = npt.fit(x, gamma=0.3, n_components=6, landmarks=80, chunk_size=100,
                    labels=labels, random_state=0, progress=True)  # fmt: skip
    err = capsys.readouterr().err
    assert "npt fit: training pass [" in err
    assert "6/6 chunks" in err
    y = model.transform(x)
    onehot = np.eye(2)[labels]
    np.testing.assert_allclose(model.moments.gram, y.T @ y, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(model.moments.cross, y.T @ onehot, rtol=1e-9, atol=1e-9)
    cert = model.diagnostics.landmarks["certificate"]
    np.testing.assert_allclose(cert["max"], model.residual(x).max(), rtol=1e-9)
