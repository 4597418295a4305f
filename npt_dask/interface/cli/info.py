"""``npt info MODEL``: a model's manifest, spectrum and diagnostics."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from npt_dask.npt.display import landmark_summary
from npt_dask.npt.model import load
from npt_dask.storage.store import manifest_checksum, read_manifest

__all__ = ["add", "run"]


def add(sub: Any) -> argparse.ArgumentParser:
    """This subcommand's parser, added to ``sub`` (the ``npt`` parser's subparsers)."""
    info = sub.add_parser("info", help="print a model's manifest, spectrum and diagnostics")
    info.add_argument("model", help="model store written by 'npt fit'")
    return info


def run(args: argparse.Namespace) -> dict[str, Any]:
    """A model's manifest, checksum, spectrum, plan and landmark summary."""
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
