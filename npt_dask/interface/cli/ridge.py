"""``npt``: a thin command line over the public API.

    npt fit DATA --kernel rbf --gamma 0.02 --n-components 100 --out model.zarr
    npt project MODEL DATA --out proj.zarr [--rows 48000:56000] [--overwrite] [--scheduler ADDRESS]
    npt grow MODEL NEW_DATA [NEW_DATA ...] --out NEW_MODEL [--residual-tol 0.01]
    npt info MODEL
    npt ridge DATA --rows 0:60000 --test-rows 60000:70000 --kernel rbf --gamma 0.02 \
        --alpha 1e-3 --landmarks 20000 [--alphas 1e-6 1e-3 ...] [--checkpoint cg.npz] \
        [--scale 255] [--predictions PRED.npy [--overwrite]]
    npt run CONFIG [--output DIR] [--data-dir DIR] [--scheduler ADDRESS | --scheduler-file FILE]

``fit`` and ``project`` run on local threads, or on an existing dask cluster
given by ``--scheduler``/``--scheduler-file`` (``tls://`` schedulers with
``--tls-ca-file --tls-cert --tls-key``), through :func:`npt_dask.runtime.cluster.connect`.

DATA is a ``.npy`` file, a ``.npz`` file (``--key``, default ``x``), a zarr
array, or an xarray dataset in zarr (``--var``). ``npt ridge`` looks a relative
``.npy``/``.npz`` path that is not here up in ``$NPT_DATA_DIR`` (as
:func:`npt_dask.storage.datasets.load_npz` does), flattens images to rows (saying so) and
divides by ``--scale``; no output path of a command may be one of its inputs.
Errors print one line and exit with status 2; a finished command exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for a misspelled option (Python 3.14's, on any Python)."""

    commands: dict[str, argparse.ArgumentParser]  # the sub-commands' parsers, by name

    def error(self, message: str) -> Any:
        match = re.match(r"unrecognized arguments: (.*)", message)
        if match:
            known = [o for a in self._actions for o in a.option_strings]
            for word in match.group(1).split():
                close = difflib.get_close_matches(word.split("=")[0], known, n=1, cutoff=0.6)
                if word.startswith("-") and close:
                    message += f" (did you mean {close[0]}?)"
                    break
        super().error(message)


def _parser() -> _Parser:
    from npt_dask._version import __version__

    parser = _Parser(
        prog="npt",
        description="Nonlinear Projection Trick on Dask: fit a kernel model, persist it to "
        "zarr, and project data chunk by chunk.",
    )
    parser.add_argument("--version", action="version", version=f"npt-dask {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    fit = sub.add_parser("fit", help="fit a model to DATA and save it to --out")
    fit.add_argument("data", help=".npy, .npz (--key), zarr array, or xarray zarr (--var)")
    fit.add_argument("--out", required=True, help="path of the model store to write (zarr)")
    fit.add_argument("--overwrite", action="store_true", help="replace a model already at --out")
    _rows_option(fit, "fit on these rows of DATA only (e.g. 0:48000, the training rows)")
    _fit_options(fit)
    _data_options(fit)
    _device_option(fit)
    _cluster_options(fit)

    proj = sub.add_parser("project", help="project DATA with MODEL into --out (resumable)")
    proj.add_argument("model", help="model store written by 'npt fit'")
    proj.add_argument("data", help=".npy, .npz (--key), zarr array, or xarray zarr (--var)")
    proj.add_argument("--out", required=True, help="path of the projection store (zarr)")
    proj.add_argument("--chunk-size", type=int, help="rows per task (default: the model's)")
    proj.add_argument(
        "--overwrite", action="store_true", help="start again: replace a projection at --out"
    )
    proj.add_argument("--no-resume", action="store_true", help=argparse.SUPPRESS)  # deprecated
    _rows_option(proj, "project these rows of DATA only (e.g. 48000:56000)")
    _data_options(proj)
    _device_option(proj)
    _cluster_options(proj)

    grow = sub.add_parser(
        "grow", help="grow a full-rank MODEL by the rows of NEW_DATA (one batch per file)"
    )
    grow.add_argument(
        "model", help="a full-rank model store ('npt fit --n-components none', or 'npt grow')"
    )
    grow.add_argument("data", nargs="+", help="one or more data files, each a batch")
    grow.add_argument("--out", required=True, help="path of the grown model's store (zarr)")
    grow.add_argument("--overwrite", action="store_true", help="replace a model already at --out")
    _grow_options(grow)
    _data_options(grow)

    info = sub.add_parser("info", help="print a model's manifest, spectrum and diagnostics")
    info.add_argument("model", help="model store written by 'npt fit'")

    ridge = sub.add_parser(
        "ridge", help="kernel ridge classification (or --regression) of DATA, scored on --test"
    )
    ridge.add_argument("data", nargs="?",
                       help=".npy, .npz (--key), zarr array, or xarray zarr (--var)")  # fmt: skip
    ridge.add_argument("--labels", help="file of the labels (default: DATA, at --labels-key)")
    ridge.add_argument("--labels-key", default="y", help="labels' array in a .npz (default y)")
    ridge.add_argument("--labels-var", default="y", help="labels' variable in xarray zarr")
    ridge.add_argument("--test", help="test rows' file (default: DATA, at --test-rows)")
    ridge.add_argument("--test-labels", help="file of the test labels (default: as --labels)")
    _rows_option(ridge, "train on these rows of DATA only (e.g. 0:60000)")
    ridge.add_argument("--test-rows", metavar="START:STOP", type=_row_range,
                       help="score on these rows of the test file (e.g. 60000:70000)")  # fmt: skip
    ridge.add_argument("--regression", action="store_true",
                       help="numeric targets: KernelRidge and R^2 (default: classes)")  # fmt: skip
    ridge.add_argument("--checkpoint", help="CG's state file: the same command run again "
                       "after a kill resumes from it, on the landmarks it saved")  # fmt: skip
    ridge.add_argument("--predictions", help="write the test predictions here (.npy; needs "
                       "--test or --test-rows)")  # fmt: skip
    ridge.add_argument("--overwrite", action="store_true",
                       help="replace a file already at --predictions")  # fmt: skip
    ridge.add_argument(
        "--scale", type=_positive, metavar="S",
        help="divide DATA's and --test's rows by S (255: pixels to [0, 1])",
    )  # fmt: skip
    ridge.add_argument("--out", help="save the fitted model here (zarr; 'npt ridge --model')")
    ridge.add_argument("--model", help="predict --test with this saved model (no DATA, no fit)")
    _ridge_options(ridge)
    _data_options(ridge)
    _device_option(ridge)
    _cluster_options(ridge)

    run = sub.add_parser("run", help="run a pipeline config (TOML): fit, project, methods, report")
    run.add_argument("config", help="pipeline config, e.g. pipelines/quickstart.toml")
    run.add_argument("--output", help="results folder (overrides [output] dir)")
    run.add_argument("--data-dir", help="folder of the data files (overrides [data] data_dir)")
    run.add_argument("--overwrite", action="store_true", help="restart projections")
    run.add_argument("--quiet", action="store_true", help="no progress output")
    _cluster_options(run, default="the config's [cluster]")
    parser.commands = {"fit": fit, "project": proj, "info": info, "run": run, "ridge": ridge}
    return parser


def _rows_option(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--rows", metavar="START:STOP", type=_row_range, help=text)


def _row_range(text: str) -> slice:
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


def _positive(text: str) -> float:
    """A positive finite number (``--scale``)."""
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number, e.g. 255.")
    return value


def _select_rows(data: Any, rows: slice | None) -> Any:
    """The rows of ``data`` in ``rows``, keeping their numbers as the sample coordinate."""
    if rows is None:
        return data
    import numpy as np
    import xarray as xr

    from npt_dask.errors import InputError

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


_CLI_OWN = {"progress", "start"}  # the command line's --quiet; --start takes a model path


def _fit_options(parser: argparse.ArgumentParser) -> None:
    """One option per fit parameter, from the parameter table (names, defaults, help)."""
    from npt_dask.npt.params import PARAMS

    for param in PARAMS:
        if param.name in _CLI_OWN:
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


def _ridge_options(parser: argparse.ArgumentParser) -> None:
    """One option per kernel ridge parameter and search parameter, from their tables."""
    from npt_dask.ridge.params import RIDGE_PARAMS
    from npt_dask.ridge.search import SEARCH_PARAMS

    for param in (*RIDGE_PARAMS, *SEARCH_PARAMS):
        if param.name in ("progress",):
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


def _grow_options(parser: argparse.ArgumentParser) -> None:
    """Growth's options, from its parameter table (names, defaults, help, parsing)."""
    from npt_dask.npt.growth import GROW_PARAMS

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


def _check_parent(out: str, option: str = "--out") -> None:
    """Refuse an output path whose folder does not exist (a typo would create a tree)."""
    from npt_dask.errors import InputError

    parent = Path(os.path.realpath(Path(out).expanduser())).parent  # where a link points
    if not parent.is_dir():
        raise InputError(
            f"{option} {out}: the folder {parent} does not exist; create it first or fix the path."
        )


def _data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key", help="array name inside a .npz file (default x)")
    parser.add_argument("--var", help="variable name inside an xarray zarr dataset")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def _device_option(parser: argparse.ArgumentParser) -> None:
    """``--device gpu``: the rows' chunks on the CUDA device (CuPy), from the device table."""
    from npt_dask.arrays.device import DEVICE_PARAM, DEVICES

    parser.add_argument(
        DEVICE_PARAM.flag, choices=DEVICES, default=None, help=f"{DEVICE_PARAM.help} (default cpu)"
    )


def _on_device(data: Any, args: argparse.Namespace) -> Any:
    """The rows with their chunks on ``--device`` (as they are for cpu)."""
    from npt_dask.arrays.device import to_device

    return to_device(data, args.device)


def _cluster_options(parser: argparse.ArgumentParser, default: str = "local threads") -> None:
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
def _client_from_args(args: argparse.Namespace) -> Iterator[Any]:
    """The cluster named by the options, or nothing (local threads)."""
    address, scheduler_file = args.scheduler, args.scheduler_file
    if address and address.endswith(".json") and not scheduler_file:  # older spelling
        address, scheduler_file = None, address
    tls = None
    if args.tls_ca_file or args.tls_cert or args.tls_key:
        from npt_dask.errors import InputError
        from npt_dask.runtime.cluster import TLSConfig

        if not args.tls_ca_file:
            raise InputError("--tls-cert/--tls-key need --tls-ca-file (the cluster's CA).")
        tls = TLSConfig(args.tls_ca_file, cert=args.tls_cert, key=args.tls_key)
    if not (address or scheduler_file or tls):
        yield None
        return
    from npt_dask.runtime.cluster import connect, quiet_lost_scheduler

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


def _fit(args: argparse.Namespace) -> dict[str, Any]:
    import npt_dask as npt
    from npt_dask.arrays.device import check_device
    from npt_dask.errors import InputError
    from npt_dask.npt.projection_store import open_data
    from npt_dask.storage.store import check_target

    check_device(args.device)  # a GPU asked for and missing: refused before any work
    inputs = {"DATA": Path(args.data)} | ({"--start": Path(args.start)} if args.start else {})
    _check_not_an_input("--out", args.out, inputs)  # a warm-start model is kept as it was
    if (Path(args.out) / "zarr.json").is_file() and not args.overwrite:  # a store already there
        raise InputError(f"{args.out} already holds a zarr store; pass --overwrite to replace it.")
    _check_parent(args.out)
    check_target(Path(args.out))  # a file or foreign data there: refused before the fit
    data = _on_device(
        _select_rows(open_data(args.data, key=args.key, var=args.var), args.rows), args
    )
    with _client_from_args(args):
        model = _fit_model(npt, data, args)
        model.save(args.out, overwrite=args.overwrite)
    return {
        "model": str(args.out),
        "n": model.n_samples,
        "r": model.n_components,
        "passes": model.diagnostics.passes,
        "converged": model.diagnostics.converged,
    }


def _fit_model(npt: Any, data: Any, args: argparse.Namespace) -> Any:
    from npt_dask.npt.fitting import fit_params
    from npt_dask.npt.params import PARAMS, FitParams

    values = {p.name: getattr(args, p.name, p.default) for p in PARAMS if p.name not in _CLI_OWN}
    start = npt.load(args.start) if args.start else None
    return fit_params(data, FitParams(**values, start=start, progress=not args.quiet))


def _grow(args: argparse.Namespace) -> dict[str, Any]:
    import npt_dask as npt
    from npt_dask.errors import InputError
    from npt_dask.npt.growth import GROW_PARAMS
    from npt_dask.npt.projection_store import open_data
    from npt_dask.params.constraints import check_table
    from npt_dask.storage.store import check_target

    options = {p.name: getattr(args, p.name) for p in GROW_PARAMS}
    check_table(GROW_PARAMS, options)  # before the model is read
    inputs = {"MODEL": Path(args.model)} | {f"DATA {p}": Path(p) for p in args.data}
    _check_not_an_input("--out", args.out, inputs)  # the parent model is kept as it was
    if (Path(args.out) / "zarr.json").is_file() and not args.overwrite:
        raise InputError(f"{args.out} already holds a zarr store; pass --overwrite to replace it.")
    check_target(Path(args.out))
    model: Any = npt.load(args.model)
    for path in args.data:
        batch = open_data(path, key=args.key, var=args.var)
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


def _project(args: argparse.Namespace) -> dict[str, Any]:
    import npt_dask as npt
    from npt_dask.arrays.device import check_device
    from npt_dask.npt.projection_store import open_data

    if check_device(args.device) == "gpu":  # missing: refused before the store is touched
        data = _select_rows(open_data(args.data, key=args.key, var=args.var), args.rows)
        args.data, args.rows = _on_device(data, args), None
    if args.no_resume:
        print(
            "npt project: --no-resume is deprecated; use --overwrite (as npt fit and npt run).",
            file=sys.stderr,
        )
    _check_not_an_input("--out", args.out, {"MODEL": Path(args.model), "DATA": Path(args.data)})
    _check_parent(args.out)
    model = npt.load(args.model)
    data = args.data
    if args.rows is not None:
        data = _select_rows(open_data(args.data, key=args.key, var=args.var), args.rows)
    with _client_from_args(args):
        ds = npt.project(
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


def _info(args: argparse.Namespace) -> dict[str, Any]:
    from pathlib import Path

    import npt_dask as npt
    from npt_dask.npt.display import landmark_summary
    from npt_dask.storage.store import manifest_checksum, read_manifest

    manifest = read_manifest(Path(args.model))
    model = npt.load(args.model, verify=False)
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


def _open_labels(path: str, key: str, var: str, rows: slice | None) -> Any:
    """Labels (1-D) from ``.npy``, a ``.npz`` (``key``) or zarr (``var``), never unpickled;
    the ``rows`` selected as the data's are."""
    import numpy as np
    import xarray as xr

    from npt_dask.errors import InputError
    from npt_dask.storage.datasets import read_numpy

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


def _ridge(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    import npt_dask as npt
    from npt_dask.arrays.device import check_device
    from npt_dask.ridge.params import RIDGE_PARAMS
    from npt_dask.ridge.search import SEARCH_PARAMS
    from npt_dask.runtime.progress import progress_label

    check_device(args.device)  # a GPU asked for and missing: refused before any work
    if args.model is not None:
        return _ridge_predict(args)
    _check_ridge_out(args)
    files = _ridge_files(args)
    _check_ridge_outputs(args, files)  # before any row is read, and long before the fit
    x = _on_device(_ridge_rows(files["DATA"], args, args.rows, "DATA", note=True), args)
    y = _open_labels(str(files["--labels"]), args.labels_key, args.labels_var, args.rows)
    test = None
    if "--test" in files:
        same = files["--test"] == files["DATA"]  # its note given once
        z = _ridge_rows(files["--test"], args, args.test_rows, "--test", note=not same)
        truth = _open_labels(
            str(files["--test-labels"]), args.labels_key, args.labels_var, args.test_rows
        )
        test = _on_device(z, args), np.asarray(truth)
        _check_test_labels(z, test[1], files["--test-labels"])
    search = args.alphas is not None or args.gammas is not None
    table = {p.name for p in RIDGE_PARAMS} - {"progress"}
    table |= {p.name for p in SEARCH_PARAMS} if search else set()
    if search:
        table -= {"alpha"} | ({"gamma"} if args.gammas is not None else set())
    values = {name: getattr(args, name) for name in table}
    if search and args.alphas is None:  # --gammas alone: the search's default alphas
        del values["alphas"]
    if search and args.gammas is None and values.get("gamma") is not None:
        values["gammas"] = [float(values.pop("gamma"))]
    values.pop("gamma", None) if search else None
    kinds = {
        (False, False): npt.KernelRidgeClassifier, (False, True): npt.KernelRidgeClassifierCV,
        (True, False): npt.KernelRidge, (True, True): npt.KernelRidgeCV,
    }  # fmt: skip
    est = kinds[(args.regression, search)](**values, progress=not args.quiet)
    result: dict[str, Any] = {}
    with _client_from_args(args) as client, _lost_scheduler(client, _resume_hint(args)):
        with progress_label("npt ridge"):
            est.fit(x, y, checkpoint=args.checkpoint)
        if args.out is not None:
            result["model"] = str(est.save(args.out))
        result |= {"route": est.solver_, "reason": est.plan_["reason"], "n_iter": est.n_iter_,
                   "alpha": float(getattr(est, "alpha_", values.get("alpha", np.nan))),
                   "gamma": est.gamma_, "seconds": est.fit_seconds_}  # fmt: skip
        if test is not None:
            z, truth = test
            pred = _predicted(est, z)
            result["test_score"] = _score_of(est, truth, pred)  # no second prediction
            if args.predictions:
                _save_npy(Path(args.predictions), pred)
                result["predictions"] = str(args.predictions)
    return result


def _check_ridge_out(args: argparse.Namespace) -> None:
    """``npt ridge``'s DATA is there, and its ``--out`` can take the model: checked before
    the fit (never over a saved model, an input or the predictions)."""
    from npt_dask.errors import InputError
    from npt_dask.storage.store import check_target

    if args.data is None:
        raise InputError(
            "npt ridge needs DATA to fit on; or pass --model M.zarr --test T.npy to predict "
            "with a saved model."
        )
    if args.out is None:
        return
    out = Path(os.path.realpath(Path(args.out).expanduser()))
    if args.predictions and Path(os.path.realpath(args.predictions)) == out:
        raise InputError("--predictions and --out name the same path; give each its own.")
    if (out / "zarr.json").is_file():
        raise InputError(
            f"--out {args.out} already holds a zarr store; npt ridge never replaces one: "
            "remove it or choose another path."
        )
    _check_parent(args.out)
    check_target(out)  # a file or foreign data there (DATA itself): refused before the fit


_FIT_ONLY = {"data": "DATA", "labels": "--labels", "rows": "--rows", "out": "--out",
             "regression": "--regression", "checkpoint": "--checkpoint"}  # fmt: skip


def _ignored_by_model(args: argparse.Namespace) -> list[str]:
    """The fitting options given beside ``--model`` (each would be ignored)."""
    from npt_dask.ridge.params import RIDGE_PARAMS
    from npt_dask.ridge.search import SEARCH_PARAMS

    flags = dict(_FIT_ONLY)
    flags |= {p.name: p.flag for p in (*RIDGE_PARAMS, *SEARCH_PARAMS) if p.name != "progress"}
    defaults = _parser().commands["ridge"]
    return [flag for name, flag in flags.items()
            if getattr(args, name, None) != defaults.get_default(name)]  # fmt: skip


def _ridge_predict(args: argparse.Namespace) -> dict[str, Any]:
    """``npt ridge --model M.zarr --test T.npy``: predict (and score, with labels at hand)
    with a saved model, no refit."""
    import numpy as np

    import npt_dask as npt
    from npt_dask.errors import InputError

    ignored = _ignored_by_model(args)
    if ignored:
        raise InputError(
            f"--model predicts with a saved model, so {', '.join(ignored)} would be ignored "
            "(they are for fitting): leave them out, or drop --model to fit a new one."
        )
    if args.test is None:
        raise InputError("--model needs --test FILE: the rows to predict.")
    scored = args.test_labels is not None or _has_labels(
        str(_find_input(args.test, "--test")), args.labels_key
    )
    if args.predictions is None and not scored:
        raise InputError(
            f"Nothing to do: {args.test} carries no labels to score; pass --predictions P.npy "
            "to write the predictions (or --test-labels to score them)."
        )
    files = {"--model": Path(args.model), "--test": _find_input(args.test, "--test")}
    if args.test_labels:
        files["--test-labels"] = _find_input(args.test_labels, "--test-labels")
    _check_ridge_outputs(args, files)  # the fit's checks: never over an input, as found
    est = npt.load_ridge(args.model)
    z = _ridge_rows(files["--test"], args, args.test_rows, "--test", note=True)
    result: dict[str, Any] = {"model": str(args.model), "estimator": type(est).__name__}
    with _client_from_args(args):
        pred = _predicted(est, z)
        result["rows"] = int(pred.shape[0])
        if scored:
            labels = files.get("--test-labels", files["--test"])
            truth = _open_labels(str(labels), args.labels_key, args.labels_var, args.test_rows)
            result["test_score"] = _score_of(est, np.asarray(truth), pred)
    if args.predictions is not None:
        _save_npy(Path(args.predictions), pred)
        result["predictions"] = str(args.predictions)
    return result


def _predicted(est: Any, z: Any) -> Any:
    """The estimator's predictions of ``z`` in host memory, computed once (a lazy result
    under the command's BLAS-thread cap)."""
    import numpy as np

    from npt_dask.arrays.host import to_host
    from npt_dask.runtime.inputs import is_lazy
    from npt_dask.runtime.scheduler import compute

    pred = est.predict(z)
    return np.asarray(to_host(compute(pred)[0] if is_lazy(pred) else pred))


def _score_of(est: Any, truth: Any, pred: Any) -> float:
    """``est.score``'s value from predictions already made: accuracy for a classifier,
    R^2 (uniform over the targets) for a regressor, as scikit-learn's mixins score."""
    from sklearn.base import is_classifier
    from sklearn.metrics import accuracy_score, r2_score

    if is_classifier(est):
        return float(accuracy_score(truth, pred))
    return float(r2_score(truth, pred))


def _has_labels(path: str, key: str) -> bool:
    """Whether ``path`` is a ``.npz`` holding the labels' array ``key``."""
    import numpy as np

    if Path(path).suffix != ".npz" or not Path(path).is_file():
        return False
    with np.load(path, allow_pickle=False) as data:
        return key in data.files


def _ridge_files(args: argparse.Namespace) -> dict[str, Path]:
    """The input files of ``npt ridge`` by option, found as :func:`npt_dask.load_npz` finds
    one (a relative ``.npy``/``.npz`` path not here is looked up in ``$NPT_DATA_DIR``);
    ``--test`` and ``--test-labels`` only when test rows are asked for."""
    files = {"DATA": _find_input(args.data, "DATA")}
    files["--labels"] = _find_input(args.labels, "--labels") if args.labels else files["DATA"]
    if args.test is not None or args.test_rows is not None:
        files["--test"] = _find_input(args.test, "--test") if args.test else files["DATA"]
        labels = files["--labels"] if args.labels else files["--test"]  # as the rows
        if args.test_labels:
            labels = _find_input(args.test_labels, "--test-labels")
        files["--test-labels"] = labels
    return files


def _find_input(path: str, option: str) -> Path:
    """An input file or store: ``path`` itself, or a ``.npy``/``.npz`` file looked up in
    ``$NPT_DATA_DIR``; an error naming the option and where it looked otherwise."""
    from npt_dask.errors import InputError
    from npt_dask.storage.datasets import find_file

    given = Path(path).expanduser()
    if given.exists():
        return given
    if given.suffix in (".npy", ".npz"):
        try:
            return find_file(given)
        except InputError as exc:
            raise InputError(f"{option}: {exc}") from None
    raise InputError(f"{option} {path} does not exist; check the path.")


def _ridge_rows(
    path: Path, args: argparse.Namespace, rows: slice | None, option: str, *, note: bool
) -> Any:
    """The rows of ``path`` (``--key``/``--var``) as 2-D rows: images flattened (with a
    ``note`` saying so), divided by ``--scale``, then the ``rows`` selected."""
    from npt_dask.npt.projection_store import open_data

    if path.suffix == ".npz":  # read whole, as open_data does; images flattened below
        data: Any = _read_array(path, args.key or "x")
    else:
        data = open_data(path, key=args.key, var=args.var)
    data = _as_rows(data, path, option, args, note=note)
    if args.scale is not None:
        data = data / args.scale
    return _select_rows(data, rows)


def _as_rows(data: Any, path: Path, option: str, args: argparse.Namespace, *, note: bool) -> Any:
    """``data`` as ``(n_samples, n_features)``: one sample per row, an image flattened."""
    import numpy as np

    from npt_dask.errors import InputError

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
    import numpy as np

    from npt_dask.errors import InputError
    from npt_dask.storage.datasets import read_numpy

    def load() -> Any:
        with np.load(path, allow_pickle=False) as data:
            if key not in data.files:
                raise InputError(f"{path} has no array {key!r}; it has {data.files} (--key).")
            return np.asarray(data[key])

    return read_numpy(path, load)


def _check_test_labels(z: Any, truth: Any, source: Path) -> None:
    """Refuse test labels whose count is not the test rows' (before the fit)."""
    from npt_dask.errors import InputError

    if truth.ndim != 1 or len(truth) != int(z.shape[0]):
        raise InputError(
            f"--test-labels {source} gives {truth.shape} labels for {int(z.shape[0])} test "
            "rows; they must be one label per test row: check --test-labels, --test-rows "
            "and --labels-key."
        )


def _check_ridge_outputs(args: argparse.Namespace, files: dict[str, Path]) -> None:
    """Refuse, before any work, a ``--predictions`` or ``--checkpoint`` path that is one
    of the inputs (a link to one, a hard link, or a path inside an input store), a
    ``--predictions`` without test rows, in a missing folder, or over an existing file
    without ``--overwrite``."""
    from npt_dask.errors import InputError

    if args.checkpoint:
        _check_not_an_input("--checkpoint", args.checkpoint, files)
    if not args.predictions:
        return
    if "--test" not in files:
        raise InputError(
            "--predictions writes the test rows' predictions, and no test rows are given: "
            "add --test FILE or --test-rows START:STOP, or drop --predictions."
        )
    inputs = files | ({"--checkpoint": Path(args.checkpoint)} if args.checkpoint else {})
    _check_not_an_input("--predictions", args.predictions, inputs)
    _check_parent(args.predictions, "--predictions")
    target = Path(os.path.realpath(Path(args.predictions).expanduser()))
    if target.is_dir():
        raise InputError(f"--predictions {args.predictions} is a folder; name a file in it.")
    if target.exists() and not args.overwrite:
        raise InputError(
            f"--predictions {args.predictions} already exists; pass --overwrite to replace "
            "it, or choose another path."
        )


def _check_not_an_input(option: str, out: str, inputs: dict[str, Path]) -> None:
    """Refuse an output path that is, links to, or lies inside one of ``inputs``."""
    from npt_dask.errors import InputError

    target = Path(os.path.realpath(Path(out).expanduser()))
    for name, source in inputs.items():
        if _same_place(target, source):
            raise InputError(
                f"{option} {out} is the input {name} ({source}): writing it would destroy "
                f"that input. Choose another path for {option}."
            )


def _same_place(target: Path, source: Path) -> bool:
    """Whether writing ``target`` would write ``source``: the same path once links are
    resolved, the same file (a hard link), or a path inside the store ``source``."""
    real = Path(os.path.realpath(source))
    if target == real or real in target.parents:
        return True
    try:
        return target.exists() and os.path.samefile(target, real)
    except OSError:
        return False


def _resume_hint(args: argparse.Namespace) -> str:
    """How to go on after a stop: the same command resumes from ``--checkpoint``."""
    if not args.checkpoint:
        return ""
    return (
        f" CG's state is kept in {args.checkpoint} after each iteration: run the same "
        "command again to resume from it."
    )


@contextlib.contextmanager
def _lost_scheduler(client: Any, hint: str) -> Iterator[None]:
    """A run that stopped because the scheduler went away: one
    :class:`~npt_dask.errors.ClusterError` saying so and how to go on (``hint``); a
    task's own error as it is."""
    from npt_dask.errors import ClusterError
    from npt_dask.npt.projection_store import scheduler_lost

    try:
        yield
    except ClusterError:
        raise
    except Exception as exc:
        if client is None or not scheduler_lost(client, exc):
            raise
        address = getattr(getattr(client, "scheduler", None), "address", "?")
        raise ClusterError(
            f"Lost the connection to the dask scheduler at {address}: it stopped, or the "
            f"network to it failed.{hint}"
        ) from None


def _save_npy(path: Path, values: Any) -> None:
    """``values`` as a ``.npy`` file, written atomically where a link points (no pickle):
    an interrupted write leaves the previous file, or none."""
    import numpy as np

    from npt_dask.runtime.atomic import real, write_file

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:
            np.save(handle, values, allow_pickle=False)
            handle.flush()
            os.fsync(handle.fileno())

    write_file(real(path), write)


def _run(args: argparse.Namespace) -> dict[str, Any]:
    from npt_dask.interface.pipeline import load_config, run
    from npt_dask.interface.pipeline.report import summary_text

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
    report = run(config.with_overrides(**overrides), progress=not args.quiet)
    if not args.quiet:
        print(summary_text(report), file=sys.stderr)
    return {"report": f"{report['outputs']['dir']}/report.json"}  # the figures are in it


def for_the_command_line(exc: BaseException) -> str:
    """An error's message in the command line's words: option flags, not Python names.

    The error says which parameter it is about and how its Python spellings read on
    the command line (:class:`~npt_dask.errors.NPTError`'s ``param`` and ``spellings``).

    >>> from npt_dask.errors import InputError
    >>> for_the_command_line(InputError("The 'chunk_size' parameter must be ...; pass "
    ...     "resume=False.", param="chunk_size", spellings={"resume=False": "--overwrite"}))
    'The --chunk-size option must be ...; pass --overwrite.'
    """
    from npt_dask.params.parsing import flag_of, subject

    text = str(exc)
    param = getattr(exc, "param", None)
    if param is not None:
        text = text.replace(subject(param), f"The {flag_of(param)} option")
    for python, flag in getattr(exc, "spellings", {}).items():
        text = text.replace(python, flag)
    return text


@contextlib.contextmanager
def _one_line_warnings(command: str) -> Iterator[None]:
    """Print each warning as one line, ``npt fit: warning: KernelScaleWarning: ...``
    (Python's default names the console script's line, ``.../bin/npt:8:``, then prints
    its source line, ``sys.exit(main())``).

    Only the format changes (:func:`warnings.formatwarning`, which Python lets a program
    replace): which warnings are raised, which the filters show, and a caller recording
    them (``warnings.catch_warnings(record=True)``) see what they did before.
    """

    def one_line(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        line: str | None = None,
    ) -> str:
        text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
        return f"npt {command}: warning: {category.__name__}: {text}\n"

    before = warnings.formatwarning
    warnings.formatwarning = one_line
    try:
        yield
    finally:
        warnings.formatwarning = before


def _interrupted_ridge(args: argparse.Namespace) -> str:
    """What an interrupted ``npt ridge`` kept: CG's state, when a checkpoint was written."""
    if not args.checkpoint or not Path(args.checkpoint).is_file():
        return ""
    return (
        f"; CG's state is kept in {args.checkpoint}: run the same command again to resume from it"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the command's parser knows its options: it suggests the nearest
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    from npt_dask.errors import NPTError

    commands = {
        "fit": _fit, "grow": _grow, "project": _project, "info": _info, "run": _run,
        "ridge": _ridge,
    }  # fmt: skip
    command = commands[args.command]
    try:
        with _one_line_warnings(args.command):
            result = command(args)
    except KeyboardInterrupt:
        print(file=sys.stderr)  # end a progress line rewritten in place
        out = getattr(args, "out", None)
        hint = _interrupted_ridge(args) if args.command == "ridge" else ""
        if args.command == "project":
            hint = (
                f"; chunks already written are kept in {out}: run the same command again to "
                "resume (they are checked, not projected again)"
            )
        print(f"npt {args.command}: interrupted{hint}.", file=sys.stderr)
        return 130
    except (NPTError, OSError) as exc:  # the library's own errors and files; a bug propagates
        text = str(exc) if args.command == "run" else for_the_command_line(exc)
        print(f"npt {args.command}: error: {text}", file=sys.stderr)  # run: the config's keys
        return 2
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
