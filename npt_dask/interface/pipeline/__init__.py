"""End-to-end jobs from a declarative config: ``npt run CONFIG``.

* :mod:`~npt_dask.interface.pipeline.config` -- the TOML schema (frozen dataclasses).
* :mod:`~npt_dask.interface.pipeline.data` -- reading the train/test split.
* :mod:`~npt_dask.interface.pipeline.methods` -- downstream stages on projected coordinates.
* :mod:`~npt_dask.interface.pipeline.report` -- report.json, summary.txt, figures.
* :mod:`~npt_dask.interface.pipeline.runner` -- strings the stages together.
"""

from __future__ import annotations

from npt_dask.interface.pipeline.config import PipelineConfig, load_config
from npt_dask.interface.pipeline.runner import run

__all__ = ["PipelineConfig", "load_config", "run"]
