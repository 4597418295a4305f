"""End-to-end jobs built on the npt_dask public API."""
