"""``load_ridge``: a kernel ridge estimator saved by ``save`` (any of the four), back as it
was saved (its store is :mod:`npt_dask.storage.ridge_store`).
"""

from __future__ import annotations

import os

from npt_dask.errors import (
    InputScaleWarning,
    StoreIntegrityError,
    StoreWarning,
    warn,
)
from npt_dask.ridge.classifier import KernelRidgeClassifier
from npt_dask.ridge.cv import KernelRidgeClassifierCV, KernelRidgeCV
from npt_dask.ridge.regressor import KernelRidge
from npt_dask.storage import ridge_store

__all__ = [
    "load_ridge",
]


_SAVED = {cls.__name__: cls for cls in (KernelRidge, KernelRidgeClassifier, KernelRidgeCV,
                                        KernelRidgeClassifierCV)}  # fmt: skip


def load_ridge(
    path: str | os.PathLike, *, verify: bool = True
) -> KernelRidge | KernelRidgeClassifier:
    """Load a kernel ridge estimator saved by :meth:`KernelRidge.save` (any of the four
    estimators, as it was saved): it predicts bit for bit as the saved one did, without
    refitting.

    ``verify`` re-computes the SHA-256 of every array against the manifest (CRC32C
    checks of each chunk happen regardless). Refused: anything altered or damaged
    (:class:`~npt_dask.errors.StoreIntegrityError`), a newer store layout
    (:class:`~npt_dask.errors.StoreVersionError`), an NPT model (load it with
    :func:`npt_dask.load`); another scikit-learn major.minor than the saving one's is a
    :class:`~npt_dask.errors.StoreVersionWarning`. A store that records a scale its rows
    were divided by (saved by ``npt ridge --out``) is an
    :class:`~npt_dask.errors.InputScaleWarning`: the rows to predict need it too.
    """
    stored = ridge_store.read(path, verify=verify)
    cls = _SAVED.get(stored.manifest.estimator)
    if cls is None:
        raise StoreIntegrityError(
            f"{stored.path} holds an estimator named {stored.manifest.estimator!r}, which is "
            f"none of {sorted(_SAVED)}; the store is damaged (or from a newer npt-dask)."
        )
    estimator = cls()
    known = estimator.get_params(deep=False)
    params = stored.manifest.parameters()
    unknown = sorted(set(params) - set(known))
    if unknown:
        warn(
            f"{stored.path} records parameters {unknown} that this npt-dask's {cls.__name__} "
            "does not have (saved by a newer version?); they are left out.",
            StoreWarning,
        )
    estimator.set_params(**{k: v for k, v in params.items() if k in known})
    estimator._restore(stored)
    _say_transform(stored)
    return estimator


def _say_transform(stored: ridge_store.StoredRidge) -> None:
    """Warn that the rows to predict need the scale the store records (``npt ridge``
    divided the rows of its files by it before the fit; ``npt ridge --model`` does so
    itself)."""
    scale = (stored.manifest.input_transform or {}).get("scale")
    if scale is not None and scale != 1:
        warn(
            f"{stored.path} was fitted by npt ridge on rows divided by {scale:g} (its store "
            f"records it): divide the rows you predict by {scale:g} as well (x / {scale:g}), "
            "or predict with npt ridge --model, which does.",
            InputScaleWarning,
        )
