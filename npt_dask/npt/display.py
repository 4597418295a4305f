"""How a model shows itself: a plain-text ``repr`` and an HTML card for notebooks.

Pure formatting over numbers the model already holds: nothing is computed,
nothing is read from the store.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np

from npt_dask.npt.eigen import NEGATIVE_RATIO

__all__ = ["landmark_summary", "landmark_text", "model_html", "model_rows", "model_text", "not_psd"]


def _kernel(kernel: Any) -> str:
    params = {k: v for k, v in kernel.to_dict().items() if k != "name"}
    inner = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in
                      params.items())  # fmt: skip
    return f"{kernel.name}({inner})"


def landmark_summary(landmarks: dict[str, Any]) -> dict[str, Any]:
    """A landmark model's landmarks for a report: m, the method and the certificate's
    mean, max and quantiles (the row indices stay in the store; empty for an exact model).

    >>> cert = {"n_rows": 9, "mean": 0.1, "max": 0.5, "quantiles": {"0.5": 0.1},
    ...         "relative_mean": 0.01, "relative_max": 0.05, "histogram": {}}
    >>> landmark_summary({"method": "uniform", "m": 3, "indices": [0, 4, 8],
    ...                   "certificate": cert})["certificate"]["max"]
    0.5
    """
    if not landmarks:
        return {}
    cert = landmarks.get("certificate", {})
    keep = ("n_rows", "mean", "max", "quantiles", "relative_mean", "relative_max")
    return {
        "m": landmarks.get("m"),
        "method": landmarks.get("method"),
        "certificate": {k: cert[k] for k in keep if k in cert},
    }


def landmark_text(landmarks: dict[str, Any]) -> str:
    """One line: ``m = 2,000 landmarks (uniform); certificate over 56,000 rows: ...``."""
    summary = landmark_summary(landmarks)
    if not summary:
        return ""
    cert = summary["certificate"]
    quantiles = ", ".join(
        f"{float(q) * 100:g}% {v:.3g}" for q, v in cert.get("quantiles", {}).items()
    )
    return (
        f"m = {summary['m']:,} landmarks ({summary['method']}); certificate (Lemma 5 "
        f"residual) over {cert.get('n_rows', 0):,} rows: mean {cert.get('mean', 0.0):.3g}, "
        f"max {cert.get('max', 0.0):.3g}, quantiles {quantiles}"
    )


def not_psd(min_eigenvalue: float, eigenvalues: np.ndarray) -> bool:
    """Whether ``min_eigenvalue`` is significantly negative, by the solver's own rule.

    Negative eigenvalues down to ``NEGATIVE_RATIO * λ₁`` in magnitude are
    rounding (a PSD kernel's zero eigenvalues come out as ±1e-15 or so), not a
    property of the kernel: the solver neither warns about nor excludes them.

    >>> not_psd(-9.7e-15, np.array([42.0])), not_psd(-0.5, np.array([42.0]))
    (False, True)
    """
    lam1 = float(eigenvalues[0]) if eigenvalues.size else 0.0
    return bool(min_eigenvalue < -NEGATIVE_RATIO * max(lam1, 0.0))


def model_rows(model: Any) -> list[tuple[str, str]]:
    """(label, value) rows shared by the text and HTML views."""
    lam, d = model.eigenvalues, model.diagnostics
    spectrum = "empty"
    if lam.size:
        spectrum = (
            f"λ₁ = {lam[0]:.4g} … λ_r = {lam[-1]:.4g}, Σλ = {lam.sum():.4g}, "
            f"λ₁/λ_r = {lam[0] / lam[-1]:.3g}"
        )
    residual = float(np.max(d.residuals, initial=0.0))
    state = "converged" if d.converged else "NOT converged"
    solver = (
        f"{d.solver}, {d.passes} pass{'es' if d.passes != 1 else ''}, max residual "
        f"{residual:.2g} (tol {d.tol:.0e}), {state}, {d.seconds:.1f} s"
    )
    if d.solver == "krylov":
        solver += f", block {d.block_size}, cache {d.cache} ({d.cached_fraction:.0%} kept)"
    if not_psd(d.min_eigenvalue, lam):
        solver += f"; most negative eigenvalue {d.min_eigenvalue:.3g} (kernel not PSD)"
    return [
        ("kernel", _kernel(model.kernel)),
        ("training", f"n = {model.n_samples:,}, d = {model.n_features:,}, "
                     f"{model.precision}, {'centred' if model.center else 'uncentred'}"),
        ("components", f"r = {model.n_components}"),
        ("spectrum", spectrum),
        ("solver", solver),
        ("store", model.store_path or "in memory (not saved)"),
    ]  # fmt: skip


def model_text(model: Any) -> str:
    """Multi-line ``repr``."""
    rows = model_rows(model)
    width = max(len(label) for label, _ in rows)
    return "NPTModel\n" + "\n".join(f"  {label:<{width}}  {value}" for label, value in rows)


def _sparkline(values: np.ndarray, width: int = 160, height: int = 36) -> str:
    """Inline SVG of log10 of the positive eigenvalues (no plotting library needed)."""
    positive = values[values > 0]
    if positive.size < 2:
        return ""
    logs = np.log10(positive)
    span = max(float(logs.max() - logs.min()), 1e-12)
    xs = np.linspace(2, width - 2, logs.size)
    ys = 2 + (height - 4) * (logs.max() - logs) / span
    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys, strict=True))
    return (
        f'<svg width="{width}" height="{height}" role="img" aria-label="log spectrum">'
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{points}"/></svg>'
    )


def model_html(model: Any) -> str:
    """``_repr_html_``: a compact table with a log-spectrum sparkline."""
    cells = "".join(
        f'<tr><th style="text-align:left;padding-right:1em">{html.escape(label)}</th>'
        f'<td style="text-align:left">{html.escape(value)}</td></tr>'
        for label, value in model_rows(model)
    )
    spark = _sparkline(model.eigenvalues)
    if spark:
        cells += f'<tr><th style="text-align:left">log λ</th><td>{spark}</td></tr>'
    return f"<div><strong>NPTModel</strong><table>{cells}</table></div>"
