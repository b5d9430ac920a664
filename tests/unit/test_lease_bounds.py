"""Lease names are bounded per host and freed after a retention, tokens never repeat."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.test_lease_metrics import Clock, desk_with_metrics, scrape, value
from xce_controller.core.lifecycle import Refused
from xce_controller.lease_desk import LEASE_RETENTION, MAX_LEASES_PER_HOST, LeaseDesk
from xce_controller.store.sqlite import Store


def fill(desk: LeaseDesk, host: str, ttl: float = 10.0) -> None:
    for i in range(MAX_LEASES_PER_HOST):
        desk.acquire(f"{host}-l{i}", host, "s1", ttl)


def test_one_host_cannot_use_up_the_lease_names_of_the_cluster(tmp_path: Path) -> None:
    """Before: one host credential made 253 names, then every new lease anywhere got 409."""
    desk, _ = desk_with_metrics(tmp_path / "db", Clock())
    fill(desk, "greedy")
    with pytest.raises(Refused) as refused:
        desk.acquire("one-more", "greedy", "s1", 10.0)
    assert (refused.value.status, refused.value.code.value) == (409, "refused_lease_host_limit")
    assert refused.value.details["limit"] == MAX_LEASES_PER_HOST
    assert desk.acquire("provisioner", "node2", "s2", 10.0).token == 1  # others still may
    assert desk.acquire("greedy-l0", "greedy", "s1", 10.0).token == 1  # its own still renew


def test_a_released_name_is_forgotten_after_the_retention_and_its_token_never_repeats(
    tmp_path: Path,
) -> None:
    clock = Clock()
    desk, registry = desk_with_metrics(tmp_path / "db", clock)
    fill(desk, "h1")
    for _ in range(3):  # h1-l0 reaches token 4
        desk.release("h1-l0", "h1", "s1")
        desk.acquire("h1-l0", "h1", "s1", 10.0)
    for i in range(MAX_LEASES_PER_HOST):
        desk.release(f"h1-l{i}", "h1", "s1")
    with pytest.raises(Refused):  # released, but within the retention: still counted
        desk.acquire("new", "h1", "s1", 10.0)
    clock.now += LEASE_RETENTION
    assert desk.acquire("new", "h1", "s1", 10.0).token == 5  # above every forgotten token
    names = [le["lease"] for le in desk.listing()]
    assert names == ["new"]
    assert value(scrape(registry), "xce_controller_lease_token", lease="h1-l0") == 0
    forgotten = [f for f in desk.store.lease_facts() if f.kind == "lease_forgotten"]
    assert len(forgotten) == MAX_LEASES_PER_HOST
    assert desk.acquire("h1-l0", "h1", "s1", 10.0).token == 5  # taken again: above its 4
    desk.store.close()
    # After a restart, and rebuilt from the facts alone, the floor is the same.
    store = Store(tmp_path / "db")
    again = LeaseDesk(store, monotonic=clock)
    again.release("h1-l0", "h1", "s1")
    assert again.acquire("fresh", "h2", "s1", 10.0).token == 5
    store.db.execute("UPDATE leases SET data = ? WHERE name != ''", (json.dumps({}),))
    store.db.execute("DELETE FROM leases WHERE name = ''")
    store.db.commit()
    rebuilt = LeaseDesk(store, monotonic=clock)
    assert rebuilt.book.floor == 4
    assert rebuilt.acquire("other", "h3", "s1", 10.0).token == 5


def test_an_expired_grant_counts_as_idle_from_its_expiry(tmp_path: Path) -> None:
    clock = Clock()
    desk, _ = desk_with_metrics(tmp_path / "db", clock)
    fill(desk, "h1", ttl=5.0)  # never renewed nor released: its agent died
    clock.now += 5.0 + LEASE_RETENTION - 1
    with pytest.raises(Refused):
        desk.acquire("new", "h1", "s1", 10.0)
    clock.now += 1
    assert desk.acquire("new", "h1", "s1", 10.0).token == 2  # above the forgotten 1s
