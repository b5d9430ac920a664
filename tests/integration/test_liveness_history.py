"""The liveness checker's judge can fail: each breach it names, from a history built by hand
(the rig's runs only show it passing)."""

from __future__ import annotations

from tests.integration.liveness_history import Beats, Loss, violations

GRACE, SLACK = 12.0, 4.0
BEATING = Beats([float(t) for t in range(100, 140)])


def test_a_clean_history_has_no_breach() -> None:
    hosts = {"a": BEATING, "b": Beats([100.0, 101.0], silenced_at=101.5)}
    assert violations(hosts, [Loss("b", 101.0 + GRACE, "no heartbeat")], GRACE, SLACK) == []


def test_a_host_that_kept_beating_and_was_lost_is_a_breach() -> None:
    found = violations({"a": BEATING}, [Loss("a", 120.0, "no heartbeat")], GRACE, SLACK)
    assert found == ["a kept sending heartbeats and was declared lost at 120.0 (no heartbeat)"]


def test_a_silenced_host_lost_too_soon_is_a_breach() -> None:
    hosts = {"b": Beats([100.0, 101.0], silenced_at=101.5)}
    soon = 101.0 + GRACE - SLACK - 0.5
    [found] = violations(hosts, [Loss("b", soon, "no heartbeat")], GRACE, SLACK)
    assert found.startswith("b declared lost at 108.5 (no heartbeat), 7.5s after a heartbeat")


def test_a_loss_within_the_slack_of_the_grace_is_no_breach() -> None:
    hosts = {"b": Beats([100.0, 101.0], silenced_at=101.5)}
    at = 101.0 + GRACE - SLACK + 0.1
    assert violations(hosts, [Loss("b", at, "no heartbeat")], GRACE, SLACK) == []


def test_only_heartbeats_acknowledged_before_the_loss_count() -> None:
    # Acknowledged after the loss was decided (a replica that had not yet heard of it):
    # the loss is judged against the last heartbeat before it.
    hosts = {"b": Beats([100.0, 130.0], silenced_at=131.0)}
    assert violations(hosts, [Loss("b", 120.0, "no heartbeat")], GRACE, SLACK) == []


def test_a_silenced_host_never_lost_is_a_breach() -> None:
    found = violations({"b": Beats([100.0], silenced_at=100.5)}, [], GRACE, SLACK)
    assert found == ["b went silent at 100.5 and was never declared lost"]


def test_a_loss_of_no_host_of_the_run_is_a_breach() -> None:
    found = violations({"a": BEATING}, [Loss("ghost", 110.0, "no heartbeat")], GRACE, SLACK)
    assert found == ["ghost declared lost at 110.0 is no host of the run"]
