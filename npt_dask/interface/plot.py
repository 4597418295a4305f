"""Figures of NPT results from xarray objects (needs matplotlib: ``pip install npt-dask[plot]``).

Each function takes what users already hold -- an ``NPTModel`` (from
``npt.fit`` or ``npt.load``), its ``to_dataset()``, a projection Dataset
(returned by ``npt.project`` or opened with ``xarray.open_zarr``), or one of
their variables -- and says plainly what it needs otherwise. It returns a
``matplotlib.figure.Figure`` built without pyplot, so it works the same in a
script and a headless pipeline (``fig.savefig(path)``) and leaves pyplot's
global state alone. In Jupyter, run ``%matplotlib inline`` once so a figure
left as a cell's value (or passed to ``display``) renders as an image.
Lazy (dask-backed) inputs are reduced before plotting: a scatter draws at
most ``max_points`` rows, a histogram reads only the residual column.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from npt_dask.errors import InputError, InputTypeError

__all__ = ["coordinate_scatter", "histogram_by_label", "residual_histogram", "spectrum"]


def _figure(width: float = 6.0, height: float = 4.0) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise InputTypeError(
            "npt_dask.plot needs matplotlib; install it with pip install 'npt-dask[plot]'."
        ) from exc
    return Figure(figsize=(width, height), layout="constrained")


def _values(obj: Any, name: str) -> np.ndarray:
    if type(obj).__name__ == "Dataset":
        if name not in obj:
            raise InputError(f"The Dataset has no variable {name!r}; got {list(obj.data_vars)}.")
        obj = obj[name]
    return np.asarray(obj.values if hasattr(obj, "values") else obj)


_MODEL = "an NPTModel (npt.fit, npt.load(path)) or its to_dataset()"
_PROJECTION = "a projection Dataset (npt.project(...), xr.open_zarr(path))"


def _kind(obj: Any) -> str:
    """``model``, ``model_dataset``, ``projection``, ``dataset``, ``array`` or ``other``."""
    from npt_dask.npt.model import NPTModel

    if isinstance(obj, NPTModel):
        return "model"
    if type(obj).__name__ == "Dataset" and hasattr(obj, "data_vars"):
        if "eigenvalues" in obj:
            return "model_dataset"
        if "coordinates" in obj or "residual" in obj or "npt_projection" in obj.attrs:
            return "projection"
        return "dataset"
    if isinstance(obj, str | bytes | dict | set) or obj is None:
        return "other"
    if hasattr(obj, "shape") or isinstance(obj, list | tuple):
        return "array"
    return "other"


def _refuse(function: str, accepted: str, obj: Any) -> Exception:
    """The error for an object ``function`` cannot use, saying what it takes."""
    if type(obj).__name__ == "Dataset" and hasattr(obj, "data_vars"):
        got = f"a Dataset with variables {sorted(map(str, obj.data_vars))}"
        return InputError(f"plot.{function} takes {accepted}; got {got}.")
    got = f"a {type(obj).__name__}"
    if isinstance(obj, str):
        got = f"the string {obj!r} (open it first: npt.load(path) or xr.open_zarr(path))"
    return InputTypeError(f"plot.{function} takes {accepted}; got {got}.")


def _with_labels(labels: Any, source: Any) -> Any:
    """``labels``, or the coordinate/variable of ``source`` it names."""
    if not isinstance(labels, str):
        return labels
    try:
        return source[labels]
    except (KeyError, IndexError, TypeError, ValueError):
        names = sorted(map(str, getattr(source, "coords", {})))
        raise InputError(
            f"labels={labels!r} names no coordinate of the data (it has {names}); pass the "
            "labels themselves (an array with one per sample) or an existing name."
        ) from None


def _label_name(labels: Any) -> str:
    """The legend's title: the coordinate named, a DataArray's name, else "label"."""
    if isinstance(labels, str):
        return labels
    name = getattr(labels, "name", None)
    return str(name) if isinstance(name, str) and name else "label"


def _check_components(components: Any, r: int) -> tuple[int, int]:
    """Two column indices in ``[0, r)``, or an error naming ``components``."""
    try:
        i, j = (int(c) for c in components)
    except (TypeError, ValueError):
        raise InputError(
            f"components must be two column indices, e.g. (0, 1); got {components!r}."
        ) from None
    if not (0 <= i < r and 0 <= j < r):
        raise InputError(
            f"components={tuple(components)!r} is outside the {r} coordinate columns; "
            f"choose two indices from 0 to {r - 1}."
        )
    return i, j


def _check_labels(labels: Any, n: int, function: str) -> np.ndarray:
    """One label per sample, or an error naming ``labels``."""
    lab = _values(labels, "label").ravel()
    if len(lab) != n:
        raise InputError(
            f"plot.{function}: labels has {len(lab)} entries but there are {n} samples; "
            "pass one label per sample (in the same order), or a coordinate's name."
        )
    return lab


SMALL_MULTIPLES = 4
"""More labels than this: a histogram gets one panel per label, not overlaid outlines."""


def spectrum(model: Any, *, total_variance: float | None = None, title: str | None = None) -> Any:
    """Eigenvalues (log scale) with the cumulative explained variance.

    Parameters
    ----------
    model : NPTModel, its ``to_dataset()``, or the eigenvalues (DataArray or array)
    total_variance : float, optional
        ``trace(K)`` (:func:`npt_dask.methods.total_variance`); without it the
        cumulative curve is relative to the kept components only.
    """
    kind = _kind(model)
    if kind == "model":
        lam, centred = np.asarray(model.eigenvalues), bool(model.center)
    elif kind in ("model_dataset", "array"):
        lam = _values(model, "eigenvalues").ravel()
        centred = bool(getattr(model, "attrs", {}).get("center", 1))
    elif kind == "projection":
        raise InputError(
            "plot.spectrum needs the model; a projection has coordinates, not eigenvalues. "
            f"Pass {_MODEL}."
        )
    else:
        raise _refuse("spectrum", f"{_MODEL}, or an array of eigenvalues", model)
    fig = _figure()
    ax = fig.subplots()
    k = np.arange(1, len(lam) + 1)
    positive = lam > 0
    ax.semilogy(k[positive], lam[positive], ".-", color="C0", label="eigenvalue")
    if (~positive).any():
        ax.semilogy(k[~positive], -lam[~positive], "x", color="C3", label="-eigenvalue (< 0)")
    ax.set_xlabel("component")
    ax.set_ylabel(f"eigenvalue of the {'centred' if centred else 'uncentred'} kernel matrix")
    total = float(total_variance) if total_variance else float(lam.clip(0).sum())
    twin = ax.twinx()
    twin.plot(k, np.cumsum(lam.clip(0)) / total, color="C1", label="cumulative explained")
    twin.set_ylim(0, 1.02)
    twin.set_ylabel("cumulative explained variance" + ("" if total_variance else " (kept)"))
    ax.set_title(title or f"Spectrum, r = {len(lam)}")
    fig.legend(loc="outside lower center", ncols=3, fontsize="small")
    return fig


def coordinate_scatter(
    coordinates: Any,
    labels: Any = None,
    *,
    components: tuple[int, int] = (0, 1),
    max_points: int = 5000,
    title: str | None = None,
    seed: int = 0,
) -> Any:
    """2-D scatter of two coordinate columns, coloured by label.

    Parameters
    ----------
    coordinates : a projection Dataset (its ``coordinates``), an NPTModel or its
        ``to_dataset()`` (the training rows' coordinates), a DataArray (sample,
        component), or an array (n, r)
    labels : array-like (n,) or the name of a sample coordinate of ``coordinates``
    components : the two columns to draw
    max_points : draw a random subset of at most this many rows
    """
    source, kind = coordinates, _kind(coordinates)
    if kind == "model":
        source = coordinates = coordinates.to_dataset()
        kind = "model_dataset"
    if kind == "model_dataset":
        coordinates = source["train_coordinates"]
    elif kind == "projection" and "coordinates" in source:
        coordinates = source["coordinates"]
    elif kind != "array":
        raise _refuse(
            "coordinate_scatter", f"{_PROJECTION}, {_MODEL}, or a (sample, component) array",
            coordinates,
        )  # fmt: skip
    legend_title = _label_name(labels)
    labels = _with_labels(labels, source)
    n = coordinates.shape[0]
    i, j = _check_components(components, int(coordinates.shape[1]))
    lab = None if labels is None else _check_labels(labels, n, "coordinate_scatter")
    keep = np.sort(np.random.default_rng(seed).permutation(n)[: min(n, max_points)])
    data = coordinates.data if hasattr(coordinates, "dims") else coordinates
    pts = np.asarray(data[keep][:, [i, j]], dtype=np.float64)
    fig = _figure(6.5, 5.0)
    ax = fig.subplots()
    if lab is None:
        ax.scatter(pts[:, 0], pts[:, 1], s=4, alpha=0.6)
    else:
        lab = lab[keep]
        for value in np.unique(lab):
            mask = lab == value
            ax.scatter(pts[mask, 0], pts[mask, 1], s=4, alpha=0.6, label=str(value))
        # beside the axes, never over the points
        fig.legend(loc="outside right upper", markerscale=3, title=legend_title, fontsize="small")
    ax.set_xlabel(f"component {i}")
    ax.set_ylabel(f"component {j}")
    ax.set_title(title or f"{len(keep)} of {n} samples")
    return fig


def histogram_by_label(
    values: Any,
    labels: Any = None,
    *,
    bins: int = 50,
    xlabel: str = "value",
    title: str | None = None,
) -> Any:
    """Histogram of one value per sample (a DataArray or array), one outline per label."""
    if _kind(values) != "array":
        raise _refuse(
            "histogram_by_label", "one value per sample (a DataArray such as ds['residual'], "
            "or an array)", values,
        )  # fmt: skip
    legend_title = _label_name(labels)
    labels = _with_labels(labels, values)
    data = np.asarray(values.values if hasattr(values, "values") else values).ravel()
    edges = np.histogram_bin_edges(data, bins=bins)
    lab = None if labels is None else _check_labels(labels, len(data), "histogram_by_label")
    groups = [] if lab is None else list(np.unique(lab))
    if len(groups) > SMALL_MULTIPLES:  # overlaid outlines of many labels cannot be read
        return _small_multiples(data, lab, groups, edges, xlabel, legend_title, title)
    fig = _figure()
    ax = fig.subplots()
    if lab is None:
        ax.hist(data, bins=edges)
    else:
        for value in groups:
            ax.hist(data[lab == value], bins=edges, histtype="step", label=str(value))
        fig.legend(loc="outside right upper", title=legend_title, fontsize="small")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("samples")
    ax.set_title(title or "")
    return fig


def _small_multiples(
    data: np.ndarray,
    lab: Any,
    groups: list[Any],
    edges: np.ndarray,
    xlabel: str,
    label_name: str,
    title: str | None,
) -> Any:
    """One filled histogram per label on shared axes, in a grid of up to 5 columns."""
    cols = min(5, len(groups))
    rows = -(-len(groups) // cols)
    fig = _figure(2.2 * cols, 1.8 * rows + 0.6)
    axes = np.atleast_1d(fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False))
    for k, ax in enumerate(axes.ravel()):
        if k >= len(groups):
            ax.set_axis_off()
            continue
        ax.hist(data[lab == groups[k]], bins=edges, color=f"C{k % 10}")
        ax.set_title(f"{label_name} {groups[k]}", fontsize="small")
    fig.supxlabel(xlabel, fontsize="small")
    fig.supylabel("samples", fontsize="small")
    if title:
        fig.suptitle(title)
    return fig


def residual_histogram(
    residual: Any, labels: Any = None, *, bins: int = 50, title: str | None = None
) -> Any:
    """Histogram of the Lemma-5 residual (distance from the fitted subspace), per label.

    ``residual`` is a projection Dataset (``npt.project(...)`` or
    ``xr.open_zarr(path)``), its ``ds["residual"]``, or an array
    (``model.transform_with_residual(X)[1]``).
    """
    source, kind = residual, _kind(residual)
    if kind in ("model", "model_dataset"):
        raise InputError(
            "plot.residual_histogram needs projected rows: a model has no residuals. Pass "
            f"{_PROJECTION}, or model.transform_with_residual(X)[1]."
        )
    if kind == "projection" and "residual" in source:
        residual = source["residual"]
    elif kind != "array":
        raise _refuse("residual_histogram", f"{_PROJECTION} or its ds['residual']", residual)
    labels = _with_labels(labels, source)
    return histogram_by_label(
        residual, labels, bins=bins, xlabel="residual ||phi(x) - P phi(x)||",
        title=title or "Distance from the fitted subspace",
    )  # fmt: skip
