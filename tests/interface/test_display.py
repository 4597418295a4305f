"""The model's text/HTML views and the plot functions (small data)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import npt_dask as npt
from npt_dask.errors import InputError

plot = pytest.importorskip("npt_dask.interface.plot")
pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    x = np.vstack([rng.normal(0, 1, (60, 3)), rng.normal(3, 1, (60, 3))])
    labels = np.repeat(["a", "b"], 60)
    model = npt.fit(x, "rbf", gamma=0.3, n_components=8)
    da = xr.DataArray(x, dims=("sample", "feature"), coords={"label": ("sample", labels)})
    return model, da, labels


def test_repr_names_kernel_size_spectrum_and_solver(fitted, tmp_path):
    model, _, _ = fitted
    text = repr(model)
    assert text.splitlines()[0] == "NPTModel"
    assert "rbf(gamma=0.3)" in text
    assert "n = 120, d = 3, float64, centred" in text
    assert f"λ₁ = {model.eigenvalues[0]:.4g}" in text
    assert "dense" in text
    html = model._repr_html_()
    assert html.startswith("<div>")
    assert "<svg" in html
    assert "rbf(gamma=0.3)" in html
    model.save(tmp_path / "m.zarr")
    assert str(tmp_path / "m.zarr") in repr(npt.load(tmp_path / "m.zarr"))


def test_spectrum_figure(fitted, tmp_path):
    model, _, _ = fitted
    from npt_dask.methods import total_variance

    fig = plot.spectrum(model.to_dataset(), total_variance=total_variance(model))
    ax, twin = fig.axes
    np.testing.assert_allclose(ax.lines[0].get_ydata(), model.eigenvalues)
    cumulative = twin.lines[0].get_ydata()
    assert np.all(np.diff(cumulative) > 0)
    assert cumulative[-1] <= 1.0
    fig.savefig(tmp_path / "s.png")
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(InputError, match=r"takes an NPTModel .* got a Dataset with variables"):
        plot.spectrum(xr.Dataset({"x": ("a", [1.0])}))


def test_scatter_draws_one_group_per_label_and_caps_points(fitted):
    model, da, labels = fitted
    coords = model.transform(da)
    fig = plot.coordinate_scatter(coords, "label")
    groups = fig.axes[0].collections
    assert [len(g.get_offsets()) for g in groups] == [60, 60]
    np.testing.assert_allclose(
        np.vstack([g.get_offsets() for g in groups]),
        np.vstack([coords.values[labels == v][:, :2] for v in ("a", "b")]),
    )
    lazy = xr.DataArray(coords.data, dims=coords.dims).chunk({"sample": 25})
    capped = plot.coordinate_scatter(lazy, labels, max_points=50)
    assert sum(len(g.get_offsets()) for g in capped.axes[0].collections) == 50


def test_histograms(fitted):
    model, da, _ = fitted
    _, residual = model.transform_with_residual(da)
    fig = plot.residual_histogram(residual, "label")
    assert len(fig.axes[0].patches) == 2  # one step outline per label
    counts = plot.histogram_by_label(np.arange(10.0), bins=5).axes[0].patches
    assert [p.get_height() for p in counts] == [2, 2, 2, 2, 2]


def test_progress_lines_for_fit_passes_and_projection_chunks(capsys, tmp_path):
    x = np.random.default_rng(1).normal(size=(600, 4))
    model = npt.fit(x, "rbf", gamma=0.5, n_components=5, solver="krylov", chunk_size=128,
                    progress=True)  # fmt: skip
    err = capsys.readouterr().err  # not a terminal: whole lines, the last one once
    assert err.startswith("npt fit: Krylov solver, n = 600, r = 5, block ")  # at once
    assert "pairs converged" in err
    assert "\r" not in err
    assert err.endswith("\n")
    lines = err.splitlines()
    assert len(lines) == len(set(lines))
    assert f"{model.n_components}/{model.n_components} pairs converged" in lines[-1]
    npt.project(model, x[:300], tmp_path / "p.zarr", chunk_size=100, progress=True)
    err = capsys.readouterr().err
    assert "npt project [" in err
    assert err.rstrip("\n").endswith("s")
    assert "3/3 chunks" in err
    npt.fit(x, "rbf", gamma=0.5, n_components=5, solver="krylov", chunk_size=128)
    npt.project(model, x[:300], tmp_path / "q.zarr", chunk_size=100, progress=False)
    assert capsys.readouterr().err == ""
