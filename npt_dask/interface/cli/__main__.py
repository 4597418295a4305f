"""``python -m npt_dask.interface.cli``: the ``npt`` command line."""

from npt_dask.interface.cli.program import main

if __name__ == "__main__":
    raise SystemExit(main())
