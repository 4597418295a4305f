"""An iterative solve's state on disk, so that a killed job resumes where it stopped.

One ``.npz`` file of plain arrays (read with ``allow_pickle=False``: no pickle
is ever loaded), rewritten after every iteration by the one atomic writer
(:func:`npt_dask.runtime.atomic.write_file`: an owner-tagged temporary renamed into
place, a killed writer's temporary swept by the next write; a reader sees the
old state or the new one, never half of one). It carries the problem's *fingerprint* -- a SHA-256
of everything that defines the solution: the data (a digest of every row
chunk, :class:`~npt_dask.engine.consumers.Digest`), targets, sample weights, kernel,
alpha, centres, precision and route -- and a checkpoint of another problem
is refused (:class:`~npt_dask.errors.CheckpointError`), never continued.

Layer rule: numpy and files only.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from npt_dask.errors import CheckpointError
from npt_dask.linalg.cg import CGState
from npt_dask.runtime.atomic import write_file

__all__ = ["CHECKPOINT_VERSION", "fingerprint", "load_state", "save_state"]

CHECKPOINT_VERSION = 2
"""Layout of the checkpoint file (another one is refused, not misread; 2: the right-hand
side, each column's best iterate and whether its residual was verified)."""

_ARRAYS = ("x", "r", "p", "rz", "b", "b_norm", "best", "best_x", "converged", "verified",
           "breakdown", "history")  # fmt: skip


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


def save_state(path: str | os.PathLike, state: CGState, problem: str) -> None:
    """Write ``state`` of the problem with fingerprint ``problem`` to ``path``, atomically."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    meta = {"version": CHECKPOINT_VERSION, "fingerprint": problem, "iteration": state.iteration}
    arrays = {name: np.asarray(getattr(state, name)) for name in _ARRAYS}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:
            np.savez(handle, **arrays)  # type: ignore[arg-type]  # numeric arrays only
            handle.flush()
            os.fsync(handle.fileno())

    write_file(target, write)


def _check_version(target: Path, meta: Mapping[str, Any]) -> None:
    """Refuse a layout other than :data:`CHECKPOINT_VERSION`, naming the fix."""
    version = meta.get("version", 0)
    if version != CHECKPOINT_VERSION:
        which = "a newer" if version > CHECKPOINT_VERSION else "an older"
        raise CheckpointError(
            f"{target} was written by {which} npt-dask (layout {version}, this one reads "
            f"{CHECKPOINT_VERSION}); delete it to start afresh"
            + (", or upgrade." if version > CHECKPOINT_VERSION else ".")
        )


def load_state(path: str | os.PathLike, problem: str) -> CGState | None:
    """The saved state of the problem with fingerprint ``problem``, or None when ``path``
    does not exist. A file of another problem, a newer layout or damaged bytes is a
    :class:`~npt_dask.errors.CheckpointError` naming the fix."""
    target = Path(path)
    if not target.exists():
        return None
    try:
        with np.load(target, allow_pickle=False) as data:
            meta = json.loads(bytes(data["meta"]).decode())
            _check_version(target, meta)
            arrays = {name: np.array(data[name]) for name in _ARRAYS}
    except CheckpointError:
        raise
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise CheckpointError(
            f"{target} is not a readable npt-dask checkpoint ({exc}). Delete it to start "
            "the solve afresh, or pass another checkpoint path."
        ) from exc
    if meta.get("fingerprint") != problem:
        raise CheckpointError(
            f"{target} holds the state of another problem (other data, targets, weights, "
            "kernel, alpha, centres or precision), so it cannot be continued. Delete it to "
            "start afresh, or pass another checkpoint path."
        )
    history = [float(v) for v in arrays.pop("history")]
    state = CGState(**arrays, iteration=int(meta["iteration"]), history=history)
    for name in ("converged", "verified", "breakdown"):
        setattr(state, name, getattr(state, name).astype(bool))
    return state
