"""``npt``: a thin command line over the public API, one module per subcommand.

    npt fit DATA --kernel rbf --gamma 0.02 --n-components 100 --out model.zarr
    npt project MODEL DATA --out proj.zarr [--rows 48000:56000] [--overwrite] [--scheduler ADDRESS]
    npt grow MODEL NEW_DATA [NEW_DATA ...] --out NEW_MODEL [--residual-tol 0.01]
    npt info MODEL                       (an npt fit model or an npt ridge --out model)
    npt ridge DATA --rows 0:60000 --test-rows 60000:70000 --kernel rbf --gamma 0.02 \
        --alpha 1e-3 --landmarks 20000 [--alphas 1e-6 1e-3 ...] [--checkpoint cg.npz] \
        [--scale 255] [--predictions PRED.npy [--overwrite]]
    npt run CONFIG [--output DIR] [--data-dir DIR] [--scheduler ADDRESS | --scheduler-file FILE]

``fit`` and ``project`` run on local threads, or on an existing dask cluster
given by ``--scheduler``/``--scheduler-file`` (``tls://`` schedulers with
``--tls-ca-file --tls-cert --tls-key``), through :func:`npt_dask.runtime.cluster.connect`.

DATA is a ``.npy`` file, a ``.npz`` file (``--key``, default ``x``), a zarr
array, or an xarray dataset in zarr (``--var``). ``npt ridge`` looks a relative
``.npy``/``.npz`` path that is not here up in ``$NPT_DATA_DIR`` (as
:func:`npt_dask.storage.datasets.load_npz` does), flattens images to rows (saying so) and
divides by ``--scale``; no output path of a command may be one of its inputs.
Errors print one line and exit with status 2; a finished command exits 0.

The rooms: :mod:`~npt_dask.interface.cli.program` (the parser and :func:`main`), one module
per subcommand (:mod:`~npt_dask.interface.cli.fit`, ``project``, ``grow``, ``info``,
``ridge``, ``run``), and what they share: :mod:`~npt_dask.interface.cli.options`,
:mod:`~npt_dask.interface.cli.checks`, :mod:`~npt_dask.interface.cli.messages`,
:mod:`~npt_dask.interface.cli.ridge_files`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from npt_dask._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "main": "npt_dask.interface.cli.program",
}

__all__ = ["main"]

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:
    from npt_dask.interface.cli.program import main
