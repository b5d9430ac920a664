"""Never two: three agents and the controller under random fault schedules (blackholed
traffic, kill -9 of an agent, of a component and of the controller, SIGSTOP longer than the
TTL); the singleton components' own records show no two running at once, tokens that only
grow, and a new holder within 2 x TTL of the old one's loss.

`make test` runs 40 schedules (each controller fault among them at least once); the long
runs are `make lease-soak` (500) and `make bench` (100, its README table), the same checker.
XCE_LEASE_SCHEDULES and XCE_LEASE_SEED change the run.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from tests.integration.helpers import wait_for
from tests.integration.lease_checker import running
from tests.integration.lease_cluster import LeaseCluster
from tests.integration.lease_faults import Chaos

# 40 take half the time of the 100 this ran before and still draw every host fault kind (all
# but about 1 run in 2,000); the soak's 500 are what find a rare interleaving.
SCHEDULES = int(os.environ.get("XCE_LEASE_SCHEDULES", "40"))
LEASES = int(os.environ.get("XCE_LEASE_LANES", "5"))
TTL = 2.0


def test_never_two_under_random_fault_schedules(tmp_path: Path) -> None:
    seed = int(os.environ.get("XCE_LEASE_SEED", str(random.SystemRandom().randrange(10**6))))
    c = LeaseCluster(tmp_path, hosts=3, leases=LEASES, ttl=TTL).start()
    try:
        c.wait_all_held()
        # At 40 draws the 1-in-10 controller kill would be missed in ~1.5% of runs: owe it.
        # Every 3rd host fault timed: with the soak's every 5th, 40 schedules measured 4
        # takeovers, right at the bound below; every 3rd measured 12 and 22 (about 15 s more).
        report = Chaos(c, seed, each_first=True, measure_every=3).run(SCHEDULES)
        c.wait_all_held()
        for lease in c.leases:  # and afterwards each runs once again
            wait_for(lambda: len(running(c.records, lease, time.monotonic())) == 1, 30)  # noqa: B023
    finally:
        c.close()
    summary = f"seed {seed}: {report.line(TTL)}"
    print(summary)
    assert report.schedules >= SCHEDULES, summary
    assert report.violations == [], f"{summary}\n" + "\n".join(report.violations)
    assert report.slow == [], f"{summary}\n" + "\n".join(report.slow)
    assert len(report.takeovers) >= SCHEDULES // 10, summary
    assert report.intervals > report.schedules // 2, summary
