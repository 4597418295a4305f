"""``npt project MODEL DATA --out PROJ.zarr``: project DATA with MODEL into a zarr store,
resumably."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from npt_dask.arrays.device import check_device
from npt_dask.interface.cli.checks import check_paths
from npt_dask.interface.cli.options import (
    client_from_args,
    cluster_options,
    data_options,
    device_option,
    on_device,
    rows_option,
    select_rows,
)
from npt_dask.npt.model import load
from npt_dask.npt.projection_store import open_data, project

__all__ = ["add", "run"]


def add(sub: Any) -> argparse.ArgumentParser:
    """This subcommand's parser, added to ``sub`` (the ``npt`` parser's subparsers)."""
    proj = sub.add_parser("project", help="project DATA with MODEL into --out (resumable)")
    proj.add_argument("model", help="model store written by 'npt fit'")
    proj.add_argument("data", help=".npy, .npz (--key), zarr array, or xarray zarr (--var)")
    proj.add_argument("--out", required=True, help="path of the projection store (zarr)")
    proj.add_argument("--chunk-size", type=int, help="rows per task (default: the model's)")
    proj.add_argument(
        "--overwrite", action="store_true", help="start again: replace a projection at --out"
    )
    proj.add_argument("--no-resume", action="store_true", help=argparse.SUPPRESS)  # deprecated
    rows_option(proj, "project these rows of DATA only (e.g. 48000:56000)")
    data_options(proj)
    device_option(proj)
    cluster_options(proj)
    return proj


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Project ``DATA`` with ``MODEL`` into the zarr store ``--out`` (resumable)."""
    gpu = check_device(args.device) == "gpu"  # missing: refused before the store is touched
    if args.no_resume:
        print(
            "npt project: --no-resume is deprecated; use --overwrite (as npt fit and npt run).",
            file=sys.stderr,
        )
    check_paths({"--out": args.out}, {"MODEL": args.model, "DATA": args.data})
    model = load(args.model)
    data = args.data  # a path: npt.project opens it
    if gpu or args.rows is not None:
        rows = select_rows(open_data(args.data, key=args.key, var=args.var), args.rows)
        data = on_device(rows, args)  # as they are for cpu
    with client_from_args(args):
        ds = project(
            model,
            data,
            args.out,
            chunk_size=args.chunk_size,
            resume=not (args.overwrite or args.no_resume),
            progress=not args.quiet,
            key=args.key,
            var=args.var,
        )
    return {
        "out": str(args.out),
        "rows": int(ds.sizes["sample"]),
        "components": int(ds.sizes["component"]),
    }
