"""``cupy.random`` of the stand-in: numpy's generators, drawing on the device.

``default_rng(seed)`` and ``RandomState(seed)`` give numpy's streams for the seed (CuPy's
differ: a test compares against its own draws, never against numpy's), each draw a device
array; the module-level functions draw from one global ``RandomState``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from cupy._core import call

_DRAWS = ("beta", "binomial", "choice", "exponential", "gamma", "integers", "normal",
          "permutation", "poisson", "rand", "randint", "randn", "random", "random_sample",
          "standard_normal", "uniform")  # fmt: skip


class _Drawing:
    """A numpy generator whose draws land on the device."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._inner, name)
        if name not in _DRAWS:
            raise AttributeError(f"the stand-in's generator has no {name!r}")
        return lambda *args, **kwargs: call(fn, args, kwargs)

    def shuffle(self, x: Any) -> None:
        call(self._inner.shuffle, (x,), {})


def default_rng(seed: Any = None) -> _Drawing:
    return _Drawing(np.random.default_rng(seed))


def RandomState(seed: Any = None) -> _Drawing:
    return _Drawing(np.random.RandomState(seed))


_GLOBAL = RandomState(0)


def seed(seed: Any = None) -> None:
    global _GLOBAL
    _GLOBAL = RandomState(seed)


def __getattr__(name: str) -> Any:
    if name in _DRAWS:
        return getattr(_GLOBAL, name)
    raise AttributeError(name)
