"""Never two, at length: the lease checker's rig (three agents, the controller, five 2 s
leases) under many random fault schedules, and how fast a lease changes hands.

Takeover after a holder's loss (kill -9 or SIGSTOP of its agent, its traffic blackholed) is
timed from the fault to the first start elsewhere, in TTLs; the peer is a graceful hand-over
in the same cluster (`xce-agent stop` on the holder: the lease is released, not waited out).
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from bench.stats import percentile, table
from tests.integration.lease_checker import intervals
from tests.integration.lease_cluster import LeaseCluster
from tests.integration.lease_faults import Chaos

TTL = 2.0


def _handover(c: LeaseCluster) -> float:
    """Seconds from a graceful stop of a lease's holder to the next host's start."""
    holder = c.wait_all_held()[c.leases[0]]
    before = len(intervals(c.records).get(c.leases[0], []))
    stopped = time.monotonic()
    agent = c.agent(holder)
    agent.graceful_stop()
    deadline = time.monotonic() + 30
    while len(intervals(c.records).get(c.leases[0], [])) <= before:
        if time.monotonic() > deadline:
            return float("nan")
        time.sleep(0.02)
    took = intervals(c.records)[c.leases[0]][-1].start - stopped
    agent.start()
    return took


def run(schedules: int = 500, seed: int | None = None, handovers: int = 5) -> str:
    seed = seed if seed is not None else random.SystemRandom().randrange(10**6)
    with tempfile.TemporaryDirectory() as tmp:
        c = LeaseCluster(Path(tmp), hosts=3, leases=5, ttl=TTL).start()
        try:
            c.wait_all_held()
            started = time.monotonic()
            report = Chaos(c, seed).run(schedules)
            elapsed = time.monotonic() - started
            c.wait_all_held()
            graceful = [_handover(c) for _ in range(handovers)]
        finally:
            c.close()
    take = report.takeovers
    rows = [
        ["takeover after a holder's loss", str(len(take))]
        + [f"{percentile(take, p) / TTL:.2f}" for p in (50, 95)]
        + [f"{max(take, default=float('nan')) / TTL:.2f}"],
        ["graceful hand-over (released)", str(len(graceful))]
        + [f"{percentile(graceful, p) / TTL:.2f}" for p in (50, 95)]
        + [f"{max(graceful, default=float('nan')) / TTL:.2f}"],
    ]
    head = (
        f"seed {seed}: {report.line(TTL)}; {elapsed:.0f}s of faults\n"
        f"violations: {len(report.violations)} (two at once or a token going down)"
    )
    body = table(
        f"Leases (ttl {TTL:g}s): time to the next start, in TTLs",
        ["case", "n", "p50", "p95", "max"],
        rows,
    )
    problems = "\n".join(report.violations + report.slow)
    return "\n".join(part for part in (head, body, problems) if part)
