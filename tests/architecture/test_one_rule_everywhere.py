"""Rules decided once and applied at every entry point, each through the call a user types.

References are independent where there is one: scikit-learn's ``KernelPCA`` for the
refusal of ``-K``, ``npt.fit`` itself for the estimator's landmark route, the source
text for the decisions that must be written once.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from sklearn.decomposition import KernelPCA
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

import npt_dask as npt
from npt_dask.errors import InputError, KernelScaleWarning
from npt_dask.methods import RidgeClassifier
from npt_dask.npt import scale_warnings

PACKAGE = Path(npt.__file__).resolve().parent
RNG = np.random.default_rng(280)
PIXELS = RNG.uniform(0, 1, size=(200, 16))  # "pixels" in [0, 1]
GAMMA = 0.1


@pytest.fixture(scope="module")
def full():
    return npt.fit(PIXELS[:80], gamma=GAMMA, n_components=None)


# --- rows on another scale, one rule ------------------------------------------------------


def test_rows_on_another_scale_warn_everywhere(full, tmp_path):
    raw = (PIXELS[80:120] * 255).astype(np.uint8)
    calls = {
        "transform": lambda: full.transform(raw),
        "residual": lambda: full.residual(raw),
        "partial_fit": lambda: full.partial_fit(raw),
        "project": lambda: npt.project(full, raw, tmp_path / "p.zarr", progress=False),
    }
    for call in calls.values():
        with pytest.warns(KernelScaleWarning, match="unlike every training row"):
            call()
    with warnings.catch_warnings():  # the same rows, scaled as the training rows: silent
        warnings.simplefilter("error")
        full.transform(PIXELS[80:120])
        full.residual(PIXELS[80:120])


def test_npt_grow_warns_of_rows_on_another_scale(full, tmp_path, capsys):
    from npt_dask.interface.cli import main

    full.save(tmp_path / "m0.zarr")
    np.save(tmp_path / "day1_u8.npy", (PIXELS[80:120] * 255).astype(np.uint8))
    with pytest.warns(KernelScaleWarning, match="unlike every training row"):
        main(["grow", str(tmp_path / "m0.zarr"), str(tmp_path / "day1_u8.npy"),
              "--out", str(tmp_path / "m1.zarr")])  # fmt: skip


def test_one_rule_decides_for_every_entry_point(full, tmp_path, monkeypatch):
    """Every check goes through the one rule (``scale_problem``, as NPT's warnings call it):
    forcing it forces every warning."""
    seen: list[str] = []

    def always(rows, train, spec):
        seen.append("x")
        return "identity"

    monkeypatch.setattr(scale_warnings, "scale_problem", always)
    z = PIXELS[80:90]
    entry_points = [
        lambda: npt.fit(PIXELS[:60], gamma=GAMMA, n_components=3),
        lambda: full.transform(z),
        lambda: full.residual(z),
        lambda: full.partial_fit(z),
        lambda: npt.project(full, z, tmp_path / "q.zarr", progress=False),
    ]
    for call in entry_points:
        with pytest.warns(KernelScaleWarning):
            call()
    assert len(seen) == len(entry_points)


def test_scale_sample_and_the_rule_are_declared_once():
    defined = {
        p.name: len(re.findall(r"^SCALE_SAMPLE = ", p.read_text(), re.M))
        for p in PACKAGE.rglob("*.py")
    }
    assert {k: v for k, v in defined.items() if v} == {"scale.py": 1}
    for name in ("warn_projection_scale", "_warn_far_rows", "def warn_kernel_scale",
                 "def scale_problem"):  # fmt: skip
        holders = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                   if name in p.read_text()]  # fmt: skip
        assert holders in ([], ["kernels/scale.py"], ["npt/scale_warnings.py"]), (name, holders)


def test_lazy_transform_stays_lazy(full, task_counter):
    before = task_counter.tasks
    out = full.transform(da.from_array((PIXELS[80:120] * 255), chunks=(20, -1)))
    assert isinstance(out, da.Array)
    assert task_counter.tasks == before  # the scale rule reads nothing of lazy rows


# --- the decisions written twice ----------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "home"),
    [
        (r'__name__ == "DataArray"', "runtime/inputs.py"),
        (r"def _?is_lazy\(", "runtime/inputs.py"),
        (r"type_of_target|check_classification_targets", "runtime/labels.py"),
    ],
)
def test_decision_written_once(pattern, home):
    holders = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if re.search(pattern, p.read_text())
    )
    assert holders == [home]


# --- -K -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_estimator_refuses_a_negative_kernel_matrix_as_kernel_pca_does(seed):
    """Whatever sign rounding gives the centred -K's top eigenvalue (about 1e-15; half of
    these seeds round it below 0, and those gave all-zero coordinates)."""
    rows = np.random.default_rng(seed).uniform(0, 1, size=(50, 16))
    k = rbf_kernel(rows, gamma=GAMMA)
    with pytest.raises(ValueError, match="negative"):
        KernelPCA(3, kernel="precomputed").fit(-k)  # the reference refuses
    with pytest.raises(npt.NegativeDefiniteKernelError, match=r"wrong sign, e.g. -K"):
        npt.NonlinearProjection(kernel="precomputed", n_components=3).fit(-k)
    with pytest.raises(npt.NegativeDefiniteKernelError, match=r"wrong sign, e.g. -K"):
        npt.fit(-k, "precomputed", n_components=3)
    with pytest.warns(npt.RankWarning):  # constant data: still KernelPCA's zeros
        out = npt.NonlinearProjection(n_components=2).fit_transform(np.ones((10, 3)))
    assert not out.any()


# --- the landmark route from the estimator ------------------------------------------------


def test_estimator_takes_landmarks_and_grid_search_tunes_them():
    x, y = PIXELS, (PIXELS[:, 0] + PIXELS[:, 1] > 1).astype(int)
    est = npt.NonlinearProjection(gamma=GAMMA, n_components=5, landmarks=40, random_state=0)
    got = est.fit_transform(x)
    model = npt.fit(x, gamma=GAMMA, n_components=5, landmarks=40, random_state=0)
    np.testing.assert_allclose(got, model.transform(x), atol=1e-10)
    assert got.shape == (200, 5)
    pipe = make_pipeline(npt.NonlinearProjection(gamma=GAMMA, n_components=5, random_state=0),
                         RidgeClassifier(0.1))  # fmt: skip
    grid = {"nonlinearprojection__landmarks": [30, 60],
            "nonlinearprojection__landmark_method": ["uniform", "rpcholesky"]}  # fmt: skip
    search = GridSearchCV(pipe, grid, cv=2).fit(x, y)
    assert search.best_params_["nonlinearprojection__landmarks"] in (30, 60)
    with pytest.raises(InputError, match="landmark_method"):
        npt.NonlinearProjection(landmarks=30, landmark_method="bad").fit(x)


# --- partial_fit of a truncated estimator -------------------------------------------------


def test_truncated_partial_fit_says_it_refits_and_nothing_about_start():
    est = npt.NonlinearProjection(gamma="scale", n_components=5)
    est.partial_fit(PIXELS[:60])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.partial_fit(PIXELS[60:100] * 1.5)  # another spread: gamma='scale' would differ
    said = [str(w.message) for w in caught]
    assert [w.category for w in caught] == [npt.RefitWarning], said
    assert "refits on every row seen so far (60 training rows and 40 new, 100 in all)" in said[0]
    assert est.model_.n_samples == 100


# --- a start's kernel wins unless another is named ----------------------------------------


def test_start_kernel_wins_over_a_default_kernel(tmp_path, capsys):
    from npt_dask.interface.cli import main

    x = PIXELS
    lap = npt.fit(x, "laplacian", gamma=0.05, n_components=6, landmarks=60, random_state=0)
    lap.save(tmp_path / "m_lap.zarr")
    np.save(tmp_path / "x.npy", x)
    with pytest.warns(KernelScaleWarning, match=r"uses the start's kernel \(laplacian: no other"):
        code = main(["fit", str(tmp_path / "x.npy"), "--gamma", "scale", "--n-components", "6",
                     "--start", str(tmp_path / "m_lap.zarr"), "--out", str(tmp_path / "m.zarr"),
                     "--quiet"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert npt.load(tmp_path / "m.zarr").kernel.name == "laplacian"
    with pytest.warns(KernelScaleWarning, match=r"uses the kernel named \(kernel={'name': 'rbf'"):
        named = npt.fit(x, {"name": "rbf", "gamma": 0.1}, n_components=6, start=lap)
    assert named.kernel.name == "rbf"


@pytest.mark.parametrize("how", ["positional", "keyword", "cli"])
def test_rbf_named_is_rbf_even_with_a_laplacian_start(tmp_path, capsys, how):
    """``kernel="rbf"`` is a kernel named, though it equals the default: the start's
    kernel no longer replaces it (it did: a laplacian model, or no warning at all)."""
    from npt_dask.interface.cli import main

    x = PIXELS
    lap = npt.fit(x, "laplacian", gamma=0.05, n_components=6, landmarks=60, random_state=0)
    match = r"uses the kernel named \(kernel='rbf'\)"
    if how == "cli":
        lap.save(tmp_path / "m_lap.zarr")
        np.save(tmp_path / "x.npy", x)
        with pytest.warns(KernelScaleWarning, match=match):
            code = main(["fit", str(tmp_path / "x.npy"), "--kernel", "rbf", "--gamma", "scale",
                         "--n-components", "6", "--start", str(tmp_path / "m_lap.zarr"),
                         "--out", str(tmp_path / "m.zarr"), "--quiet"])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        model = npt.load(tmp_path / "m.zarr")
    else:
        args = (("rbf",), {}) if how == "positional" else ((), {"kernel": "rbf"})
        with pytest.warns(KernelScaleWarning, match=match):
            model = npt.fit(x, *args[0], **args[1], gamma="scale", n_components=6, start=lap)
    assert model.kernel.name == "rbf"
    assert model.kernel.gamma == pytest.approx(1.0 / (x.shape[1] * x.var()))


# --- progress over the landmark pass ------------------------------------------------------


def test_progress_covers_the_landmark_training_pass(capsys):
    x = da.from_array(PIXELS, chunks=(50, -1))
    npt.fit(x, gamma=GAMMA, n_components=4, landmarks=40, landmark_method="rpcholesky",
            random_state=0, progress=True)  # fmt: skip
    err = capsys.readouterr().err
    assert "npt fit: landmarks: choosing them among 200 rows (rpcholesky)" in err
    assert "rpcholesky round 1," in err
    assert re.search(r"npt fit: training pass \[#+\] \d+/\d+ chunks", err), err


# --- --------------------------------------------------------------------------------------


def test_float32_model_grows_as_float32(tmp_path):
    m32 = npt.fit(PIXELS[:60].astype(np.float32), gamma=GAMMA, n_components=None)
    grown = m32.partial_fit(PIXELS[60:120])
    assert grown.rows_added > 0
    assert grown.precision == np.float32
    assert grown.transform(PIXELS[120:130]).dtype == np.float32
    grown.save(tmp_path / "g.zarr")
    assert npt.load(tmp_path / "g.zarr").x_train.dtype == np.float32


def test_max_landmarks_below_the_model_is_refused(full):
    with pytest.raises(InputError, match=r"max_landmarks=50 is below the model's 80 basis rows"):
        full.partial_fit(PIXELS[80:120], max_landmarks=50)


def test_negative_landmark_indices_are_named():
    with pytest.raises(InputError, match=r"1 of them are negative or out of range: -1 \(negative"):
        npt.fit(PIXELS, gamma=GAMMA, landmarks=[-1, 2, 3, 4], n_components=2)
    with pytest.raises(InputError, match=r"1 of them are repeated \(3\)"):
        npt.fit(PIXELS, gamma=GAMMA, landmarks=[1, 3, 3, 4], n_components=2)


# --- wording ------------------------------------------------------------------------------


def test_gamma_auto_gets_its_own_hint():
    with pytest.raises(InputError, match=r"gamma='auto' is scikit-learn's SVC name of 1 / n_f"):
        npt.fit(PIXELS, gamma="auto")
    with pytest.raises(InputError) as info:
        npt.fit(PIXELS, gamma="auto")
    assert "gamma = 0" not in str(info.value)


def test_float_class_labels_are_named_for_what_they_are():
    labels = (PIXELS[:, 0] > 0.5) + 0.5
    with pytest.raises(InputError, match=r"labels are non-integer floats \(2 distinct values: "
                                         r"0.5, 1.5\).*labels.astype\(str\)"):  # fmt: skip
        npt.fit(PIXELS, gamma=GAMMA, n_components=3, labels=labels)


def test_transposed_dataarray_without_sample_dim_gets_the_hint():
    model = npt.fit(PIXELS, gamma=GAMMA, n_components=3)
    z = xr.DataArray(PIXELS[:30].T, dims=("pixel", "image"))
    with pytest.raises(InputError, match=r"looks transposed: pass Z.transpose\('image', 'pixel'\)"):
        model.transform(z)


def test_readmes_say_what_there_is():
    root = PACKAGE.parent
    notebooks = sorted(p.name for p in (root / "notebooks").glob("[0-9]*.py"))
    text = (root / "notebooks" / "README.md").read_text()
    words = {3: "Three", 4: "Four", 5: "Five", 6: "Six"}
    count = words[len(notebooks)]
    assert f"{count} worked analyses" in text
    alls = re.findall(r"\bAll (\w+),", text)  # "All three, as the test suite does"
    assert alls
    assert set(alls) == {count.lower()}, alls
    main_readme = (root / "README.md").read_text()
    assert all(name in main_readme for name in notebooks), notebooks
    assert "about 16 minutes on a quiet two-core machine" in main_readme  # and under load:
    assert "longer when the machine is shared" in main_readme


def test_the_readme_quickstart_sample_is_what_the_quickstart_writes():
    """The sample output has a line per method of ``pipelines/quickstart.toml`` in its
    order, and the text beside it names every store the pipeline writes."""
    import tomllib

    from npt_dask.interface.pipeline.outputs import STORES

    root = PACKAGE.parent
    readme = (root / "README.md").read_text()
    section = readme[readme.index("## 1. The quickstart") : readme.index("## 2. ")]
    sample = section[section.index("```text") : section.index("```", section.index("```text") + 3)]
    config = tomllib.loads((root / "pipelines" / "quickstart.toml").read_text())
    labels = [m.get("label", m["name"]) for m in config["methods"]]
    lines = sample.splitlines()[1:]
    shown = [line.split(":")[0] for line in lines[5 : 5 + len(labels)]]  # after the header
    assert shown == labels
    assert lines[5 + len(labels)] == f"outputs in {config['output']['dir']}"
    assert all(f"`{name}`" in section for name in STORES), STORES


# --- one run spec per key under a distributed scheduler -----------------------------------


def test_landmark_fit_then_other_graphs_on_the_same_rows_send_one_run_spec(caplog):
    """A landmark model kept alive, then a second fit and a kernel ridge on the same
    chunked dask input: the scheduler never meets a key of X with another run spec (it
    logged "Detected different `run_spec`" when the model held a fused, persisted slice
    of X). Fails on the persisted-slice landmark rows."""
    import logging

    from distributed import Client, LocalCluster

    rng = np.random.default_rng(12)
    x = rng.normal(size=(6000, 10))
    y = (x[:, 0] > 0).astype(int)
    xd = da.from_array(x, chunks=(2500, 10))  # rechunked to the fit's own rows
    kw = {"gamma": 0.05, "n_components": 4, "landmarks": 60, "random_state": 0}
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,  # fmt: skip
        Client(cluster),
        caplog.at_level(logging.WARNING, logger="distributed.scheduler"),
    ):
        model = npt.fit(xd, chunk_size=1000, labels=y, **kw)
        again = npt.fit(xd, chunk_size=1000, **kw)
        clf = npt.KernelRidgeClassifier(kernel="rbf", gamma=0.05, landmarks=80, alpha=1e-2)
        clf.fit(xd, y)
        assert model.n_components == again.n_components == 4
        assert clf.score(x, y) > 0.8
    assert not [r for r in caplog.records if "run_spec" in r.getMessage()]
