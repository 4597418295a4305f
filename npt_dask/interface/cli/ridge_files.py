"""``npt ridge``'s files: the inputs found as :func:`npt_dask.load_npz` finds one (a
relative ``.npy``/``.npz`` path not here is looked up in ``$NPT_DATA_DIR``), rows read
as 2-D (images flattened; the scale is :mod:`~npt_dask.interface.cli.scaling`'s), labels
read without unpickling, the outputs checked before any work
(:func:`~npt_dask.interface.cli.checks.check_paths`, then each output's own rules) and
written atomically."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from npt_dask.errors import InputError, OutputPathError
from npt_dask.interface.cli.checks import check_paths
from npt_dask.interface.cli.options import select_rows
from npt_dask.npt.projection_store import open_data
from npt_dask.runtime.atomic import real, write_file
from npt_dask.storage.datasets import find_file, read_numpy
from npt_dask.storage.store import check_target

__all__ = [
    "Rows",
    "check_labels",
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


@dataclass(frozen=True)
class Rows:
    """The rows of one option as read: ``data`` 2-D (images flattened, ``rows`` selected,
    not scaled), ``raw`` the array as the file holds it (what the pixel rule reads),
    ``image_shape`` each image's shape (None: the file holds rows)."""

    option: str
    source: Path
    data: Any
    raw: Any
    image_shape: tuple[int, ...] | None


def ridge_rows(
    path: Path, args: argparse.Namespace, rows: slice | None, option: str, *, note: bool
) -> Rows:
    """The rows of ``path`` (``--key``/``--var``) as 2-D rows: images flattened (with a
    ``note`` saying so), then the ``rows`` selected; not scaled."""

    if path.suffix == ".npz":  # read whole, as open_data does; images flattened below
        raw: Any = _read_array(path, args.key or "x")
    else:
        raw = open_data(path, key=args.key, var=args.var)
    data = _as_rows(raw, path, option, args, note=note)
    shape = tuple(int(v) for v in raw.shape[1:]) if raw.ndim > 2 else None
    return Rows(option, path, select_rows(data, rows), raw, shape)


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
        print(
            f"npt ridge: note: {option} {path} holds images of shape {tuple(values.shape)}; "
            f"each is flattened to a row of {flat.shape[1]} values.",
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


def check_labels(labels: Any, rows: Rows, source: Path) -> None:
    """Refuse training labels whose count is not the training rows' (before the fit)."""

    n = int(rows.data.shape[0])
    if len(labels.shape) != 1 or int(labels.shape[0]) != n:
        raise InputError(
            f"--labels {source} gives {tuple(labels.shape)} labels for {n} rows of DATA; "
            "they must be one label per row: check --labels, --labels-key and --rows."
        )


def check_test_labels(z: Any, truth: Any, source: Path) -> None:
    """Refuse test labels whose count is not the test rows' (before the fit)."""

    if truth.ndim != 1 or len(truth) != int(z.shape[0]):
        raise InputError(
            f"--test-labels {source} gives {truth.shape} labels for {int(z.shape[0])} test "
            "rows; they must be one label per test row: check --test-labels, --test-rows "
            "and --labels-key."
        )


def check_ridge_outputs(args: argparse.Namespace, files: dict[str, Path]) -> None:
    """Every check of ``npt ridge``'s outputs, before any row is read: the paths of all
    its path options together (:func:`~npt_dask.interface.cli.checks.check_paths`: no
    output is an input or another output, each can be written), then each output's own
    rules: ``--out`` no store already there (never replaced) nor other data;
    ``--checkpoint`` a file; ``--predictions`` with test rows, a file, not over an
    existing one without ``--overwrite``."""

    outputs = {"--out": args.out, "--checkpoint": args.checkpoint,
               "--predictions": args.predictions}  # fmt: skip
    check_paths(outputs, files)
    if args.out is not None:
        out = Path(os.path.realpath(Path(args.out).expanduser()))
        if (out / "zarr.json").is_file():
            raise OutputPathError(
                f"--out {args.out} already holds a zarr store; npt ridge never replaces one: "
                "remove it or choose another path."
            )
        check_target(out)  # a file or foreign data there: refused before the fit
    if args.checkpoint and Path(os.path.realpath(args.checkpoint)).is_dir():
        raise OutputPathError(
            f"--checkpoint {args.checkpoint} is a folder; name a file in it (e.g. cg.npz)."
        )
    if args.predictions:
        _check_predictions(args, files)


def _check_predictions(args: argparse.Namespace, files: dict[str, Path]) -> None:
    if "--test" not in files:
        raise InputError(
            "--predictions writes the test rows' predictions, and no test rows are given: "
            "add --test FILE or --test-rows START:STOP, or drop --predictions."
        )
    target = Path(os.path.realpath(Path(args.predictions).expanduser()))
    if target.is_dir():
        raise OutputPathError(f"--predictions {args.predictions} is a folder; name a file in it.")
    if target.exists() and not args.overwrite:
        raise OutputPathError(
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
