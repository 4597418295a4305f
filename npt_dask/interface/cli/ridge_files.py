"""``npt ridge``'s files: the inputs found as :func:`npt_dask.load_npz` finds one (a
relative ``.npy``/``.npz`` path not here is looked up in ``$NPT_DATA_DIR``), rows read
as 2-D (images flattened, divided by ``--scale``), labels read without unpickling, the
outputs checked before any work and written atomically."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from npt_dask.errors import InputError
from npt_dask.interface.cli.checks import check_not_an_input, check_parent
from npt_dask.interface.cli.options import select_rows
from npt_dask.npt.projection_store import open_data
from npt_dask.runtime.atomic import real, write_file
from npt_dask.storage.datasets import find_file, read_numpy

__all__ = [
    "check_ridge_outputs",
    "check_test_labels",
    "find_input",
    "has_labels",
    "open_labels",
    "ridge_files",
    "ridge_rows",
    "save_npy",
]


def open_labels(path: str, key: str, var: str, rows: slice | None) -> Any:
    """Labels (1-D) from ``.npy``, a ``.npz`` (``key``) or zarr (``var``), never unpickled;
    the ``rows`` selected as the data's are."""

    source = Path(path)
    if not source.exists():
        raise InputError(f"{source} does not exist.")
    if source.suffix in (".npy", ".npz"):

        def load() -> Any:
            if source.suffix == ".npy":  # an array (np.load opens a .npz as a closable file)
                return np.asarray(np.load(source, allow_pickle=False))
            with np.load(source, allow_pickle=False) as data:
                if key not in data.files:
                    raise InputError(f"{source} has no array {key!r}; it has {data.files}.")
                return np.asarray(data[key])

        values = read_numpy(source, load)
    else:
        values = xr.open_zarr(source)[var].data
    return values if rows is None else values[rows]


def has_labels(path: str, key: str) -> bool:
    """Whether ``path`` is a ``.npz`` holding the labels' array ``key``."""

    if Path(path).suffix != ".npz" or not Path(path).is_file():
        return False
    with np.load(path, allow_pickle=False) as data:
        return key in data.files


def ridge_files(args: argparse.Namespace) -> dict[str, Path]:
    """The input files of ``npt ridge`` by option, found as :func:`npt_dask.load_npz` finds
    one (a relative ``.npy``/``.npz`` path not here is looked up in ``$NPT_DATA_DIR``);
    ``--test`` and ``--test-labels`` only when test rows are asked for."""
    files = {"DATA": find_input(args.data, "DATA")}
    files["--labels"] = find_input(args.labels, "--labels") if args.labels else files["DATA"]
    if args.test is not None or args.test_rows is not None:
        files["--test"] = find_input(args.test, "--test") if args.test else files["DATA"]
        labels = files["--labels"] if args.labels else files["--test"]  # as the rows
        if args.test_labels:
            labels = find_input(args.test_labels, "--test-labels")
        files["--test-labels"] = labels
    return files


def find_input(path: str, option: str) -> Path:
    """An input file or store: ``path`` itself, or a ``.npy``/``.npz`` file looked up in
    ``$NPT_DATA_DIR``; an error naming the option and where it looked otherwise."""

    given = Path(path).expanduser()
    if given.exists():
        return given
    if given.suffix in (".npy", ".npz"):
        try:
            return find_file(given)
        except InputError as exc:
            raise InputError(f"{option}: {exc}") from None
    raise InputError(f"{option} {path} does not exist; check the path.")


def ridge_rows(
    path: Path, args: argparse.Namespace, rows: slice | None, option: str, *, note: bool
) -> Any:
    """The rows of ``path`` (``--key``/``--var``) as 2-D rows: images flattened (with a
    ``note`` saying so), divided by ``--scale``, then the ``rows`` selected."""

    if path.suffix == ".npz":  # read whole, as open_data does; images flattened below
        data: Any = _read_array(path, args.key or "x")
    else:
        data = open_data(path, key=args.key, var=args.var)
    data = _as_rows(data, path, option, args, note=note)
    if args.scale is not None:
        data = data / args.scale
    return select_rows(data, rows)


def _as_rows(data: Any, path: Path, option: str, args: argparse.Namespace, *, note: bool) -> Any:
    """``data`` as ``(n_samples, n_features)``: one sample per row, an image flattened."""

    if data.ndim < 2:
        raise InputError(
            f"{option} {path} holds an array of shape {tuple(data.shape)}; the rows must be "
            "2-D (n_samples, n_features), or images (n_samples, height, width). A single "
            "feature: save x.reshape(-1, 1)."
        )
    if data.ndim == 2:
        return data
    values = data.data if hasattr(data, "dims") else data  # an xarray variable: its array
    flat = values.reshape(values.shape[0], -1)
    if note and not args.quiet:
        hint = ""
        if np.issubdtype(values.dtype, np.integer) and args.scale is None:
            hint = " (integer pixels: --scale 255 maps them to [0, 1])"
        print(
            f"npt ridge: note: {option} {path} holds images of shape {tuple(values.shape)}; "
            f"each is flattened to a row of {flat.shape[1]} values{hint}.",
            file=sys.stderr,
        )
    return flat


def _read_array(path: Path, key: str) -> Any:
    """Array ``key`` of the ``.npz`` file ``path``, never unpickled."""

    def load() -> Any:
        with np.load(path, allow_pickle=False) as data:
            if key not in data.files:
                raise InputError(f"{path} has no array {key!r}; it has {data.files} (--key).")
            return np.asarray(data[key])

    return read_numpy(path, load)


def check_test_labels(z: Any, truth: Any, source: Path) -> None:
    """Refuse test labels whose count is not the test rows' (before the fit)."""

    if truth.ndim != 1 or len(truth) != int(z.shape[0]):
        raise InputError(
            f"--test-labels {source} gives {truth.shape} labels for {int(z.shape[0])} test "
            "rows; they must be one label per test row: check --test-labels, --test-rows "
            "and --labels-key."
        )


def check_ridge_outputs(args: argparse.Namespace, files: dict[str, Path]) -> None:
    """Refuse, before any work, a ``--predictions`` or ``--checkpoint`` path that is one
    of the inputs (a link to one, a hard link, or a path inside an input store), a
    ``--predictions`` without test rows, in a missing folder, or over an existing file
    without ``--overwrite``."""

    if args.checkpoint:
        check_not_an_input("--checkpoint", args.checkpoint, files)
    if not args.predictions:
        return
    if "--test" not in files:
        raise InputError(
            "--predictions writes the test rows' predictions, and no test rows are given: "
            "add --test FILE or --test-rows START:STOP, or drop --predictions."
        )
    inputs = files | ({"--checkpoint": Path(args.checkpoint)} if args.checkpoint else {})
    check_not_an_input("--predictions", args.predictions, inputs)
    check_parent(args.predictions, "--predictions")
    target = Path(os.path.realpath(Path(args.predictions).expanduser()))
    if target.is_dir():
        raise InputError(f"--predictions {args.predictions} is a folder; name a file in it.")
    if target.exists() and not args.overwrite:
        raise InputError(
            f"--predictions {args.predictions} already exists; pass --overwrite to replace "
            "it, or choose another path."
        )


def save_npy(path: Path, values: Any) -> None:
    """``values`` as a ``.npy`` file, written atomically where a link points (no pickle):
    an interrupted write leaves the previous file, or none."""

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:
            np.save(handle, values, allow_pickle=False)
            handle.flush()
            os.fsync(handle.fileno())

    write_file(real(path), write)
