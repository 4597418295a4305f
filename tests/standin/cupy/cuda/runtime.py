"""``cupy.cuda.runtime`` of the stand-in: one device; ``deviceSynchronize`` counted."""

from __future__ import annotations

from typing import Any

from cupy import _standin


class CUDARuntimeError(RuntimeError):
    pass


def getDeviceCount() -> int:
    return 1 if _standin.AVAILABLE else 0


def getDevice() -> int:
    return 0


def deviceSynchronize() -> None:
    _standin.record(syncs=1)


def memGetInfo() -> tuple[int, int]:
    return (_standin.DEVICE_BYTES - _standin.live_bytes(), _standin.DEVICE_BYTES)


def runtimeGetVersion() -> int:
    return 12080


def driverGetVersion() -> int:
    return 12080


def getDeviceProperties(device: int) -> dict[str, Any]:
    return {"name": b"CuPy stand-in", "totalGlobalMem": _standin.DEVICE_BYTES,
            "major": 9, "minor": 0, "multiProcessorCount": 132}  # fmt: skip


is_hip = False
