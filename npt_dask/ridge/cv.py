"""``KernelRidgeCV`` and ``KernelRidgeClassifierCV``: the kernel ridge estimators with
``alpha`` (and ``gamma``) chosen on held-out rows by :func:`npt_dask.ridge.search.search`
before the one fit.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg
import scipy.sparse

from npt_dask.kernels import KernelSpec, make_kernel
from npt_dask.params.constraints import (
    Param,
    table_defaults,
)
from npt_dask.ridge.classifier import KernelRidgeClassifier
from npt_dask.ridge.params import RIDGE_CV_PARAMS
from npt_dask.ridge.regressor import KernelRidge
from npt_dask.ridge.search import (
    GAMMA_FACTORS,
    r2_score,
    search,
    target_score,
)

__all__ = [
    "KernelRidgeCV",
    "KernelRidgeClassifierCV",
]


_S = table_defaults(RIDGE_CV_PARAMS)


def _entry_variance(sample: Any) -> float:
    """The variance of all entries of the sampled rows (``gamma="scale"``), sparse too."""
    if not scipy.sparse.issparse(sample):
        return float(np.var(sample))
    size = float(sample.shape[0]) * float(sample.shape[1])
    values = sample.data.astype(np.float64)
    mean = float(values.sum()) / size
    return max(float(np.dot(values, values)) / size - mean * mean, 0.0)


class _Search:
    """The CV estimators' hyperparameter step (see :mod:`npt_dask.ridge.search`)."""

    alphas: Any
    gammas: Any
    search_rows: int | None
    held_out: float
    kernel: Any
    degree: float
    coef0: float
    kernel_params: Any
    landmarks: Any
    random_state: Any
    _precomputed: bool
    _score: Any = None
    _param_table: tuple[Param, ...] = RIDGE_CV_PARAMS

    def _spec_of(self, gamma: Any, sample: Any) -> KernelSpec:
        """The kernel of ``gamma``, resolved on the sampled rows (dense or sparse)."""
        spec = make_kernel(self.kernel, gamma=gamma, degree=self.degree, coef0=self.coef0,
                           kernel_params=self.kernel_params)  # fmt: skip
        variance = _entry_variance(sample) if spec.needs_variance else None
        return spec.resolve(sample.shape[1], variance)

    def _grid(self, sample: np.ndarray) -> list[Any]:
        """The candidate gammas: given, or multiples of ``gamma="scale"`` on the sample
        (``[None]`` for a kernel without gamma, or a precomputed one)."""
        if self._precomputed:
            return [None]
        if self.gammas is not None:  # each finite and > 0: checked by the table
            return [float(g) for g in np.asarray(self.gammas, dtype=np.float64).ravel()]
        if "gamma" not in self._spec_of(1.0, sample[:1]).to_dict():
            return [None]
        scale = self._spec_of("scale", sample).to_dict()["gamma"]
        return [factor * scale for factor in GAMMA_FACTORS]

    def _hyper(self, rows: da.Array, t: Any, weights: Any) -> tuple[Any, Any]:
        alphas = np.asarray(self.alphas, dtype=np.float64).ravel()  # checked by the table
        result = search(
            rows, t, weights, spec_for=None if self._precomputed else self._spec_of,
            gammas=self._grid, alphas=alphas.tolist(), landmarks=self.landmarks,
            score=self._score, rng=np.random.default_rng(self.random_state),
            search_rows=self.search_rows, held_out=self.held_out,
        )  # fmt: skip
        self.best_score_ = result.best_score  # the chosen pair's (ties: the grid's middle)
        self.cv_results_ = result.as_dict()
        self.alpha_ = result.alpha
        return result.alpha, result.gamma


class KernelRidgeCV(_Search, KernelRidge):
    """Kernel ridge regression with gamma and alpha chosen by held-out R^2 on a subproblem.

    The search (:mod:`npt_dask.ridge.search`): before the full fit, ``search_rows``
    rows (None: a fifth of the rows, from 1,000 up to 10,000) drawn uniformly (seeded by
    ``random_state``) make a subproblem, a share
    ``held_out`` of them held out; for each gamma its kernel is evaluated once, for
    each alpha one Cholesky factorisation is solved (the penalty per row kept:
    ``alpha * rows / n``) and scored on the held-out rows; the full fit takes the
    best pair, scores within one part in a thousand of the best being ties broken toward
    the middle of the grids (the ends are where a grid is too short). Cost:
    ``len(gammas)`` kernel evaluations and ``len(gammas) * len(alphas)`` factorisations
    of the subproblem's size (or its landmarks), recorded in ``cv_results_["seconds"]``:
    the cube of the subproblem's rows, which a fifth of n keeps near the final fit's time
    (on 5,000 covertype rows, a busy 2-core machine: 68 s against the final fit's 27 s;
    ``benchmarks/search.py`` times both).

    Parameters
    ----------
    alphas : sequence of float, default ``logspace(-6, 1, 8)``
        Candidate alphas, in the full problem's units (:class:`KernelRidge`'s alpha).
    gammas : sequence of float, optional
        Candidate gammas; None: ``(0.25, 0.5, 1, 2, 4)`` times ``gamma="scale"``
        (``1 / (d var X)`` on the subproblem's rows) for kernels that take a gamma.
    search_rows : int or None, default None
    held_out : float, default 0.2
    kernel : str or callable, default "rbf"
        As :class:`KernelRidge`'s, but for its default: a search over gammas needs a
        kernel that takes one.
    degree, coef0, kernel_params, landmarks, landmark_method, solver, tol, max_iter
        As :class:`KernelRidge`.
    precision, random_state, memory_budget, device_memory_budget, device, chunk_size, progress
        As :class:`KernelRidge`.

    Attributes
    ----------
    alpha_, gamma_ : the chosen pair (``gamma_`` resolved)
    best_score_ : float
        Its held-out score (accuracy for the classifier, R^2 for the regressor).
    cv_results_ : dict
        Every candidate's score (``scores[g][a]``), the subproblem's sizes, seconds.
    and the attributes of the estimator it extends.

    Examples
    --------
    >>> import numpy as np
    >>> from npt_dask import KernelRidgeCV
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, (400, 1))
    >>> y = np.sin(X[:, 0]) + rng.normal(0, 0.1, 400)
    >>> est = KernelRidgeCV(random_state=0).fit(X, y)
    >>> round(float(est.best_score_), 2) > 0.9
    True
    """

    _score = staticmethod(r2_score)

    def __init__(
        self,
        alphas: Any = _S["alphas"],
        *,
        gammas: Any = _S["gammas"],
        search_rows: int | None = _S["search_rows"],
        held_out: float = _S["held_out"],
        kernel: Any = _S["kernel"],
        degree: float = _S["degree"],
        coef0: float = _S["coef0"],
        kernel_params: dict | None = _S["kernel_params"],
        landmarks: Any = _S["landmarks"],
        landmark_method: str = _S["landmark_method"],
        solver: str = _S["solver"],
        tol: float = _S["tol"],
        max_iter: int = _S["max_iter"],
        precision: str | None = _S["precision"],
        random_state: Any = _S["random_state"],
        memory_budget: int | str | None = _S["memory_budget"],
        device_memory_budget: int | str | None = _S["device_memory_budget"],
        device: str | None = _S["device"],
        chunk_size: int | None = _S["chunk_size"],
        progress: bool = _S["progress"],
    ) -> None:
        self.alphas = alphas
        self.gammas = gammas
        self.search_rows = search_rows
        self.held_out = held_out
        self.kernel = kernel
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.landmarks = landmarks
        self.landmark_method = landmark_method
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.precision = precision
        self.random_state = random_state
        self.memory_budget = memory_budget
        self.device_memory_budget = device_memory_budget
        self.device = device
        self.chunk_size = chunk_size
        self.progress = progress


class KernelRidgeClassifierCV(_Search, KernelRidgeClassifier):
    """Kernel ridge classification with gamma and alpha chosen by held-out squared error
    of the ±1 targets on a subproblem.

    The search (:mod:`npt_dask.ridge.search`): before the full fit, ``search_rows``
    rows (None: a fifth of the rows, from 1,000 up to 10,000) drawn uniformly (seeded by
    ``random_state``) make a subproblem, a share
    ``held_out`` of them held out; for each gamma its kernel is evaluated once, for
    each alpha one Cholesky factorisation is solved (the penalty per row kept:
    ``alpha * rows / n``) and scored on the held-out rows; the full fit takes the
    best pair, scores within one part in a thousand of the best being ties broken toward
    the middle of the grids (the ends are where a grid is too short). Cost:
    ``len(gammas)`` kernel evaluations and ``len(gammas) * len(alphas)`` factorisations
    of the subproblem's size (or its landmarks), recorded in ``cv_results_["seconds"]``:
    the cube of the subproblem's rows, which a fifth of n keeps near the final fit's time
    (on 5,000 covertype rows, a busy 2-core machine: 68 s against the final fit's 27 s;
    ``benchmarks/search.py`` times both).

    Parameters
    ----------
    alphas : sequence of float, default ``logspace(-6, 1, 8)``
        Candidate alphas, in the full problem's units (:class:`KernelRidge`'s alpha).
    gammas : sequence of float, optional
        Candidate gammas; None: ``(0.25, 0.5, 1, 2, 4)`` times ``gamma="scale"``
        (``1 / (d var X)`` on the subproblem's rows) for kernels that take a gamma.
    search_rows : int or None, default None
    held_out : float, default 0.2
    kernel : str or callable, default "rbf"
        As :class:`KernelRidge`'s, but for its default: a search over gammas needs a
        kernel that takes one.
    degree, coef0, kernel_params, landmarks, landmark_method, solver, tol, max_iter
        As :class:`KernelRidge`.
    precision, random_state, memory_budget, device_memory_budget, device, chunk_size, progress
        As :class:`KernelRidge`.

    Attributes
    ----------
    alpha_, gamma_ : the chosen pair (``gamma_`` resolved)
    best_score_ : float
        Its held-out score: ``1 - mean squared error`` of its ±1 targets (continuous,
        unlike accuracy, which ties most alphas on a few thousand held-out rows).
    cv_results_ : dict
        Every candidate's score (``scores[g][a]``), the subproblem's sizes, seconds.
    and the attributes of the estimator it extends.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import make_moons
    >>> from npt_dask import KernelRidgeClassifierCV
    >>> X, y = make_moons(400, noise=0.2, random_state=0)
    >>> clf = KernelRidgeClassifierCV(random_state=0).fit(X, y)
    >>> clf.best_score_ > 0.8, clf.score(X, y) > 0.9  # 1 - squared error; accuracy
    (True, True)
    """

    _score = staticmethod(target_score)

    __init__ = KernelRidgeCV.__init__
