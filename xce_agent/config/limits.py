"""A component's `limits:` (memory_max, cpu_weight, tasks_max), checked into ResourceLimits."""

from __future__ import annotations

import re

from xce_agent.supervision.spec import ResourceLimits
from xce_protocol.validation import Checker, describe, join_path
from xce_protocol.yamlsource import LineDict

_SIZE = re.compile(r"^\s*(\d{1,15})\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE | re.ASCII)
_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_limits(node: LineDict, p: str, c: Checker) -> ResourceLimits:
    """The limits; none after a reported problem (the caller's mark tells)."""
    r = c.mapping(node, "limits", p, required=False)
    if r is None:
        return ResourceLimits()
    lp = join_path(p, "limits")
    c.allowed_keys(r, lp, ("memory_max", "cpu_weight", "tasks_max"))
    memory = _size(r, "memory_max", lp, c)
    weight = c.integer(r, "cpu_weight", lp, minimum=1, maximum=10000)
    tasks = c.integer(r, "tasks_max", lp, minimum=1, maximum=4194304)
    return ResourceLimits(memory_max=memory, cpu_weight=weight, tasks_max=tasks)


def _size(node: LineDict, key: str, p: str, c: Checker) -> int | None:
    if key not in node:
        return None
    value = node[key]
    expected = "a size in bytes from 1M to 1T (like 512M, 4G)"
    amount: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        amount = value
    elif isinstance(value, str):
        match = _SIZE.match(value)
        if match:
            unit = (match.group(2) or "").upper()[:1].replace("B", "")
            amount = int(match.group(1)) * _SIZE_UNITS[unit]
    if amount is None or not 1024**2 <= amount <= 1024**4:
        c.report(join_path(p, key), expected, describe(value), c.line_of(node, key))
        return None
    return amount
