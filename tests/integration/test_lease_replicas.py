"""Never two with the controller as two replicas on PostgreSQL: the lease checker's random
fault schedules (lease_faults.py) with kill -9 of a replica and failovers of the database
(kill -9 of the primary, its synchronous standby promoted) among them; each kind at least once.
The probes' records show no two components of a lease at once and tokens that only grow.

XCE_LEASE_REPLICA_SCHEDULES (12 in `make test`) and XCE_LEASE_SEED change the run; `make
lease-replica-soak` runs a long one. What the rig must do for the result to mean anything:
a replica killed while a database failover is under way may find no database at its restart
and exit (as it should), so the rig restarts it as systemd would; the standby remade after a
failover may fail its first start on the killed server's port, so the rig makes it again
(before, the failover's exception left the next lanes promoting the new primary: "not in
standby mode").
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from tests.integration.helpers import wait_for
from tests.integration.lease_checker import running
from tests.integration.lease_faults import Chaos
from tests.integration.lease_replicas import ReplicaLeaseCluster
from tests.pg_server import need_pg

SCHEDULES = int(os.environ.get("XCE_LEASE_REPLICA_SCHEDULES", "12"))
TTL = 2.0


def test_never_two_across_replica_kills_and_database_failovers(tmp_path: Path) -> None:
    need_pg()
    seed = int(os.environ.get("XCE_LEASE_SEED", str(random.SystemRandom().randrange(10**6))))
    c = ReplicaLeaseCluster(tmp_path, hosts=3, leases=3, ttl=TTL)
    c.start()
    try:
        c.wait_all_held()
        report = Chaos(c, seed, each_first=True).run(SCHEDULES)
        c.wait_all_held()
        for lease in c.leases:  # and afterwards each runs once again
            wait_for(lambda: len(running(c.records, lease, time.monotonic())) == 1, 30)  # noqa: B023
    finally:
        c.close()
    summary = f"seed {seed}: {report.line(TTL)}, {c.failovers} database failovers"
    print(summary)
    assert report.schedules >= SCHEDULES, summary
    assert report.violations == [], f"{summary}\n" + "\n".join(report.violations)
    kinds = {f.kind for f in report.faults}
    assert {"kill-replica", "db-failover"} <= kinds, summary
    assert report.intervals > report.schedules // 2, summary
