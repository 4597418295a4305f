"""``python -m pipelines CONFIG [options]``: the same as ``npt run CONFIG [options]``."""

import sys

from npt_dask.interface.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
