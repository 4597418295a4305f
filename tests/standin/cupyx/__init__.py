"""``cupyx`` of the stand-in: ``errstate(linalg=...)`` and ``cupyx.scipy.linalg``. No
``cupyx.scipy.sparse``: the stand-in has no sparse arrays on the device."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from cupy import _standin


@contextlib.contextmanager
def errstate(*, linalg: str | None = None) -> Iterator[None]:
    """``linalg="raise"``: failed cuSOLVER factorisations raise ``LinAlgError`` (CuPy's
    default, ``"ignore"``, returns them silently)."""
    before = _standin.LINALG_ERRORS
    if linalg is not None:
        if linalg not in ("ignore", "raise"):
            raise ValueError(f"linalg must be 'ignore' or 'raise', got {linalg!r}")
        _standin.LINALG_ERRORS = linalg
    try:
        yield
    finally:
        _standin.LINALG_ERRORS = before


from cupyx import scipy  # noqa: E402

__all__ = ["errstate", "scipy"]
