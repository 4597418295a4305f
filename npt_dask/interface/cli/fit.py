"""``npt fit DATA --out MODEL.zarr``: fit a model to DATA and save it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from npt_dask.arrays.device import check_device
from npt_dask.errors import InputError
from npt_dask.interface.cli.checks import check_paths
from npt_dask.interface.cli.options import (
    CLI_OWN,
    client_from_args,
    cluster_options,
    data_options,
    device_option,
    fit_options,
    on_device,
    rows_option,
    select_rows,
)
from npt_dask.npt.fitting import fit_params
from npt_dask.npt.model import load
from npt_dask.npt.params import PARAMS, FitParams
from npt_dask.npt.projection_store import open_data
from npt_dask.storage.store import check_target

__all__ = ["add", "run"]


def add(sub: Any) -> argparse.ArgumentParser:
    """This subcommand's parser, added to ``sub`` (the ``npt`` parser's subparsers)."""
    fit = sub.add_parser("fit", help="fit a model to DATA and save it to --out")
    fit.add_argument("data", help=".npy, .npz (--key), zarr array, or xarray zarr (--var)")
    fit.add_argument("--out", required=True, help="path of the model store to write (zarr)")
    fit.add_argument("--overwrite", action="store_true", help="replace a model already at --out")
    rows_option(fit, "fit on these rows of DATA only (e.g. 0:48000, the training rows)")
    fit_options(fit)
    data_options(fit)
    device_option(fit)
    cluster_options(fit)
    return fit


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Fit a model to the rows of ``DATA`` (``--rows``) and save it to ``--out``."""
    check_device(args.device)  # a GPU asked for and missing: refused before any work
    check_paths({"--out": args.out}, {"DATA": args.data, "--start": args.start})  # a
    # warm-start model is kept as it was
    if (Path(args.out) / "zarr.json").is_file() and not args.overwrite:  # a store already there
        raise InputError(f"{args.out} already holds a zarr store; pass --overwrite to replace it.")
    check_target(Path(args.out))  # a file or foreign data there: refused before the fit
    data = on_device(select_rows(open_data(args.data, key=args.key, var=args.var), args.rows), args)
    with client_from_args(args):
        model = _fit_model(data, args)
        model.save(args.out, overwrite=args.overwrite)
    return {
        "model": str(args.out),
        "n": model.n_samples,
        "r": model.n_components,
        "passes": model.diagnostics.passes,
        "converged": model.diagnostics.converged,
    }


def _fit_model(data: Any, args: argparse.Namespace) -> Any:
    values = {p.name: getattr(args, p.name, p.default) for p in PARAMS if p.name not in CLI_OWN}
    start = load(args.start) if args.start else None
    return fit_params(data, FitParams(**values, start=start, progress=not args.quiet))
