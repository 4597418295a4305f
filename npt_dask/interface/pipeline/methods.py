"""Downstream stages of a pipeline: each method reads the projected coordinates lazily.

Every stage takes the training and test projections as xarray Datasets
opened from zarr (``coordinates``, ``residual``, ``label``), runs one method
from :mod:`npt_dask.methods` over their chunks, and returns a JSON-ready
metrics dict plus the figures it wants saved. Nothing here writes files.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from npt_dask.errors import ConvergenceWarning, InputError, warn
from npt_dask.interface.pipeline.config import DATA_STAGES
from npt_dask.interface.pipeline.data import Split
from npt_dask.interface.pipeline.outputs import CHECKPOINT_SUFFIX
from npt_dask.npt.model import NPTModel

__all__ = [
    "MODEL_ONLY_STAGES",
    "MOMENT_STAGES",
    "PARAMS",
    "STAGES",
    "STAGE_SEED",
    "check_params",
    "checkpoint_name",
    "needs_train_coordinates",
    "run_method",
    "run_stage_params",
    "stage_checkpoints",
]

Figures = dict[str, Callable[[], Any]]


def _labels(ds: Any) -> np.ndarray:
    return np.asarray(ds["label"].values)


def _accuracy(pred: Any, truth: np.ndarray) -> float:
    return float(np.mean(np.asarray(pred) == truth))


def _ksvm(params: dict, train: Any, test: Any, split: Split, model: NPTModel) -> tuple:
    from npt_dask.methods.ksvm import linear_svm

    solver = params.pop("solver", "chunked")
    c = float(params.pop("C", 1.0))
    if solver == "chunked":
        params.setdefault("random_state", 0)
    svm = linear_svm(solver, c, **params)  # the solver and C checked by the method's table
    y_tr, y_te = _labels(train), _labels(test)
    notes: list[str] = []  # scikit-learn's convergence messages
    if solver == "chunked":  # streams the zarr chunks: out of core
        pred = svm.fit(train["coordinates"], y_tr).predict(test["coordinates"]).values
    else:  # reads the coordinates into memory (n x r)
        notes = _fit_recording_convergence(svm, np.asarray(train["coordinates"].values), y_tr)
        pred = svm.predict(np.asarray(test["coordinates"].values))
    metrics = {"solver": solver, "C": c, "test_accuracy": _accuracy(pred, y_te)}
    if notes:
        metrics["convergence"] = {"converged": False, "message": notes[0], "hint": _SVM_HINT}
    return metrics, {}


_SVM_HINT = (
    "liblinear's dual coordinate descent did not converge: NPT coordinates are not "
    "standardised (column i has variance lambda_i / n, a wide range), and more iterations "
    "rarely help. Lower C, or use solver = 'chunked' (out of core) or 'svc'."
)


def _fit_recording_convergence(svm: Any, x: np.ndarray, y: np.ndarray) -> list[str]:
    """Fit ``svm``; scikit-learn's convergence warnings are returned (for the report) and
    replaced by one :class:`~npt_dask.errors.ConvergenceWarning` whose hint is true."""
    from sklearn.exceptions import ConvergenceWarning as SklearnConvergence

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        svm.fit(x, y)
    notes = []
    for w in caught:
        if issubclass(w.category, SklearnConvergence):
            notes.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if notes:
        warn(f"ksvm: {_SVM_HINT} (recorded in report.json)", ConvergenceWarning)
    return notes


def _ridge(params: dict, train: Any, test: Any, split: Split, model: NPTModel) -> tuple:
    """One-vs-all ridge: from the fit's training pass (``model.moments``: no second read of
    the training rows), else streaming over the zarr chunks of the training coordinates."""
    from npt_dask.methods import RidgeClassifier

    alpha = params.pop("alpha", [10.0**k for k in range(-8, 1)])
    clf = RidgeClassifier(alpha=np.asarray(alpha, dtype=float), **params)
    if model.moments is not None and model.moments.classes is not None:
        clf.fit_moments(model.moments)
        source = "training pass moments"
    else:
        clf.fit(train["coordinates"], _labels(train))
        source = "training coordinates"
    pred = clf.predict(test["coordinates"])
    acc = _accuracy(getattr(pred, "values", pred), _labels(test))
    return {"alpha": float(clf.alpha_), "fitted_from": source, "test_accuracy": acc}, {}


def _reference(params: dict, train: Any, test: Any, split: Split, model: NPTModel) -> tuple:
    """scikit-learn's kernel SVM on the raw rows, for comparison (in memory)."""
    from sklearn.svm import SVC

    k = model.kernel.to_dict()
    n = min(len(split.x_train), int(params.pop("max_train", len(split.x_train))))
    kwargs = {key: k[key] for key in ("gamma", "degree", "coef0") if k.get(key) is not None}
    name = {"polynomial": "poly"}.get(k["name"], k["name"])
    svm = SVC(kernel=name, C=float(params.pop("C", 1.0)), **kwargs, **params)
    assert split.y_train is not None  # a stage of LABEL_STAGES and TEST_STAGES: the
    assert split.y_test is not None  # config and load_split saw to both
    svm.fit(split.x_train[:n], split.y_train[:n])
    acc = _accuracy(svm.predict(split.x_test), split.y_test)
    return {"n_train": n, "kernel": name, "test_accuracy": acc}, {}


_RIDGE_KERNEL = ("kernel", "gamma", "degree", "coef0")


def _kernel_ridge(
    params: dict, train: Any, test: Any, split: Split, model: NPTModel | None
) -> tuple:
    """Kernel ridge classification on the rows themselves (``npt_dask.KernelRidgeClassifier``:
    exact or Nyström, direct or CG, as its plan chooses), the model's kernel unless the
    stage names one; ``alphas``/``gammas`` search them (``KernelRidgeClassifierCV``).
    ``checkpoint`` (a path, set by the runner in the output folder) makes CG resumable."""
    from npt_dask.ridge.classifier import KernelRidgeClassifier
    from npt_dask.ridge.cv import KernelRidgeClassifierCV

    kernel = {} if model is None else _kernel_args(model)
    kernel.update({k: params.pop(k) for k in _RIDGE_KERNEL if k in params})
    checkpoint = params.pop("checkpoint", None)
    if "alphas" in params or "gammas" in params:
        if "gammas" not in params and "gamma" in kernel:
            params["gammas"] = [kernel.pop("gamma")]
        kernel.pop("gamma", None)
        est: Any = KernelRidgeClassifierCV(**kernel, **params)
    else:
        est = KernelRidgeClassifier(**kernel, **params)
    assert split.y_train is not None  # a stage of LABEL_STAGES and TEST_STAGES
    assert split.y_test is not None
    est.fit(split.x_train, split.y_train, checkpoint=checkpoint)
    acc = _accuracy(est.predict(split.x_test), split.y_test)
    metrics = {
        "test_accuracy": acc, "route": est.solver_, "reason": est.plan_["reason"],
        "alpha": float(getattr(est, "alpha_", est.get_params().get("alpha", np.nan))),
        "gamma": est.gamma_, "n_iter": est.n_iter_,
        "residuals": [float(r) for r in est.residuals_],
        "landmarks": 0 if est.landmarks_ is None else len(est.landmarks_),
        "plan_memory_gib": sum(est.plan_["memory"].values()) / 2**30,
        "stage_seconds": est.fit_seconds_,
    }  # fmt: skip
    if hasattr(est, "cv_results_"):
        metrics["search"] = {k: est.cv_results_[k] for k in ("gammas", "alphas", "scores",
                                                             "seconds")}  # fmt: skip
    return metrics, {}


def _kernel_args(model: NPTModel) -> dict[str, Any]:
    """The model's kernel as KernelRidge's arguments (a function kernel as it is)."""
    spec = model.kernel
    if not spec.storable or spec.precomputed:
        raise InputError(
            "kernel_ridge takes the model's kernel, and this model's is a function or a "
            "given matrix: name a kernel in the [[methods]] table (kernel = 'rbf', gamma = ...)."
        )
    d = spec.to_dict()
    return {"kernel": d.pop("name"), **d}


def _kfd(params: dict, train: Any, test: Any, split: Split, model: NPTModel) -> tuple:
    from npt_dask.interface.plot import coordinate_scatter, histogram_by_label
    from npt_dask.methods import FisherDiscriminant

    kfd = FisherDiscriminant(**params).fit(train["coordinates"], _labels(train))
    features = kfd.transform(test["coordinates"])
    acc = _accuracy(kfd.predict(test["coordinates"]).values, _labels(test))
    metrics = {
        "n_components": int(kfd.scalings_.shape[1]),
        "ridge": kfd.ridge_,
        "eigenvalues": kfd.eigenvalues_.tolist(),
        "test_accuracy_nearest_mean": acc,
    }
    title = "KFD features of the test rows"
    if features.shape[1] >= 2:
        figure = lambda: coordinate_scatter(features.compute(), test["label"], title=title)  # noqa: E731
    else:
        figure = lambda: histogram_by_label(  # noqa: E731
            features[:, 0].compute(), test["label"], xlabel="KFD feature", title=title
        )
    return metrics, {"kfd_test.png": figure}


def _kpcal1(params: dict, train: Any, test: Any, split: Split, model: NPTModel) -> tuple:
    from npt_dask.interface.plot import coordinate_scatter
    from npt_dask.methods import PCAL1, l1_dispersion

    params = {"n_components": 2, "random_state": 0, **params}
    pca = PCAL1(**params).fit(train["coordinates"])
    k = pca.components_.shape[0]
    axes = np.eye(model.n_components)[:k]  # the KPCA directions in NPT coordinates
    kpca_l1 = l1_dispersion(train["coordinates"], axes)
    metrics = {
        "n_components": k,
        "l1_dispersion": pca.dispersion_.tolist(),
        "kpca_l1_dispersion": kpca_l1.tolist(),
        "iterations": pca.n_iter_.tolist(),
    }
    figures: Figures = {}
    if k >= 2 and test is not None:  # a zarr source may have no test rows
        projected = pca.transform(test["coordinates"])
        labels = test["label"] if "label" in test.coords else None
        figures["kpcal1_test.png"] = lambda: coordinate_scatter(
            projected.compute(), labels, title="KPCA-L1 components of the test rows"
        )
    return metrics, figures


def _kpca(params: dict, train: Any, test: Any, split: Split, model: NPTModel) -> tuple:
    from npt_dask.methods import total_variance

    total = total_variance(model)
    ratio = model.eigenvalues / total
    show = int(params.pop("show", 10))
    metrics = {
        "total_variance": total,
        "explained_variance_ratio_first": ratio[:show].tolist(),
        "explained_variance_ratio_sum": float(ratio.sum()),
    }
    return metrics, {}


def _alignment(params: dict, train: Any, test: Any, split: Split, model: NPTModel) -> tuple:
    """Kernel-target alignment of the model's kernel on the training rows (one pass)."""
    from npt_dask.methods import alignment_scores

    return alignment_scores(model.x_train, _labels(train), model.kernel), {}


STAGES = {
    "alignment": _alignment,
    "ksvm": _ksvm,
    "kernel_svm_reference": _reference,
    "ridge": _ridge,
    "kfd": _kfd,
    "kpcal1": _kpcal1,
    "kpca": _kpca,
    "kernel_ridge": _kernel_ridge,
}


PARAMS = {
    "ksvm": {"solver", "C", "epochs", "average", "chunk_size", "persist", "max_iter", "tol"},
    "kernel_svm_reference": {"C", "max_train", "tol", "cache_size"},
    "ridge": {"alpha", "fit_intercept", "criterion", "chunk_size"},
    "kfd": {"n_components", "reg", "chunk_size"},
    "kpcal1": {
        "n_components", "n_init", "max_iter", "center", "perturbation", "chunk_size", "persist",
        "random_state",
    },
    "kpca": {"show"},
    "alignment": set(),
    "kernel_ridge": {
        "kernel", "gamma", "degree", "coef0", "alpha", "alphas", "gammas", "landmarks",
        "landmark_method", "solver", "tol", "max_iter", "precision", "random_state",
        "memory_budget", "chunk_size", "search_rows", "held_out", "checkpoint",
    },
}  # fmt: skip


MOMENT_STAGES = frozenset({"ridge"})
"""Stages served by the training pass's moments (:attr:`NPTModel.moments`)."""

MODEL_ONLY_STAGES = frozenset({"kpca", "kernel_svm_reference", "kernel_ridge"})
"""Stages that read no training coordinates at all."""


def needs_train_coordinates(methods: Any, model: NPTModel) -> bool:
    """Whether some configured stage reads the projected training rows (``train.zarr``)."""
    served = MODEL_ONLY_STAGES | (MOMENT_STAGES if model.moments is not None else frozenset())
    return any(method.name not in served for method in methods)


_CHECKPOINT_NAME = re.compile(r"^(?:[\w.-]+\.[0-9a-f]{12}|kernel_ridge)\.cg\.npz$")

STAGE_SEED = 0
"""A ``kernel_ridge`` stage's ``random_state`` unless it sets one: the same centres on
every run, so that a re-run resumes its checkpoint (as the model's seed, ``[model]``)."""


def run_stage_params(
    name: str,
    params: Mapping[str, Any],
    out: Any,
    *,
    key: str | None = None,
    problem: str = "",
    progress: bool = False,
) -> dict[str, Any]:
    """A stage's parameters as it runs them.

    ``kernel_ridge``: a fixed seed unless given (:data:`STAGE_SEED`), the run's
    ``progress``, and its CG checkpoint in the output folder unless ``checkpoint =
    false`` (a re-run then resumes a killed solve). The checkpoint is named by the stage
    (``key``, its report name, unique in a config) and a digest of its parameters and of
    ``problem`` (the data it reads): two stages, or the same stage with other settings,
    never share one.
    """
    given = dict(params)
    if name == "kernel_ridge":
        keep = given.pop("checkpoint", True)
        given.setdefault("random_state", STAGE_SEED)
        if keep:
            given["checkpoint"] = str(Path(out) / checkpoint_name(key or name, given, problem))
        given["progress"] = progress
    return given


def checkpoint_name(key: str, params: Mapping[str, Any], problem: str) -> str:
    """``<stage>.<digest>.cg.npz``: the stage's name (characters other than letters,
    digits, ``.``, ``-`` and ``_`` replaced) and 12 hex digits of a SHA-256 of its
    parameters and ``problem``."""
    text = json.dumps({"params": dict(params), "problem": problem}, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    stage = re.sub(r"[^\w.-]", "_", key)
    return f"{stage}.{digest}{CHECKPOINT_SUFFIX}"


def stage_checkpoints(out: Path) -> list[Path]:
    """The ``kernel_ridge`` checkpoints in the output folder ``out`` (any stage's, any
    settings', and the earlier ``kernel_ridge.cg.npz``)."""
    if not out.is_dir():
        return []
    return sorted(p for p in out.iterdir() if p.is_file() and _CHECKPOINT_NAME.match(p.name))


def check_params(name: str, params: Mapping[str, Any]) -> None:
    """Refuse unknown method parameters before any work starts."""
    unknown = sorted(set(params) - PARAMS[name])
    if unknown:
        raise InputError(
            f"Unknown parameter(s) {unknown} for method {name!r}; allowed: {sorted(PARAMS[name])}."
        )
    if name == "ksvm":  # the kernel SVM's table: its solvers and C, before any work
        from npt_dask.methods.ksvm import KERNEL_SVM_PARAMS
        from npt_dask.params.constraints import check_table

        given = {k: params[k] for k in ("solver", "C") if k in params}
        check_table(KERNEL_SVM_PARAMS, given, owner="[[methods]] ksvm")


def run_method(
    name: str,
    params: Mapping[str, Any],
    train: Any,
    test: Any,
    split: Split,
    model: NPTModel | None,
) -> tuple[dict[str, Any], Figures]:
    """Run one stage; the metrics carry its wall time in ``seconds``."""
    t0 = time.perf_counter()
    if model is None and name not in DATA_STAGES:
        raise InputError(f"[[methods]] {name!r} needs an NPT model: add a [model] table.")
    metrics, figures = STAGES[name](dict(params), train, test, split, model)  # type: ignore[arg-type]
    metrics["seconds"] = round(time.perf_counter() - t0, 3)
    return metrics, figures
