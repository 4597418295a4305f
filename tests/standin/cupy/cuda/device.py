"""``cupy.cuda.device`` of the stand-in: the one fake device."""

from __future__ import annotations

from typing import Any

from cupy import _standin
from cupy.cuda.runtime import CUDARuntimeError


class Device:
    """The fake CUDA device (only id 0 exists)."""

    def __init__(self, device: Any = None) -> None:
        self.id = 0 if device is None else int(device)
        if self.id != 0:
            raise CUDARuntimeError("cudaErrorInvalidDevice: invalid device ordinal")

    def __int__(self) -> int:
        return self.id

    __index__ = __int__

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def use(self) -> None:
        return None

    def synchronize(self) -> None:
        _standin.record(syncs=1)

    @property
    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes: the fake device's size less the live stand-in bytes."""
        return (_standin.DEVICE_BYTES - _standin.live_bytes(), _standin.DEVICE_BYTES)

    @property
    def compute_capability(self) -> str:
        return "90"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self) -> int:
        return hash(("cuda", self.id))

    def __repr__(self) -> str:
        return f"<CUDA Device {self.id}>"
