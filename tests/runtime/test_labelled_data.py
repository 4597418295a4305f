"""Data that carries its own row labels and feature names.

References are independent: xarray's and pandas' own alignment (``xr.align``,
``reindex``) for labels, scikit-learn's own ``feature_names_in_`` check for
feature names, and the same fit on plain arrays put in order by hand.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from sklearn.preprocessing import StandardScaler

import npt_dask as npt
from npt_dask.errors import InputError
from npt_dask.methods import ChunkedLinearSVM, FisherDiscriminant, Ridge, RidgeClassifier

GAMMA = 0.2
N = 240
RNG = np.random.default_rng(28)
X = RNG.normal(size=(N, 5))
Y = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int)
T = np.sin(X[:, 0]) + X[:, 2]
PERM = RNG.permutation(N)
NAMES = list("abcde")
SAMPLES = np.arange(N) * 3 + 1000  # row labels that are not positions


def _xa(values, *, lazy=False):
    data = da.from_array(values, chunks=(70, -1)) if lazy else values
    samples = SAMPLES[: len(values)]
    return xr.DataArray(
        data, dims=("sample", "feature"), coords={"sample": samples, "feature": NAMES}
    )


def _ya(values, *, lazy=False):
    data = da.from_array(values, chunks=70) if lazy else values
    return xr.DataArray(data, dims="sample", coords={"sample": SAMPLES})


def _moments(model):
    m = model.moments
    return np.concatenate([m.gram.ravel(), m.cross.ravel(), np.ravel(m.t_sum)])


# --- labels matched by label --------------------------------------------------------------


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("landmarks", [None, 60])
def test_fit_labels_follow_the_sample_coordinate(lazy, landmarks):
    """Labels in another order are matched to X's rows by their ``sample`` coordinate, as
    xarray's own alignment matches them."""
    x, y = _xa(X, lazy=lazy), _ya(Y, lazy=lazy).isel(sample=PERM)
    kw = dict(gamma=GAMMA, n_components=8, landmarks=landmarks, random_state=0)
    model = npt.fit(x, labels=y, **kw)
    by_xarray = xr.align(x, y, join="left")[1].values  # xarray's alignment
    reference = npt.fit(X, labels=by_xarray, **kw)  # plain arrays, matched by position
    np.testing.assert_allclose(_moments(model), _moments(reference), rtol=1e-10, atol=1e-10)
    positional = npt.fit(X, labels=np.asarray(y.values), **kw)  # what was done before
    assert not np.allclose(_moments(model), _moments(positional))


def test_fit_targets_follow_a_pandas_index():
    df = pd.DataFrame(X, columns=NAMES, index=SAMPLES)
    t = pd.Series(T, index=SAMPLES).iloc[PERM]
    model = npt.fit(df, gamma=GAMMA, n_components=8, targets=t)
    reference = npt.fit(X, gamma=GAMMA, n_components=8, targets=t.reindex(df.index).to_numpy())
    np.testing.assert_allclose(_moments(model), _moments(reference), rtol=1e-10, atol=1e-10)


def test_labels_that_differ_are_refused_as_xarray_exact_join_refuses_them():
    x = _xa(X)
    other = SAMPLES.copy()
    other[-1] = 7  # one row label that X does not have
    y = _ya(Y).assign_coords(sample=other)
    with pytest.raises(ValueError, match="join='exact'"):
        xr.align(x, y, join="exact")  # the reference refuses too
    with pytest.raises(
        InputError, match=r"1 row label\(s\) of X not in labels \(1717\).*not in X \(7\)"
    ):
        npt.fit(x, gamma=GAMMA, n_components=4, labels=y)
    with pytest.raises(InputError, match="repeats some labels"):
        npt.fit(x, gamma=GAMMA, n_components=4, labels=_ya(Y).assign_coords(sample=[0] * N))


def test_unlabelled_data_is_matched_by_position():
    y = _ya(Y).isel(sample=PERM)
    plain = npt.fit(X, gamma=GAMMA, n_components=6, labels=y)  # X has no row labels
    reference = npt.fit(X, gamma=GAMMA, n_components=6, labels=Y[PERM])
    np.testing.assert_allclose(_moments(plain), _moments(reference), rtol=1e-12)


@pytest.mark.parametrize("kind", ["xarray", "pandas"])
def test_methods_match_y_by_label(kind):
    coords = npt.fit(X, gamma=GAMMA, n_components=6).train_coordinates()
    if kind == "xarray":
        Yc = xr.DataArray(coords, dims=("sample", "component"), coords={"sample": SAMPLES})
        lab, tar = _ya(Y).isel(sample=PERM), _ya(T).isel(sample=PERM)
    else:
        Yc = pd.DataFrame(coords, index=SAMPLES)
        lab, tar = pd.Series(Y, index=SAMPLES).iloc[PERM], pd.Series(T, index=SAMPLES).iloc[PERM]
    cases = [
        (RidgeClassifier(0.1), lab, Y, "coef_"),
        (Ridge(0.1), tar, T, "coef_"),
        (FisherDiscriminant(), lab, Y, "scalings_"),
        (ChunkedLinearSVM(chunk_size=60, random_state=0, epochs=2), lab, Y, "coef_"),
    ]
    for est, shuffled, ordered, attr in cases:
        got = getattr(est.fit(Yc, shuffled), attr)
        want = getattr(type(est)(**est.get_params()).fit(coords, ordered), attr)
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10, err_msg=type(est).__name__)


def test_estimator_refuses_y_in_another_order_than_x():
    df = pd.DataFrame(X, columns=NAMES, index=SAMPLES)
    est = npt.NonlinearProjection(gamma=GAMMA, n_components=3)
    with pytest.raises(InputError, match="different orders"):
        est.fit(df, pd.Series(Y, index=SAMPLES).iloc[PERM])
    est.fit(df, pd.Series(Y, index=SAMPLES))  # the same order: fine


def test_dask_labels_of_unknown_chunks_name_the_fix():
    labels = da.from_array(Y, chunks=60)
    labels = labels[labels >= 0]  # boolean indexing: chunk sizes unknown
    with pytest.raises(InputError, match=r"compute_chunk_sizes\(\)"):
        npt.fit(X, gamma=GAMMA, n_components=4, labels=labels)
    with pytest.raises(InputError, match=r"compute_chunk_sizes\(\)"):
        RidgeClassifier().fit(da.from_array(X, chunks=60), labels)


# --- feature names ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def frame_model():
    df = pd.DataFrame(X, columns=NAMES, index=SAMPLES)
    return df, npt.fit(df, gamma=GAMMA, n_components=5)


def test_model_records_names_and_reorders_by_name(frame_model):
    df, model = frame_model
    assert model.feature_names == tuple(NAMES)
    want = model.transform(X[:20])
    reordered = df.iloc[:20][NAMES[::-1]]
    np.testing.assert_allclose(model.transform(reordered).to_numpy(), want, atol=1e-12)
    np.testing.assert_allclose(
        model.residual(reordered).to_numpy(), model.residual(X[:20]), atol=1e-12
    )
    xa = _xa(X[:20].copy())
    xmodel = npt.fit(_xa(X), gamma=GAMMA, n_components=5)
    assert xmodel.feature_names == tuple(NAMES)
    out = xmodel.transform(xa.isel(feature=[4, 2, 0, 1, 3]))
    np.testing.assert_allclose(out.values, xmodel.transform(X[:20]), atol=1e-12)


def test_names_that_differ_are_refused_as_scikit_learn_refuses_them(frame_model):
    df, model = frame_model
    renamed = df.rename(columns={"a": "z"})
    scaler = StandardScaler().fit(df)  # the reference: scikit-learn's own check
    with pytest.raises(ValueError, match="The feature names should match those that were passed"):
        scaler.transform(renamed)
    full = npt.fit(df.iloc[:60], gamma=GAMMA, n_components=None)  # growable
    for call in (model.transform, model.residual, full.partial_fit):
        with pytest.raises(InputError, match=r"should match those that were passed during fit"):
            call(renamed)
    with pytest.raises(InputError, match=r"unseen at fit time: 'z'.*missing: 'a'"):
        model.transform(renamed)


def test_dataframe_input_keeps_its_index(frame_model):
    df, model = frame_model
    part = df.iloc[PERM[:30]]
    y = model.transform(part)
    assert isinstance(y, pd.DataFrame)
    pd.testing.assert_index_equal(y.index, part.index)
    res = model.residual(part)
    assert isinstance(res, pd.Series)
    pd.testing.assert_index_equal(res.index, part.index)


def test_names_are_stored_verified_and_used_by_project_and_grow(frame_model, tmp_path):
    import json

    df, _ = frame_model
    full = npt.fit(df.iloc[:60], gamma=GAMMA, n_components=None)
    path = full.save(tmp_path / "m.zarr")
    loaded = npt.load(path)
    assert loaded.feature_names == tuple(NAMES)
    ds = npt.project(loaded, df.iloc[60:90][NAMES[::-1]], tmp_path / "p.zarr", progress=False)
    np.testing.assert_allclose(ds["coordinates"].values, full.transform(X[60:90]), atol=1e-10)
    with pytest.raises(InputError, match="should match"):
        npt.project(loaded, df.iloc[60:90].rename(columns={"b": "q"}), tmp_path / "q.zarr")
    grown = loaded.partial_fit(df.iloc[60:120][NAMES[::-1]], residual_tol=0.05)
    expected = full.partial_fit(X[60:120], residual_tol=0.05)
    np.testing.assert_array_equal(grown.basis, expected.basis)
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"]["npt"]["feature_names"] = NAMES[::-1]  # edited: caught by the checksum
    (path / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(npt.StoreError):
        npt.load(path)


def test_npt_grow_reorders_named_features(tmp_path, capsys):
    from npt_dask.interface.cli import main

    base = _xa(X[:60]).to_dataset(name="x")
    base.to_zarr(tmp_path / "day0.zarr")
    day1 = _xa(X[60:140]).isel(feature=[3, 1, 4, 0, 2]).to_dataset(name="x")
    day1.to_zarr(tmp_path / "day1.zarr")
    npt.fit(base["x"], gamma=GAMMA, n_components=None).save(tmp_path / "m0.zarr")
    code = main(["grow", str(tmp_path / "m0.zarr"), str(tmp_path / "day1.zarr"), "--var", "x",
                 "--out", str(tmp_path / "m1.zarr"), "--residual-tol", "0.05"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    grown = npt.load(tmp_path / "m1.zarr")
    expected = npt.load(tmp_path / "m0.zarr").partial_fit(X[60:140], residual_tol=0.05)
    np.testing.assert_array_equal(np.asarray(grown.x_train), expected.basis)


def test_a_transposed_dataarray_gets_the_transpose_hint():
    model = npt.fit(X, gamma=GAMMA, n_components=3)
    z = xr.DataArray(X[:30].T, dims=("pixel", "image"))
    with pytest.raises(InputError, match=r"looks transposed: pass Z.transpose\('image', 'pixel'\)"):
        model.transform(z)
    est = npt.NonlinearProjection(gamma=GAMMA, n_components=3).fit(X)
    with pytest.raises(InputError, match="looks transposed"):
        est.transform(z)
