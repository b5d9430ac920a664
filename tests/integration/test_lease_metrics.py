"""Lease metrics on both sides through a takeover: the holder cut off from the controller
(its traffic blackholed) counts failed renewals and loses its hold; the controller counts the
expiry and the takeover; the new holder shows the next fencing token; a graceful stop is a
release. Both sides' output passes `promtool check metrics`."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.helpers import wait_for
from tests.integration.lease_cluster import LeaseCluster

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, tuple(sorted(labels.items()))), 0.0)


def agent_value(c: LeaseCluster, host: str, name: str, **labels: str) -> float:
    return value(c.agent(host).metrics(), name, component="lease-0", lease="lease-0", **labels)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LeaseCluster]:
    c = LeaseCluster(tmp_path, hosts=2, leases=1, ttl=2.0).start()
    yield c
    c.close()


def test_counters_follow_a_takeover_and_a_release(cluster: LeaseCluster) -> None:
    c = cluster
    old = c.wait_all_held()["lease-0"]
    new = next(a.name for a in c.agents if a.name != old)
    wait_for(lambda: agent_value(c, old, "xce_agent_singleton_holding") == 1, 30)
    assert agent_value(c, old, "xce_agent_singleton_token") == 1
    assert agent_value(c, old, "xce_agent_lease_holds_total") == 1
    # The other host asks and is refused: it waits, and says why.
    wait_for(
        lambda: (
            agent_value(
                c, new, "xce_agent_singleton_state", phase="seeking", code="refused_lease_held"
            )
            == 1
        ),
        30,
    )
    before = c.scrape()
    assert (
        value(before, "xce_controller_lease_grants_total", lease="lease-0", code="lease_granted")
        == 1
    )
    assert value(before, "xce_controller_lease_holder", lease="lease-0", host=old) == 1
    renewals = "xce_controller_lease_renewals_total"
    wait_for(lambda: value(c.scrape(), renewals, lease="lease-0") >= 1, 30)
    refused = value(
        before,
        "xce_controller_refusals_total",
        endpoint="/v1/leases/{lease}",
        code="refused_lease_held",
    )
    assert refused >= 1

    c.agent(old).proxy.blackhole(True)
    try:
        wait_for(lambda: agent_value(c, new, "xce_agent_singleton_holding") == 1, 30)
        wait_for(
            lambda: (
                agent_value(c, old, "xce_agent_lease_losses_total", code="lease_not_renewed") == 1
            ),
            30,
        )
        assert agent_value(c, old, "xce_agent_singleton_holding") == 0
        # Its renewal in flight times out (at the deadline, or just after it).
        wait_for(lambda: agent_value(c, old, "xce_agent_lease_renew_failures_total") >= 1, 30)
        assert agent_value(c, old, "xce_agent_lease_losses_total", code="lease_lost") == 0
        assert agent_value(c, new, "xce_agent_singleton_token") == 2
        assert agent_value(c, new, "xce_agent_lease_holds_total") == 1
        after = c.scrape()
        grants = "xce_controller_lease_grants_total"
        assert value(after, grants, lease="lease-0", code="lease_taken_over") == 1
        assert value(after, grants, lease="lease-0", code="lease_granted") == 1
        assert value(after, "xce_controller_lease_expiries_total", lease="lease-0") == 1
        assert value(after, "xce_controller_lease_token", lease="lease-0") == 2
        assert value(after, "xce_controller_lease_holder", lease="lease-0", host=new) == 1
        assert value(after, "xce_controller_leases", state="held") == 1
    finally:
        c.agent(old).proxy.blackhole(False)
    # Back in contact, the old holder is refused: it waits behind the new one.
    wait_for(
        lambda: (
            agent_value(
                c, old, "xce_agent_singleton_state", phase="seeking", code="refused_lease_held"
            )
            == 1
        ),
        30,
    )
    check_with_promtool(c.scrape(), c.agent(old).metrics(), c.agent(new).metrics())

    c.agent(new).graceful_stop()  # a release: the old host gets it at once, as a free lease
    wait_for(lambda: agent_value(c, old, "xce_agent_singleton_holding") == 1, 30)
    last = c.scrape()
    assert value(last, "xce_controller_lease_releases_total", lease="lease-0") == 1
    assert (
        value(last, "xce_controller_lease_grants_total", lease="lease-0", code="lease_granted") == 2
    )
    assert value(last, "xce_controller_lease_expiries_total", lease="lease-0") == 1
    assert agent_value(c, old, "xce_agent_singleton_token") == 3
    assert agent_value(c, old, "xce_agent_lease_holds_total") == 2


def check_with_promtool(*texts: str) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        return  # the counters were asserted; the format check needs prometheus installed
    for text in texts:
        assert "lease" in text
        out = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stdout + out.stderr
