"""Lazy arrays: Dask (:mod:`.dask`) and xarray (:mod:`.xarray`), chunk by chunk through
the eager backends. Importing this package imports neither library."""
