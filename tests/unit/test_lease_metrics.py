"""The controller's lease metrics through a takeover, a renewal, a release and a restart,
read back from the exposition text as Prometheus would scrape it."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from xce_controller.core.lifecycle import Refused
from xce_controller.http import lease_metrics
from xce_controller.lease_desk import LeaseDesk
from xce_controller.store.sqlite import Store


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def desk_with_metrics(path: Path, clock: Clock) -> tuple[LeaseDesk, CollectorRegistry]:
    desk = LeaseDesk(Store(path), monotonic=clock, wall=lambda: 1.7e9)
    registry = CollectorRegistry(auto_describe=False)
    lease_metrics.register(registry, desk)
    return desk, registry


def test_a_takeover_moves_the_counters_and_the_gauges(tmp_path: Path) -> None:
    clock = Clock()
    desk, registry = desk_with_metrics(tmp_path / "db", clock)
    desk.acquire("prov", "h1", "s1", 10.0)
    clock.now += 3
    desk.acquire("prov", "h1", "s1", 10.0)  # a renewal
    with pytest.raises(Refused) as refused:
        desk.acquire("prov", "h2", "s2", 10.0)
    assert refused.value.code.value == "refused_lease_held"
    m = scrape(registry)
    assert value(m, "xce_controller_lease_grants_total", lease="prov", code="lease_granted") == 1
    assert value(m, "xce_controller_lease_renewals_total", lease="prov") == 1
    assert value(m, "xce_controller_lease_holder", lease="prov", host="h1") == 1
    assert value(m, "xce_controller_lease_token", lease="prov") == 1
    assert value(m, "xce_controller_lease_expires_in_seconds", lease="prov") == 10.0
    assert value(m, "xce_controller_leases", state="held") == 1
    assert value(m, "xce_controller_lease_expiries_total", lease="prov") == 0

    clock.now += 10  # h1 stopped renewing: a scrape sees the expiry before anyone asks
    m = scrape(registry)
    assert value(m, "xce_controller_leases", state="expired") == 1
    assert value(m, "xce_controller_lease_held", lease="prov") == 0
    assert value(m, "xce_controller_lease_expiries_total", lease="prov") == 1
    assert ("xce_controller_lease_holder", (("host", "h1"), ("lease", "prov"))) not in m

    desk.acquire("prov", "h2", "s2", 10.0)
    m = scrape(registry)
    assert value(m, "xce_controller_lease_grants_total", lease="prov", code="lease_taken_over") == 1
    assert value(m, "xce_controller_lease_expiries_total", lease="prov") == 1  # counted once
    assert value(m, "xce_controller_lease_holder", lease="prov", host="h2") == 1
    assert value(m, "xce_controller_lease_token", lease="prov") == 2

    desk.release("prov", "h2", "s2")
    m = scrape(registry)
    assert value(m, "xce_controller_lease_releases_total", lease="prov") == 1
    assert value(m, "xce_controller_leases", state="free") == 1
    assert value(m, "xce_controller_lease_token", lease="prov") == 2  # kept: never reused


def test_an_expiry_found_by_a_request_is_counted_once(tmp_path: Path) -> None:
    clock = Clock()
    desk, registry = desk_with_metrics(tmp_path / "db", clock)
    desk.acquire("prov", "h1", "s1", 5.0)
    clock.now += 6
    desk.listing()
    desk.acquire("prov", "h1", "s1", 5.0)  # the same holder, late: a new grant
    clock.now += 6
    m = scrape(registry)
    assert value(m, "xce_controller_lease_grants_total", lease="prov", code="lease_regranted") == 1
    assert value(m, "xce_controller_lease_expiries_total", lease="prov") == 2
    assert value(m, "xce_controller_lease_token", lease="prov") == 2


def test_after_a_restart_the_token_is_kept_and_counters_start_at_zero(tmp_path: Path) -> None:
    clock = Clock()
    desk, _ = desk_with_metrics(tmp_path / "db", clock)
    desk.acquire("prov", "h1", "s1", 5.0)
    desk.store.close()
    _, registry = desk_with_metrics(tmp_path / "db", clock)
    m = scrape(registry)
    assert value(m, "xce_controller_lease_token", lease="prov") == 1
    assert value(m, "xce_controller_lease_held", lease="prov") == 1  # one TTL for its holder
    assert value(m, "xce_controller_lease_grants_total", lease="prov", code="lease_granted") == 0


def test_the_controller_keeps_a_bounded_number_of_leases(tmp_path: Path) -> None:
    from xce_controller.lease_desk import MAX_LEASES, MAX_LEASES_PER_HOST

    clock = Clock()
    desk, _ = desk_with_metrics(tmp_path / "db", clock)
    for i in range(MAX_LEASES):
        desk.acquire(f"l{i}", f"h{i // MAX_LEASES_PER_HOST}", "s1", 10.0)
    with pytest.raises(Refused) as refused:
        desk.acquire("one-more", "h-new", "s1", 10.0)
    assert refused.value.status == 409 and refused.value.code.value == "refused_lease_limit"
    assert len(desk.listing()) == MAX_LEASES
    # The leases it keeps still work: renewed, released, and granted again.
    assert desk.acquire("l0", "h0", "s1", 10.0).token == 1
    desk.release("l0", "h0", "s1")
    assert desk.acquire("l0", "h2", "s2", 10.0).token == 2
