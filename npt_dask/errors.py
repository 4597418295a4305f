"""The one exception and warning hierarchy of npt-dask.

Every error a user can trigger with bad input derives from :class:`ValueError`
or :class:`TypeError`, so ``except ValueError`` keeps working for callers who do
not know this module, and from :class:`NPTError`, so callers who do can catch
everything npt-dask raises in one clause.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from types import FrameType

__all__ = [
    "CheckpointError",
    "ClusterError",
    "ConvergenceWarning",
    "DegenerateKernelError",
    "DeviceError",
    "InputError",
    "InputScaleWarning",
    "InputTypeError",
    "KernelParameterError",
    "KernelScaleWarning",
    "KernelValueError",
    "MemoryBudgetWarning",
    "NPTError",
    "NPTWarning",
    "NegativeDefiniteKernelError",
    "NegativeEigenvalueError",
    "NegativeEigenvalueWarning",
    "NotFittedError",
    "OutputPathError",
    "ProjectionError",
    "RankWarning",
    "RefitWarning",
    "ResidualWarning",
    "RidgeWarning",
    "ScratchError",
    "StoreError",
    "StoreInUseError",
    "StoreIntegrityError",
    "StoreNotFoundError",
    "StoreVersionError",
    "StoreVersionWarning",
    "StoreWarning",
    "warn",
]


class NPTError(Exception):
    """Base class of every exception raised by npt-dask.

    ``param`` names the parameter the error is about (set by the parameter table's
    check); ``spellings`` maps a Python spelling in the message (``"resume=False"``)
    to the command line's (``"--overwrite"``). The command line rewrites its messages
    from these two, never by matching wording (:func:`npt_dask.interface.cli.for_the_command_line`).
    Both survive pickling (they live in the instance's ``__dict__``).

    >>> err = InputError("The 'tol' parameter must be ...", param="tol")
    >>> err.param, err.spellings
    ('tol', {})
    """

    def __init__(
        self, *args: object, param: str | None = None, spellings: dict[str, str] | None = None
    ) -> None:
        super().__init__(*args)
        self.param = param
        self.spellings = dict(spellings or {})


class InputError(NPTError, ValueError):
    """Input data or a parameter has the wrong value (shape, content, range)."""


class InputTypeError(NPTError, TypeError):
    """Input data or a parameter has the wrong type."""


class KernelParameterError(InputError):
    """A kernel name or kernel parameter is invalid."""


class KernelValueError(InputError):
    """A kernel gave values that are not a kernel block: non-finite (an overflow, or a
    callable returning NaN/inf), or a callable returned no numbers or the wrong shape."""


class ClusterError(NPTError, ValueError):
    """A dask scheduler could not be reached or used (wrong address, down, TLS refused)."""


class DeviceError(NPTError, ValueError):
    """The device asked for cannot be used: ``device="gpu"`` (or a CUDA cluster) where
    CuPy or dask-cuda is not installed, or no CUDA device is visible."""


class StoreError(NPTError, ValueError):
    """A path is not a loadable npt model (missing, corrupt, newer or foreign).

    The base of the store errors below (zarr-python's manner): ``except StoreError``
    catches them all; a caller that must tell them apart catches the subclass.
    """


# --- store errors a caller can tell apart -------------------------------------------------


class StoreNotFoundError(FileNotFoundError, StoreError):
    """Nothing is stored at the path: no directory, or no ``zarr.json`` in it. Also a
    :class:`FileNotFoundError` (as zarr-python's ``GroupNotFoundError``).

    :class:`FileNotFoundError` comes first in the bases so that the exception is built
    by :class:`OSError` (its memory layout), which keeps it picklable."""

    def __init__(
        self, *args: object, param: str | None = None, spellings: dict[str, str] | None = None
    ) -> None:
        NPTError.__init__(self, *args, param=param, spellings=spellings)


class StoreIntegrityError(StoreError):
    """The store is damaged or was altered after it was written: a checksum that does not
    match, a missing chunk or array, a malformed or truncated manifest."""


class StoreVersionError(StoreError):
    """The store was written in a newer format than this npt-dask reads; upgrade."""


class StoreInUseError(StoreError):
    """The store changed while it was in use (a save replaced the model a running
    projection or transform reads): nothing computed from it was kept."""


# --- end of the store errors --------------------------------------------------------------


class OutputPathError(InputError):
    """An output path cannot be written: inside a zarr store or array, below a file, in a
    folder that takes no new file, or one of the command's inputs or other outputs."""


class ProjectionError(NPTError, ValueError):
    """An output store cannot be used for this projection (another model or input)."""


class ScratchError(NPTError, ValueError):
    """A scratch directory (dask's ``temporary-directory``) cannot be used: missing, not
    a directory, not writable, or full."""


class NegativeEigenvalueError(NPTError, ValueError):
    """The kernel matrix has significantly negative eigenvalues (not PSD)."""


class DegenerateKernelError(NegativeEigenvalueError):
    """The kernel matrix has no positive eigenvalue: nothing to project on (zero after
    centring, e.g. constant data, or negative semi-definite). ``NonlinearProjection``
    turns it into zero coordinates with a warning, as scikit-learn's ``KernelPCA``."""


class NotFittedError(NPTError, ValueError, AttributeError):
    """A model or estimator is used before it was fitted."""


class NPTWarning(UserWarning):
    """Base class of every warning issued by npt-dask."""


class ConvergenceWarning(NPTWarning):
    """An iterative eigensolver stopped before reaching its tolerance."""


class NegativeEigenvalueWarning(NPTWarning):
    """The kernel matrix has significantly negative eigenvalues; they were excluded."""


class KernelScaleWarning(NPTWarning):
    """The kernel is nearly the identity or nearly constant on the data: almost surely
    a kernel parameter on the wrong scale for the data (e.g. unscaled pixels)."""


class MemoryBudgetWarning(NPTWarning):
    """A ``memory_budget`` above the machine's physical memory: valid, but the fit would
    page or be killed long before the plan's arrays reach it."""


class InputScaleWarning(NPTWarning):
    """Rows given to a saved model may be scaled otherwise than the rows it was fitted on
    (a scale the store records, or does not record)."""


class StoreWarning(NPTWarning):
    """A store holds something this version does not use (fields of a newer version)."""


class StoreVersionWarning(StoreWarning):
    """A store was written under another scikit-learn (major.minor) or a newer npt-dask
    than the one loading it: it loads, but its estimator may not behave as saved."""


class RankWarning(NPTWarning):
    """Fewer significant eigenvalues than requested components (Lemma 1: r <= rank)."""


class ResidualWarning(NPTWarning):
    """A residual cannot be computed from what was given (a precomputed test kernel
    matrix lacks the rows' self-similarities ``k(z, z)``): it is NaN."""


# --- kernels of the wrong sign, refits said -----------------------------------------------


class NegativeDefiniteKernelError(DegenerateKernelError):
    """The kernel matrix has no positive eigenvalue above rounding but significant
    negative ones (a kernel passed with the wrong sign, ``-K``): refused by every entry
    point, never turned into zero coordinates (scikit-learn's ``KernelPCA`` refuses it)."""


class RefitWarning(NPTWarning):
    """``partial_fit`` of a truncated estimator refits on every row seen so far (warm-started
    from its model): said, since the cost grows with the rows seen."""


_PACKAGE = str(Path(__file__).resolve().parent)


def warn(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` pointing at the caller's line, outside npt-dask.

    The stack is walked to the first frame whose file is not in the package
    (and not in dask's or the standard library's machinery between them), so
    a warning names the user's ``npt.fit(...)`` line however deep it is raised.
    """
    level = 2  # 1 is this function; 2 its caller, the first frame looked at
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


# --- kernel ridge -------------------------------------------------------------------------


class CheckpointError(NPTError, ValueError):
    """A solver checkpoint cannot be used: it belongs to another problem (data, targets,
    kernel, alpha or centres), or it is damaged."""


class RidgeWarning(NPTWarning):
    """A kernel ridge solve fell back to another method (a singular system solved by least
    squares, as scikit-learn does) or stopped early (an indefinite operator)."""
