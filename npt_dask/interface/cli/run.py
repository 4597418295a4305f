"""``npt run CONFIG``: run a pipeline config (TOML): fit, project, methods, report."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from npt_dask.interface.cli.options import cluster_options
from npt_dask.interface.pipeline import load_config
from npt_dask.interface.pipeline import run as run_pipeline
from npt_dask.interface.pipeline.report import summary_text

__all__ = ["add", "run"]


def add(sub: Any) -> argparse.ArgumentParser:
    """This subcommand's parser, added to ``sub`` (the ``npt`` parser's subparsers)."""
    run = sub.add_parser("run", help="run a pipeline config (TOML): fit, project, methods, report")
    run.add_argument("config", help="pipeline config, e.g. pipelines/quickstart.toml")
    run.add_argument("--output", help="results folder (overrides [output] dir)")
    run.add_argument("--data-dir", help="folder of the data files (overrides [data] data_dir)")
    run.add_argument("--overwrite", action="store_true", help="restart projections")
    run.add_argument("--quiet", action="store_true", help="no progress output")
    cluster_options(run, default="the config's [cluster]")
    return run


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the pipeline config with the command line's overrides; the report's path."""
    config = load_config(args.config)
    overrides: dict[str, dict[str, Any]] = {}
    if args.output:
        overrides["output"] = {"dir": args.output}
    if args.overwrite:
        overrides.setdefault("output", {})["overwrite"] = True
    if args.data_dir:
        overrides["data"] = {"data_dir": args.data_dir}
    cluster = {
        "address": args.scheduler, "scheduler_file": args.scheduler_file,
        "tls_ca_file": args.tls_ca_file, "tls_cert": args.tls_cert, "tls_key": args.tls_key,
    }  # fmt: skip
    if any(cluster.values()):
        overrides["cluster"] = {k: v for k, v in cluster.items() if v}
    report = run_pipeline(config.with_overrides(**overrides), progress=not args.quiet)
    if not args.quiet:
        print(summary_text(report), file=sys.stderr)
    return {"report": f"{report['outputs']['dir']}/report.json"}  # the figures are in it
