"""``cupy.fft`` of the stand-in: numpy.fft on the device (numpy operands refused)."""

from __future__ import annotations

import numpy as np
from cupy._functions import submodule

globals().update(submodule(np.fft))
