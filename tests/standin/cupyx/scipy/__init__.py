"""``cupyx.scipy`` of the stand-in: ``linalg`` only."""

from cupyx.scipy import linalg

__all__ = ["linalg"]
