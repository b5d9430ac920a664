"""What a simulation found: the summary table, hosts stuck past the bound, reclaims that
could not happen and why, job outcomes, and the optional plot over virtual time."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xce_controller.core.model import Fact, Host, HostState
from xce_protocol.errors import ConfigError

TIMELINE_COLUMNS = ("virtual_seconds", "fact", "host", "job", "state", "by", "why")
STEADY = (HostState.OPEN, HostState.CLOSED, HostState.RETURNED)


@dataclass
class Stuck:
    """Hosts that stayed in one state longer than the bound, with the worst few."""

    count: int = 0
    longest: float = 0.0
    examples: list[tuple[float, str, str]] = field(default_factory=list)  # (time, host, why)


def stuck_hosts(hosts: Iterable[Host], end: float, bound: float) -> dict[str, Stuck]:
    """Hosts by state that stayed in a passing state (not open, closed or returned) longer
    than `bound` at the end, with the three longest of each."""
    stuck: dict[str, Stuck] = {}
    for host in hosts:
        since = host.history[-1].at if host.history else 0.0
        if host.state in STEADY or end - since <= bound:
            continue
        entry = stuck.setdefault(host.state.value, Stuck())
        entry.count += 1
        entry.longest = max(entry.longest, end - since)
        entry.examples.append((end - since, host.name or host.key, host.reason))
    for entry in stuck.values():
        entry.examples = sorted(entry.examples, reverse=True)[:3]
    return stuck


def timeline_row(now: float, fact: Fact) -> list[str]:
    """One fact of the run as a CSV row (`--csv`), in TIMELINE_COLUMNS order."""
    d: dict[str, Any] = fact.data
    return [
        f"{now:.3f}",
        fact.kind,
        str(d.get("key", d.get("instance_id", ""))),
        str(d.get("id", "")),
        str(d.get("state", "")),
        fact.by,
        str(d.get("why", "")),
    ]


@dataclass
class Series:
    """Samples over virtual time for the plot: hosts by state, jobs by outcome (cumulative)."""

    times: list[float] = field(default_factory=list)
    hosts: dict[str, list[int]] = field(default_factory=dict)
    jobs: dict[str, list[int]] = field(default_factory=dict)

    def sample(self, at: float, hosts: dict[str, int], jobs: dict[str, int]) -> None:
        self.times.append(at)
        for store, counts in ((self.hosts, hosts), (self.jobs, jobs)):
            for key in set(store) | set(counts):
                store.setdefault(key, [0] * (len(self.times) - 1)).append(counts.get(key, 0))


@dataclass
class Summary:
    hosts: int
    virtual_seconds: float
    facts: int
    counts: dict[str, int]  # hosts by final state
    jobs: dict[str, int]  # job outcomes: done, failed, killed, pending, running, requeued, ...
    drains: list[float]
    stuck: dict[str, Stuck]
    stuck_after: float
    missed: dict[str, int]  # reclaims and notices that could not happen, by reason
    restarts: int
    forgotten: int  # decommissions the controller lost (a drained host became open again)
    lost_alive: int  # hosts declared lost that were in fact alive (silent only to it)
    series: Series = field(default_factory=Series)

    def render(self) -> str:
        drains = sorted(self.drains)

        def pct(p: float) -> str:
            if not drains:
                return "-"
            return f"{drains[min(len(drains) - 1, round(p / 100 * (len(drains) - 1)))]:.0f}s"

        rows = [
            ("hosts", f"{self.hosts:,} over {self.virtual_seconds / 3600:.1f} virtual hours"),
            ("facts", f"{self.facts:,}"),
            ("controller restarts", str(self.restarts)),
            ("hosts by final state", _counts(self.counts)),
            ("drain duration", f"p50 {pct(50)}, p95 {pct(95)} over {len(drains):,} drains"),
            ("jobs", _counts(self.jobs)),
            ("jobs run twice", f"{self.jobs.get('run twice', 0):,}"),
            ("decommissions forgotten", f"{self.forgotten:,}"),
            ("hosts taken for lost while alive", f"{self.lost_alive:,}"),
            (
                f"hosts stuck > {self.stuck_after / 3600:g} h",
                _counts({k: v.count for k, v in self.stuck.items()}) or "none",
            ),
            ("reclaims not done", _counts(self.missed) or "none"),
        ]
        width = max(len(k) for k, _ in rows)
        lines = ["simulation summary", f"{'-' * width}  {'-' * 40}"]
        lines += [f"{k.ljust(width)}  {v}" for k, v in rows]
        for state, stuck in sorted(self.stuck.items()):
            for at, host, why in stuck.examples:
                lines.append(f"  stuck {state} {at / 3600:.1f} h: {host} ({why})")
        return "\n".join(lines)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()) if v)


def plot(summary: Summary, path: Path) -> None:
    """Hosts by state and jobs by outcome over virtual time, as a PNG (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError(
            [f"--plot {path}: expected matplotlib installed (pip install matplotlib), got none"]
        ) from None
    series = summary.series
    hours = [t / 3600 for t in series.times]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for state, values in sorted(series.hosts.items()):
        top.plot(hours, values, label=state)
    top.set_yscale("symlog")  # a few stuck hosts show beside tens of thousands open
    top.set_ylabel("hosts")
    top.set_title(f"{summary.hosts:,} hosts by state")
    top.legend(loc="upper right", fontsize="small")
    for outcome, values in sorted(series.jobs.items()):
        bottom.plot(hours, values, label=outcome)
    bottom.set_ylabel("jobs (cumulative)")
    bottom.set_xlabel("virtual hours")
    bottom.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
