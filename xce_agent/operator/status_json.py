"""`xce-agent status --json`: the state as the agent saved it, with its times as RFC 3339 in
UTC (`2026-12-01T08:22:00.000Z`), as `xcecli --json` and the API write them.

state.json keeps seconds since the epoch (what the agent computes with, and what an older agent
reading the file after a downgrade expects); only what the command prints is converted. A time
the state holds as 0 (never: a component that never ran) is printed as null.
"""

from __future__ import annotations

import math
from typing import Any

from xce_protocol.times import rfc3339

# The wall-clock times of the state (state.py and what it holds): `boot_time` of a process
# identity is not one of them (a count of clock ticks goes with it and it is compared as is).
TIME_KEYS = frozenset(
    {"at", "create_time", "deadline", "next_retry", "retry_until", "since", "started"}
    | {"started_at", "updated_at"}
)


def with_rfc3339_times(value: Any) -> Any:
    """`value` with every number under a TIME_KEYS key, at any depth, as RFC 3339 (0: null)."""
    if isinstance(value, dict):
        return {k: _time(v) if k in TIME_KEYS else with_rfc3339_times(v) for k, v in value.items()}
    if isinstance(value, list):
        return [with_rfc3339_times(v) for v in value]
    return value


def _time(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value  # None, or what a newer agent wrote: shown as it is
    return rfc3339(value) if math.isfinite(value) and value > 0 else None
