"""The controller's lease machine: grants, renewals, expiry, release, restart, fencing tokens."""

from __future__ import annotations

import random

import pytest

from xce_controller.core import leases as ls
from xce_controller.core.model import Fact


def acquire(book: ls.Book, host: str, now: float, session: str = "s1", ttl: float = 10.0):  # type: ignore[no-untyped-def]
    return ls.step(book, ls.Acquire("prov", host, session, ttl, 1000.0 + now), now)


def test_first_grant_is_token_one_and_a_fact() -> None:
    _, facts, answer = acquire(ls.EMPTY, "a", 0.0)
    assert isinstance(answer, ls.Held)
    assert answer.lease.token == 1 and answer.lease.host == "a" and answer.lease.expires == 10.0
    assert [f.kind for f in facts] == [ls.GRANTED] and facts[0].data["token"] == 1
    assert facts[0].data["code"] == "lease_granted" and ls.expired(ls.EMPTY, 0.0) == []


def test_renewal_by_the_holder_moves_expiry_and_stores_nothing() -> None:
    book, _, _ = acquire(ls.EMPTY, "a", 0.0)
    book, facts, answer = acquire(book, "a", 6.0)
    assert facts == [] and isinstance(answer, ls.Held)
    assert answer.lease.token == 1 and answer.lease.expires == 16.0


def test_another_holder_is_refused_until_expiry_then_gets_the_next_token() -> None:
    book, _, _ = acquire(ls.EMPTY, "a", 0.0)
    _, facts, answer = acquire(book, "b", 9.99)
    assert facts == [] and isinstance(answer, ls.Busy) and "held by a" in answer.why
    book, facts, answer = acquire(book, "b", 10.0)
    assert isinstance(answer, ls.Held) and answer.lease.host == "b" and answer.lease.token == 2
    assert facts[0].data["token"] == 2
    assert facts[0].data["code"] == "lease_taken_over" and facts[0].data["previous"] == "a"


def test_expired_lists_the_grants_that_ran_out_unreleased() -> None:
    book, _, _ = acquire(ls.EMPTY, "a", 0.0)
    assert ls.expired(book, 9.99) == []
    assert [le.host for le in ls.expired(book, 10.0)] == ["a"]
    released, _, _ = ls.step(book, ls.Release("prov", "a", "s1", 1.0), 1.0)
    assert ls.expired(released, 20.0) == []


def test_a_restarted_agent_is_a_new_holder() -> None:
    book, _, _ = acquire(ls.EMPTY, "a", 0.0, session="run1")
    _, _, answer = acquire(book, "a", 1.0, session="run2")
    assert isinstance(answer, ls.Busy)


def test_the_holder_after_its_expiry_gets_a_new_token() -> None:
    book, _, _ = acquire(ls.EMPTY, "a", 0.0)
    book, facts, answer = acquire(book, "a", 10.5)
    assert isinstance(answer, ls.Held) and answer.lease.token == 2 and len(facts) == 1
    assert facts[0].data["code"] == "lease_regranted"


def test_renewal_with_another_ttl_is_refused() -> None:
    book, _, _ = acquire(ls.EMPTY, "a", 0.0)
    _, facts, answer = acquire(book, "a", 1.0, ttl=60.0)
    assert facts == [] and isinstance(answer, ls.Busy) and "ttl" in answer.why


def test_release_frees_at_once_and_keeps_the_token() -> None:
    book, _, _ = acquire(ls.EMPTY, "a", 0.0)
    book, facts, answer = ls.step(book, ls.Release("prov", "a", "s1", 1.0), 1.0)
    assert [f.kind for f in facts] == [ls.RELEASED] and facts[0].data["code"] == "lease_released"
    assert isinstance(answer, ls.Held) and not answer.lease.held and answer.lease.token == 1
    book, facts, answer = acquire(book, "b", 1.5)
    assert isinstance(answer, ls.Held) and answer.lease.token == 2
    assert facts[0].data["code"] == "lease_granted"  # free again: not a takeover


def test_release_by_a_non_holder_changes_nothing() -> None:
    book, _, _ = acquire(ls.EMPTY, "a", 0.0)
    after, facts, answer = ls.step(book, ls.Release("prov", "b", "s1", 1.0), 1.0)
    assert facts == [] and isinstance(answer, ls.Busy) and after == book
    after, facts, answer = ls.step(book, ls.Release("other", "b", "s1", 1.0), 1.0)
    assert facts == [] and isinstance(answer, ls.Held) and not answer.lease.held


def test_restart_keeps_a_held_lease_for_one_ttl_from_the_start() -> None:
    book, _, _ = acquire(ls.EMPTY, "a", 0.0, ttl=5.0)
    rows = [ls.to_row(le) for le in book.leases.values()]
    # The controller comes back at monotonic 100 (its clock started anew): the expiry is lost.
    restarted = ls.restored([ls.from_row(r) for r in rows], 100.0)
    _, _, answer = acquire(restarted, "b", 104.9, ttl=5.0)
    assert isinstance(answer, ls.Busy)
    _, facts, answer = acquire(restarted, "a", 101.0, ttl=5.0)
    assert facts == [] and isinstance(answer, ls.Held) and answer.lease.token == 1
    _, _, answer = acquire(restarted, "b", 105.0, ttl=5.0)
    assert isinstance(answer, ls.Held) and answer.lease.token == 2


def test_restart_after_release_grants_at_once() -> None:
    book, _, _ = acquire(ls.EMPTY, "a", 0.0)
    book, _, _ = ls.step(book, ls.Release("prov", "a", "s1", 1.0), 1.0)
    restarted = ls.restored(book.leases.values(), 50.0)
    _, _, answer = acquire(restarted, "b", 50.0)
    assert isinstance(answer, ls.Held) and answer.lease.token == 2


def test_replay_of_the_facts_gives_the_stored_rows() -> None:
    book, stored = ls.EMPTY, []
    for i, host in enumerate(["a", "b", "b", "c", "a"]):
        book, facts, _ = acquire(book, host, 20.0 * i)
        stored += facts
    book, facts, _ = ls.step(book, ls.Release("prov", "a", "s1", 0.0), 80.0)
    stored += facts
    assert {n: ls.to_row(le) for n, le in ls.replay(stored).leases.items()} == {
        n: ls.to_row(le) for n, le in book.leases.items()
    }


@pytest.mark.parametrize("seed", range(20))
def test_random_histories_never_have_two_live_holders_and_tokens_grow(seed: int) -> None:
    rnd = random.Random(seed)  # noqa: S311 - a reproducible history
    book, now, last_token = ls.EMPTY, 0.0, 0
    stored: list[Fact] = []
    for _ in range(300):
        now += rnd.choice([0.1, 1.0, 3.0, 12.0])
        host, session = rnd.choice("abc"), rnd.choice(["1", "2"])
        if rnd.random() < 0.1:
            rows = [ls.to_row(le) for le in book.leases.values()]
            book = ls.restored([ls.from_row(r) for r in rows], now)
            continue
        if rnd.random() < 0.2:
            book, facts, _ = ls.step(book, ls.Release("prov", host, session, now), now)
        else:
            before = book.get("prov")
            book, facts, answer = acquire(book, host, now, session=session)
            if isinstance(answer, ls.Held) and before.live(now):
                assert before.holds(host, session)  # only the live holder renews
        stored += facts
        token = book.get("prov").token
        assert token >= last_token
        last_token = token
    tokens = [f.data["token"] for f in stored if f.kind == ls.GRANTED]
    assert tokens == sorted(set(tokens))


def test_lease_names() -> None:
    assert ls.is_lease_name("provisioner") and ls.is_lease_name("a.b-c_1")
    for bad in ("", "Prov", "a/b", "a b", "x" * 64, "-a"):
        assert not ls.is_lease_name(bad)


def test_facts_name_the_holders_record_and_a_takeover_the_one_that_lost_it() -> None:
    book, facts, _ = ls.step(ls.EMPTY, ls.Acquire("prov", "a", "s1", 10.0, 1.0, "i-a"), 0.0)
    assert facts[0].data["key"] == "i-a" and facts[0].data["previous_key"] == ""
    # Kept across a controller restart, as the holder is.
    book = ls.restored([ls.from_row(ls.to_row(book.get("prov")))], 100.0)
    assert book.get("prov").key == "i-a"
    book, facts, _ = ls.step(book, ls.Acquire("prov", "b", "s2", 10.0, 2.0, "i-b"), 110.0)
    assert (facts[0].data["key"], facts[0].data["previous_key"]) == ("i-b", "i-a")
    released, facts, _ = ls.step(book, ls.Release("prov", "b", "s2", 3.0, "i-b"), 111.0)
    assert facts[0].data["key"] == "i-b"
    # Free, and who had it last is still known (across a restart too).
    lease = ls.from_row(ls.to_row(released.get("prov")))
    assert not lease.held and lease.last_host == "b"
    # A row stored before holders had a record key reads as one without.
    row = {k: v for k, v in ls.to_row(book.get("prov")).items() if k != "key"}
    assert ls.from_row(row).key == ""
