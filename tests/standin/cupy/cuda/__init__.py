"""``cupy.cuda`` of the stand-in: one fake device (id 0, ``_standin.DEVICE_BYTES`` of memory),
a null stream; every ``synchronize`` counted."""

from __future__ import annotations

from typing import Any

from cupy import _standin
from cupy.cuda import device, runtime
from cupy.cuda.device import Device
from cupy.cuda.runtime import CUDARuntimeError


class Stream:
    """A CUDA stream (all work is ordered on the host anyway)."""

    null: Stream

    def __init__(self, null: bool = False, non_blocking: bool = False, ptr: int = 0) -> None:
        self.ptr = ptr

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def use(self) -> Stream:
        return self

    def synchronize(self) -> None:
        _standin.record(syncs=1)

    def record(self, event: Any = None) -> Any:
        return event


Stream.null = Stream(null=True)


class ExternalStream(Stream):
    def __init__(self, ptr: int, device_id: int = -1) -> None:
        super().__init__(ptr=ptr)


def get_current_stream(device_id: int = -1) -> Stream:
    return Stream.null


def get_device_id() -> int:
    return 0


def is_available() -> bool:
    return _standin.AVAILABLE


def set_allocator(allocator: Any = None) -> None:
    return None


def set_pinned_memory_allocator(allocator: Any = None) -> None:
    return None


class MemoryPool:
    """A memory pool reading the live stand-in bytes (``cupy.get_default_memory_pool``)."""

    def __init__(self, allocator: Any = None) -> None:
        return None

    def used_bytes(self) -> int:
        return _standin.live_bytes()

    def total_bytes(self) -> int:
        return _standin.live_bytes()

    def free_all_blocks(self, stream: Any = None) -> None:
        return None


__all__ = ["CUDARuntimeError", "Device", "ExternalStream", "MemoryPool", "Stream",
           "device", "get_current_stream", "get_device_id", "is_available", "runtime"]  # fmt: skip
