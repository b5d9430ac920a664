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
        lease = path.parent.name
        found.setdefault(lease, []).extend(_read(lease, path.read_text().splitlines()))
    for spans in found.values():
        spans.sort(key=lambda i: i.start)
    return found


def _read(lease: str, lines: list[str]) -> list[Interval]:
    """A record's intervals: one per `start` line. A probe writes one, but a file that holds
    two (a later probe with the same pid appended to it) is two processes, never one that
    ran from the first's start to the second's end."""
    spans: list[Interval] = []
    head: list[str] | None = None
    last, stopped = 0.0, False
    for line in [*lines, "start"]:  # the sentinel closes the last one
        parts = line.split()
        if parts[:1] == ["start"]:
            if head is not None:
                _, start, token, host, pid = head
                spans.append(
                    Interval(lease, host, int(pid), int(token), float(start), last + TICK, stopped)
                )
            head = parts if len(parts) == 5 else None  # a torn start line: nothing ran
            last, stopped = (float(parts[1]), False) if head is not None else (0.0, False)
        elif head is not None and len(parts) == 2:  # a torn last line has fewer fields
            last = max(last, float(parts[1]))
            stopped = stopped or parts[0] == "stop"
    return spans


def running(directory: Path, lease: str, now: float) -> list[str]:
    """Hosts whose component of `lease` shows signs of life now."""
    spans = intervals(directory).get(lease, [])
    return [s.host for s in spans if not s.stopped and now - s.end < 0.3]


def violations(spans: list[Interval]) -> list[str]:
    """Two intervals at once, or a token smaller than before, or a new holder with the old
    token: each as one line. An interval is checked against the one of all before it that
    ended last, not only against the one that started just before: a component that ran on
    overlaps every later one, and each is a line."""
    problems = []
    latest: Interval | None = None  # of the intervals so far, the one that ended last
    for before, after in zip(spans, spans[1:]):
        latest = before if latest is None or before.end > latest.end else latest
        if after.start < latest.end:
            problems.append(f"overlap: {latest} and {after}")
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
