"""The liveness checker: random schedules of faults (replicas killed, stopped and cut off
from the database, the database stopped, every agent restarted, overlapping, some past the
grace) against three real replicas on PostgreSQL with simulated hosts heartbeating through
them; after each, the hosts' view and the stored lost facts are judged (liveness_history.py):
no host that kept sending heartbeats is declared lost, a silenced one is, and no sooner than
its grace. Without the isolation rule or the stall rule, seed 1 finds beating hosts lost.

`make test` runs XCE_LIVENESS_SCHEDULES schedules (1: seed 1, which finds both rules removed)
of 40 s; `make liveness-soak` more. A breach prints the seed: XCE_LIVENESS_SEED=S replays it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration import liveness_rig
from tests.pg_server import PgCluster, need_pg

SCHEDULES = int(os.environ.get("XCE_LIVENESS_SCHEDULES", "1"))
FIRST = int(os.environ.get("XCE_LIVENESS_SEED", "1"))
SECONDS = float(os.environ.get("XCE_LIVENESS_SECONDS", "40"))


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    need_pg()
    pg = PgCluster(port=5464)  # its own: the schedules stop every one of its processes
    yield pg
    pg.close()


@pytest.mark.parametrize("seed", range(FIRST, FIRST + SCHEDULES))
def test_no_host_that_kept_beating_is_lost_whatever_the_faults(
    tmp_path: Path, cluster: PgCluster, seed: int
) -> None:
    outcome = liveness_rig.run(tmp_path, cluster, seed, SECONDS)
    print(outcome.summary())
    for fault in outcome.faults:
        print(" ", fault)
    assert not outcome.breaches, "\n".join(outcome.breaches)
    # The faults were met: the hosts moved, and a silenced host was declared lost.
    assert outcome.counts["ack"] > liveness_rig.HOSTS * SECONDS * 0.3, outcome.summary()
    assert outcome.counts["moved"] > 0, outcome.summary()
    assert any(f.kind is liveness_rig.Kind.SILENCE for f in outcome.faults)
