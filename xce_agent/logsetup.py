"""Logging to stderr: plain lines under journald (it adds time and unit), timestamps otherwise."""

from __future__ import annotations

import logging
import os
import sys


def configure(level: str = "info") -> None:
    under_journal = bool(os.environ.get("JOURNAL_STREAM"))
    fmt = "%(levelname)s %(name)s: %(message)s"
    if not under_journal:
        fmt = "%(asctime)s " + fmt
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Component output is logged under its own name; keep it at info even at warning.
    logging.getLogger("urllib3").setLevel(logging.WARNING)
