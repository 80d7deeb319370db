"""Where shards of work run: in process, or on a Dask cluster."""
