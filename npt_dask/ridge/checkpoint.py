"""An iterative solve's state on disk, so that a killed job resumes where it stopped.

One ``.npz`` file of plain arrays (read with ``allow_pickle=False``: no pickle
is ever loaded), rewritten after every iteration by the one atomic writer
(:func:`npt_dask.runtime.atomic.write_file`: an owner-tagged temporary renamed into
place, a killed writer's temporary swept by the next write; a reader sees the
old state or the new one, never half of one). A checkpoint that is a symbolic
link is written where the link points, as stores are.

A fit holds its checkpoint (:class:`Checkpoint`) from start to end: the path
is checked first (a directory, FIFO or device is refused before it is opened),
then an exclusive lock is taken beside it (``.<name>.lock``, :func:`~npt_dask.runtime.
atomic.take_lock`; a second fit on the same path is refused, a dead holder's
lock broken), then the file, if any, is read and verified:

* the layout version (another one is refused by name, not misread);
* a SHA-256 of every stored array, recorded in the metadata when it was written
  (an array altered or damaged since is refused);
* the shapes of the state and its values (finite; ``||b||`` is the norm of the
  stored right-hand side; one residual per iteration): the fields every method's state
  has (:class:`~npt_dask.ridge.state.SolverState`) here, the method's own arrays by the
  method when the state is read back (:meth:`Checkpoint.resume`'s ``read``).

The file holds any iterative method's state: the named arrays its method gives
(:meth:`npt_dask.ridge.state.Method.arrays`), its iteration count and history, beside the
centres, the probe and the metadata; the route in the fingerprint tells one method's
state from another's.

The solver then compares what it pins the problem by: the *fingerprint* -- a
SHA-256 of everything that defines the solution: the data (a digest of every
row chunk, :class:`~npt_dask.engine.consumers.Digest`), targets, sample weights, the
kernel's parameters, alpha, centres, precision and route --, the kernel's
*values* on a small fixed probe of the data (a kernel function's code says
nothing of the values it closes over: compared within the precision's
rounding), and the right-hand side recomputed from the data; then, before any step,
the state itself: the operator of the problem at hand applied to the saved iterate
(one pass more, :mod:`npt_dask.ridge.resume`). A checkpoint of another problem is
refused (:class:`~npt_dask.errors.CheckpointError`), never
continued. The centres are kept too: a fit that draws its landmarks without a
seed resumes on the saved ones.

Layer rule: numpy, files, :mod:`npt_dask.runtime.atomic` and :mod:`~npt_dask.runtime.places`
only (and the state's field names, :mod:`npt_dask.ridge.state`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import numpy as np

from npt_dask.errors import CheckpointError
from npt_dask.ridge.state import COLUMNS, FLAGS, PER_TARGET
from npt_dask.runtime.atomic import real, release_lock, take_lock, write_file
from npt_dask.runtime.owners import describe
from npt_dask.runtime.places import check_output_place

__all__ = ["CHECKPOINT_VERSION", "Checkpoint", "Saved", "Snapshot", "array_digest", "fingerprint"]

CHECKPOINT_VERSION = 3
"""Layout of the checkpoint file (another one is refused, not misread; 2: the right-hand
side, each column's best iterate and whether its residual was verified; 3: a digest of
every array, the centres and the kernel's values on a probe of the data)."""

_OWN = ("history", "centres", "probe")  # the file's own arrays, beside the state's
_REQUIRED = (*COLUMNS, *PER_TARGET, *FLAGS, *_OWN)
State = TypeVar("State")
_ZIP = b"PK\x03\x04"  # an .npz is a zip archive
_FIX = "Delete it to start the solve afresh, or pass another checkpoint path."


def fingerprint(parts: Mapping[str, Any]) -> str:
    """SHA-256 of named parts: arrays by dtype, shape and bytes; bytes as they are; the
    rest as canonical JSON."""
    h = hashlib.sha256()
    for name in sorted(parts):
        value = parts[name]
        h.update(name.encode() + b"\0")
        if isinstance(value, np.ndarray):
            h.update(f"{value.dtype.str}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        elif isinstance(value, bytes):
            h.update(value)
        else:
            h.update(json.dumps(value, sort_keys=True, default=str).encode())
        h.update(b"\1")
    return h.hexdigest()


def array_digest(value: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and bytes."""
    return fingerprint({"array": np.asarray(value)})


@dataclass
class Snapshot:
    """A solver state as a checkpoint holds it: its named host arrays
    (:meth:`npt_dask.ridge.state.Method.arrays`), its iteration count and history."""

    arrays: dict[str, np.ndarray]
    iteration: int
    history: list[float]


@dataclass
class Saved:
    """What a checkpoint holds, verified: the solver's state, the fingerprint of its
    problem, the sorted centre indices (None: every row a centre) and the kernel's values
    on the probe of the data."""

    state: Snapshot
    problem: str
    centres: np.ndarray | None
    probe: np.ndarray


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _check_regular(given: Path, path: Path) -> bool:
    """Whether a file is at ``path`` (links resolved); something that is not a regular
    file there is refused before it is opened (a FIFO would block the read forever)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise CheckpointError(f"The checkpoint {given} cannot be read ({exc}). {_FIX}") from exc
    if not stat.S_ISREG(mode):
        raise CheckpointError(
            f"The checkpoint {given} is {_kind(mode)}, not a file: a checkpoint is a file "
            "npt-dask writes. Pass the path of a file (one that does not exist yet, or an "
            "earlier checkpoint)."
        )
    return True


def _check_version(target: Path, meta: Mapping[str, Any]) -> None:
    """Refuse a layout other than :data:`CHECKPOINT_VERSION`, naming the fix."""
    version = meta.get("version", 0)
    if not isinstance(version, int):
        version = 0
    if version != CHECKPOINT_VERSION:
        which = "a newer" if version > CHECKPOINT_VERSION else "an older"
        raise CheckpointError(
            f"{target} was written by {which} npt-dask (layout {version}, this one reads "
            f"{CHECKPOINT_VERSION}); delete it to start afresh"
            + (", or upgrade." if version > CHECKPOINT_VERSION else ".")
        )


def _foreign(target: Path, what: str) -> CheckpointError:
    return CheckpointError(
        f"{target} is not an npt-dask checkpoint ({what}); it is left as it is. If it is "
        "your data, pass another checkpoint path; if it is a damaged checkpoint, delete it "
        "to start the solve afresh."
    )


def _read_arrays(target: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The metadata and arrays of the file at ``target``, or a CheckpointError naming what
    it is instead (empty, not an archive, unreadable, missing arrays)."""
    with open(target, "rb") as handle:
        head = handle.read(len(_ZIP))
    if not head:
        raise _foreign(target, "the file is empty: a write that never finished?")
    if head != _ZIP:
        raise _foreign(target, "not an .npz archive: the training data given as checkpoint?")
    try:
        with np.load(target, allow_pickle=False) as data:
            meta = json.loads(bytes(data["meta"]).decode())
            if not isinstance(meta, dict):
                raise ValueError("its metadata is not a mapping")
            _check_version(target, meta)
            names = [name for name in data.files if name != "meta"]
            missing = [name for name in _REQUIRED if name not in names]
            if missing:
                raise KeyError(f"no arrays {missing}")
            arrays = {name: np.array(data[name]) for name in names}
    except CheckpointError:
        raise
    except Exception as exc:  # whatever a damaged archive raises
        raise CheckpointError(
            f"{target} is not a readable npt-dask checkpoint ({type(exc).__name__}: {exc}). " + _FIX
        ) from exc
    return meta, arrays


def _check_digests(target: Path, meta: Mapping[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Each array against the SHA-256 recorded when it was written."""
    recorded = meta.get("digests")
    if not isinstance(recorded, dict):
        raise CheckpointError(f"{target} records no digest of its arrays. {_FIX}")
    for name, value in arrays.items():
        if recorded.get(name) != array_digest(value):
            raise CheckpointError(
                f"{target} fails its integrity check: the array {name!r} does not match the "
                "digest recorded when it was written (altered or damaged since). " + _FIX
            )


def _check_state(target: Path, meta: Mapping[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Shapes, dtypes and values every method's state has: refused otherwise (a
    consistent file of impossible numbers is not continued)."""

    def refuse(why: str) -> CheckpointError:
        return CheckpointError(f"{target} does not hold a valid solver state ({why}). {_FIX}")

    x = arrays["x"]
    if x.ndim != 2 or x.dtype != np.float64:
        raise refuse("the iterate is not a 2-D float64 array")
    k = x.shape[1]
    for name in COLUMNS:
        if arrays[name].shape != x.shape or arrays[name].dtype != np.float64:
            raise refuse(f"{name!r} has shape {arrays[name].shape}, not {x.shape}")
    for name in (*PER_TARGET, *FLAGS):
        if arrays[name].shape != (k,):
            raise refuse(f"{name!r} has shape {arrays[name].shape}, not ({k},)")
    if any(arrays[name].dtype != np.bool_ for name in FLAGS):
        raise refuse("its flags are not booleans")
    history, centres, probe = arrays["history"], arrays["centres"], arrays["probe"]
    if history.ndim != 1 or centres.ndim != 1 or probe.ndim != 2:
        raise refuse("its history, centres or probe has the wrong number of dimensions")
    if centres.dtype.kind not in "iu" or (centres.size and centres.min() < 0):
        raise refuse("its centres are not row indices")
    floats = [name for name, v in arrays.items() if v.dtype.kind == "f" and name != "centres"]
    for name in floats:
        if not np.isfinite(arrays[name]).all():
            raise refuse(f"{name!r} holds NaN or infinity")
    norms = np.sqrt(np.einsum("ij,ij->j", arrays["b"], arrays["b"]))
    if not np.allclose(arrays["b_norm"], norms, rtol=1e-12, atol=0.0):
        raise refuse("the norms of the right-hand side are not its norms")
    iteration = meta.get("iteration")
    if not isinstance(iteration, int) or iteration != len(history):
        raise refuse(f"iteration {iteration!r} with {len(history)} residuals recorded")
    if not isinstance(meta.get("fingerprint"), str):
        raise refuse("no fingerprint of its problem")


def _read(target: Path) -> Saved:
    """The verified content of the checkpoint file at ``target``."""
    meta, arrays = _read_arrays(target)
    _check_digests(target, meta, arrays)
    _check_state(target, meta, arrays)
    state = {name: value for name, value in arrays.items() if name not in _OWN}
    history = [float(v) for v in arrays["history"]]
    centres = arrays["centres"].astype(np.int64) if meta.get("has_centres") else None
    snapshot = Snapshot(state, int(meta["iteration"]), history)
    return Saved(snapshot, str(meta["fingerprint"]), centres, arrays["probe"])


class Checkpoint:
    """A checkpoint file held for one fit: ``with Checkpoint(path) as held:`` checks the
    path, locks it and reads what it holds (:attr:`saved`, verified; None without a
    file); :meth:`resume` compares it with the problem; :meth:`save` writes a state.

    The lock, ``.<name>.lock`` beside the file (links resolved), is held until the
    ``with`` block ends: a second fit on the same checkpoint is refused while the first
    runs.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.user_path = Path(path)
        self.path = real(path)
        self.lock = self.path.parent / f".{self.path.name}.lock"
        self.saved: Saved | None = None
        self._held = False

    def __enter__(self) -> Checkpoint:
        exists = _check_regular(self.user_path, self.path)
        where = f"The checkpoint {self.user_path}"
        check_output_place(self.user_path, where, error=CheckpointError)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        holder = take_lock(self.lock)
        if holder is not None:
            raise CheckpointError(
                f"The checkpoint {self.user_path} is in use by "
                f"{describe(str(holder.get('owner')))} (pid {holder.get('pid', '?')}, since "
                f"{holder.get('started', '?')}): one fit writes a checkpoint at a time. Wait "
                "for that fit to finish, or pass another checkpoint path. If that process "
                f"is gone (it ran on another host), remove {self.lock} and rerun."
            )
        self._held = True
        try:
            # checked again under the lock: another writer may have replaced it meanwhile
            if exists or _check_regular(self.user_path, self.path):
                self.saved = _read(self.path)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release the lock (if this process holds it)."""
        if self._held:
            self._held = False
            with contextlib.suppress(OSError):
                release_lock(self.lock)

    @property
    def centres(self) -> np.ndarray | None:
        """The saved centre indices, if the file holds any."""
        return None if self.saved is None else self.saved.centres

    def resume(
        self, problem: str, probe: np.ndarray, rhs: np.ndarray, *, precision: str,
        read: Callable[[Mapping[str, np.ndarray], int, list[float]], State],
    ) -> State | None:  # fmt: skip
        """The saved state if it is of this problem (``problem``: its fingerprint;
        ``probe``: the kernel's values on the probe of the data; ``rhs``: the right-hand
        side recomputed from the data), read back by its method's ``read``
        (:meth:`npt_dask.ridge.state.Method.from_arrays`: the arrays, iteration and
        history; a ValueError of it is refused as an invalid state), None without one;
        another problem's is a CheckpointError naming the fix."""
        saved = self.saved
        if saved is None:
            return None
        if saved.problem != problem:
            raise CheckpointError(
                f"{self.user_path} holds the state of another problem (other data, targets, "
                "weights, kernel parameters, alpha, centres or precision), so it cannot be "
                "continued. Delete it to start afresh, or pass another checkpoint path."
            )
        close = 1e-5 if precision == "float32" else 1e-10
        if not _agree(saved.probe, probe, close):
            raise CheckpointError(
                f"{self.user_path} was written with another kernel: its values on a probe of "
                "the data differ from this kernel's (a changed kernel function, or a "
                "parameter it closes over or takes by default). Pass the original kernel "
                "to resume, or delete the checkpoint to start afresh with this one."
            )
        if not _agree(saved.state.arrays["b"], np.asarray(rhs, dtype=np.float64), 1e-10):
            raise CheckpointError(
                f"{self.user_path} holds a right-hand side that the data do not give (altered "
                "since it was written, or of another problem). " + _FIX
            )
        try:
            state = read(saved.state.arrays, saved.state.iteration, saved.state.history)
        except ValueError as exc:
            raise CheckpointError(
                f"{self.user_path} does not hold a valid solver state ({exc}). {_FIX}"
            ) from exc
        self.saved = None  # handed over: the solver updates it in place
        return state

    def save(
        self, state: Snapshot, problem: str, centres: np.ndarray | None, probe: np.ndarray
    ) -> None:
        """Write a solver state of the problem with fingerprint ``problem``, its centres
        and probe values, atomically, with a digest of every array."""
        clash = sorted(set(state.arrays) & {*_OWN, "meta"})
        if clash:
            raise ValueError(f"A solver state may not name its arrays {clash}.")
        arrays = {name: np.asarray(v) for name, v in state.arrays.items()}
        arrays["history"] = np.asarray(state.history, dtype=np.float64)
        arrays["centres"] = np.zeros(0, np.int64) if centres is None else np.asarray(
            centres, dtype=np.int64)  # fmt: skip
        arrays["probe"] = np.asarray(probe, dtype=np.float64)
        meta = {
            "version": CHECKPOINT_VERSION, "fingerprint": problem,
            "iteration": state.iteration, "has_centres": centres is not None,
            "digests": {name: array_digest(value) for name, value in arrays.items()},
        }  # fmt: skip
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as handle:
                np.savez(handle, **arrays)  # type: ignore[arg-type]  # numeric arrays only
                handle.flush()
                os.fsync(handle.fileno())

        write_file(self.path, write)


def _agree(saved: np.ndarray, now: np.ndarray, close: float) -> bool:
    """Same shape and the same values within ``close`` of the largest one."""
    if saved.shape != now.shape:
        return False
    scale = max(1.0, float(np.abs(saved).max(initial=0.0)))
    return bool(np.allclose(saved, now, rtol=close, atol=close * scale))
