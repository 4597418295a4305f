"""What a new user meets first, one test per case: the README's entry points.

Each test replays what a user with only the README ran into: an unguarded
script, a plot of the model, opening a projection, a data file by name, the
model's repr, progress in a log, an interrupted projection.
"""

from __future__ import annotations

import dataclasses
import io
import re
import subprocess
import sys
import textwrap
import warnings

import dask
import numpy as np
import pytest
import xarray as xr
import zarr

import npt_dask as npt
from npt_dask.errors import InputError, InputTypeError
from npt_dask.npt import projection_store as projection
from npt_dask.npt.eigen import NEGATIVE_RATIO
from npt_dask.runtime import progress
from npt_dask.storage.datasets import DATA_DIR_ENV, load_npz


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(14)
    x = np.vstack([rng.normal(0, 1, (40, 3)), rng.normal(3, 1, (40, 3))])
    labels = np.repeat([2, 7], 40)
    data = xr.DataArray(x, dims=("sample", "feature"), coords={"label": ("sample", labels)})
    model = npt.fit(data, "rbf", gamma=0.3, n_components=4)
    return model, data


# --- an unguarded script gets one clear error ---------------------------------------------


def _run_script(tmp_path, source, timeout=60):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout,
        cwd=tmp_path,
    )  # fmt: skip


def test_connect_without_main_guard_is_one_clear_error(tmp_path):
    done = _run_script(
        tmp_path,
        """
        import npt_dask as npt

        with npt.connect(n_workers=2, threads_per_worker=1) as client:
            print("computed", client.submit(sum, [1, 2]).result())
        """,
    )
    assert done.returncode == 1
    assert "computed" not in done.stdout
    err = done.stderr
    assert err.count("Traceback") == 1, err
    assert "bootstrapping" not in err
    last = err.strip().splitlines()
    assert any(line.startswith("npt_dask.errors.ClusterError: npt.connect() is called at the "
                               "top level of") for line in last), err  # fmt: skip
    assert "(line 4) without an if __name__ == '__main__' guard" in err
    assert 'if __name__ == "__main__":' in err


def test_guard_detection_accepts_guarded_and_function_calls(tmp_path):
    done = _run_script(
        tmp_path,
        """
        from npt_dask.runtime.cluster import _unguarded_main_call

        def main():
            return _unguarded_main_call()

        print(main())  # unguarded, through a function
        if __name__ == "__main__":
            print(main())
        """,
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first == f"('{tmp_path / 'script.py'}', 7)"
    assert second == "None"


# --- plot functions take the model, its dataset, a projection -----------------------------


def test_plot_functions_take_what_users_hold(fitted, tmp_path):
    plot = pytest.importorskip("npt_dask.interface.plot")
    model, data = fitted
    ds = npt.project(model, data, tmp_path / "p.zarr", chunk_size=40, progress=False)
    for obj in (model, model.to_dataset(), model.eigenvalues):
        lines = plot.spectrum(obj).axes[0].lines
        np.testing.assert_allclose(lines[0].get_ydata(), model.eigenvalues)
    for obj, n in ((ds, 80), (model, 80), (model.to_dataset(), 80), (ds["coordinates"], 80)):
        groups = plot.coordinate_scatter(obj, "label").axes[0].collections
        assert sum(len(g.get_offsets()) for g in groups) == n
        assert len(groups) == 2
    for obj in (ds, ds["residual"]):
        assert len(plot.residual_histogram(obj, "label").axes[0].patches) == 2
    with pytest.raises(InputError, match="a projection has coordinates, not eigenvalues"):
        plot.spectrum(ds)
    with pytest.raises(InputError, match="a model has no residuals"):
        plot.residual_histogram(model)
    with pytest.raises(InputTypeError, match=r"open it first: npt\.load\(path\)"):
        plot.spectrum(str(tmp_path / "p.zarr"))
    with pytest.raises(InputError, match="labels='digit' names no coordinate"):
        plot.coordinate_scatter(ds, "digit")
    with pytest.raises(InputError, match="variables"):
        plot.histogram_by_label(ds)


# --- a projection store opens silently ----------------------------------------------------


def test_projection_store_opens_without_consolidation_warning(fitted, tmp_path):
    model, data = fitted
    out = tmp_path / "p.zarr"
    npt.project(model, data, out, chunk_size=30, progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = xr.open_zarr(out)
        ds.load()
    assert [str(w.message) for w in caught] == []
    assert "npt_projection" in ds.attrs
    # a store written before consolidation resumes, and comes back consolidated
    group = zarr.open_group(str(out), mode="r+", use_consolidated=False)
    meta = out / "zarr.json"
    text = meta.read_text()
    import json

    plain = json.loads(text)
    plain.pop("consolidated_metadata")
    meta.write_text(json.dumps(plain))
    group["npt_done"][1] = 0
    again = npt.project(model, data, out, chunk_size=30, progress=False)
    np.testing.assert_array_equal(again["coordinates"].values, ds["coordinates"].values)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        xr.open_zarr(out)
    assert [str(w.message) for w in caught] == []
    stamp = meta.stat().st_mtime_ns
    npt.project(model, data, out, chunk_size=30, progress=False)
    assert meta.stat().st_mtime_ns == stamp  # a finished store's metadata is not rewritten
    with pytest.raises(projection.ProjectionError, match="another"):  # identity still read
        npt.project(model, data, out, chunk_size=20, progress=False)


# --- load_npz finds a bare name in $NPT_DATA_DIR ------------------------------------------


def test_load_npz_looks_in_npt_data_dir(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    np.savez(data / "tiny.npz", x=np.arange(12.0).reshape(3, 2, 2), y=np.array([0, 1, 0]))
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    with pytest.raises(InputError, match=f"looked for {elsewhere / 'tiny.npz'}; set NPT_DATA"):
        load_npz("tiny.npz")
    monkeypatch.setenv(DATA_DIR_ENV, str(data))
    x, y = load_npz("tiny.npz")
    assert x.shape == (3, 4)
    np.testing.assert_array_equal(y, [0, 1, 0])
    with pytest.raises(InputError) as missing:
        load_npz("mnist.npz")
    assert str(elsewhere / "mnist.npz") in str(missing.value)
    assert str(data / "mnist.npz") in str(missing.value)
    np.savez(elsewhere / "tiny.npz", x=np.zeros((1, 2)), y=np.array([5]))
    assert load_npz("tiny.npz")[1].tolist() == [5]  # the current directory comes first


# --- rounding is not "kernel not PSD" -----------------------------------------------------


def test_repr_calls_only_significant_negative_eigenvalues_not_psd(fitted):
    model, _ = fitted
    lam1 = float(model.eigenvalues[0])

    def with_min(value):
        diagnostics = dataclasses.replace(model.diagnostics, min_eigenvalue=value)
        return repr(dataclasses.replace(model, diagnostics=diagnostics))

    assert "not PSD" not in with_min(-9.7e-15)
    assert "not PSD" not in with_min(-0.5 * NEGATIVE_RATIO * lam1)
    assert "most negative eigenvalue -0.5 (kernel not PSD)" in with_min(-0.5)


# --- progress in logs and pipes -----------------------------------------------------------


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_progress_is_line_oriented_off_a_terminal(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(progress, "_clock", clock)
    log = _Stream(tty=False)
    bar = progress.ProgressBar("npt project", 20, "chunks", stream=log)
    for _ in range(20):
        clock.now += 1.0  # one chunk a second: a line every LOG_EVERY seconds
        bar.step()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert log.getvalue().endswith("\n")
    shown = [int(re.search(r"(\d+)/20 chunks", line)[1]) for line in lines]
    assert shown == [1, 6, 11, 16, 20]
    assert len(set(lines)) == len(lines)
    fit = progress.FitProgress(3, 1e-8, stream=log)
    log.seek(0)
    log.truncate()
    fit(1, np.ones(3), np.array([1e-3, 1e-3, 1e-3]))
    clock.now += 0.1
    fit(2, np.ones(3), np.array([1e-9, 1e-9, 1e-9]))  # throttled, then shown by close
    fit.close()
    clock.now += 1.0
    fit.stage("dense solver: done")
    fit.close()  # the last line once, not twice
    lines = log.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "npt fit: pass   1",
        "npt fit: pass   2",
        "npt fit: dense solver: done    1.1s",
    ]
    tty = _Stream(tty=True)
    bar = progress.ProgressBar("npt project", 3, "chunks", stream=tty)
    for _ in range(3):
        clock.now += 1.0
        bar.step()
    assert tty.getvalue() == "".join(
        f"\rnpt project [{'#' * (10 * k):<30}] {k}/3 chunks {float(k):6.1f}s" for k in (1, 2, 3)
    ) + "\n"  # fmt: skip


# --- an interrupted projection says it resumes --------------------------------------------


def test_interrupted_projection_propagates_and_resume_says_so(fitted, tmp_path, capsys):
    model, data = fitted
    clean = npt.project(model, data, tmp_path / "clean.zarr", chunk_size=10, progress=False)
    step = projection.ProgressBar.step

    def interrupt_after_three(bar):
        step(bar)
        if bar.done == 3:
            raise KeyboardInterrupt

    out = tmp_path / "p.zarr"
    with dask.config.set(scheduler="synchronous"), pytest.MonkeyPatch.context() as mp:
        mp.setattr(projection.ProgressBar, "step", interrupt_after_three)
        with pytest.raises(KeyboardInterrupt):
            npt.project(model, data, out, chunk_size=10, progress=False)
    assert zarr.open_group(str(out))["npt_done"][:].sum() == 3
    capsys.readouterr()
    resumed = npt.project(model, data, out, chunk_size=10, progress=True)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "npt project: resuming: 3 of 8 chunks already done (their input rows are checked, "
        "not projected again)"
    )
    assert "8/8 chunks" in err[-1]
    np.testing.assert_array_equal(resumed["coordinates"].values, clean["coordinates"].values)


def test_warnings_point_at_the_callers_line():
    """A warning names the user's line, not a line inside npt-dask."""
    import warnings

    x = np.random.default_rng(0).normal(size=(60, 4)) * 1000.0  # unscaled: rbf is ~identity
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        npt.fit(x, gamma=1.0, n_components=3)
    scale = [w for w in caught if issubclass(w.category, npt.KernelScaleWarning)]
    assert scale, [str(w.message) for w in caught]
    assert all(w.filename == __file__ for w in scale), [w.filename for w in scale]
