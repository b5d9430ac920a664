"""Benchmarks for `make bench`: figures side by side with a peer measured in the same run."""
