"""What lands on disk: fitted models as zarr stores, and data sets."""
