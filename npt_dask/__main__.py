"""``python -m npt_dask``: the ``npt`` command line."""

from npt_dask.interface.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
