"""Singleton components on real agents: one host runs it, a graceful stop hands it over."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.helpers import wait_for
from tests.integration.lease_checker import intervals, violations
from tests.integration.lease_cluster import ADMIN, LeaseCluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LeaseCluster]:
    c = LeaseCluster(tmp_path, hosts=3, leases=1, ttl=2.0).start()
    yield c
    c.close()


def running(c: LeaseCluster) -> list[str]:
    """Hosts whose probe is running now (its record still ticks)."""
    now = time.monotonic()
    spans = intervals(c.records).get("lease-0", [])
    return [s.host for s in spans if not s.stopped and now - s.end < 0.5]


def test_one_host_runs_it_and_a_graceful_stop_hands_it_over(cluster: LeaseCluster) -> None:
    holder = cluster.wait_all_held()["lease-0"]
    wait_for(lambda: running(cluster) == [holder], 30)
    time.sleep(3 * cluster.ttl)  # renewals keep it where it is, and nobody else starts
    assert running(cluster) == [holder]
    spans = intervals(cluster.records)["lease-0"]
    assert [(s.host, s.token) for s in spans] == [(holder, 1)]
    # `status` says who holds it: this host with its token, or another host.
    shown = cluster.agent(holder).cli("status")
    assert "  lease: lease-0: held by this host, token 1 [lease_granted]" in shown.stdout
    other = next(a for a in cluster.agents if a.name != holder)
    shown = other.cli("status")
    assert "  lease: lease-0: waiting for it (no grant yet): HTTP 409 lease_held" in shown.stdout
    assert f"held by {holder} (token 1)" in shown.stdout
    held = json.loads(cluster.agent(holder).cli("status", "--json").stdout)["singletons"]
    assert held == [
        {
            "component": "lease-0",
            "lease": "lease-0",
            "phase": "holding",
            "token": 1,
            "detail": "held with token 1",
            "code": "lease_granted",
        }
    ]
    stopped_at = time.monotonic()
    cluster.agent(holder).graceful_stop()
    wait_for(lambda: len(intervals(cluster.records)["lease-0"]) == 2, 30)
    spans = intervals(cluster.records)["lease-0"]
    assert spans[0].stopped and spans[1].host != holder and spans[1].token == 2
    # Released: the next host did not wait out the TTL.
    assert spans[1].start - stopped_at < cluster.ttl, spans
    assert violations(spans) == []
    assert "lease lease-0" in cluster.agent(holder).log()


def test_a_crash_looping_singleton_gives_its_lease_to_another_host(tmp_path: Path) -> None:
    c = LeaseCluster(tmp_path, hosts=2, leases=1, ttl=2.0, give_up=2)
    try:
        (c.records / "crash-h0").write_text("")
        c.agent("h0").start()
        wait_for(lambda: "lease lease-0 seeking -> holding" in c.agent("h0").log(), 30)
        wait_for(lambda: "lease given back" in c.agent("h0").log(), 30)  # FATAL on h0
        c.agent("h1").start()
        holder = c.wait_all_held()["lease-0"]
        assert holder == "h1"
        wait_for(lambda: running(c) == ["h1"], 30)
        assert intervals(c.records)["lease-0"][0].token == 2  # h0's grant was token 1
    finally:
        c.close()


def test_operator_commands_go_through_the_lease(cluster: LeaseCluster) -> None:
    holder = cluster.wait_all_held()["lease-0"]
    wait_for(lambda: running(cluster) == [holder], 30)
    agent = cluster.agent(holder)
    stopped = agent.cli("stop", "lease-0")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    # Stopped by the operator: the lease is given back and another host runs it at once.
    wait_for(lambda: len(running(cluster)) == 1 and running(cluster) != [holder], 30)
    other = running(cluster)[0]
    started = agent.cli("start", "lease-0")
    assert started.returncode == 0, started.stdout + started.stderr
    assert "starts once this host holds lease lease-0" in started.stdout  # and does not wait
    wait_for(lambda: "lease lease-0 idle -> seeking (xce-agent start lease-0)" in agent.log(), 30)
    time.sleep(2 * cluster.ttl)  # asks, and is refused while the other host holds it
    assert running(cluster) == [other] and cluster.holders()["lease-0"] == other
    restarted = cluster.agent(other).cli("restart", "lease-0")
    assert restarted.returncode == 0
    wait_for(lambda: len(intervals(cluster.records)["lease-0"]) >= 3, 30)
    spans = intervals(cluster.records)["lease-0"]
    assert spans[-1].host == other and spans[-1].token == spans[-2].token  # the same hold
    assert violations(spans) == []
    # A reload may not change who holds what: the lease holder is the agent run.
    text = agent.config.read_text().replace("ttl: 2.0s", "ttl: 3s")
    agent.config.write_text(text)
    refused = agent.cli("reload")
    assert refused.returncode != 0 and "singleton components changed (lease-0)" in (
        refused.stdout + refused.stderr
    )


def lease_refusals(c: LeaseCluster) -> float:
    """Lease requests the controller refused as a decommissioned host's."""
    series = (
        'xce_controller_refusals_total{code="refused_decommissioned",endpoint="/v1/leases/{lease}"}'
    )
    for line in c.scrape().splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_decommissioned_holder_stops_its_singleton_at_once_and_asks_no_more(
    cluster: LeaseCluster,
) -> None:
    holder = cluster.wait_all_held()["lease-0"]
    wait_for(lambda: running(cluster) == [holder], 30)
    agent = cluster.agent(holder)
    r = requests.post(
        f"{cluster.ctl.url}/v1/hosts/{holder}/decommission",
        headers={"Authorization": f"Bearer {ADMIN}"},
        json={},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    wait_for(lambda: "holding -> releasing (host decommissioned" in agent.log(), 30)
    wait_for(lambda: running(cluster) and holder not in running(cluster), 30)
    asked = lease_refusals(cluster)
    assert asked >= 1  # its release, refused: the host is decommissioned
    time.sleep(3 * cluster.ttl)  # it asked every ttl/3 before
    assert lease_refusals(cluster) == asked
    shown = agent.cli("status").stdout
    assert (
        "lease: lease-0: not asked for (token 1): host decommissioned (decommissioned by admin)"
        " [refused_decommissioned]" in shown
    )
    refused = agent.cli("start", "lease-0")
    assert refused.returncode == 1 and "never starts" in refused.stderr
    assert violations(intervals(cluster.records)["lease-0"]) == []
