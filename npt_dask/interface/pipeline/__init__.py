"""End-to-end jobs from a declarative config: ``npt run CONFIG``.

* :mod:`~npt_dask.interface.pipeline.config` -- the TOML schema (frozen dataclasses).
* :mod:`~npt_dask.interface.pipeline.data` -- reading the train/test split.
* :mod:`~npt_dask.interface.pipeline.methods` -- downstream stages on projected coordinates.
* :mod:`~npt_dask.interface.pipeline.report` -- report.json, summary.txt, figures.
* :mod:`~npt_dask.interface.pipeline.runner` -- strings the stages together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from npt_dask._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "PipelineConfig": "npt_dask.interface.pipeline.config",
    "load_config": "npt_dask.interface.pipeline.config",
    "run": "npt_dask.interface.pipeline.runner",
}

__all__ = ["PipelineConfig", "load_config", "run"]

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:
    from npt_dask.interface.pipeline.config import PipelineConfig, load_config
    from npt_dask.interface.pipeline.runner import run
