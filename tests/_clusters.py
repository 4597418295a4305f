"""Helpers for tests that start real processes: the recipes in ``cluster/`` and sockets."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import psutil

from tests.conftest import REPO

LOOPBACK = "127.0.0.1"


def recipe(relative: str) -> ModuleType:
    """Import a script of ``cluster/`` (not a package) as a module."""
    path = REPO / "cluster" / relative
    name = f"npt_recipe_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def listening(pids: list[int]) -> list[tuple[str, int]]:
    """``(ip, port)`` of every listening inet socket of these processes."""
    out = []
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except psutil.Error:
            continue
        out += [(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]
    return out


def tree_digest(path: Path) -> str:
    """SHA-256 over every file's relative name and bytes."""
    digest = hashlib.sha256()
    for f in sorted(p for p in Path(path).rglob("*") if p.is_file()):
        digest.update(str(f.relative_to(path)).encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()
