"""``npt ridge DATA ...``: kernel ridge classification (or ``--regression``) of DATA,
scored on test rows; or, with ``--model``, predictions of a saved model."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import is_classifier
from sklearn.metrics import accuracy_score, r2_score

from npt_dask.arrays.device import check_device
from npt_dask.arrays.host import to_host
from npt_dask.errors import InputError, InputScaleWarning
from npt_dask.interface.cli.checks import check_width
from npt_dask.interface.cli.options import (
    client_from_args,
    cluster_options,
    data_options,
    device_option,
    on_device,
    positive,
    ridge_options,
    row_range,
    rows_option,
)
from npt_dask.interface.cli.ridge_files import (
    Rows,
    check_labels,
    check_ridge_outputs,
    check_test_labels,
    find_input,
    has_labels,
    open_labels,
    ridge_files,
    ridge_rows,
    save_npy,
)
from npt_dask.interface.cli.scaling import fit_transform, model_transform, scaled
from npt_dask.ridge.classifier import KernelRidgeClassifier
from npt_dask.ridge.cv import KernelRidgeClassifierCV, KernelRidgeCV
from npt_dask.ridge.load import load_ridge
from npt_dask.ridge.params import RIDGE_PARAMS
from npt_dask.ridge.regressor import KernelRidge
from npt_dask.ridge.search import SEARCH_PARAMS
from npt_dask.runtime.inputs import is_lazy
from npt_dask.runtime.lost_scheduler import on_lost_scheduler
from npt_dask.runtime.progress import progress_label
from npt_dask.runtime.scheduler import compute
from npt_dask.storage.ridge_store import read_input_transform

__all__ = ["add", "interrupted_hint", "run"]


def add(sub: Any) -> argparse.ArgumentParser:
    """This subcommand's parser, added to ``sub`` (the ``npt`` parser's subparsers)."""
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
    rows_option(ridge, "train on these rows of DATA only (e.g. 0:60000)")
    ridge.add_argument("--test-rows", metavar="START:STOP", type=row_range,
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
        "--scale", type=positive, metavar="S",
        help="divide DATA's and --test's rows by S (default: 255 for raw 8-bit pixels, "
        "else 1; recorded in --out's model, applied again by --model)",
    )  # fmt: skip
    ridge.add_argument("--out", help="save the fitted model here (zarr; 'npt ridge --model')")
    ridge.add_argument("--model", help="predict --test with this saved model (no DATA, no fit)")
    ridge_options(ridge)
    data_options(ridge)
    device_option(ridge)
    cluster_options(ridge)
    return ridge


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Fit kernel ridge on ``DATA`` (or load ``--model``), score and predict the test rows."""
    check_device(args.device)  # a GPU asked for and missing: refused before any work
    if args.model is not None:
        return _ridge_predict(args)
    if args.data is None:
        raise InputError(
            "npt ridge needs DATA to fit on; or pass --model M.zarr --test T.npy to predict "
            "with a saved model."
        )
    files = ridge_files(args)
    check_ridge_outputs(args, files)  # before any row is read, and long before the fit
    train, y, test = _fit_inputs(args, files)
    transform = fit_transform(args, train, [] if test is None else [test[0]])
    x = on_device(scaled(train, transform["scale"]), args)
    est = _estimator(args)
    result: dict[str, Any] = {}
    with client_from_args(args) as client, on_lost_scheduler(client, lambda: _resume_hint(args)):
        with progress_label("npt ridge"):
            est.fit(x, y, checkpoint=args.checkpoint)
        if args.out is not None:
            result["model"] = str(est.save(args.out, input_transform=transform))
        result |= {"route": est.solver_, "reason": est.plan_["reason"], "n_iter": est.n_iter_,
                   "alpha": float(getattr(est, "alpha_", getattr(est, "alpha", np.nan))),
                   "gamma": est.gamma_, "scale": transform["scale"],
                   "seconds": est.fit_seconds_}  # fmt: skip
        if test is not None:
            rows, truth = test
            pred = _predicted(est, on_device(scaled(rows, transform["scale"]), args))
            result["test_score"] = _score_of(est, truth, pred)  # no second prediction
            if args.predictions:
                save_npy(Path(args.predictions), pred)
                result["predictions"] = str(args.predictions)
    return result


def _fit_inputs(
    args: argparse.Namespace, files: dict[str, Path]
) -> tuple[Rows, Any, tuple[Rows, np.ndarray] | None]:
    """The training rows and labels, and the test rows and labels (None without test
    rows), each checked against the training rows before the fit: labels one per row,
    test rows as wide as the training rows."""

    train = ridge_rows(files["DATA"], args, args.rows, "DATA", note=True)
    y = open_labels(str(files["--labels"]), args.labels_key, args.labels_var, args.rows)
    check_labels(y, train, files["--labels"])
    if "--test" not in files:
        return train, y, None
    same = files["--test"] == files["DATA"]  # its note given once
    z = ridge_rows(files["--test"], args, args.test_rows, "--test", note=not same)
    truth = np.asarray(
        open_labels(str(files["--test-labels"]), args.labels_key, args.labels_var, args.test_rows)
    )
    check_test_labels(z.data, truth, files["--test-labels"])
    check_width("--test", files["--test"], z.data, int(train.data.shape[1]),
                f"DATA {files['DATA']}")  # fmt: skip
    return train, y, (z, truth)


def _estimator(args: argparse.Namespace) -> Any:
    """The estimator the options ask for: classifier or regressor, searching or not."""

    search = args.alphas is not None or args.gammas is not None
    table = {p.name for p in RIDGE_PARAMS} - {"progress", "device"}  # the rows moved here
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
        (False, False): KernelRidgeClassifier, (False, True): KernelRidgeClassifierCV,
        (True, False): KernelRidge, (True, True): KernelRidgeCV,
    }  # fmt: skip
    return kinds[(args.regression, search)](**values, progress=not args.quiet)


_FIT_ONLY = {"data": "DATA", "labels": "--labels", "rows": "--rows", "out": "--out",
             "regression": "--regression", "checkpoint": "--checkpoint"}  # fmt: skip


def _ignored_by_model(args: argparse.Namespace) -> list[str]:
    """The fitting options given beside ``--model`` (each would be ignored)."""

    flags = dict(_FIT_ONLY)
    flags |= {
        p.name: p.flag
        for p in (*RIDGE_PARAMS, *SEARCH_PARAMS)
        if p.name not in ("progress", "device")
    }  # --device serves a prediction too
    defaults = add(argparse.ArgumentParser(prog="npt").add_subparsers())  # its own defaults
    return [flag for name, flag in flags.items()
            if getattr(args, name, None) != defaults.get_default(name)]  # fmt: skip


def _ridge_predict(args: argparse.Namespace) -> dict[str, Any]:
    """``npt ridge --model M.zarr --test T.npy``: predict (and score, with labels at hand)
    with a saved model, no refit."""

    ignored = _ignored_by_model(args)
    if ignored:
        raise InputError(
            f"--model predicts with a saved model, so {', '.join(ignored)} would be ignored "
            "(they are for fitting): leave them out, or drop --model to fit a new one."
        )
    if args.test is None:
        raise InputError("--model needs --test FILE: the rows to predict.")
    scored = args.test_labels is not None or has_labels(
        str(find_input(args.test, "--test")), args.labels_key
    )
    if args.predictions is None and not scored:
        raise InputError(
            f"Nothing to do: {args.test} carries no labels to score; pass --predictions P.npy "
            "to write the predictions (or --test-labels to score them)."
        )
    files = {"--model": Path(args.model), "--test": find_input(args.test, "--test")}
    if args.test_labels:
        files["--test-labels"] = find_input(args.test_labels, "--test-labels")
    check_ridge_outputs(args, files)  # the fit's checks: never over an input, as found
    recorded = read_input_transform(args.model)
    with warnings.catch_warnings():  # the recorded scale is applied below
        warnings.simplefilter("ignore", InputScaleWarning)
        est = load_ridge(args.model)
    z = ridge_rows(files["--test"], args, args.test_rows, "--test", note=True)
    check_width("--test", files["--test"], z.data, int(est.n_features_in_),
                f"the model {args.model}")  # fmt: skip
    scale = model_transform(args, recorded, z, args.model)
    truth = None
    if scored:
        labels = files.get("--test-labels", files["--test"])
        truth = np.asarray(open_labels(str(labels), args.labels_key, args.labels_var,
                                       args.test_rows))  # fmt: skip
        check_test_labels(z.data, truth, labels)
    result: dict[str, Any] = {"model": str(args.model), "estimator": type(est).__name__,
                              "scale": scale}  # fmt: skip
    with client_from_args(args):
        pred = _predicted(est, scaled(z, scale))
        result["rows"] = int(pred.shape[0])
        if truth is not None:
            result["test_score"] = _score_of(est, truth, pred)
    if args.predictions is not None:
        save_npy(Path(args.predictions), pred)
        result["predictions"] = str(args.predictions)
    return result


def _predicted(est: Any, z: Any) -> Any:
    """The estimator's predictions of ``z`` in host memory, computed once (a lazy result
    under the command's BLAS-thread cap)."""

    pred = est.predict(z)
    return np.asarray(to_host(compute(pred)[0] if is_lazy(pred) else pred))


def _score_of(est: Any, truth: Any, pred: Any) -> float:
    """``est.score``'s value from predictions already made: accuracy for a classifier,
    R^2 (uniform over the targets) for a regressor, as scikit-learn's mixins score."""

    if is_classifier(est):
        return float(accuracy_score(truth, pred))
    return float(r2_score(truth, pred))


def _resume_hint(args: argparse.Namespace) -> str:
    """How to go on after a stop: the same command resumes from ``--checkpoint``."""
    if not args.checkpoint:
        return ""
    return (
        f" CG's state is kept in {args.checkpoint} after each iteration: run the same "
        "command again to resume from it."
    )


def interrupted_hint(args: argparse.Namespace) -> str:
    """What an interrupted ``npt ridge`` kept: CG's state, when a checkpoint was written."""
    if not args.checkpoint or not Path(args.checkpoint).is_file():
        return ""
    return (
        f"; CG's state is kept in {args.checkpoint}: run the same command again to resume from it"
    )
