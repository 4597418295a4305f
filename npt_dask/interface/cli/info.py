"""``npt info STORE``: what a store written by npt-dask holds, read from its manifest: an
NPT model's manifest, spectrum and diagnostics, or a kernel ridge model's route, kernel,
shapes, iterations and input scale."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from npt_dask.npt.display import landmark_summary
from npt_dask.npt.model import load
from npt_dask.storage import ridge_store
from npt_dask.storage.kinds import RIDGE, store_kind
from npt_dask.storage.store import manifest_checksum, read_manifest, recover

__all__ = ["add", "run"]


def add(sub: Any) -> argparse.ArgumentParser:
    """This subcommand's parser, added to ``sub`` (the ``npt`` parser's subparsers)."""
    info = sub.add_parser(
        "info", help="print what a model store holds (npt fit's, or npt ridge --out's)"
    )
    info.add_argument("model", help="model store written by 'npt fit' or 'npt ridge --out'")
    return info


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The store's summary: :func:`ridge_summary` for a kernel ridge model, else an NPT
    model's manifest, checksum, spectrum, plan and landmark summary."""
    recover(Path(args.model))  # a save killed mid-swap: finished or rolled back first
    if store_kind(args.model) == RIDGE:
        return ridge_summary(args.model)
    manifest = read_manifest(Path(args.model))
    model = load(args.model, verify=False)
    lam = model.eigenvalues
    shown = manifest.to_dict() | {"checksums": "..."}
    diagnostics = dict(shown.get("diagnostics", {}))
    landmarks = diagnostics.pop("landmarks", None)  # the indices stay in the store
    shown["diagnostics"] = diagnostics  # its plan is shown once, below
    plan = diagnostics.pop("plan", None) or dict(model.diagnostics.plan)
    result = {
        "manifest": shown,
        "checksum": manifest_checksum(manifest),
        "spectrum": {
            "lambda_1": float(lam[0]),
            "lambda_r": float(lam[-1]),
            "sum_of_r_eigenvalues": float(lam.sum()),
        },
        "plan": plan,
    }
    if landmarks:
        result["landmarks"] = landmark_summary(landmarks)
    return result


def ridge_summary(path: str | Path) -> dict[str, Any]:
    """A kernel ridge store's summary from its checked manifest (no array is read): the
    estimator, its route and why, the kernel, alpha, the shapes, the iterations, the
    input scale it was fitted on (None where none is recorded), the search's result
    for a CV estimator, the plan, the versions and the checksum."""
    m = ridge_store.read_manifest(path)
    fitted = dict(m.fitted)
    plan = dict(fitted.get("plan_") or {})
    out: dict[str, Any] = {
        "kind": "kernel ridge model",
        "estimator": m.estimator,
        "route": fitted.get("solver_"),
        "exact": m.exact,
        "reason": plan.pop("reason", None),
        "kernel": dict(m.kernel),
        "alpha": fitted.get("alpha_", m.params.get("alpha")),
        "precision": m.precision,
        "shapes": {
            "n_train": m.n_train,
            "n_centres": m.n_centres,
            "n_features": m.n_features,
            "n_targets": m.n_targets,
        },
        "n_iter": fitted.get("n_iter_"),
        "scale": None if m.input_transform is None else m.input_transform["scale"],
        "image_shape": None if m.input_transform is None else m.input_transform["image_shape"],
    }
    classes = m.arrays.get("classes") or m.arrays.get("classes_utf32")
    if classes is not None:
        out["n_classes"] = int(classes["shape"][0])
    if m.feature_names is not None:
        out["feature_names"] = _short(m.feature_names)
    if "cv_results_" in fitted:
        found = fitted["cv_results_"]
        out["search"] = {
            "best_score": fitted.get("best_score_"),
            "gamma": fitted.get("gamma_"),
            "alpha": fitted.get("alpha_"),
            "gammas": found.get("gammas"),
            "alphas": found.get("alphas"),
            "seconds": found.get("seconds"),
        }
    out |= {
        "seconds": fitted.get("fit_seconds_"),
        "params": dict(m.params),
        "plan": plan,
        "versions": {
            "npt-dask": m.package_version,
            "scikit-learn": m.sklearn_version,
            "format": m.format_version,
        },
        "created": m.created,
        "checksum": m.checksum,
    }
    return out


def _short(names: list[str], most: int = 20) -> list[str] | str:
    """Feature names as they are, or how many there are and the first few."""
    if len(names) <= most:
        return list(names)
    return f"{len(names)} names: {', '.join(names[:5])}, ..."
