"""Pipelines reading their training rows lazily from zarr, generated first when asked."""

from __future__ import annotations

import re

import numpy as np
import pytest
from distributed import Client, LocalCluster
from scipy import ndimage

import npt_dask as npt
from npt_dask.errors import InputError
from npt_dask.interface.pipeline import PipelineConfig, run
from npt_dask.interface.pipeline.data import generate_if_absent, load_split
from npt_dask.methods import total_variance
from npt_dask.storage.datasets import write_deformed_mnist

N0 = 40


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """An MNIST-like ``.npz``: ``N0`` training and 20 test 28 x 28 uint8 images."""
    rng = np.random.default_rng(3)
    labels = np.arange(N0 + 20) % 2
    canvas = np.zeros((N0 + 20, 28, 28))
    for k, label in enumerate(labels):  # class 0: a vertical bar, class 1: a horizontal one
        at = rng.integers(10, 18)
        if label:
            canvas[k, at, 6:22] = 1.0
        else:
            canvas[k, 6:22, at] = 1.0
    images = ndimage.gaussian_filter(canvas, (0, 1.0, 1.0))
    images = np.round(255 * images / images.max()).astype(np.uint8)
    path = tmp_path_factory.mktemp("data") / "digits.npz"
    np.savez(path, x=images, y=labels)
    return path


def _data(tmp_path, source, **changes) -> dict:
    return {
        "source": "zarr",
        "path": str(tmp_path / "rows.zarr"),
        "test_path": str(source),
        "test": [N0, N0 + 20],
        "test_scale": 255.0,
        **changes,
    }


def _config(tmp_path, source, data=None, **sections) -> PipelineConfig:
    values = {
        "name": "zarr_rows",
        "data": data or _data(tmp_path, source),
        "model": {"kernel": "rbf", "gamma": 0.02, "landmarks": 30, "n_components": None,
                  "chunk_size": 32, "solver": "dense"},
        "methods": [{"name": "ridge"}],
        "output": {"dir": str(tmp_path / "out"), "plots": False},
        **sections,
    }  # fmt: skip
    return PipelineConfig.from_dict(values)


GENERATE = {"name": "deformed_mnist", "n_rows": 100, "seed": 2, "chunk_size": 32}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"source": "zarr", "test": [0, 5]}, "needs path = '<store>.zarr'"),
        (  # test rows are optional, but test_path names rows of a file
            {"source": "zarr", "path": "a.zarr", "test_path": "b.npz"},
            "needs test = [start, stop)",
        ),
        ({"source": "npz", "path": "a.npz", "test_path": "b.npz"}, "apply to source='zarr'"),
        ({"source": "moons", "generate": GENERATE}, "apply to source='zarr'"),
        ({"source": "zarr", "path": "a.zarr", "test": [0, 5], "test_scale": 2.0}, "give test_path"),
        (
            {"source": "zarr", "path": "a.zarr", "test": [0, 5], "classes": [1]},
            "remove ['classes']",
        ),
        (
            {"source": "zarr", "path": "a.zarr", "test": [0, 5], "generate": {"name": "cifar"}},
            "name = one of ('deformed_mnist',)",
        ),
        (
            {"source": "zarr", "path": "a.zarr", "test": [0, 5],
             "generate": {**GENERATE, "n_row": 5}},
            "Unknown key(s) ['n_row'] in [data] generate",
        ),
        (
            {"source": "zarr", "path": "a.zarr", "test": [0, 5],
             "generate": {**GENERATE, "n_rows": 0}},
            "The 'n_rows' parameter of [data] generate must be an int in the range [1, inf)",
        ),
        (
            {"source": "zarr", "path": "a.zarr", "test": [0, 5],
             "generate": {**GENERATE, "deformation": {"alpah": 1.0}}},
            "Unknown key(s) ['alpah'] in [data] generate deformation",
        ),
    ],
)  # fmt: skip
def test_config_refuses_bad_zarr_data(data, message):
    with pytest.raises(InputError, match=re.escape(message)):
        PipelineConfig.from_dict({"name": "x", "data": data})


def test_config_refuses_a_generated_seed_of_the_wrong_type():
    data = {"source": "zarr", "path": "a.zarr", "test": [0, 5], "generate": {**GENERATE}}
    data["generate"]["seed"] = "0"
    with pytest.raises(InputError, match=r"'seed' parameter of \[data\] generate must be an int"):
        PipelineConfig.from_dict({"name": "x", "data": data})


def test_zarr_rows_are_read_lazily_with_their_labels(tmp_path, source):
    path = write_deformed_mnist(tmp_path / "rows.zarr", 100, 2, source=source, chunk_size=32)
    cfg = _config(tmp_path, source, data=_data(tmp_path, source, train=[10, 90])).data
    split = load_split(cfg)
    import xarray as xr

    stored = xr.open_zarr(path, consolidated=False)
    assert split.x_train.chunks is not None  # lazy: read chunk by chunk
    np.testing.assert_array_equal(split.x_train.values, stored["x"][10:90].values)
    np.testing.assert_array_equal(split.y_train, stored["y"][10:90].values)
    np.testing.assert_array_equal(split.x_train["label"].values, split.y_train)
    with np.load(source) as raw:
        expected = raw["x"][N0 : N0 + 20].reshape(20, -1) / 255.0
        np.testing.assert_allclose(split.x_test, expected)
        np.testing.assert_array_equal(split.y_test, raw["y"][N0 : N0 + 20])
    same_store = load_split(_config(tmp_path, source, data=_data(
        tmp_path, source, test=[90, 100], test_path=None, test_scale=None)).data)  # fmt: skip
    np.testing.assert_array_equal(same_store.x_test.values, stored["x"][90:100].values)
    with pytest.raises(InputError, match="has 100 rows"):
        load_split(_config(tmp_path, source, data=_data(tmp_path, source, train=[0, 101])).data)


def test_a_missing_store_names_how_to_write_it(tmp_path, source):
    with pytest.raises(InputError, match=r"write it first .* \[data\] generate"):
        load_split(_config(tmp_path, source).data)


def test_generate_writes_once_and_refuses_a_different_store(tmp_path, source):
    generate = {**GENERATE, "source": str(source)}
    cfg = _config(tmp_path, source, data=_data(tmp_path, source, generate=generate)).data
    assert generate_if_absent(cfg)
    assert not generate_if_absent(cfg)  # present and matching: reused
    other = {**generate, "seed": 3}
    cfg = _config(tmp_path, source, data=_data(tmp_path, source, generate=other)).data
    with pytest.raises(InputError, match=r"other parameters \(seed=2 \(wanted 3\)\)"):
        generate_if_absent(cfg)
    other = {**generate, "originals": False}
    cfg = _config(tmp_path, source, data=_data(tmp_path, source, generate=other)).data
    with pytest.raises(InputError, match=r"originals=True \(wanted False\)"):
        generate_if_absent(cfg)


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c


def test_pipeline_generates_then_reads_the_store_in_place(tmp_path, source, client):
    generate = {**GENERATE, "source": source.name}  # relative: found in data_dir
    data = _data(tmp_path, source, generate=generate, data_dir=str(source.parent))
    config = _config(tmp_path, source, data=data)
    report = run(config, client=client, progress=False)
    out = tmp_path / "out"
    assert "generate" in report["seconds"]
    assert report["data"]["n_train"] == 100
    assert report["data"]["n_test"] == 20
    assert report["methods"]["ridge"]["test_accuracy"] >= 0.9  # bars vs bars: easy
    assert not (out / "input_train.zarr").exists()  # read from the store, not copied
    assert (out / "input_test.zarr").exists()
    assert "input_train.zarr" not in report["outputs"]["stores"]
    again = run(config, client=client, progress=False)
    assert again["model"]["reused"]
    assert again["methods"]["ridge"]["test_accuracy"] == report["methods"]["ridge"]["test_accuracy"]


# --- the config names the variables; labels and test rows optional ------------------------


def _unlabelled_store(path, rows) -> None:
    """A zarr dataset of rows named ``pixels`` (and ``digit`` labels if given)."""
    import xarray as xr

    ds = xr.Dataset({"pixels": (("sample", "feature"), rows[0])})
    if rows[1] is not None:
        ds["digit"] = ("sample", rows[1])
    ds.to_zarr(path, zarr_format=3, consolidated=False)


def test_named_variables_without_labels_or_test_run_kernel_pca(tmp_path, client):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 5))
    _unlabelled_store(tmp_path / "emb.zarr", (x, None))
    values = {
        "name": "kpca-only",
        "data": {"source": "zarr", "path": str(tmp_path / "emb.zarr"), "x_var": "pixels"},
        "model": {"kernel": "rbf", "gamma": 0.2, "n_components": 5, "chunk_size": 40},
        "methods": [{"name": "kpca"}, {"name": "kpcal1"}],
        "output": {"dir": str(tmp_path / "out"), "plots": False},
    }
    report = run(PipelineConfig.from_dict(values), client=client, progress=False)
    assert (report["data"]["n_train"], report["data"]["n_test"]) == (120, 0)
    assert report["data"]["classes"] == []
    ratio = report["methods"]["kpca"]["explained_variance_ratio_first"]
    model = npt.fit(x, "rbf", gamma=0.2, n_components=5, chunk_size=40, random_state=0)
    np.testing.assert_allclose(ratio, model.eigenvalues / total_variance(model), rtol=1e-8)
    assert report["methods"]["kpcal1"]["n_components"] == 2
    assert "test.zarr" not in report["outputs"]["stores"]


def test_named_labels_serve_the_stages_that_need_them(tmp_path, client):
    rng = np.random.default_rng(1)
    y = np.arange(100) % 2
    x = rng.normal(size=(100, 4)) + 3.0 * y[:, None]
    _unlabelled_store(tmp_path / "emb.zarr", (x, y))
    data = {"source": "zarr", "path": str(tmp_path / "emb.zarr"), "x_var": "pixels",
            "y_var": "digit", "train": [0, 80], "test": [80, 100]}  # fmt: skip
    values = {
        "name": "ridge", "data": data, "methods": [{"name": "ridge"}],
        "model": {"kernel": "rbf", "gamma": 0.1, "n_components": 6, "chunk_size": 40},
        "output": {"dir": str(tmp_path / "out"), "plots": False},
    }  # fmt: skip
    report = run(PipelineConfig.from_dict(values), client=client, progress=False)
    assert report["data"]["classes"] == [0, 1]
    assert report["methods"]["ridge"]["test_accuracy"] == 1.0  # two far blobs
    unlabelled = {k: v for k, v in data.items() if k != "y_var"}
    _unlabelled_store(tmp_path / "bare.zarr", (x, None))
    values["data"] = {**unlabelled, "path": str(tmp_path / "bare.zarr")}
    values["output"] = {"dir": str(tmp_path / "out2"), "plots": False}
    with pytest.raises(
        InputError, match=r"no variable 'y' of labels; its variables are \['pixels'\]"
    ):
        run(PipelineConfig.from_dict(values), client=client, progress=False)
    assert not (tmp_path / "out2" / "model.zarr").exists()  # refused before the fit


def test_stages_that_score_test_rows_need_them(tmp_path):
    data = {"source": "zarr", "path": "emb.zarr"}
    with pytest.raises(InputError, match=r"\['ridge'\] score test rows, and \[data\] gives none"):
        PipelineConfig.from_dict({"name": "x", "data": data, "methods": [{"name": "ridge"}]})
    PipelineConfig.from_dict({"name": "x", "data": data, "methods": [{"name": "kpca"}]})


def test_npz_source_with_a_zarr_path_says_so():
    with pytest.raises(InputError, match=r"is a zarr store, and source = 'npz' reads \.npz files"):
        PipelineConfig.from_dict({"name": "x", "data": {"source": "npz", "path": "rows.zarr"}})
