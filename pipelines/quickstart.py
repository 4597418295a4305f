"""The README's main job: ``python -m pipelines.quickstart [--output DIR]``.

Runs ``pipelines/quickstart.toml``: scikit-learn's bundled digits on an
embedded ``LocalCluster``, an RBF NPT model fitted with the streaming Krylov
solver and saved to zarr, train and test rows projected chunk by chunk to
zarr, then a kernel SVM (as a linear SVM on the coordinates, in memory and
chunk by chunk), KFD and KPCA-L1, next to scikit-learn's kernel SVM on the
pixels. Writes ``results/quickstart/{report.json, summary.txt, *.png}``.
"""

import sys
from pathlib import Path

from npt_dask.interface.cli import main

CONFIG = Path(__file__).with_name("quickstart.toml")

if __name__ == "__main__":
    sys.exit(main(["run", str(CONFIG), *sys.argv[1:]]))
