"""Kernel SVM as a linear SVM on NPT coordinates, in memory or chunk by chunk.

Because ``k(x_i, x_j) = y_i^T y_j`` for the coordinates, the dual of a linear
SVM on Y *is* the dual of the kernel SVM on X (000, eqs. 17-20): the same C
gives the same multipliers, the same bias and the same decision values. (The
SVM's constraint ``sum_i alpha_i c_i = 0`` makes it blind to the centring of
the kernel, so centred and uncentred NPT models give the same machine.)

* :func:`kernel_svm` -- a scikit-learn pipeline ``NonlinearProjection ->
  SVC(kernel="linear")`` (exact, O(n^2) in the SVM solver) or
  ``-> LinearSVC`` (primal, scales to large n; liblinear also penalises the
  intercept, so it is close to but not the kernel SVM).
* :class:`ChunkedLinearSVM` -- the out-of-core path: hinge-loss SGD over the
  coordinate chunks (``alpha = 1 / (C n)`` is the same objective as C),
  several epochs in shuffled chunk order, one chunk in memory at a time.
"""

from __future__ import annotations

from typing import Any, Literal

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.linear_model import SGDClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.svm import SVC, LinearSVC
from sklearn.utils.validation import check_is_fitted

from npt_dask.arrays.host import to_host
from npt_dask.engine.rows import Rows
from npt_dask.errors import InputError
from npt_dask.methods._passes import (
    COORDINATE_ROWS,
    PERSIST,
    affine,
    as_labels,
    class_positions,
    coordinate_rows,
    maybe_persist,
    take_labels,
)
from npt_dask.params.constraints import (
    FLAG,
    INT,
    NONE,
    REAL,
    InstanceOf,
    Interval,
    Options,
    Param,
    check_estimator,
    check_table,
    table_defaults,
)
from npt_dask.runtime.inputs import align_rows, is_data_array, wrap_rows
from npt_dask.runtime.labels import class_index
from npt_dask.runtime.scheduler import compute

__all__ = [
    "KERNEL_SVM_PARAMS",
    "SVM_PARAMS",
    "ChunkedLinearSVM",
    "in_host_memory",
    "kernel_svm",
    "linear_svm",
]

_C = Param("C", (Interval(REAL, 0, None, "neither"),), 1.0, "the SVM's C (> 0)")

SVM_PARAMS: tuple[Param, ...] = (
    _C,
    Param("epochs", (Interval(INT, 1, None),), 10, "passes over the data"),
    Param("average", (FLAG,), True, "averaged SGD"),
    COORDINATE_ROWS,
    PERSIST,
    Param(
        "random_state",
        (Interval(INT, 0, None), NONE),
        None,
        "seed of the chunk order, the row shuffles and SGD",
    ),
)
"""``npt_dask.methods.ChunkedLinearSVM``."""

KERNEL_SVM_PARAMS: tuple[Param, ...] = (
    _C,
    Param(
        "solver",
        (Options(("svc", "liblinear", "chunked")),),
        "svc",
        "SVC(kernel='linear'), the kernel SVM exactly, LinearSVC's hinge loss (large n), or "
        "ChunkedLinearSVM (hinge-loss SGD chunk by chunk: out of core)",
    ),
    Param("svm_params", (InstanceOf((dict,), "a dict"), NONE), None, "more arguments of the SVM"),
)
"""``npt_dask.methods.kernel_svm`` and ``linear_svm`` (functions: checked on each call)."""

_K = table_defaults(KERNEL_SVM_PARAMS)  # the signatures' defaults: the parameter tables'
_S = table_defaults(SVM_PARAMS)


def kernel_svm(
    C: float = _K["C"],
    *,
    solver: Literal["svc", "liblinear", "chunked"] = _K["solver"],
    svm_params: dict[str, Any] | None = _K["svm_params"],
    **npt_params: Any,
) -> Pipeline:
    """A kernel SVM built the NPT way: ``NonlinearProjection`` then a linear SVM.

    Parameters
    ----------
    C : float, default 1.0
        The SVM's C, the same as the kernel SVM's.
    solver : {"svc", "liblinear", "chunked"}, default "svc"
        ``"svc"``: ``SVC(kernel="linear")`` -- exactly the kernel SVM at full
        rank. ``"liblinear"``: ``LinearSVC(loss="hinge")`` in the primal,
        for large n. ``"chunked"``: :class:`ChunkedLinearSVM`, hinge-loss SGD
        over the coordinates' row chunks (out of core).
    svm_params : dict, optional
        More keyword arguments for the SVM (not modified).
    **npt_params
        Keyword arguments of :class:`npt_dask.NonlinearProjection`
        (``kernel``, ``gamma``, ``n_components``, ...).

    Notes
    -----
    The in-memory solvers (``"svc"``, ``"liblinear"``) are scikit-learn's, which read
    numpy: a ``"host"`` step between the two brings lazy coordinates into host memory
    (computed once; a device's copied once), so rows on a GPU fit and predict too. The
    chunked solver streams the coordinates' chunks itself.

    Examples
    --------
    >>> from sklearn.datasets import make_moons
    >>> from npt_dask.methods import kernel_svm
    >>> X, y = make_moons(200, noise=0.1, random_state=0)
    >>> clf = kernel_svm(C=10.0, kernel="rbf", gamma=2.0).fit(X, y)
    >>> round(clf.score(X, y), 2)
    1.0
    """
    from npt_dask.npt.estimator import NonlinearProjection

    values = {"C": C, "solver": solver, "svm_params": svm_params}
    check_table(KERNEL_SVM_PARAMS, values, owner="kernel_svm")
    svm = linear_svm(solver, C, **dict(svm_params or {}))
    steps: list[tuple[str, Any]] = [("npt", NonlinearProjection(**npt_params))]
    if solver != "chunked":  # scikit-learn's solvers read the coordinates in host memory
        steps.append(("host", FunctionTransformer(in_host_memory)))
    return Pipeline([*steps, ("svm", svm)])


def in_host_memory(coordinates: Any) -> Any:
    """Coordinates in host memory for an in-memory solver: numpy as they are; lazy ones
    (dask, a DataArray's) computed, and a device's copied to the host once."""
    if is_data_array(coordinates):
        coordinates = coordinates.data
    if not isinstance(coordinates, da.Array):
        return coordinates
    return np.asarray(to_host(compute(coordinates)[0]))


def linear_svm(solver: str, C: float, **params: Any) -> Any:
    """The in-memory linear SVM for NPT coordinates: the kernel SVM's own objective.

    ``"svc"`` is libsvm's ``SVC(kernel="linear")`` (same dual, same bias as
    the kernel SVC); ``"liblinear"`` is ``LinearSVC`` with the hinge loss
    solved in the dual (scikit-learn's default squared hinge is another
    objective), faster for large n; ``"chunked"`` is :class:`ChunkedLinearSVM`
    (hinge-loss SGD chunk by chunk, for coordinates that do not fit in memory).
    """
    check_table(KERNEL_SVM_PARAMS, {"solver": solver, "C": C}, owner="linear_svm")
    if solver == "svc":
        return SVC(kernel="linear", C=C, **params)
    if solver == "chunked":
        return ChunkedLinearSVM(C=C, **params)
    return LinearSVC(C=C, loss="hinge", dual=True, **{"max_iter": 10000, **params})


class ChunkedLinearSVM(ClassifierMixin, BaseEstimator):
    """Linear SVM trained chunk by chunk: the out-of-core kernel SVM on NPT coordinates.

    Parameters
    ----------
    C : float, default 1.0
        SVM regularisation; SGD minimises ``||w||^2 / (2 C n) + mean hinge``,
        which is the SVM objective divided by ``C n``.
    epochs : int, default 10
        Passes over the data.
    average : bool, default True
        Averaged SGD (stabler final weights).
    chunk_size : int, default 8192
        Rows per chunk for numpy input; dask/xarray input keeps its chunks.
    persist : bool, optional
        Keep Y in (cluster) memory across epochs, or re-read each chunk from
        its source every epoch (``False``); default: persist up to 512 MiB.
    random_state : int or None
        Seeds the chunk order, the row shuffles and SGD.

    Attributes
    ----------
    coef_, intercept_, classes_, n_features_in_, n_iter_ (epochs run)

    Notes
    -----
    Each epoch reads every chunk once, in a random order, shuffles its rows
    and calls ``SGDClassifier.partial_fit``: one chunk of ``chunk * r``
    floats in memory at a time, whatever n. ``decision_function`` and
    ``predict`` on dask or zarr-backed input stay lazy.

    Examples
    --------
    >>> import numpy as np
    >>> from npt_dask.methods import ChunkedLinearSVM
    >>> rng = np.random.default_rng(0)
    >>> Y = np.vstack([rng.normal(-2, 1, (300, 2)), rng.normal(2, 1, (300, 2))])
    >>> y = np.repeat([0, 1], 300)
    >>> svm = ChunkedLinearSVM(C=1.0, chunk_size=100, random_state=0).fit(Y, y)
    >>> svm.score(Y, y) > 0.95
    True
    """

    def __init__(
        self,
        C: float = _S["C"],
        *,
        epochs: int = _S["epochs"],
        average: bool = _S["average"],
        chunk_size: int = _S["chunk_size"],
        persist: bool | None = _S["persist"],
        random_state: int | None = _S["random_state"],
    ) -> None:
        self.C = C
        self.epochs = epochs
        self.average = average
        self.chunk_size = chunk_size
        self.persist = persist
        self.random_state = random_state

    def fit(self, Y: Any, y: Any) -> ChunkedLinearSVM:
        """Train over the chunks of Y (numpy, dask or DataArray) for ``epochs`` passes."""
        check_estimator(SVM_PARAMS, self)  # before any data are read
        y = align_rows(y, Y, name="y", rows_name="Y")
        rows, _ = coordinate_rows(Y, chunk_size=self.chunk_size, min_samples=2)
        classes, index = class_index(as_labels(y, rows.data), name="y", owner="ChunkedLinearSVM")
        labels = classes.take(index)  # in host memory, where SGD runs
        data = maybe_persist(_on_host(rows), self.persist)
        starts = np.concatenate([[0], np.cumsum(rows.chunks)]).astype(int)
        sgd = SGDClassifier(
            loss="hinge",
            alpha=1.0 / (float(self.C) * data.shape[0]),
            average=self.average,
            learning_rate="optimal",
            random_state=self.random_state,
        )
        rng = np.random.default_rng(self.random_state)
        for _ in range(self.epochs):
            for k in rng.permutation(data.numblocks[0]):
                (block,) = compute(data.blocks[k])
                lab = labels[starts[k] : starts[k + 1]]
                order = rng.permutation(len(block))
                sgd.partial_fit(block[order], lab[order], classes=classes)
        self._sgd = sgd
        self.coef_, self.intercept_, self.classes_ = sgd.coef_, sgd.intercept_, classes
        self.n_features_in_, self.n_iter_ = data.shape[1], self.epochs
        return self

    def _scores(self, Y: Any) -> tuple[Rows, Any, Any]:
        check_is_fitted(self, "coef_")
        rows, info = coordinate_rows(Y, chunk_size=self.chunk_size)
        if rows.data.shape[1] != self.n_features_in_:
            raise InputError(
                f"Y has {rows.data.shape[1]} features, but the SVM was fitted on "
                f"{self.n_features_in_}."
            )
        return rows, affine(rows, self.coef_.T, offset=self.intercept_, label="decision"), info

    def decision_function(self, Y: Any) -> Any:
        """Signed distances (times ``||w||``); shape (m,) for two classes, else (m, C)."""
        _, scores, info = self._scores(Y)
        if scores.shape[1] == 1:
            return wrap_rows(scores[:, 0], info, name="decision")
        return wrap_rows(scores, info, column_dim="class", name="decision")

    def predict(self, Y: Any) -> Any:
        """Class labels (lazy for dask input; on the coordinates' device for numeric
        classes)."""
        rows, scores, info = self._scores(Y)
        labels = take_labels(rows, class_positions(scores), self.classes_)
        return wrap_rows(labels, info, name="label")


def _on_host(rows: Rows) -> Any:
    """The coordinates in host memory, where scikit-learn's SGD reads them: each chunk
    copied once (numpy's as they are)."""
    if rows.numpy:
        return rows.data
    return da.map_blocks(
        _host_block, rows.data, dtype=rows.data.dtype, meta=np.empty((0, 0), rows.data.dtype)
    )


def _host_block(block: Any) -> np.ndarray:
    return np.asarray(to_host(block))
