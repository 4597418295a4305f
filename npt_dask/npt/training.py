"""The training pass: one read of the training rows for a model and its consumers.

A landmark model is fitted on m rows, but its users need two things of
*every* training row: the Lemma 5 residual (the model's certificate) and the
sufficient statistics of a linear method on the coordinates (ridge: ``Y^T Y``,
``Y^T T``, column sums, counts). Each is a function of the same kernel block
``kappa(X_i, L)``, so the pass is one :func:`npt_dask.engine.passes.row_pass` with
the model's training rows as centres (:mod:`npt_dask.npt.projector`) and two
consumers of each chunk's block (:mod:`npt_dask.engine.consumers`):

* :class:`~npt_dask.engine.consumers.Certificate`: the chunk's residuals and centred
  self-similarities;
* :class:`~npt_dask.engine.consumers.Moments`: :class:`~npt_dask.engine.moments.LinearMoments`
  of the chunk's coordinates with its labels (one-hot) or targets, summed in
  float64 along fixed chains.

Both read the chunk's ``[y | residual]`` (float64), computed once and kept for
the task's duration only (no n x r array is formed: use ``transform`` or
:func:`npt_dask.project` for coordinates that are kept).

The chain fit -> certificate -> ridge -> test projection -> predict thus
evaluates each training row's landmark kernel once.

Notes
-----
Memory per task: one row chunk, one kernel block against one training block
(``chunk x training chunk``), the chunk's ``[y | residual]`` (``chunk x (r+1)``
float64) and two moment tuples (``r x r + r x k`` each: its own, and its
chain's running sums). The moments are summed along one chain per thread
(chunk i joins chain ``i mod threads``), so at most ``2 x threads`` moment
tuples exist at once whatever n -- a tree would hold ``FAN_IN`` of them per
node (800 MB each at r = 10,000) -- and the order of summation is fixed, so
the result does not depend on scheduling. The driver receives the summed
moments and two float64 numbers per row (residual and self-similarity, for
the certificate's quantiles): ``16 n`` bytes.

Layer rule: graph code; the numbers come from :mod:`npt_dask.engine.blocks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import array_api_compat
import dask.array as da
import numpy as np

from npt_dask.arrays.host import to_host
from npt_dask.engine.consumers import Certificate, Consumer, Moments
from npt_dask.engine.moments import LinearMoments, chunk_moments, one_hot
from npt_dask.engine.passes import as_rows, row_pass
from npt_dask.engine.projection import ProjectionTerms
from npt_dask.engine.rows import Rows
from npt_dask.engine.sums import chunk_sums
from npt_dask.errors import InputError
from npt_dask.runtime.inputs import is_data_array
from npt_dask.runtime.labels import class_labels, one_per_row
from npt_dask.runtime.progress import ProgressBar
from npt_dask.runtime.scheduler import compute, task_threads

if TYPE_CHECKING:
    from npt_dask.npt.model import NPTModel

__all__ = [
    "PassResult",
    "device_targets",
    "host_values",
    "linear_moments",
    "training_pass",
]


@dataclass(frozen=True)
class PassResult:
    """What one training pass returns."""

    residuals: np.ndarray  # (n,) Lemma 5 residual of every row
    self_similarity: np.ndarray  # (n,) centred k(x, x) of every row
    moments: LinearMoments | None


def training_pass(
    model: NPTModel,
    x: Rows | da.Array,
    *,
    labels: Any = None,
    targets: Any = None,
    progress: bool = False,
) -> PassResult:
    """Residuals and moments of every row of ``x``, one pass over the rows.

    ``progress`` reports each finished row chunk on stderr (a bar, as ``npt project``'s).

    ``x`` is row-chunked as the projector's rule gives it (see
    :meth:`npt_dask.npt.projector.Projector.rows_of`); ``labels`` (class labels,
    one-hot moments with ``classes``) or ``targets`` (numeric, 1-D or 2-D) are
    read with the rows they belong to.

    On rows in a device's memory the labels are read on the host (class labels are
    checked there, :func:`host_values`) and their one-hot indicator goes to the device
    once, as targets do (:meth:`~npt_dask.engine.rows.Rows.aligned`: ``n k`` values
    moved once, split like the rows); nothing row-aligned moves per chunk.
    """
    if labels is not None and targets is not None:
        raise InputError("pass labels= (classification) or targets= (regression), not both.")
    rows = as_rows(x)
    n = rows.n
    what = "labels" if labels is not None else "targets"
    given = labels if labels is not None else targets
    classes = class_labels(labels) if labels is not None else None
    projector = model.projector()
    terms = _terms_on(rows, projector.terms)
    consumers: dict[str, Consumer] = {"certificate": Certificate(terms)}
    aux: dict[str, Any] = {}
    if given is not None:
        values = one_per_row(given, n, what)
        indicator_of = classes
        if rows.numpy:  # a device's targets with host rows: read on the host once
            values = host_values(values)
        elif classes is not None:  # the indicator, made on host once, moved as targets
            what, values, indicator_of = (
                "targets",
                one_hot(_read(host_values(values)), classes),
                None,
            )
        aux[what] = values
        consumers["moments"] = Moments(terms, indicator_of, str(model.precision))
    bar = ProgressBar("npt fit: training pass", len(rows.chunks), "chunks", progress)
    result = row_pass(rows, projector.centres, model.kernel, consumers, aux=aux,
                      chains=task_threads(), progress=bar)  # fmt: skip
    per_row = np.concatenate(result.rows["certificate"], axis=1)
    summed = result.sums.get("moments")
    moments = None if summed is None else LinearMoments.from_tuple(summed, classes)
    return PassResult(per_row[0], per_row[1], moments)


def _terms_on(rows: Rows, terms: ProjectionTerms) -> ProjectionTerms:
    """The projection's constants on the rows' device, moved once for the pass (each
    task would otherwise copy them to its chunk's device); on numpy as they are."""
    if rows.numpy:
        return terms
    moved = {k: rows.put(v) if isinstance(v, np.ndarray) else v for k, v in terms.items()}
    return cast(ProjectionTerms, moved)


def _foreign(data: Any) -> bool:
    """Whether ``data`` (an array, or a dask array by its chunks' type) lives in another
    library's memory than numpy's (a device's)."""
    meta = data._meta if isinstance(data, da.Array) else data
    return bool(array_api_compat.is_array_api_obj(meta)) and not isinstance(
        meta, np.ndarray | np.generic
    )


def host_values(values: Any) -> Any:
    """Labels or targets in host memory: an array of another library than numpy -- a
    device's, or a dask array or DataArray of one -- read to the host once (one
    crossing), as numpy; anything else (numpy, a list, a pandas object, a DataArray or
    dask array of numpy) as it is. Class labels are checked on the host
    (:func:`~npt_dask.runtime.labels.class_labels`)."""
    data = values.data if is_data_array(values) else values
    if not _foreign(data):
        return values
    if isinstance(data, da.Array):
        data = compute(data)[0]
    return np.asarray(to_host(data))


def device_targets(values: Any) -> Any:
    """Targets as the checks and the training pass take them: an array of a device's
    library as a one-chunk dask array of it (checked by its shape and dtype, nothing
    read; the pass splits it like the rows, on the device, once); anything else as it
    is."""
    data = values.data if is_data_array(values) else values
    if isinstance(data, da.Array) or not _foreign(data):
        return values
    return da.from_array(data, chunks=data.shape, asarray=False, name=False)


def _read(values: Any) -> np.ndarray:
    """Host values (numpy, or a dask array of numpy) as one numpy array."""
    return np.asarray(compute(values)[0] if isinstance(values, da.Array) else values)


def _coordinate_moments(y: np.ndarray, aux: Any, classes: np.ndarray | None) -> tuple:
    t = one_hot(np.asarray(aux), classes) if classes is not None else np.asarray(aux)
    return chunk_moments(y, t.reshape(len(y), -1))


def linear_moments(y: da.Array, *, labels: Any = None, targets: Any = None) -> LinearMoments:
    """:class:`~npt_dask.engine.moments.LinearMoments` of given row-chunked coordinates ``y``
    with class ``labels`` or numeric ``targets``, one pass over the chunks
    (:func:`npt_dask.engine.sums.chunk_sums`)."""
    if (labels is None) == (targets is None):
        raise InputError("pass labels= (classification) or targets= (regression), one of them.")
    what = "labels" if labels is not None else "targets"
    given = labels if labels is not None else targets
    values = one_per_row(given, int(y.shape[0]), what)
    aux = values if isinstance(values, da.Array) else da.from_array(values)
    aux = aux.rechunk({0: y.chunks[0], **{a: -1 for a in range(1, aux.ndim)}})
    classes = class_labels(labels) if labels is not None else None
    return LinearMoments.from_tuple(chunk_sums(_coordinate_moments, [y, aux], classes), classes)
