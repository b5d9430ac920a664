"""Times on the wire: RFC 3339 in UTC (protocol 1.2), read back from either that or epoch seconds.

Protocol 1.2 writes every time in an answer as `2026-12-01T08:22:00.000Z`; 1.1 wrote seconds
since the epoch as a JSON number. Whoever reads a time takes both forms, so an agent or client
of one version works with a controller of the other (docs/upgrades.md).
"""

from __future__ import annotations

import calendar
import math
import re
import time
from typing import Any

# Date, time, optional fraction, then Z or an offset: what RFC 3339 section 5.6 allows.
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})",
    re.ASCII,
)
EPOCH_MAX = 1e11  # seconds since the epoch (the year 5138): anything later is not a time


def rfc3339(seconds: float) -> str:
    """`seconds` since the epoch as RFC 3339 in UTC, to the millisecond."""
    whole = math.floor(seconds)
    millis = round((seconds - whole) * 1000)
    if millis == 1000:
        whole, millis = whole + 1, 0
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def rfc3339_or_none(seconds: float | None) -> str | None:
    return None if seconds is None else rfc3339(seconds)


def parse_time(value: Any) -> float | None:
    """Seconds since the epoch from an RFC 3339 string or a JSON number; None if neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        ok = math.isfinite(value) and 0 <= value < EPOCH_MAX
        return float(value) if ok else None
    if not isinstance(value, str) or len(value) > 40:
        return None
    match = _RFC3339.fullmatch(value)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        return None
    try:
        stamp = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    except (OverflowError, ValueError):
        return None
    fraction = float(match.group(7) or 0.0)
    zone = match.group(8)
    if zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        stamp -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    seconds = stamp + fraction
    return seconds if 0 <= seconds < EPOCH_MAX else None


# Which fields of an answer hold a time: `at`, `deadline`, `last_seen` and every `*_at`.
# One rule for the whole API, so a client converts without knowing each record's shape.
TIME_FIELDS = frozenset({"at", "deadline", "last_seen"})


def is_time_field(name: str) -> bool:
    return name in TIME_FIELDS or name.endswith("_at")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def times_to_rfc3339(value: Any) -> Any:
    """A JSON value with the numbers of its time fields (at any depth) as RFC 3339 strings."""
    if isinstance(value, dict):
        return {
            k: rfc3339(v)
            if is_time_field(str(k)) and _number(v) and math.isfinite(v)
            else times_to_rfc3339(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [times_to_rfc3339(v) for v in value]
    return value


def times_to_epoch(value: Any) -> Any:
    """The other way: time fields of either form as seconds since the epoch (None if bad)."""
    if isinstance(value, dict):
        return {
            k: parse_time(v)
            if is_time_field(str(k)) and isinstance(v, (str, int, float))
            else times_to_epoch(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [times_to_epoch(v) for v in value]
    return value
