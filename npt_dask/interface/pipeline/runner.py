"""Running a pipeline: data -> fit -> persist -> project -> methods -> report.

The runner strings together the public API; each stage is a function of the
previous stage's outputs, timed, and the report records every figure. The
output folder holds ``model.zarr``, ``train.zarr`` and ``test.zarr`` (the
coordinates, residuals and labels, for ``xarray.open_zarr``),
``report.json``, ``summary.txt`` and PNG figures.

Re-running a config resumes: a model store whose kernel, dimension and
training rows match is loaded instead of refitted, and projections continue
where they stopped. A refitted model restarts the projections (they belong
to the old model).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import resource
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np

from npt_dask.arrays.device import check_device, to_device
from npt_dask.errors import InputError, StoreError
from npt_dask.interface.pipeline.checks import check_references
from npt_dask.interface.pipeline.config import LABEL_STAGES, PipelineConfig
from npt_dask.interface.pipeline.data import Split, generate_if_absent, load_split
from npt_dask.interface.pipeline.grow import grow_stored
from npt_dask.interface.pipeline.methods import (
    MOMENT_STAGES,
    check_params,
    needs_train_coordinates,
    run_method,
    run_stage_params,
    stage_checkpoints,
)
from npt_dask.interface.pipeline.outputs import STORES
from npt_dask.interface.pipeline.report import write_figures, write_report
from npt_dask.kernels import resolve_kernel
from npt_dask.kernels.params import DEFAULT_TOL
from npt_dask.npt.display import landmark_summary
from npt_dask.npt.fitting import fit_params
from npt_dask.npt.model import NPTModel, load
from npt_dask.npt.params import FitParams
from npt_dask.npt.projection_store import project
from npt_dask.runtime.inputs import data_variance, float_dtype
from npt_dask.runtime.scheduler import compute

__all__ = ["run"]


def _peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _matches(model: NPTModel, cfg: FitParams, x: np.ndarray, rows: Any) -> bool:
    spec = resolve_kernel(cfg, x.shape[1], lambda: data_variance(da.from_array(x)))
    precision = cfg.precision or float_dtype(x.dtype).name
    same = (
        model.kernel.matches(spec, rel_tol=1e-9)
        and cfg.n_components in (None, model.n_components)
        and model.center == cfg.center
        and model.precision == np.dtype(precision)
        and model.diagnostics.tol == (cfg.tol if cfg.tol is not None else DEFAULT_TOL[precision])
    )
    indices = model.diagnostics.landmarks.get("indices")
    if not same or (cfg.landmarks is None) != (indices is None):
        return False
    given = da.from_array(x) if rows is None else getattr(rows, "data", rows)
    if indices is not None:  # a landmark model: its rows must be these rows of x
        wanted = cfg.landmarks if isinstance(cfg.landmarks, int) else len(cfg.landmarks)
        if len(indices) != wanted or model.diagnostics.landmarks["certificate"]["n_rows"] != len(x):
            return False
        given = given[np.asarray(indices)]
    # compared chunk by chunk, both sides read from zarr: neither is gathered or
    # shipped inside the graph (``x`` itself only when no staged ``rows`` exist)
    stored = model.x_train
    if stored.shape != given.shape:
        return False
    given = given.rechunk(stored.chunks).astype(model.precision)
    return bool(compute((stored == given).all())[0])


def fit_or_reuse(
    cfg: FitParams,
    x: np.ndarray,
    path: Path,
    progress: bool = False,
    rows: Any = None,
    labels: Any = None,
    device: str | None = None,
) -> tuple[NPTModel, bool]:
    """Load the model at ``path`` if it is this config's fit on ``x``, else fit and save.

    ``rows`` are the same rows lazily (staged in zarr); the fit reads them
    chunk by chunk instead of shipping ``x`` inside the task graph. With
    ``labels`` a new fit also returns the ridge moments of the training rows
    (:attr:`NPTModel.moments`, from the same pass as a landmark model's
    certificate; saved with it). A reused model's stored moments are dropped:
    its rows are checked to be this config's, its labels are not. ``device="gpu"``
    fits on the rows' chunks moved to the CUDA device (the stored model is the same).
    """
    if path.exists():
        with contextlib.suppress(StoreError):
            model = load(path)
            if _matches(model, cfg, x, rows):
                return dataclasses.replace(model, moments=None), True
    fit_rows = to_device(x if rows is None else rows, device)
    model = fit_params(fit_rows, cfg.replace(progress=progress), labels=labels)
    model.save(path, overwrite=True)  # not this config's fit (checked above): replace it
    return load(path), False  # streams its training blocks from the store when projecting


_STAGED = "npt_staged_rows"
_STORES = STORES


def stage_rows(x: np.ndarray, y: np.ndarray, path: Path, rows: int) -> Any:
    """Write rows and labels to a zarr store once; return them as a lazy DataArray.

    Workers then read the rows chunk by chunk (on a real cluster ``path`` must
    be on a shared filesystem, as the projection stores are), and a task
    whose worker dies is recomputed from the store. A directory at ``path``
    that this function did not write is refused, never replaced.
    """
    import xarray as xr
    import zarr

    if path.exists():
        try:
            ours = _STAGED in zarr.open_group(path, mode="r").attrs
        except Exception:  # not zarr at all
            ours = False
        if not ours:
            raise InputError(f"{path} exists and is not rows staged by npt run; move it away.")
    ds = xr.Dataset({"x": (("sample", "feature"), x)}, coords={"label": ("sample", y)})
    ds.attrs[_STAGED] = 1
    encoding = {"x": {"chunks": (min(rows, len(x)), x.shape[1])}}
    ds.to_zarr(path, mode="w", zarr_format=3, consolidated=False, encoding=encoding)
    return xr.open_zarr(path, consolidated=False)["x"]


def _stage(split: Split, out: Path, chunk: int | None, clock: _Clock) -> dict[str, Any]:
    """Each part's rows as a lazy DataArray: numpy rows staged to zarr, lazy rows as they are
    (no test part when the split has no test rows)."""
    parts = (("train", split.x_train, split.y_train), ("test", split.x_test, split.y_test))
    return {
        part: clock(f"stage_{part}", stage_rows, x, y, out / f"input_{part}.zarr", chunk)
        if isinstance(x, np.ndarray) else x
        for part, x, y in parts
        if x is not None
    }  # fmt: skip


@contextlib.contextmanager
def _client(cfg: PipelineConfig, client: Any | None, progress: bool) -> Iterator[Any]:
    if client is not None:
        yield client
        return
    from npt_dask.runtime.cluster import connect

    c = cfg.cluster
    remote = bool(c.address or c.scheduler_file)
    embedded = {} if remote else {
        "n_workers": c.n_workers, "threads_per_worker": c.threads_per_worker,
        "memory_limit": c.memory_limit,
    }  # fmt: skip
    with connect(
        c.address or None,
        scheduler_file=c.scheduler_file,
        tls=_tls(c),
        show_dashboard=progress,  # the link, on stderr, while the run lasts
        **embedded,  # type: ignore[arg-type]
    ) as connected:
        yield connected


def _outlives(cfg: PipelineConfig, client: Any | None) -> bool:
    """Whether the run's cluster is still up after it (the caller's, or a scheduler's)."""
    return client is not None or bool(cfg.cluster.address or cfg.cluster.scheduler_file)


def _tls(c: Any) -> Any:
    if not (c.tls_ca_file or c.tls_cert or c.tls_key):
        return None
    from npt_dask.runtime.cluster import TLSConfig

    return TLSConfig(ca_file=c.tls_ca_file, cert=c.tls_cert, key=c.tls_key)


class _Clock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, stage: str, func: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        result = func(*args, **kw)
        self.seconds[stage] = round(time.perf_counter() - t0, 3)
        return result


def _model_summary(model: NPTModel, reused: bool) -> dict[str, Any]:
    d = model.diagnostics
    return {
        "kernel": model.kernel.to_dict(),
        "n_components": model.n_components,
        "center": model.center,
        "solver": d.solver,
        "passes": d.passes,
        "converged": bool(d.converged),
        "max_residual": float(np.max(d.residuals)) if len(d.residuals) else 0.0,
        "eigenvalues_first": model.eigenvalues[:5].tolist(),
        "reused": reused,
    } | ({"landmarks": landmark_summary(dict(d.landmarks))} if d.landmarks else {})


def _worker_peak(client: Any) -> int:
    if client is None or not hasattr(client, "run"):
        return 0
    return max(client.run(_peak_rss_bytes).values(), default=0)


def _project_both(
    model: NPTModel,
    rows: dict[str, Any],
    out: Path,
    clock: _Clock,
    *,
    resume: bool,
    progress: bool,
) -> dict[str, Any]:
    """Project the staged training and test rows into ``out/{train,test}.zarr``."""
    return {
        part: clock(
            f"project_{part}", project, model, data, out / f"{part}.zarr",
            resume=resume, progress=progress,
        )
        for part, data in rows.items()
    }  # fmt: skip


def _run_methods(
    config: PipelineConfig,
    model: NPTModel | None,
    proj: dict,
    split: Split,
    clock: _Clock,
    out: Path,
    progress: bool = False,
) -> tuple[dict[str, Any], dict[str, Callable[[], Any]]]:
    figures = {} if model is None else _model_figures(model, proj.get("test"), config)
    methods = {}
    problem = json.dumps(config.to_dict()["data"], sort_keys=True, default=str)
    for method in config.methods:
        params = run_stage_params(
            method.name, method.params, out, key=method.key, problem=problem, progress=progress
        )
        metrics, figs = run_method(
            method.name, params, proj.get("train"), proj.get("test"), split, model
        )
        if params.get("checkpoint"):  # the stage is done: its solve needs no resuming
            Path(params["checkpoint"]).unlink(missing_ok=True)
        methods[method.key] = metrics
        clock.seconds[method.key] = metrics["seconds"]
        figures.update(figs)
    return methods, figures


def _model_stages(
    config: PipelineConfig, split: Split, out: Path, clock: _Clock, progress: bool
) -> tuple[NPTModel, bool, dict[str, Any], dict[str, Any] | None]:
    """Stage the rows, fit (or reuse) the model, grow it, project: the model, whether it
    was reused, the projections and the grow stage's record."""
    assert config.model is not None
    rows = _stage(split, out, config.model.chunk_size, clock)
    wants_moments = any(method.name in MOMENT_STAGES for method in config.methods)
    model, reused = clock(
        "fit", fit_or_reuse, config.model, split.x_train, out / "model.zarr", progress,
        rows["train"], split.y_train if wants_moments else None, config.device,
    )  # fmt: skip
    grown = (
        clock("grow", grow_stored, config.grow, out, config.data.data_dir,
              config.output.overwrite, config.device)
        if config.grow is not None
        else None
    )  # fmt: skip
    resume = reused and not config.output.overwrite
    if not needs_train_coordinates(config.methods, model):
        rows.pop("train")  # the training pass gave what the stages need
    rows = {part: to_device(data, config.device) for part, data in rows.items()}
    proj = _project_both(model, rows, out, clock, resume=resume, progress=progress)
    return model, reused, proj, grown


def run(config: PipelineConfig, *, client: Any | None = None, progress: bool = True) -> dict:
    """Run ``config`` and return its report (also written to ``config.output.dir``).

    The rows are staged once into ``input_{train,test}.zarr`` in the output
    folder, so workers read them chunk by chunk (rows already in a zarr
    dataset, ``[data] source = "zarr"``, are read from it, generated there
    first when ``[data] generate`` asks and the store is absent).

    Parameters
    ----------
    config : PipelineConfig
    client : distributed.Client, optional
        Use this client instead of the one ``config.cluster`` describes.
    progress : bool
        Progress for the fit's passes and the projections' chunks (stderr).
    """
    check_device(config.device)  # a GPU asked for and missing: refused before any write
    for method in config.methods:
        check_params(method.name, method.params)
    check_references(config)  # every file and value the config names, before any stage
    out = Path(config.output.dir)
    out.mkdir(parents=True, exist_ok=True)
    if config.output.overwrite:  # start again: no stage resumes an earlier solve
        for stale in stage_checkpoints(out):
            stale.unlink(missing_ok=True)
    clock = _Clock()
    with _client(config, client, progress) as active, active.as_current():
        if config.data.generate is not None:  # on the cluster: each task writes its rows
            clock("generate", generate_if_absent, config.data)
        needs_labels = any(method.name in LABEL_STAGES for method in config.methods)
        split: Split = clock("load", load_split, config.data, needs_labels=needs_labels)
        model: NPTModel | None = None
        reused, proj, grown = False, dict[str, Any](), None
        if config.model is not None:  # else data stages only: no NPT model
            model, reused, proj, grown = _model_stages(config, split, out, clock, progress)
        methods, figures = _run_methods(config, model, proj, split, clock, out, progress)
        worker_peak = _worker_peak(active)
        # only a cluster that outlives the run has a dashboard worth a link
        dashboard = getattr(active, "dashboard_link", None) if _outlives(config, client) else None
    written = write_figures(out, figures) if config.output.plots and _has_matplotlib() else []
    report = {
        "name": config.name,
        "config": config.to_dict(),
        "data": split.summary(),
        "model": None if model is None else _model_summary(model, reused),
        "seconds": clock.seconds,
        "memory": {
            "driver_peak_gib": _peak_rss_bytes() / 2**30,
            "worker_peak_gib": worker_peak / 2**30,
        },
        "methods": methods,
        **({"grow": grown} if grown is not None else {}),
        "outputs": {"dir": str(out), "stores": [s for s in _STORES if (out / s).exists()],
                    "figures": written},
    }  # fmt: skip
    if dashboard:
        report["dashboard"] = dashboard
    write_report(out, report)
    return report


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _model_figures(model: NPTModel, test: Any, config: PipelineConfig) -> dict:
    from npt_dask.interface import plot
    from npt_dask.methods import total_variance

    figures = {
        "spectrum.png": lambda: plot.spectrum(
            model.to_dataset(), total_variance=total_variance(model)
        ),
    }
    if test is None:  # no test rows asked for: the model's figure only
        return figures
    labels = test["label"] if "label" in test.coords else None
    return figures | {
        "coordinates_test.png": lambda: plot.coordinate_scatter(
            test["coordinates"], labels, title=f"{config.name}: test rows, NPT coordinates"
        ),
        "residual_test.png": lambda: plot.residual_histogram(test["residual"], labels),
    }
