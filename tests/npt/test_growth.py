"""Models that grow (``partial_fit``): exact against dense references, caps and records.

References are independent: a dense numpy eigendecomposition of the centred
(or uncentred) kernel matrix of the grown model's basis rows, and the kernel
itself for the uncentred exact map (002: ``<y_i, y(z)> = kappa(x_i, z)``).
"""

from __future__ import annotations

import json

import dask.array as da
import numpy as np
import pytest
import scipy.linalg
from sklearn.metrics.pairwise import rbf_kernel

import npt_dask as npt
from npt_dask.errors import InputError, InputTypeError
from npt_dask.npt.growth import GrowingModel, grow
from tests.conftest import align_signs, centered_gram

GAMMA = 0.3


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    return rng.normal(size=(260, 4))


@pytest.fixture(scope="module")
def parent(data):
    return npt.fit(data[:40], kernel="rbf", gamma=GAMMA, n_components=None)


def _reference(basis, z, center=True):
    """Dense eigenpairs of the basis rows' kernel and the coordinates of z."""
    k = rbf_kernel(basis, basis, gamma=GAMMA)
    kz = rbf_kernel(z, basis, gamma=GAMMA)
    if center:
        mean = k.mean(axis=0)
        kz = kz - kz.mean(axis=1, keepdims=True) - mean + mean.mean()
        k = centered_gram(k)
    lam, u = scipy.linalg.eigh(k)
    keep = lam > 1e-10 * lam[-1]
    lam, u = lam[keep][::-1], u[:, keep][:, ::-1]
    return lam, kz @ u / np.sqrt(lam)


def _grown(parent, data, order, sizes, chunks, residual_tol):
    rows = data[40:][order]
    model = parent
    start = 0
    for size in sizes:
        batch = da.from_array(rows[start : start + size], chunks=(chunks, -1))
        model = model.partial_fit(batch, residual_tol=residual_tol)
        start += size
    return model


@pytest.mark.parametrize(
    ("seed", "sizes", "chunks"),
    [(0, (220,), 64), (1, (70, 70, 80), 25), (2, (5, 100, 115), 1000)],
)
def test_full_rank_growth_equals_dense_fit_on_the_union(parent, data, seed, sizes, chunks):
    order = np.random.default_rng(seed).permutation(220)
    grown = _grown(parent, data, order, sizes, chunks, residual_tol=0.05)
    assert isinstance(grown, GrowingModel)
    assert 40 < grown.n_basis < 260
    z = data[::7]
    lam, ref = _reference(grown.basis, z)
    assert grown.n_components == len(lam)
    assert np.abs(grown.eigenvalues - lam).max() <= 1e-10 * lam[0]
    y = grown.transform(z)
    np.testing.assert_allclose(align_signs(y, ref)[:, :30], ref[:, :30], atol=1e-7)
    # every row's recorded residual bounds its residual now; the last batch's is exact
    res_now = np.asarray(grown.residual(data[40:][order]))
    assert np.all(res_now**2 <= grown.seen_residuals**2 + 1e-10)
    last = slice(220 - sizes[-1], 220)
    np.testing.assert_allclose(res_now[last] ** 2, grown.seen_residuals[last] ** 2, atol=1e-10)


def test_uncentred_growth_is_the_exact_map(data):
    start = npt.fit(data[:30], kernel="rbf", gamma=GAMMA, n_components=None, center=False)
    grown = start.partial_fit(data[30:120], residual_tol=0.01).partial_fit(data[120:200])
    y_basis = grown.train_coordinates()
    z = data[200:]
    gram = y_basis @ np.asarray(grown.transform(z)).T
    np.testing.assert_allclose(gram, rbf_kernel(grown.basis, z, gamma=GAMMA), atol=1e-8)
    lam, _ = _reference(grown.basis, z, center=False)
    assert np.abs(grown.eigenvalues - lam).max() <= 1e-10 * lam[0]


def test_zero_tolerance_adds_every_new_direction_and_a_large_one_nothing(parent, data):
    everything = parent.partial_fit(data[40:90], residual_tol=0)
    assert everything.rows_added == 50
    assert everything.batches[0]["rows_added"] == 50
    assert everything.batches[0]["after"]["max"] < 1e-6
    nothing = parent.partial_fit(data[40:90], residual_tol=1.0)
    assert nothing.rows_added == 0
    assert nothing.n_basis == 40
    assert nothing.model.eigenvalues is parent.eigenvalues  # no refit: the parent itself


def test_duplicates_add_nothing_and_near_duplicates_once(parent, data):
    dup = parent.partial_fit(np.vstack([data[:40], data[5:9]]), residual_tol=0)
    assert dup.rows_added == 0
    x = data[100]
    twins = np.vstack([x, x + 1e-9, x, data[101]])
    grown = parent.partial_fit(twins, residual_tol=0)
    assert grown.rows_added == 2  # one of the three copies, and the other row


def test_max_landmarks_caps_growth_and_picks_the_largest_residual_first(parent, data):
    capped = parent.partial_fit(data[40:140], residual_tol=0, max_landmarks=45)
    assert capped.n_basis == 45
    first = capped.basis[40]
    # the first pick has the largest share of kappa(x, x) outside the span
    kz = rbf_kernel(data[:40], data[40:140], gamma=GAMMA)
    w = scipy.linalg.solve_triangular(np.linalg.cholesky(rbf_kernel(data[:40], gamma=GAMMA)),
                                      kz, lower=True)  # fmt: skip
    outside = 1 - (w * w).sum(0)
    np.testing.assert_array_equal(first, data[40:140][np.argmax(outside)])
    full = capped.partial_fit(data[140:], residual_tol=0, max_landmarks=45)
    assert full.n_basis == 45
    assert full.batches[-1]["rows_added"] == 0


def test_records_and_lineage_survive_save_load_and_growth(parent, data, tmp_path):
    grown = parent.partial_fit(data[40:120])
    saved = grown.save(tmp_path / "grown.zarr")
    manifest = json.loads((saved / "zarr.json").read_text())
    text = json.dumps(manifest)
    assert parent.identity in text
    assert '"rows_added"' in text
    loaded = npt.load(saved)
    record = loaded.diagnostics.landmarks
    assert record["method"] == "grown"
    assert record["lineage"][0]["parent"] == parent.identity
    assert [b["rows_seen"] for b in record["batches"]] == [80]
    again = loaded.partial_fit(data[120:200])
    in_memory = grown.partial_fit(data[120:200])
    np.testing.assert_array_equal(again.basis, in_memory.basis)
    np.testing.assert_allclose(again.eigenvalues, in_memory.eigenvalues, rtol=1e-10)
    z = data[200:]
    np.testing.assert_allclose(
        align_signs(np.asarray(again.transform(z)), np.asarray(in_memory.transform(z))),
        in_memory.transform(z),
        atol=1e-8,
    )
    lineage = again.model.diagnostics.landmarks["lineage"]
    assert [e["parent"] for e in lineage] == [parent.identity, loaded.identity]


def test_grow_bad_input_names_the_fix(parent, data):
    with pytest.raises(InputError, match="feature"):
        parent.partial_fit(data[40:60, :3])
    bad = data[40:60].copy()
    bad[3, 1] = np.nan
    with pytest.raises(InputError, match="NaN"):
        parent.partial_fit(bad)
    with pytest.raises(InputError, match="n_components=None"):
        npt.fit(data[:40], kernel="rbf", gamma=GAMMA, n_components=5).partial_fit(data[40:60])
    k = rbf_kernel(data[:40], gamma=GAMMA)
    pre = npt.fit(k, kernel="precomputed", n_components=None)
    with pytest.raises(InputError, match="precomputed"):
        pre.partial_fit(rbf_kernel(data[40:60], data[:40], gamma=GAMMA))
    with pytest.raises(InputError, match="residual_tol"):
        parent.partial_fit(data[40:60], residual_tol=-1)
    with pytest.raises(InputTypeError, match="max_landmarks"):  # not an int: the table's
        grow(parent, data[40:60], max_landmarks=2.5)  # type: ignore[arg-type]


def test_a_batch_that_adds_nothing_keeps_the_rotation(parent, data):
    grown = parent.partial_fit(data[40:100], residual_tol=0.05)
    values = grown.eigenvalues  # rotates once
    same = grown.partial_fit(data[:40], residual_tol=0.05)  # the basis rows: nothing new
    assert same.rows_added == grown.rows_added
    assert same.eigenvalues is values
    assert len(same.model.diagnostics.landmarks["batches"]) == 2


def test_estimator_partial_fit_follows_scikit_learn(data):
    est = npt.NonlinearProjection(kernel="rbf", gamma=GAMMA)
    assert est.partial_fit(data[:40]) is est  # the first call fits
    assert est.partial_fit(data[40:120], residual_tol=0.05) is est
    assert est.partial_fit(data[120:200], residual_tol=0.05) is est
    basis = est.model_.basis
    lam, ref = _reference(basis, data[200:])
    assert est.n_components_ == len(lam)
    assert np.abs(est.eigenvalues_ - lam).max() <= 1e-10 * lam[0]
    y = est.transform(data[200:])
    np.testing.assert_allclose(align_signs(y, ref)[:, :20], ref[:, :20], atol=1e-7)
    with pytest.raises(ValueError, match="features"):  # scikit-learn's own check and words
        est.partial_fit(data[200:, :3])


def test_a_truncated_estimator_refits_the_union_warm_started(data):
    est = npt.NonlinearProjection(kernel="rbf", gamma=GAMMA, n_components=3)
    first = est.partial_fit(data[:40]).model_
    with pytest.warns(npt.RefitWarning, match="refits on every row seen so far"):
        est.partial_fit(data[40:60])
    assert est.model_.diagnostics.landmarks["refit"] == {"start": first.identity, "rows": 60}
    lam, ref = _reference(data[:60], data[200:])
    np.testing.assert_allclose(est.eigenvalues_, lam[:3], rtol=1e-8)
    np.testing.assert_allclose(align_signs(est.transform(data[200:]), ref[:, :3]), ref[:, :3],
                               atol=1e-6)  # fmt: skip


def test_command_line_grows_a_stored_model(data, tmp_path, capsys):
    from npt_dask.interface.cli import main

    for name, rows in {"start": data[:40], "day1": data[40:120], "day2": data[120:200]}.items():
        np.save(tmp_path / f"{name}.npy", rows)
    fit = ["fit", str(tmp_path / "start.npy"), "--kernel", "rbf", "--gamma", str(GAMMA)]
    assert main([*fit, "--n-components", "none", "--out", str(tmp_path / "m0"), "--quiet"]) == 0
    capsys.readouterr()
    grow = ["grow", str(tmp_path / "m0"), str(tmp_path / "day1.npy"), str(tmp_path / "day2.npy")]
    assert main([*grow, "--out", str(tmp_path / "m1"), "--residual-tol", "0.05"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [b["rows_seen"] for b in out["batches"]] == [80, 80]
    expected = npt.load(tmp_path / "m0").partial_fit(data[40:120], residual_tol=0.05)
    expected = expected.partial_fit(data[120:200], residual_tol=0.05)
    grown = npt.load(tmp_path / "m1")
    np.testing.assert_array_equal(np.asarray(grown.x_train), expected.basis)
    assert out["parent"] == npt.load(tmp_path / "m0").identity
    assert main(["grow", str(tmp_path / "m1"), str(tmp_path / "day1.npy"), "--out",
                 str(tmp_path / "m1")]) == 2  # fmt: skip
    assert "is the input MODEL" in capsys.readouterr().err


def test_pipeline_grow_stage_grows_a_stored_model_from_files(data, parent, tmp_path):
    from npt_dask.interface.pipeline.config import PipelineConfig
    from npt_dask.interface.pipeline.grow import grow_stored

    parent.save(tmp_path / "m0.zarr")
    np.save(tmp_path / "day1.npy", data[40:120])
    np.savez(tmp_path / "day2.npz", x=data[120:200])
    table = {"model": str(tmp_path / "m0.zarr"), "files": ["day1.npy", "day2.npz"],
             "residual_tol": 0.05}  # fmt: skip
    config = PipelineConfig.from_dict({"name": "g", "grow": table})
    assert PipelineConfig.from_dict(config.to_dict()) == config
    record = grow_stored(config.grow, tmp_path, data_dir=str(tmp_path))
    expected = parent.partial_fit(data[40:120], residual_tol=0.05)
    expected = expected.partial_fit(data[120:200], residual_tol=0.05)
    assert record["rows_added"] == expected.rows_added
    assert [b["rows_seen"] for b in record["batches"]] == [80, 80]
    np.testing.assert_array_equal(np.asarray(npt.load(record["model"]).x_train), expected.basis)
    with pytest.raises(InputError, match="files"):
        PipelineConfig.from_dict({"name": "g", "grow": {"model": "m", "files": "day1.npy"}})


def test_a_grown_model_has_its_own_identity_even_with_nothing_added(parent, data, tmp_path):
    loaded = npt.load(parent.save(tmp_path / "m0.zarr"))
    same_rows = loaded.partial_fit(data[:10], residual_tol=0)
    assert same_rows.rows_added == 0
    assert same_rows.identity != loaded.identity
    assert same_rows.model.diagnostics.landmarks["lineage"][-1]["parent"] == loaded.identity
