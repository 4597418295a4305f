"""Which process owns a lock, a temporary directory or a scratch folder, and is it alive.

An owner tag names a process uniquely on a host: ``<host>-<pid>-<start>``,
``host`` a short hash of the host name and ``start`` the process's start time
in clock ticks since boot (``/proc/<pid>/stat``; 0 where there is no /proc).
A tag is *dead* when it was written on this host and its PID is gone or now
belongs to a process that started at another time (a reused PID). A tag of
another host is never declared dead: it cannot be checked from here.

Layer rule: standard library only; no dask, no zarr, no other npt-dask module.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket

__all__ = ["OWNER_PATTERN", "describe", "is_dead", "owner_tag"]

OWNER_PATTERN = r"[0-9a-f]{8}-\d+-\d+"
_TAG = re.compile(rf"^({OWNER_PATTERN})$")


def _host() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` (clock ticks since boot), 0 without /proc, None if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except FileNotFoundError:
        return None if os.path.isdir("/proc/self") else _alive_without_proc(pid)
    except OSError:
        return 0
    fields = stat.rpartition(")")[2].split()  # after "(comm)", which may hold spaces
    return int(fields[19]) if len(fields) > 19 else 0


def _alive_without_proc(pid: int) -> int | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:
        return 0
    return 0


def owner_tag(pid: int | None = None) -> str:
    """The tag of process ``pid`` (default this one)."""
    pid = os.getpid() if pid is None else pid
    return f"{_host()}-{pid}-{_start_ticks(pid) or 0}"


def is_dead(tag: str) -> bool:
    """True only when ``tag``'s process is certainly gone (this host, PID gone or reused)."""
    if not _TAG.match(tag):
        return False
    host, pid, start = tag.split("-")
    if host != _host():
        return False
    now = _start_ticks(int(pid))
    return now is None or (int(start) != 0 and now != 0 and now != int(start))


def describe(tag: str) -> str:
    """``tag`` in words, for error messages."""
    if not _TAG.match(tag):
        return f"owner {tag!r}"
    host, pid, _ = tag.split("-")
    where = "this host" if host == _host() else f"another host (id {host})"
    return f"process {pid} on {where}"
