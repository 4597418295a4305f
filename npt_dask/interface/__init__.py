"""How people use npt-dask: the command line, figures and pipelines."""
