"""Pre-images: from NPT coordinates back to input space, out of core.

Two maps, both streamed over the training rows:

* :func:`fit_inverse_map` -- scikit-learn's ``KernelPCA(fit_inverse_transform=True)``:
  kernel ridge regression of the training rows on their coordinates, the map
  ``NonlinearProjection.inverse_transform`` applies. Kernel ridge lives above this
  layer (:mod:`npt_dask.ridge.inverse_map`, on
  :class:`~npt_dask.ridge.regressor.KernelRidge`), which registers its fitting
  function here at import (:func:`register_inverse_map`); this module names only
  what the estimator needs of the fitted map (:class:`PreimageMap`).
* :func:`rbf_preimage` -- the fixed-point pre-image of Mika et al. (1999) for
  the RBF kernel: the point ``z`` whose ``phi(z)`` is nearest to the
  feature-space point with the given coordinates, by
  ``z <- sum_i g_i kappa(z, x_i) x_i / sum_i g_i kappa(z, x_i)``, each
  iteration one pass over the training blocks, started from the training row
  with the nearest coordinates (or the rows you give, e.g. the noisy inputs
  being denoised).

Layer rule: graph code over numpy blocks (:mod:`npt_dask.engine.blocks`), like
:mod:`npt_dask.npt.model`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import dask.array as da
import numpy as np

from npt_dask.arrays.host import to_host
from npt_dask.engine.blocks import as_float64_block, scratch_block
from npt_dask.engine.sums import FAN_IN
from npt_dask.errors import InputError, NPTError
from npt_dask.kernels import KernelSpec
from npt_dask.runtime.scheduler import compute

if TYPE_CHECKING:
    from npt_dask.npt.model import NPTModel

__all__ = [
    "DEFAULT_INVERSE_MAP",
    "InverseMapFitter",
    "PreimageMap",
    "fit_inverse_map",
    "fixed_point_terms",
    "rbf_preimage",
    "register_inverse_map",
]


class PreimageMap(Protocol):
    """A fitted map from coordinates back to input rows (what
    :func:`fit_inverse_map` returns: :class:`npt_dask.ridge.inverse_map.InverseMap`)."""

    @property
    def dual_coef(self) -> np.ndarray | None:
        """The dual coefficients ``(n, d)``; None when the map is in primal form."""

    def predict(self, y: Any) -> Any:
        """Input-space rows for coordinates ``y`` ``(m, r)``; lazy in, lazy out."""


InverseMapFitter = Callable[..., PreimageMap]
"""The signature of :func:`fit_inverse_map`, which the registered function has."""

_FITTERS: dict[str, InverseMapFitter] = {}

DEFAULT_INVERSE_MAP = "npt_dask.ridge.inverse_map"
"""The module that registers the default fitter (kernel ridge's) when imported: loaded by
name on the first fit of an inverse map, so this layer never imports kernel ridge's."""


def register_inverse_map(fitter: InverseMapFitter) -> None:
    """Make ``fitter`` the function :func:`fit_inverse_map` delegates to.

    :mod:`npt_dask.ridge.inverse_map` registers its kernel ridge fit when imported
    (:func:`fit_inverse_map` imports it, :data:`DEFAULT_INVERSE_MAP`, when none is).
    """
    _FITTERS["inverse_map"] = fitter


def fit_inverse_map(
    y_train: np.ndarray, x_train: da.Array, kernel: KernelSpec, alpha: float, **options: Any
) -> PreimageMap:
    """Fit scikit-learn's pre-image map: kernel ridge from ``y_train`` to ``x_train``.

    The registered fitting function's (:func:`npt_dask.ridge.inverse_map.fit_inverse_map`,
    which documents the parameters and their defaults): ``y_train`` the training
    coordinates ``(n, r)``, ``x_train`` the row-chunked training rows ``(n, d)``,
    ``kernel`` the model's, ``alpha`` the ridge; ``options`` (``tol``, ``max_passes``,
    ``memory_budget``) passed on as they are.
    """
    if "inverse_map" not in _FITTERS:
        importlib.import_module(DEFAULT_INVERSE_MAP)  # registers kernel ridge's fit
    fitter = _FITTERS.get("inverse_map")
    if fitter is None:
        raise NPTError(
            "No pre-image map fitter is registered: npt_dask.ridge.inverse_map registers "
            "it when imported. Import npt_dask (or npt_dask.ridge.inverse_map) first."
        )
    return fitter(y_train, x_train, kernel, alpha, **options)


# --- the fixed-point pre-image (Mika et al. 1999) -----------------------------------------


def _nearest_training_rows(model: NPTModel, y: np.ndarray) -> np.ndarray:
    """The training rows whose coordinates are nearest to each row of ``y``."""
    train = model.eigenvectors * np.sqrt(model.eigenvalues)
    best = np.full(y.shape[0], np.inf)
    index = np.zeros(y.shape[0], dtype=np.int64)
    yy = np.einsum("ij,ij->i", y, y)
    for start in range(0, train.shape[0], 4096):
        t = train[start : start + 4096]
        d = yy[:, None] - 2.0 * (y @ t.T) + np.einsum("ij,ij->i", t, t)[None, :]
        arg = np.argmin(d, axis=1)
        val = d[np.arange(len(y)), arg]
        better = val < best
        best[better], index[better] = val[better], arg[better] + start
    order = np.argsort(index)
    rows = np.asarray(to_host(compute(model.x_train[index[order]])[0]), dtype=np.float64)
    out = np.empty_like(rows)
    out[order] = rows
    return out


def _fp_terms(
    z: np.ndarray, x: np.ndarray, a: np.ndarray, beta: np.ndarray, c: np.ndarray,
    kernel: KernelSpec,
) -> np.ndarray:  # fmt: skip
    return fixed_point_terms(z, x, a, beta, c, kernel)[:, None, :]


def rbf_preimage(
    model: NPTModel,
    y: Any,
    *,
    init: Any = None,
    max_iter: int = 100,
    tol: float = 1e-6,
) -> np.ndarray:
    """Mika et al.'s fixed-point pre-image of coordinates ``y`` under an RBF model.

    Parameters
    ----------
    model : NPTModel
        Fitted with ``kernel="rbf"``.
    y : array-like (m, r)
        NPT coordinates (e.g. ``model.transform(Z)``, possibly with the
        trailing components zeroed: that is denoising).
    init : array-like (m, d), optional
        Starting rows (e.g. the noisy rows themselves); default the training
        row whose coordinates are nearest to each row of ``y``.
    max_iter, tol :
        Iterations (each one pass over the training blocks) and the stopping
        rule ``max |z_new - z| <= tol * max |z|``.

    Returns
    -------
    ndarray (m, d), float64.
    """
    if model.kernel.name != "rbf":
        raise InputError(
            f"The fixed-point pre-image is for the rbf kernel; this model's kernel is "
            f"{model.kernel.name!r}. Use NonlinearProjection(fit_inverse_transform=True)"
            ".inverse_transform (kernel ridge) for other kernels."
        )
    beta = np.asarray(y, dtype=np.float64)
    if beta.ndim != 2 or beta.shape[1] != model.n_components:
        raise InputError(
            f"y must have shape (m, {model.n_components}) (the model's coordinates); got "
            f"{beta.shape}."
        )
    if init is None:
        z = _nearest_training_rows(model, beta)
    else:
        z = np.array(init, dtype=np.float64)
        if z.shape != (beta.shape[0], model.n_features):
            raise InputError(
                f"init must have shape ({beta.shape[0]}, {model.n_features}); got {z.shape}."
            )
    a = model.projection_matrix
    n = model.n_samples
    # coefficients of the projected point on phi(x_i): g = A beta + (1 - 1^T A beta) / n
    c = (1.0 - beta @ a.sum(axis=0)) / n if model.center else np.zeros(len(beta))
    chunks = model.x_train.chunks[0]
    a_d = da.from_array(a, chunks=(chunks, -1))
    nb = len(chunks)
    rows = max(1, min(len(beta), model.chunk_size))
    beta_d = da.from_array(beta, chunks=(rows, -1))
    c_d = da.from_array(c, chunks=(rows,))
    x_train = model.x_train.astype(np.float64)
    scale = max(float(np.abs(z).max(initial=0.0)), 1e-300)
    for _ in range(max_iter):
        z_d = da.from_array(z, chunks=(rows, -1))
        partial = da.blockwise(
            _fp_terms, "ijc", z_d, "id", x_train, "jd", a_d, "jr", beta_d, "ir", c_d, "i",
            adjust_chunks={"j": 1}, new_axes={"c": model.n_features + 1},
            dtype=np.float64, concatenate=True, kernel=model.kernel,
        )  # fmt: skip
        p = partial.sum(axis=1, split_every=FAN_IN) if nb > 1 else partial[:, 0, :]
        terms = np.asarray(to_host(compute(p)[0]))
        num, den = terms[:, :-1], terms[:, -1]
        ok = np.abs(den) > 1e-300
        z_new = z.copy()
        z_new[ok] = num[ok] / den[ok, None]
        step = float(np.abs(z_new - z).max(initial=0.0))
        z = z_new
        if step <= tol * scale:
            break
    return z


def fixed_point_terms(
    z: np.ndarray,
    x: np.ndarray,
    a: np.ndarray,
    beta: np.ndarray,
    c: np.ndarray,
    kernel: KernelSpec,
) -> np.ndarray:
    """One training block's share of a fixed-point pre-image step: ``[num | den]``.

    The weights ``w_ij = g_ij kappa(z_i, x_j)`` with the feature-space
    coefficients ``g = beta A_j^T + c`` give ``num = w x`` and
    ``den = w 1`` (Mika et al. 1999: ``z <- num / den``).
    """
    w = as_float64_block(scratch_block(z, x, kernel)) * (beta @ a.T + c[:, None])
    xf = np.asarray(x, dtype=np.float64)
    return np.hstack([w @ xf, w.sum(axis=1, keepdims=True)])
