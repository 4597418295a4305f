"""Writing a pipeline's report: ``report.json``, ``summary.txt`` and PNG figures.

Every file is written to an owner-tagged temporary name and renamed into place
(:func:`npt_dask.runtime.atomic.write_file`), so an interrupted run never leaves a
truncated report that reads as valid, and a killed run's temporaries are removed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from npt_dask.npt.display import landmark_text
from npt_dask.runtime.atomic import write_file
from npt_dask.runtime.progress import count

__all__ = ["summary_text", "write_figures", "write_report"]


def summary_text(report: Mapping[str, Any]) -> str:
    """A short human-readable account of the run."""
    data, model, t = report["data"], report["model"], report["seconds"]
    lines = [
        f"npt-dask pipeline {report['name']!r}",
        f"data: {data['description']}, {data['n_train']} train / {data['n_test']} test rows, "
        f"d = {data['n_features']}, {len(data['classes'])} classes",
        *(_model_lines(model) if model is not None else ["model: none (data stages only)"]),
        "stages (s): " + ", ".join(f"{k} {v:.1f}" for k, v in t.items()),
        f"peak memory: driver {report['memory']['driver_peak_gib']:.2f} GiB, "
        f"largest worker {report['memory']['worker_peak_gib']:.2f} GiB",
    ]
    for name, metrics in report["methods"].items():
        shown = {k: v for k, v in metrics.items() if isinstance(v, int | float | str | list)}
        lines.append(f"{name}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in shown.items()))
    lines.append(f"outputs in {report['outputs']['dir']}")
    return "\n".join(lines) + "\n"


def _model_lines(model: Mapping[str, Any]) -> list[str]:
    return [
        f"model: {_kernel(model['kernel'])}, r = {model['n_components']}, "
        f"solver {model['solver']}, "
        f"{count(model['passes'], 'pass', 'passes')}, residual {model['max_residual']:.1e}"
        + (" (reused from the store)" if model["reused"] else ""),
        *([landmark_text(model["landmarks"])] if model.get("landmarks") else []),
    ]


def _fmt(value: Any) -> str:
    if isinstance(value, list):
        more = ", ..." if len(value) > 3 else ""
        return "[" + ", ".join(_fmt(v) for v in value[:3]) + more + "]"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _kernel(spec: Mapping[str, Any]) -> str:
    params = ", ".join(f"{k}={_fmt(v)}" for k, v in spec.items() if k != "name")
    return f"{spec['name']}({params})"


def write_report(out: Path, report: Mapping[str, Any]) -> None:
    """``report.json`` and ``summary.txt`` in ``out``."""
    text = json.dumps(report, indent=2, default=float)
    write_file(out / "report.json", lambda p: _write_text(p, text))
    summary = summary_text(report)
    write_file(out / "summary.txt", lambda p: _write_text(p, summary))


def _write_text(path: Path, text: str) -> None:
    path.write_text(text)


def _save_png(fig: Any, path: Path) -> None:
    fig.savefig(path, format="png", dpi=110)


def write_figures(out: Path, figures: Mapping[str, Callable[[], Any]]) -> list[str]:
    """Render and save each figure as PNG; returns the file names written."""
    written = []
    for name, make in figures.items():
        fig = make()
        write_file(out / name, functools.partial(_save_png, fig))
        written.append(name)
    return written
