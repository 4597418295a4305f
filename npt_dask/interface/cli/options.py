"""The options several subcommands share: rows, data, device and cluster options, and
one option per entry of a parameter table (the fit's, kernel ridge's, growth's)."""

from __future__ import annotations

import argparse
import contextlib
import math
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import xarray as xr

from npt_dask.arrays.device import DEVICE_PARAM, DEVICES, to_device
from npt_dask.errors import InputError
from npt_dask.npt.growth import GROW_PARAMS
from npt_dask.npt.params import PARAMS
from npt_dask.ridge.params import RIDGE_PARAMS
from npt_dask.ridge.search import SEARCH_PARAMS
from npt_dask.runtime.cluster import TLSConfig, connect, quiet_lost_scheduler

__all__ = [
    "CLI_OWN",
    "client_from_args",
    "cluster_options",
    "data_options",
    "device_option",
    "fit_options",
    "grow_options",
    "on_device",
    "positive",
    "ridge_options",
    "row_range",
    "rows_option",
    "select_rows",
]


def rows_option(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--rows", metavar="START:STOP", type=row_range, help=text)


def row_range(text: str) -> slice:
    """``START:STOP`` (either may be left out) as a slice of rows."""
    match = re.fullmatch(r"\s*(\d*)\s*:\s*(\d*)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a row range; write START:STOP, e.g. 0:48000 (STOP excluded)."
        )
    start, stop = (int(g) if g else None for g in match.groups())
    if start is not None and stop is not None and stop <= start:
        raise argparse.ArgumentTypeError(f"{text!r} selects no rows: STOP must exceed START.")
    return slice(start, stop)


def positive(text: str) -> float:
    """A positive finite number (``--scale``)."""

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number, e.g. 255.")
    return value


def select_rows(data: Any, rows: slice | None) -> Any:
    """The rows of ``data`` in ``rows``, keeping their numbers as the sample coordinate."""
    if rows is None:
        return data

    n = int(data.shape[0])
    start, stop, _ = rows.indices(n)
    if (rows.stop or 0) > n or start >= n:
        raise InputError(f"--rows {start}:{rows.stop} is outside the data's {n} rows.")
    if isinstance(data, xr.DataArray):
        return data.isel({data.dims[0]: slice(start, stop)})
    if data.ndim != 2:
        return data[start:stop]  # refused with the fit's message
    return xr.DataArray(
        data[start:stop], dims=("sample", "feature"), coords={"sample": np.arange(start, stop)}
    )


CLI_OWN = {"progress", "start", "device"}  # --quiet; --start: a model path; device_option


def fit_options(parser: argparse.ArgumentParser) -> None:
    """One option per fit parameter, from the parameter table (names, defaults, help)."""

    for param in PARAMS:
        if param.name in CLI_OWN:
            continue
        if param.default is True:
            parser.add_argument(
                f"--no-{param.name.replace('_', '-')}", dest=param.name, action="store_false",
                help=f"do not {param.help}",
            )  # fmt: skip
            continue
        extra: dict[str, Any] = {"dest": param.name, "type": _typed(param.parse)}
        extra["help"] = f"{param.help} (default {param.default})"
        names = [param.flag] + (["--seed"] if param.name == "random_state" else [])
        if param.name == "landmarks":
            extra["help"] += " (an int here)"
        # no --kernel: the table's default object itself (argparse would re-parse a string
        # default into an equal string, and "rbf" named is not "no kernel named")
        default = argparse.SUPPRESS if param.name == "kernel" else param.default
        parser.add_argument(*names, default=default, **extra)

    parser.add_argument(
        "--start", metavar="MODEL", help="warm start from this saved model (e.g. a landmark model)"
    )


def ridge_options(parser: argparse.ArgumentParser) -> None:
    """One option per kernel ridge parameter and search parameter, from their tables."""

    for param in (*RIDGE_PARAMS, *SEARCH_PARAMS):
        if param.name in ("progress", "device"):  # --device: device_option's, every command's
            continue
        if param.name in ("alphas", "gammas"):
            parser.add_argument(
                param.flag, dest=param.name, nargs="+", type=float, default=None,
                help=f"{param.help}; given, the search picks (KernelRidge...CV)",
            )  # fmt: skip
            continue
        parse = param.parse or (lambda text: text)
        parser.add_argument(
            param.flag, dest=param.name, type=_typed(parse), default=param.default,
            help=f"{param.help} (default {param.default})",
        )  # fmt: skip


def grow_options(parser: argparse.ArgumentParser) -> None:
    """Growth's options, from its parameter table (names, defaults, help, parsing)."""

    for param in GROW_PARAMS:
        parser.add_argument(param.flag, dest=param.name, type=_typed(param.parse),
                            default=param.default, help=param.help)  # fmt: skip


def _typed(parse: Any) -> Any:
    """The table's parser, its own errors shown as they are (not "invalid value")."""

    def typed(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    typed.__name__ = getattr(parse, "__name__", "value")
    return typed


def data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key", help="array name inside a .npz file (default x)")
    parser.add_argument("--var", help="variable name inside an xarray zarr dataset")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def device_option(parser: argparse.ArgumentParser) -> None:
    """``--device gpu``: the rows' chunks on the CUDA device (CuPy), from the device table."""

    parser.add_argument(
        DEVICE_PARAM.flag, choices=DEVICES, default=None, help=f"{DEVICE_PARAM.help} (default cpu)"
    )


def on_device(data: Any, args: argparse.Namespace) -> Any:
    """The rows with their chunks on ``--device`` (as they are for cpu)."""

    return to_device(data, args.device)


def cluster_options(parser: argparse.ArgumentParser, default: str = "local threads") -> None:
    group = parser.add_argument_group(f"cluster (default: {default})")
    group.add_argument("--scheduler", metavar="ADDRESS", help="tcp://host:8786 or tls://host:8786")
    group.add_argument("--scheduler-file", help="JSON file of 'dask scheduler --scheduler-file'")
    group.add_argument("--tls-ca-file", help="CA certificate (PEM) of a tls:// cluster")
    group.add_argument("--tls-cert", help="client certificate (PEM)")
    group.add_argument("--tls-key", help="client private key (PEM)")
    group.add_argument(
        "--scheduler-timeout", type=float, default=10.0, help="seconds to wait (default 10)"
    )


@contextlib.contextmanager
def client_from_args(args: argparse.Namespace) -> Iterator[Any]:
    """The cluster named by the options, or nothing (local threads)."""
    address, scheduler_file = args.scheduler, args.scheduler_file
    if address and address.endswith(".json") and not scheduler_file:  # older spelling
        address, scheduler_file = None, address
    tls = None
    if args.tls_ca_file or args.tls_cert or args.tls_key:
        if not args.tls_ca_file:
            raise InputError("--tls-cert/--tls-key need --tls-ca-file (the cluster's CA).")
        tls = TLSConfig(args.tls_ca_file, cert=args.tls_cert, key=args.tls_key)
    if not (address or scheduler_file or tls):
        yield None
        return

    with (
        quiet_lost_scheduler(),
        connect(
            address,
            scheduler_file=scheduler_file,
            tls=tls,
            timeout=args.scheduler_timeout,
            show_dashboard=not getattr(args, "quiet", False),
        ) as client,
    ):
        yield client
