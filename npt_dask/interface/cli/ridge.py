"""``npt ridge DATA ...``: kernel ridge classification (or ``--regression``) of DATA,
scored on test rows; or, with ``--model``, predictions of a saved model."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import is_classifier
from sklearn.metrics import accuracy_score, r2_score

from npt_dask.arrays.device import check_device
from npt_dask.arrays.host import to_host
from npt_dask.errors import InputError
from npt_dask.interface.cli.checks import check_parent
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
    check_ridge_outputs,
    check_test_labels,
    find_input,
    has_labels,
    open_labels,
    ridge_files,
    ridge_rows,
    save_npy,
)
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
from npt_dask.storage.store import check_target

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
        help="divide DATA's and --test's rows by S (255: pixels to [0, 1])",
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
    _check_ridge_out(args)
    files = ridge_files(args)
    check_ridge_outputs(args, files)  # before any row is read, and long before the fit
    x = on_device(ridge_rows(files["DATA"], args, args.rows, "DATA", note=True), args)
    y = open_labels(str(files["--labels"]), args.labels_key, args.labels_var, args.rows)
    test = None
    if "--test" in files:
        same = files["--test"] == files["DATA"]  # its note given once
        z = ridge_rows(files["--test"], args, args.test_rows, "--test", note=not same)
        truth = open_labels(
            str(files["--test-labels"]), args.labels_key, args.labels_var, args.test_rows
        )
        test = on_device(z, args), np.asarray(truth)
        check_test_labels(z, test[1], files["--test-labels"])
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
        (False, False): KernelRidgeClassifier, (False, True): KernelRidgeClassifierCV,
        (True, False): KernelRidge, (True, True): KernelRidgeCV,
    }  # fmt: skip
    est = kinds[(args.regression, search)](**values, progress=not args.quiet)
    result: dict[str, Any] = {}
    with client_from_args(args) as client, on_lost_scheduler(client, lambda: _resume_hint(args)):
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
                save_npy(Path(args.predictions), pred)
                result["predictions"] = str(args.predictions)
    return result


def _check_ridge_out(args: argparse.Namespace) -> None:
    """``npt ridge``'s DATA is there, and its ``--out`` can take the model: checked before
    the fit (never over a saved model, an input or the predictions)."""

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
    check_parent(args.out)
    check_target(out)  # a file or foreign data there (DATA itself): refused before the fit


_FIT_ONLY = {"data": "DATA", "labels": "--labels", "rows": "--rows", "out": "--out",
             "regression": "--regression", "checkpoint": "--checkpoint"}  # fmt: skip


def _ignored_by_model(args: argparse.Namespace) -> list[str]:
    """The fitting options given beside ``--model`` (each would be ignored)."""

    flags = dict(_FIT_ONLY)
    flags |= {p.name: p.flag for p in (*RIDGE_PARAMS, *SEARCH_PARAMS) if p.name != "progress"}
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
    est = load_ridge(args.model)
    z = ridge_rows(files["--test"], args, args.test_rows, "--test", note=True)
    result: dict[str, Any] = {"model": str(args.model), "estimator": type(est).__name__}
    with client_from_args(args):
        pred = _predicted(est, z)
        result["rows"] = int(pred.shape[0])
        if scored:
            labels = files.get("--test-labels", files["--test"])
            truth = open_labels(str(labels), args.labels_key, args.labels_var, args.test_rows)
            result["test_score"] = _score_of(est, np.asarray(truth), pred)
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
