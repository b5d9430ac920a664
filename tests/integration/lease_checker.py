"""Reading the singleton probes' records: every interval a component ran, and what is wrong
with them (two at once, a token that went down)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.integration.singleton_probe import TICK


@dataclass(frozen=True)
class Interval:
    lease: str
    host: str
    pid: int
    token: int
    start: float
    end: float  # the last sign of life plus one tick: it may have run until then
    stopped: bool  # ended by its stop signal (not killed)


def intervals(directory: Path) -> dict[str, list[Interval]]:
    """Per lease, the intervals by start time."""
    found: dict[str, list[Interval]] = {}
    for path in sorted(directory.glob("*/*.rec")):
        lines = path.read_text().splitlines()
        if not lines or not lines[0].startswith("start "):
            continue
        _, start, token, host, pid = lines[0].split()
        last, stopped = float(start), False
        for line in lines[1:]:
            parts = line.split()
            if len(parts) == 2:  # a torn last line (killed mid-write) has fewer fields
                last = max(last, float(parts[1]))
                stopped = stopped or parts[0] == "stop"
        lease = path.parent.name
        found.setdefault(lease, []).append(
            Interval(lease, host, int(pid), int(token), float(start), last + TICK, stopped)
        )
    for spans in found.values():
        spans.sort(key=lambda i: i.start)
    return found


def running(directory: Path, lease: str, now: float) -> list[str]:
    """Hosts whose component of `lease` shows signs of life now."""
    spans = intervals(directory).get(lease, [])
    return [s.host for s in spans if not s.stopped and now - s.end < 0.3]


def violations(spans: list[Interval]) -> list[str]:
    """Two intervals at once, or a token smaller than before, or a new holder with the old
    token: each as one line."""
    problems = []
    for before, after in zip(spans, spans[1:]):
        if after.start < before.end:
            problems.append(f"overlap: {before} and {after}")
        if after.token < before.token:
            problems.append(f"token went down: {before} then {after}")
        if after.host != before.host and after.token == before.token:
            problems.append(f"new holder with the old token: {before} then {after}")
    return problems


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]
