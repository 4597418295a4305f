"""``KernelRidgeClassifier``: kernel ridge on one-hot ``{-1, +1}`` targets, the class
of the largest decision value predicted (scikit-learn's ``RidgeClassifier`` rule, with a
kernel); the shared fit is :class:`~npt_dask.ridge.base.KernelRidgeBase`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.preprocessing import LabelBinarizer
from sklearn.utils.validation import validate_data

from npt_dask.arrays.device import check_device
from npt_dask.arrays.host import to_host
from npt_dask.engine.rows import Rows
from npt_dask.errors import (
    InputError,
)
from npt_dask.methods._passes import take_labels
from npt_dask.params.constraints import (
    check_estimator,
)
from npt_dask.ridge.base import KernelRidgeBase, on_a_device
from npt_dask.ridge.params import CHECKPOINT_PARAM
from npt_dask.ridge.routes import solver_doc
from npt_dask.runtime.inputs import (
    is_lazy,
    wrap_rows,
)
from npt_dask.runtime.labels import class_labels, host_labels

__all__ = [
    "KernelRidgeClassifier",
]


class KernelRidgeClassifier(ClassifierMixin, KernelRidgeBase):
    """Kernel ridge classification: one-vs-all ridge on ±1 targets (scikit-learn's
    ``RidgeClassifier`` rule), exact or Nyström, direct or iterative, out of core.

    The targets are +1 for a row's class and -1 for the others, one column per class
    (a single column, for ``classes_[1]``, with two classes); ``predict`` takes the
    largest decision value.

    Parameters
    ----------
    alpha : float or array-like of shape (n_targets,), default 1.0
        Regularisation strength, scikit-learn's ``KernelRidge`` meaning: the
        solution minimises ``||W^1/2 (Y - K c)||^2 + alpha c^T K c`` (with
        landmarks, ``K`` is ``K_nm`` and the penalty ``c^T K_mm c``). One value per
        target is allowed. ``alpha=0`` is solved directly (least squares when the
        system is singular, with a warning, as scikit-learn does); the iterative
        route needs ``alpha > 0``.
    kernel : str or callable, default "linear"
        ``"rbf"``, ``"laplacian"``, ``"polynomial"`` (``"poly"``), ``"sigmoid"``,
        ``"linear"``, ``"cosine"`` (scikit-learn's definitions), ``"precomputed"``
        (X is the kernel matrix), or ``f(A, B, **kernel_params)`` returning a block.
    gamma : float, "scale" or None, default None
        ``None``: ``1 / n_features``; ``"scale"``: ``1 / (n_features X.var())``.
    degree : float, default 3
    coef0 : float, default 1
    kernel_params : dict, optional
        Parameters of a callable kernel (or gamma/degree/coef0 of a named one).
    landmarks : None, int or array of row indices, default None
        ``None``: every row is a centre (exact kernel ridge, scikit-learn's). An int m:
        Nyström kernel ridge on m rows chosen by ``landmark_method`` (seeded by
        ``random_state``); an array: those rows.
    landmark_method : {"uniform", "rpcholesky"}, default "uniform"
    {solver}
        ``"auto"``: the plan's choice (``plan_["reason"]`` says why). Exact ridge
        (``landmarks=None``) takes the direct route, scikit-learn's solve, whenever the
        n x n matrix fits ``memory_budget``, whatever n; only when it does not is it solved
        by CG to ``tol``, and a ``RidgeWarning`` says so (raise ``memory_budget``, or use
        landmarks). Nyström ridge: the route of least counted work that fits.
    tol : float, default 1e-3
        CG stops when ``||b - H c|| / ||b|| <= tol`` for every target (``H`` the normal
        equations' matrix, ``b`` their right-hand side): a target the steps call converged
        is checked against its true residual with one more pass, and iterates on when it
        is above ``tol``. float32 kernel blocks resolve residuals down to about 1e-6 to
        1e-5, by the problem (a ``ConvergenceWarning`` says when tol was not reached; use
        ``precision="float64"`` for a tighter one). A fit that stops without converging
        (``max_iter``, a breakdown or divergence) reports the true residual of the iterate
        it returns, in its warning and ``solve_details_["relative_residuals"]``: it costs
        one pass more (shared with the last iteration's when a breakdown comes first),
        not the residual the steps updated, which drifts from it. The residual
        bounds the normal equations, not the predictions: at 1e-3 they differ from the
        direct solve's by about 1e-2 relative (float64) on ill-conditioned systems.
    max_iter : int, default 100
        Most CG iterations (a ``ConvergenceWarning`` if tol is not met).
    precision : {"float32", "float64"}, optional
        Kernel blocks' dtype (default: float32 input stays float32). With
        ``"float32"`` the blocks and CG's products run at BLAS's single-precision
        rate; the direct route's moments, every sum and every solve are float64, but
        for CG's preconditioner (its factors and triangular solves in the blocks'
        precision).
    random_state : int, Generator or None
        Seeds the landmark draw (and the preconditioner's landmarks).
    memory_budget : int, optional
        Bytes the fit may hold (the plan's; default a sixth of physical memory).
    device_memory_budget : int or str, optional
        Bytes of device (GPU) memory the fit may hold when the rows live on a device (the
        kernel blocks; exact direct ridge's n x n matrix and factor, built there); units as
        ``memory_budget``; default a share of the device's free memory. The plan refuses,
        before any pass, a route over either budget. Rows in host memory count against
        ``memory_budget`` alone (a value given for them warns).
    device : {"cpu", "gpu"} or None, default None
        Where the rows' arithmetic runs (the command line's ``--device``): ``"gpu"`` moves
        the rows of each ``fit`` and ``predict`` to the CUDA device through CuPy at the
        call's entrance (refused at once, naming the install, where CuPy or a device is
        missing), and gives the results back as the rows came (numpy in, numpy out);
        ``"cpu"`` or None leaves the rows where they are (rows already on a device stay
        there, and so do their lazy results). The fitted model's arrays are host numpy.
    chunk_size : int or None, default 4096
        Rows per kernel block of the exact route (None: a dask input's own chunks).
    progress : bool, default False
        Report the passes and every CG iteration on stderr.

    Attributes
    ----------
    classes_ : ndarray
        The sorted class labels.
    dual_coef_ : ndarray of shape (n_centres, 1) or (n_centres, n_classes)
    X_fit_, landmarks_, plan_, solver_, n_iter_, residuals_, kernel_
        As in :class:`KernelRidge`.

    Notes
    -----
    Cost (n rows, m centres, d features, k targets): the direct Nyström route
    evaluates ``2nmd`` flops of kernel blocks and ``nm^2`` of symmetric rank-k
    updates in one pass, then ``m^3/3`` per distinct alpha; CG evaluates
    ``2nmd + 4nmk`` per iteration after an ``m^3`` preconditioner. Memory: the
    direct route holds ``m x m`` float64 sums (one per thread that the budget
    allows) and ``K_mm``; CG one ``m x m`` preconditioner; exact CG an ``n x l``
    factor and the kernel blocks kept within the budget. Everything is in
    ``plan_`` before any pass. ``fit(..., checkpoint=path)`` writes CG's state
    after each iteration; a killed fit called again with the same path and the
    same problem resumes at the last iteration. The checkpoint keeps the
    centres, so landmarks drawn without ``random_state`` are the saved ones on
    a re-run. Another problem is refused (``CheckpointError``): other data,
    targets, weights, alpha or precision, or another kernel -- a kernel function
    is compared by its values on a few rows of the data, so a changed parameter
    it closes over is seen, and a resume applies the operator to the saved state
    once (one pass more), so a change away from those rows is seen. So are a file
    altered since it was written (every array's SHA-256 is recorded and checked),
    a file that is not a checkpoint (left as it is), and a second fit on the same
    path while one runs (a lock beside the file). A symbolic link is written through to its target.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import make_moons
    >>> from npt_dask import KernelRidgeClassifier
    >>> X, y = make_moons(300, noise=0.1, random_state=0)
    >>> clf = KernelRidgeClassifier(alpha=0.01, kernel="rbf", gamma=2.0).fit(X, y)
    >>> round(clf.score(X, y), 3)
    0.997
    >>> clf.predict(np.array([[0.0, 1.0], [1.0, -0.5]]))
    array([0, 1])
    """

    def fit(self, X: Any, y: Any, sample_weight: Any = None, *, checkpoint: Any = None) -> Any:
        """Fit on X and class labels y (numpy, dask, DataArray)."""
        check_estimator(self._param_table, self)  # before any work, in the table's words
        CHECKPOINT_PARAM.check(checkpoint, type(self).__name__)
        check_device(self.device)  # a GPU asked for and missing: refused before any work
        y, sample_weight = self._aligned(X, y, sample_weight)
        if on_a_device(y):  # a device's labels: to the host once (classes are host values)
            y = np.asarray(to_host(y))
        if not is_lazy(X) and y is not None and not is_lazy(y):
            X, y = validate_data(
                self, X, y, dtype=[np.float64, np.float32],
                accept_sparse=False if self._precomputed else ("csr", "csc"),
            )  # fmt: skip
        else:
            X = self._checked(X, reset=True)
        labels = self._labels(y, int(X.shape[0]))
        binarizer = LabelBinarizer(pos_label=1, neg_label=-1).fit(labels)
        self.classes_ = binarizer.classes_  # at least two (the label check)
        targets = binarizer.transform(labels).astype(np.float64)
        self._coef = self._fit(X, targets, sample_weight, checkpoint)
        self.dual_coef_ = self._coef
        return self

    def _labels(self, y: Any, n: int) -> np.ndarray:
        """Class labels as numpy (lazy labels are read once: they are small)."""
        if y is None:
            raise InputError(
                f"{type(self).__name__} requires y to be passed, but the target y is None."
            )
        values = host_labels(y, name="y")  # one read; a device's labels cross once
        if values.ndim != 1 or values.shape[0] != n:
            raise InputError(
                f"y must hold one class label per training row, shape ({n},); got {values.shape}."
            )
        class_labels(values, name="y", owner=type(self).__name__)  # the one label check
        return values

    def decision_function(self, X: Any) -> Any:
        """Decision values: (n,) for two classes (> 0 means ``classes_[1]``), else (n, C)."""
        out, info, moved = self._decision(X)
        if out.shape[1] == 1:
            out = out[:, 0]
        return wrap_rows(self._returned(out, moved), info, column_dim="class", name="decision")

    def predict(self, X: Any) -> Any:
        """Class labels (lazy for lazy input; where the rows live, when the classes are
        numbers a device holds, else in host memory)."""
        out, info, moved = self._decision(X)
        index = (out[:, 0] > 0).astype(np.intp) if out.shape[1] == 1 else out.argmax(axis=1)
        labels = take_labels(Rows.of(out), index, self.classes_)  # device scores: device labels
        return wrap_rows(self._returned(labels, moved), info, name="label")


KernelRidgeClassifier.__doc__ = solver_doc(
    KernelRidgeClassifier.__doc__
)  # the solver entry, from the route registry
