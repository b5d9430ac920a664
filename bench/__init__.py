"""Benchmarks for `make bench`: figures side by side with a peer measured in the same run."""


class Skipped(Exception):
    """A section cannot run here (no root, no PostgreSQL, no supervisord...): the run prints
    `SECTION: skipped (REASON)` and goes on with the next section."""
