"""A strict CPU stand-in for CuPy (tests only; see ``tests/standin/README.md``).

Arrays wrap numpy arrays and follow CuPy's rules (``cupy/_core.py``); the functions are
numpy's, generated from one table (``cupy/_functions.py``); crossings, synchronisations,
Fortran copies and the live device bytes are counted (``cupy._standin``).
"""

from __future__ import annotations

import numpy as _np
from cupy import _standin  # noqa: F401
from cupy._core import ndarray  # noqa: F401
from cupy._functions import build as _build
from cupy._functions import ufunc  # noqa: F401

__version__ = "13.6.0"

TABLE = _build(globals())
"""numpy name -> how the stand-in exports it (``DEVICE``, ``SYNC``, ``CREATE``, ``LIKE``,
``HOST``, ``UFUNC``, ``TYPE``, ``CONSTANT``, ``SKIP``)."""

from cupy import cuda, fft, linalg, random  # noqa: E402, F401
from cupy._transfer import (  # noqa: E402, F401
    array,
    asanyarray,
    asarray,
    ascontiguousarray,
    asfortranarray,
    asnumpy,
    from_dlpack,
    get_array_module,
    get_default_memory_pool,
    get_default_pinned_memory_pool,
    is_available,
)

bool_ = _np.bool_
