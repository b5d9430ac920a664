"""Failovers while simulated hosts heartbeat through three replicas on PostgreSQL
(tests/integration/ha_load.py): the primary killed -9 and its standby promoted, and a replica
killed -9. Nothing lost, nothing decommissioned, latency back under target within 60 s.

`make test` runs 5,000 hosts for 60 s after the fault; `make ha-failover` runs them for 90 s
(XCE_FAILOVER_HOSTS and XCE_FAILOVER_AFTER set either)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration import ha_load
from tests.pg_server import need_pg

HOSTS = int(os.environ.get("XCE_FAILOVER_HOSTS", "5000"))
AFTER = float(os.environ.get("XCE_FAILOVER_AFTER", "60"))


def check(outcome: ha_load.Outcome) -> None:
    print(outcome.summary())
    assert len(outcome.samples.latency) >= HOSTS * (ha_load.BEFORE + AFTER) / ha_load.INTERVAL * 0.9
    assert not outcome.lost, outcome.lost[:10]
    assert not outcome.decommissions, outcome.decommissions[:10]
    assert not outcome.not_open, list(outcome.not_open.items())[:10]
    assert outcome.recovered_in <= ha_load.RECOVERY, outcome.summary()


@pytest.mark.parametrize("fault", ["primary", "replica"])
def test_a_failover_under_heartbeats_loses_no_host_and_recovers_within_60s(
    tmp_path: Path, fault: str
) -> None:
    need_pg()
    outcome = ha_load.run(tmp_path, HOSTS, fault, AFTER)
    check(outcome)
    if fault == "replica":
        assert outcome.moves >= HOSTS // 3 * 0.9  # the dead replica's hosts went elsewhere
    else:
        # The outage was met: every replica found the heartbeat table begun anew on the new
        # primary (heartbeats themselves answer from memory while the primary is away).
        assert outcome.counters["liveness_restarts"] >= 3, outcome.summary()
