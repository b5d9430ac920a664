"""The README's bench tables, regenerated from one run (`python -m bench --readme README.md`).

Each section's table sits between `<!-- bench:SECTION -->` and `<!-- /bench:SECTION -->`;
a run replaces what is between the markers with exactly what that section printed, under one
line naming the run (date, commit, load average at the section's start and end). Text outside
the markers is left as it was, so prose must not restate a table's figures: it would go stale
at the next run. The markers are checked before the run starts, so a missing one fails in a
second rather than after twenty minutes of benchmarks.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

FENCE = "```"


class MarkerError(ValueError):
    """The README lacks a section's markers, or has them twice or out of order."""


def markers(section: str) -> tuple[str, str]:
    return f"<!-- bench:{section} -->", f"<!-- /bench:{section} -->"


def _span(text: str, section: str) -> tuple[int, int]:
    """Where the section's content lies: after its opening marker's line, before its closing
    marker."""
    start, end = markers(section)
    opens = [m.start() for m in re.finditer(re.escape(start), text)]
    closes = [m.start() for m in re.finditer(re.escape(end), text)]
    if not opens or not closes:
        missing = start if not opens else end
        raise MarkerError(f"README has no {missing} (each bench table sits between markers)")
    if len(opens) > 1 or len(closes) > 1:
        raise MarkerError(f"README has the markers of bench section {section!r} more than once")
    if closes[0] < opens[0]:
        raise MarkerError(f"README has {end} before {start}")
    line_end = text.find("\n", opens[0])
    if line_end < 0 or line_end >= closes[0]:
        raise MarkerError(f"README: {start} must be on its own line before {end}")
    return line_end + 1, closes[0]


def check(text: str, sections: Iterable[str]) -> None:
    """Raise MarkerError naming every section whose markers are missing or malformed."""
    problems = []
    for section in sections:
        try:
            _span(text, section)
        except MarkerError as e:
            problems.append(str(e))
    if problems:
        raise MarkerError("; ".join(problems))


def replace(text: str, blocks: Mapping[str, str]) -> str:
    """`text` with each section's content replaced by its block, in a code fence."""
    check(text, blocks)
    for section, block in blocks.items():
        begin, end = _span(text, section)
        body = block.strip("\n")
        if FENCE in body:
            raise MarkerError(f"bench section {section!r} printed a code fence")
        text = text[:begin] + f"{FENCE}\n{body}\n{FENCE}\n" + text[end:]
    return text


@dataclass(frozen=True)
class Run:
    """What names a run in each block's first line."""

    date: str
    commit: str

    def header(self, load_start: float, load_end: float) -> str:
        return (
            f"python -m bench, {self.date}, commit {self.commit}, load average "
            f"{load_start:.2f} at the section's start, {load_end:.2f} at its end, "
            f"{os.cpu_count()} cores"
        )


def this_run(root: Path) -> Run:
    return Run(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit(root))


def commit(root: Path) -> str:
    """The checked-out commit, "+ local changes" when the tree differs from it (README.md,
    which the run rewrites, aside)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!README.md"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" + local changes" if changed else "")


def load() -> float:
    return os.getloadavg()[0]
