"""Logging: to the journal with structured fields under systemd (system/journal.py), else to
stderr as plain lines with timestamps."""

from __future__ import annotations

import logging
import os
import sys

from xce_agent.system.journal import CodeFormatter, JournalHandler, journal_available


def configure(level: str = "info") -> None:
    under_journal = bool(os.environ.get("JOURNAL_STREAM"))
    fmt = "%(levelname)s %(name)s: %(message)s"
    if not under_journal:
        fmt = "%(asctime)s " + fmt
    # Under systemd, records go to the journal with their reason code as a field.
    handler: logging.Handler = (
        JournalHandler() if journal_available() else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(CodeFormatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Component output is logged under its own name; keep it at info even at warning.
    logging.getLogger("urllib3").setLevel(logging.WARNING)
