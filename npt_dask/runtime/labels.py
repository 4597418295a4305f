"""Labels and targets that come in with training rows: the one check of class labels
every classifier makes (:func:`class_labels`: NPT's fit, kernel ridge, the methods on
coordinates), the rows' class indices it gives (:func:`class_index`: what a pass over
device rows reads, moved there once) and the check of a fit's ``labels=``/``targets=``
before any work. Labels in any namespace come to the host once (classes are host
values: strings are never on a device)."""

from __future__ import annotations

from typing import Any

import array_api_compat
import dask.array as da
import numpy as np
import scipy.sparse
from sklearn.utils.multiclass import type_of_target

from npt_dask.arrays.host import to_host
from npt_dask.errors import InputError, InputTypeError
from npt_dask.runtime.inputs import check_known_chunks, is_data_array
from npt_dask.runtime.scheduler import compute

__all__ = [
    "check_labels_or_targets",
    "class_index",
    "class_labels",
    "host_labels",
    "on_a_device",
    "one_per_row",
]


def on_a_device(a: Any) -> bool:
    """An array of another library than numpy (CuPy's on a GPU): kept where it is."""
    return (
        array_api_compat.is_array_api_obj(a)
        and not isinstance(a, np.ndarray | np.generic)
        and not scipy.sparse.issparse(a)
    )


def _values(aux: Any) -> Any:
    """The values of labels or targets: a DataArray's or pandas object's data (numpy or
    dask), else the array as given (numpy-converted unless dask or a device's array)."""
    if is_data_array(aux):
        aux = aux.data
    if isinstance(aux, da.Array) or on_a_device(aux):
        return aux
    return np.asarray(aux)


def host_labels(labels: Any, *, name: str = "labels") -> np.ndarray:
    """1-D class labels in host memory, read once: numpy as they are, a dask array computed
    and a device's array copied to the host (one crossing)."""
    values = _values(labels)
    check_known_chunks(values, name)
    if isinstance(values, da.Array):
        return np.asarray(to_host(compute(values)[0]))
    if on_a_device(values):
        return np.asarray(to_host(values))
    return values


def class_labels(labels: Any, *, name: str = "labels", owner: str = "The fit") -> np.ndarray:
    """The sorted classes of 1-D class labels (numpy, dask, DataArray, pandas or a device's
    array: one read of the labels only), the one check every classifier makes.

    Refused, each with the fix: NaN or infinity; values that are not classes by
    scikit-learn's rule (``type_of_target``: non-integer floats are continuous
    targets); fewer than 2 classes.
    """
    return _checked_classes(host_labels(labels, name=name), name, owner)


def class_index(
    labels: Any, *, name: str = "labels", owner: str = "The fit"
) -> tuple[np.ndarray, np.ndarray]:
    """The sorted classes of 1-D class labels and each row's position among them (host
    integers), from one read of the labels (:func:`host_labels`) and the one check
    (:func:`class_labels`'). A pass over the rows reads the positions (on the rows'
    device: moved there once), never the labels themselves."""
    values = host_labels(labels, name=name)
    classes = _checked_classes(values, name, owner)
    return classes, np.searchsorted(classes, values)


def _checked_classes(values: np.ndarray, name: str, owner: str) -> np.ndarray:
    """:func:`class_labels`' check of labels already in host memory."""
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        raise InputError(f"{name} contains NaN or infinity; pass one finite class label per row.")
    classes = np.unique(values)
    kind = type_of_target(classes)
    if kind not in ("binary", "multiclass"):
        if kind == "continuous":
            shown = ", ".join(f"{v:g}" for v in classes[:3]) + (", ..." if len(classes) > 3 else "")
            why = (
                f"{name} are non-integer floats ({len(classes)} distinct values: {shown}), "
                "which scikit-learn takes for continuous targets, not classes"
            )
        else:
            why = f"{name} look {kind}, not like one class per row"
        raise InputError(
            f"Unknown label type: {why}. Class labels are integers or strings: pass "
            f"{name}.astype(int) if the values are whole numbers, or {name}.astype(str) to "
            "keep them as they are; for a regression use targets= (npt.fit) or Ridge."
        )
    if len(classes) < 2:
        raise InputError(
            f"{owner} needs at least 2 classes in {name}; got {len(classes)} class "
            f"({classes.tolist()}). Pass labels of two or more classes."
        )
    return classes


def one_per_row(aux: Any, n: int, what: str) -> Any:
    """The values of ``labels`` or ``targets`` (``what``), refused unless they give one
    entry (targets: or one row) per training row, of a kind they can be."""
    values = _values(aux)
    check_known_chunks(values, what)
    if values.shape[:1] != (n,) or values.ndim not in ((1,) if what == "labels" else (1, 2)):
        raise InputError(
            f"{what} must have one entry (or row) per training row: shape ({n},)"
            f"{'' if what == 'labels' else f' or ({n}, k)'}; got {values.shape}."
        )
    allowed = "biuf" if what == "targets" else "biufUS"
    if values.dtype.kind not in allowed:
        kind = "numeric" if what == "targets" else "numbers or strings"
        raise InputTypeError(f"{what} must be {kind}; got dtype {values.dtype}.")
    return values


def check_labels_or_targets(labels: Any, targets: Any, n: int) -> np.ndarray | None:
    """Validate ``labels=``/``targets=`` for n rows before any work; the classes, if labels."""
    if labels is not None and targets is not None:
        raise InputError("pass labels= (classification) or targets= (regression), not both.")
    if labels is not None:
        one_per_row(labels, n, "labels")
        return class_labels(labels)
    if targets is not None:
        one_per_row(targets, n, "targets")
    return None
