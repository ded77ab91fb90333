"""pmhash-bench's plots: run as `bench/plot` (see __main__.py)."""
