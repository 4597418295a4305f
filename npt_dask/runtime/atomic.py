"""The one atomic writer: stores (directories) and small files moved into place whole.

Every rename of a store happens here (``tests/architecture/test_architecture.py`` checks it), and
so does every name given to something that is not (yet, or any more) at its path.
Beside a store at ``<dir>/<name>`` a writer uses siblings named by their kind and
their owner (:mod:`npt_dask.runtime.owners`)::

    .<name>.tmp-<owner>-<hex8>    a new store being built
    .<name>.old-<owner>-<hex8>    the previous store, set aside during a swap
    .<name>.gone-<owner>-<hex8>   a store being removed (never restored)

* :func:`write_into_place` builds a store under a ``tmp`` sibling and renames it into
  place; over an existing store it swaps (the previous one is set aside as ``old``,
  the new one moved in, the previous one removed), and a failed second rename puts
  the previous store back. An interrupted write never leaves anything at the path
  that is not a complete store, and never damages the previous one.
* :func:`recover` repairs what a writer killed between the two renames left: with
  nothing at the path, the newest complete ``tmp`` is moved in, else the ``old`` one
  is put back; then :func:`sweep`.
* :func:`sweep` removes the siblings of dead owners (this host, process gone or its
  PID reused); those of live or remote owners are left alone.
* :func:`discard` removes a store: renamed to a ``gone`` sibling first, so the path is
  never half-deleted and a killed removal is finished by the next sweep.
* :func:`promote` moves a member (an array) of a store to its final place in it.
* :func:`take_lock` / :func:`release_lock`: an exclusive lock file naming its owner.
* :func:`write_file`: a small file written to a ``tmp`` sibling and renamed into place.

Leftovers of earlier versions are recognised: ``.<name>.npt-new-<owner>-<hex8>`` (a
projection store being built: as ``tmp``), ``.<name>.npt-old-<hex8>`` (a projection
store being discarded: as ``gone``) and ``.<name>.old-<hex8>`` (a generated data set
set aside during a swap: as ``old``); the last two name no owner, and their content
was already set aside, so they are treated as a dead owner's.

Layer rule: standard library and :mod:`npt_dask.runtime.owners` only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from npt_dask.runtime.owners import OWNER_PATTERN, is_dead, owner_tag

__all__ = [
    "KINDS",
    "Leftover",
    "discard",
    "leftovers",
    "lock_holder",
    "promote",
    "real",
    "recover",
    "release_lock",
    "sibling",
    "sweep",
    "take_lock",
    "write_file",
    "write_into_place",
]

KINDS = ("tmp", "old", "gone")
"""A sibling's kind: a store being built, set aside during a swap, being removed."""

_LEGACY_TAGGED = {"npt-new": "tmp"}  # earlier versions' owner-tagged kinds
_LEGACY_UNTAGGED = {"npt-old": "gone", "old": "old"}  # earlier versions' kinds with no owner


def real(path: str | os.PathLike) -> Path:
    """``path`` with its symbolic links resolved, even one to a path not yet created: a
    store is written, swapped and removed where a link points, never over the link."""
    return Path(os.path.realpath(path))


def sibling(path: Path, kind: str) -> Path:
    """``.<name>.<kind>-<owner>-<hex8>`` beside ``path``: a name only this process uses."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
    return path.parent / f".{path.name}.{kind}-{owner_tag()}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Leftover:
    """A sibling of a store: its kind (one of :data:`KINDS`), its path, its owner tag
    (None: an earlier version's, which named none)."""

    kind: str
    path: Path
    owner: str | None

    @property
    def dead(self) -> bool:
        """Whether its writer is certainly gone (an untagged one's content was already
        set aside: as a dead writer's)."""
        return self.owner is None or is_dead(self.owner)


def _patterns(path: Path) -> tuple[re.Pattern[str], re.Pattern[str]]:
    name = re.escape(path.name)
    tagged = "|".join([*KINDS, *_LEGACY_TAGGED])
    untagged = "|".join(_LEGACY_UNTAGGED)
    return (
        re.compile(rf"^\.{name}\.({tagged})-({OWNER_PATTERN})-[0-9a-f]{{8}}$"),
        re.compile(rf"^\.{name}\.({untagged})-[0-9a-f]{{8}}$"),
    )


def leftovers(path: Path) -> list[Leftover]:
    """Every sibling of the store at ``path`` a writer left (live writers' too)."""
    if not path.parent.is_dir():
        return []
    tagged, untagged = _patterns(path)
    found = []
    for entry in path.parent.iterdir():
        if match := tagged.match(entry.name):
            kind = _LEGACY_TAGGED.get(match.group(1), match.group(1))
            found.append(Leftover(kind, entry, match.group(2)))
        elif match := untagged.match(entry.name):
            found.append(Leftover(_LEGACY_UNTAGGED[match.group(1)], entry, None))
    return found


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def sweep(path: Path) -> int:
    """Remove the siblings of ``path`` whose writers are dead; returns how many."""
    path = real(path)
    dead = [left for left in leftovers(path) if left.dead]
    for left in dead:
        _remove(left.path)
    return len(dead)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def recover(path: Path, complete: Callable[[Path], bool]) -> bool:
    """Repair what a killed :func:`write_into_place` left at ``path``; True if a store
    was moved into place.

    With nothing at ``path`` (a writer killed between the two renames of a swap), the
    newest ``tmp`` of a dead writer that is ``complete`` is moved in (the swap
    finished), else the newest complete ``old`` (the previous store put back). Then the
    dead writers' siblings are removed (:func:`sweep`).
    """
    path, restored = real(path), False
    if not path.exists():
        dead = [left for left in leftovers(path) if left.dead and complete(left.path)]
        for kind in ("tmp", "old"):
            found = sorted((x.path for x in dead if x.kind == kind), key=_mtime, reverse=True)
            for candidate in found:
                with contextlib.suppress(OSError):
                    os.rename(candidate, path)
                    restored = True
                    break
            if restored:
                break
    sweep(path)
    return restored


def _occupied(path: Path) -> bool:
    return path.is_file() or (path.is_dir() and any(path.iterdir()))


def _swap(tmp: Path, path: Path, check: Callable[[Path], None] | None) -> None:
    if check is not None:
        check(path)  # what is there may be replaced (the caller's rule), checked last
    old = sibling(path, "old")
    os.rename(path, old)
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(old, path)  # put the previous store back
        raise
    discard(old)


def write_into_place(
    path: Path,
    write: Callable[[Path], None],
    *,
    replace: bool,
    check: Callable[[Path], None] | None = None,
) -> bool:
    """Build a store with ``write(tmp)`` under a ``tmp`` sibling and move it to ``path``.

    Nothing at ``path`` (or an empty directory): one rename. A store at ``path``: with
    ``replace``, swapped (``check(path)`` first may refuse what is there); without,
    nothing is moved and False is returned (another writer got there first). The
    ``tmp`` sibling is removed whatever happens.
    """
    path = real(path)
    tmp = sibling(path, "tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        write(tmp)
        if not _occupied(path):
            try:
                os.rename(tmp, path)  # onto nothing, or an empty directory
                return True
            except OSError:
                if not _occupied(path):
                    raise
        if not replace:
            return False
        _swap(tmp, path, check)
        return True
    finally:
        _remove(tmp)


def discard(path: Path) -> None:
    """Remove the store at ``path``: renamed to a ``gone`` sibling, then deleted."""
    path = real(path)
    gone = sibling(path, "gone")
    os.rename(path, gone)
    _remove(gone)


def promote(member: Path, target: Path) -> bool:
    """Move ``member`` (an array of a store) to ``target`` unless something is there;
    True if it was moved."""
    if target.exists() or not member.exists():
        return False
    os.rename(member, target)
    return True


def write_file(path: Path, write: Callable[[Path], None]) -> None:
    """Write a file with ``write(tmp)`` under a ``tmp`` sibling and rename it into place:
    a reader sees the previous file or the whole new one, never a truncated one."""
    sweep(path)
    tmp = sibling(path, "tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# --- lock files -----------------------------------------------------------------------


def _write_lock(lock: Path) -> None:
    """Create ``lock`` naming this process, atomically and exclusively.

    The content is written to a unique file (``O_EXCL``) and hard-linked to ``lock``:
    the link fails if ``lock`` exists, and a reader never sees it empty.
    """
    content = {
        "owner": owner_tag(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    draft = lock.with_name(f"{lock.name}.{owner_tag()}-{uuid.uuid4().hex[:8]}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(content, f)
        os.link(draft, lock)
    finally:
        draft.unlink(missing_ok=True)


def lock_holder(lock: Path) -> dict[str, Any] | None:
    """The content of ``lock`` (owner, host, pid, started), None if there is none."""
    try:
        found = json.loads(lock.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"owner": "unknown"}
    return found if isinstance(found, dict) else {"owner": "unknown"}


def _break(lock: Path, holder: dict[str, Any]) -> None:
    """Remove the stale ``lock`` of ``holder``, unless another process took it meanwhile."""
    aside = lock.with_name(f"{lock.name}.stale-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(lock, aside)
    except FileNotFoundError:
        return
    if lock_holder(aside) != holder:  # a live lock taken since we read it: put it back
        with contextlib.suppress(OSError):
            os.link(aside, lock)
    aside.unlink(missing_ok=True)


def take_lock(lock: Path, *, attempts: int = 5) -> dict[str, Any] | None:
    """Take ``lock`` for this process: None when taken, else its holder (a live process,
    or one that cannot be checked from here). A dead holder's lock is broken."""
    for _ in range(attempts):
        try:
            _write_lock(lock)
            return None
        except FileExistsError:
            holder = lock_holder(lock)
            if holder is None:  # released meanwhile
                continue
            if not is_dead(str(holder.get("owner"))):
                return holder
            _break(lock, holder)
    return lock_holder(lock) or {"owner": "unknown"}


def release_lock(lock: Path) -> None:
    """Remove ``lock`` if this process holds it."""
    holder = lock_holder(lock)
    if holder is not None and holder.get("owner") == owner_tag():
        lock.unlink(missing_ok=True)
