"""How `xcecli` writes values: times, reason codes, durations and tables without trailing spaces."""

from __future__ import annotations

import time
from typing import Any

from xce_controller.cli.observe import printable
from xce_protocol.times import parse_time


def when(value: float | str | None, now: float | None = None) -> str:
    """Local time of day; with the date when it is more than a day away from now. The API
    gives RFC 3339 (protocol 1.2) or epoch seconds (1.1): both are read."""
    ts = parse_time(value)
    if not ts:
        return "-"
    far = abs((time.time() if now is None else now) - ts) > 86400
    return time.strftime("%Y-%m-%d %H:%M:%S" if far else "%H:%M:%S", time.localtime(ts))


def code(record: dict[str, Any]) -> str:
    return f" [{record['code']}]" if record.get("code") else ""


def span(seconds: float) -> str:
    """`45s`, `4m05s`, `2h10m`: a duration as an operator reads it."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def size(n: Any) -> str:
    """Bytes as `188Gi`, `512Mi` (binary units, like kubectl); '-' if not a number."""
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        return "-"
    for unit, scale in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n >= scale:
            return f"{n / scale:.0f}{unit}"
    return f"{n:.0f}"


def table(rows: list[list[str]], header: list[str]) -> str:
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    # Cells are padded to their column; a line never ends in spaces.
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]
    )
