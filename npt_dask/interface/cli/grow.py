"""``npt grow MODEL NEW_DATA ... --out NEW_MODEL``: grow a full-rank model by new rows."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from npt_dask.arrays.device import check_device
from npt_dask.errors import InputError
from npt_dask.interface.cli.checks import check_paths, check_width
from npt_dask.interface.cli.options import data_options, device_option, grow_options, on_device
from npt_dask.npt.growth import GROW_PARAMS
from npt_dask.npt.model import load
from npt_dask.npt.projection_store import open_data
from npt_dask.params.constraints import check_table
from npt_dask.storage.store import check_target

__all__ = ["add", "run"]


def add(sub: Any) -> argparse.ArgumentParser:
    """This subcommand's parser, added to ``sub`` (the ``npt`` parser's subparsers)."""
    grow = sub.add_parser(
        "grow", help="grow a full-rank MODEL by the rows of NEW_DATA (one batch per file)"
    )
    grow.add_argument(
        "model", help="a full-rank model store ('npt fit --n-components none', or 'npt grow')"
    )
    grow.add_argument("data", nargs="+", help="one or more data files, each a batch")
    grow.add_argument("--out", required=True, help="path of the grown model's store (zarr)")
    grow.add_argument("--overwrite", action="store_true", help="replace a model already at --out")
    grow_options(grow)
    data_options(grow)
    device_option(grow)
    return grow


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Grow ``MODEL`` by each file of ``DATA`` in turn and save it to ``--out``."""
    options = {p.name: getattr(args, p.name) for p in GROW_PARAMS}
    check_table(GROW_PARAMS, options)  # before the model is read
    check_device(args.device)  # a GPU asked for and missing: refused before any work
    inputs = {"MODEL": args.model} | {f"DATA {p}": p for p in args.data}
    check_paths({"--out": args.out}, inputs)  # the parent model is kept as it was
    if (Path(args.out) / "zarr.json").is_file() and not args.overwrite:
        raise InputError(f"{args.out} already holds a zarr store; pass --overwrite to replace it.")
    check_target(Path(args.out))
    model: Any = load(args.model)
    batches = [open_data(path, key=args.key, var=args.var) for path in args.data]
    for path, batch in zip(args.data, batches, strict=True):  # every batch before the first
        if getattr(batch, "ndim", 2) == 2:  # (other shapes: refused by partial_fit's words)
            check_width("DATA", path, batch, model.n_features, f"MODEL {args.model}")
    for batch in batches:
        batch = on_device(batch, args)
        model = model.partial_fit(batch, **options)
    model.save(args.out, overwrite=args.overwrite)  # checked above, before the work
    record = model.model.diagnostics.landmarks
    return {
        "model": str(args.out),
        "parent": record["lineage"][-1]["parent"],
        "n": model.n_samples,
        "r": model.n_components,
        "rows_added": model.rows_added,
        "batches": [
            {k: b[k] for k in ("rows_seen", "rows_added", "m")}
            | {"residual_max_after": b["after"]["max"]}
            for b in record["batches"]
        ],
    }
