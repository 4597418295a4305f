"""What parameters are: the constraint classes every parameter table is written in
(:mod:`~npt_dask.params.constraints`) and the parsing of parameters given as text
(:mod:`~npt_dask.params.parsing`). Pure: no dask, no arrays beyond numpy's checks."""
