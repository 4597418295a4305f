"""Kernels: frozen, validated, serialisable specs and their blocks.

* :mod:`~npt_dask.kernels.numerics` -- the block and diagonal functions, written once
  against the array API (numpy keeps its fast paths);
* :mod:`~npt_dask.kernels.specs` -- :class:`KernelSpec`, :class:`NamedKernel` (its
  hyperparameters declared as data in :data:`npt_dask.kernels.params.KERNEL_TABLE`),
  :class:`PrecomputedKernel`, the one constructor path (:func:`~npt_dask.kernels.specs.
  spec_of`, behind ``KernelSpec(...)``, :meth:`KernelSpec.from_dict` and
  :func:`make_kernel`) and the resolution of ``gamma`` (:func:`resolve_kernel`);
* :mod:`~npt_dask.kernels.callables` -- :class:`CallableKernel`, the probing of a
  function's convention, :func:`blockwise` and :func:`pairwise`;
* :mod:`~npt_dask.kernels.params` -- the kernel table, the hyperparameters' and the
  kernel's entries and their lookup, the block precision;
* :mod:`~npt_dask.kernels.scale` -- the one kernel-scale rule, on samples.

This package re-exports the names other modules use, each imported on first use
(:mod:`npt_dask._lazy`).

Layer rule: arrays in, arrays out (numpy, scipy.sparse or any array API namespace);
nothing here knows dask, xarray or zarr.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from npt_dask._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "KERNEL_FORM": "npt_dask.kernels.callables",
    "CallableKernel": "npt_dask.kernels.callables",
    "blockwise": "npt_dask.kernels.callables",
    "pairwise": "npt_dask.kernels.callables",
    "Prepared": "npt_dask.kernels.numerics",
    "CALLABLE": "npt_dask.kernels.specs",
    "GAMMA_SCALE": "npt_dask.kernels.specs",
    "KERNELS": "npt_dask.kernels.specs",
    "PRECOMPUTED": "npt_dask.kernels.specs",
    "KernelSpec": "npt_dask.kernels.specs",
    "NamedKernel": "npt_dask.kernels.specs",
    "PrecomputedKernel": "npt_dask.kernels.specs",
    "make_kernel": "npt_dask.kernels.specs",
    "resolve_kernel": "npt_dask.kernels.specs",
    "spec_of": "npt_dask.kernels.specs",
}

__all__ = [
    "CALLABLE",
    "GAMMA_SCALE",
    "KERNELS",
    "KERNEL_FORM",
    "PRECOMPUTED",
    "CallableKernel",
    "KernelSpec",
    "NamedKernel",
    "PrecomputedKernel",
    "Prepared",
    "blockwise",
    "make_kernel",
    "pairwise",
    "resolve_kernel",
    "spec_of",
]

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:
    from npt_dask.kernels.callables import KERNEL_FORM, CallableKernel, blockwise, pairwise
    from npt_dask.kernels.numerics import Prepared
    from npt_dask.kernels.specs import (
        CALLABLE,
        GAMMA_SCALE,
        KERNELS,
        PRECOMPUTED,
        KernelSpec,
        NamedKernel,
        PrecomputedKernel,
        make_kernel,
        resolve_kernel,
        spec_of,
    )
