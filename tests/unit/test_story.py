"""`xcecli why`'s story, from events: durations, every kind told, long histories summed up."""

from __future__ import annotations

from typing import Any

from xce_controller.core.story import duration, story


def ev(seq: int, at: float, kind: str, by: str = "controller", **data: Any) -> dict[str, Any]:
    state = data.get("state", "")
    return {"seq": seq, "at": at, "kind": kind, "by": by, "why": data.get("why", ""),
            "code": data.get("code", ""), "state": state, "data": data}  # fmt: skip


HOST = {
    "key": "i-1",
    "name": "n1",
    "state": "returned",
    "reason": "instance returned",
    "history": [{"at": 1000.0, "state": "returned", "by": "provisioner", "why": "x"}],
    "report": {"at": 700.0, "agent_state": "decommissioned"},
}


def test_durations() -> None:
    assert [duration(x) for x in (0, 59.4, 61, 3599, 3600 * 2 + 65, 86400 * 3 + 7200)] == [
        "0s", "59s", "1m01s", "59m59s", "2h01m", "3d2h",
    ]  # fmt: skip


def test_the_decommission_story_in_order_with_durations() -> None:
    events = [
        ev(1, 0, "expected", "provisioner", instance_id="i-1", template="gpu", deadline=600),
        ev(2, 90, "joined", "n1", name="n1", instance_id="i-1", provisioned=True),
        ev(3, 100, "job_assigned", key="i-1", id=7),
        ev(4, 101, "job_started", "n1", id=7),
        ev(5, 400, "drain", "admin", key="i-1", timeout=60, policy="requeue", why="scale in"),
        ev(6, 460, "job_requeued", id=7, why="drain timeout", code="drain_timeout_requeued"),
        ev(7, 460, "state", key="i-1", state="decommissioned", why="scale in",
           code="drain_timeout_requeued"),
        ev(8, 1000, "state", "provisioner", key="i-1", state="returned", why="instance returned"),
        ev(9, 1001, "a_kind_from_the_future", "controller", why="new"),
    ]  # fmt: skip
    lines = story(HOST, events, now=1060)
    text = "\n".join(lines)
    assert lines[0] == "n1 is returned: instance returned (for 1m00s)"
    assert "to join within 10m00s" in lines[1]
    assert "joined as n1 (provisioned instance i-1) (1m30s after it was expected)" in text
    assert "job 7 requeued after 5m59s: drain timeout [drain_timeout_requeued]" in text
    assert "decommission requested by admin: scale in (policy requeue, drain timeout 1m00s)" in text
    assert "(1m00s after the decommission request)" in text
    assert (
        "its agent was refused and reported: decommissioned [refused_decommissioned] (4m00s" in text
    )
    assert "returned by provisioner: instance returned (9m00s after it left the cluster)" in text
    assert lines[-1].endswith("a_kind_from_the_future by controller: new")


def test_a_long_history_is_summed_up_but_requeues_stay() -> None:
    events = []
    for n in range(100):
        events += [
            ev(3 * n, n, "job_assigned", key="i-1", id=n),
            ev(3 * n + 1, n, "job_finished", "n1", id=n, exit_code=0),
        ]
    events.insert(10, ev(999, 3, "job_requeued", id=3, why="host lost"))
    lines = story({**HOST, "report": None}, events, now=200)
    assert len(lines) < 30
    assert lines[1].endswith("94 earlier jobs (94 finished, 1 requeued), told in `xcecli events`")
    assert lines[2].endswith("job 3 requeued: host lost")  # a requeue is always told
    assert lines[-1].endswith("job 99 finished with exit code 0 after 0s")


def test_credentials_renewed_confirmed_and_refused_are_told_with_their_codes() -> None:
    host = {**HOST, "state": "open", "reason": "", "history": []}
    events = [
        ev(1, 0, "joined", "n1", name="n1", instance_id="i-1", provisioned=True),
        ev(2, 60, "renewed", "n1", key="i-1", incarnation=2, code="credential_renewed"),
        ev(3, 61, "confirmed", "n1", key="i-1", code="credential_confirmed"),
        ev(4, 90, "refused", "n1", key="i-1", why="stale_incarnation",
           detail="earlier credential from 192.0.2.9", code="refused_stale_incarnation"),
    ]  # fmt: skip
    text = "\n".join(story(host, events, now=100))
    assert (
        "its agent resumed with its credential; incarnation 2 issued [credential_renewed]" in text
    )
    assert "earlier ones are stale now [credential_confirmed]" in text
    assert (
        "an attempt by n1 refused: earlier credential from 192.0.2.9 [refused_stale_incarnation]"
        in text
    )


def test_lease_grants_releases_and_losses_are_told_from_this_hosts_side() -> None:
    host = {"key": "n1", "name": "n1", "state": "open", "history": []}
    events = [
        ev(1, 10, "lease_granted", "n1", lease="prov", host="n1", token=1, code="lease_granted"),
        ev(2, 20, "lease_released", "n1", lease="prov", host="n1", token=1,
           code="lease_released"),
        ev(3, 30, "lease_granted", "n1", lease="prov", host="n1", token=3, previous="n2",
           code="lease_taken_over"),
        ev(4, 40, "lease_granted", "n1", lease="prov", host="n1", token=4, previous="n1",
           code="lease_regranted"),
        ev(5, 50, "lease_granted", "N2", lease="prov", host="N2", token=5, previous="n1",
           code="lease_taken_over"),
    ]  # fmt: skip
    text = "\n".join(story(host, events, now=60))
    assert "lease prov granted, token 1 [lease_granted]" in text
    assert "lease prov given back, token 1 [lease_released]" in text
    assert (
        "lease prov granted, token 3, taken over from n2 (its grant had run out)"
        " [lease_taken_over]" in text
    )
    assert "lease prov granted, token 4, again: its own grant had run out [lease_regranted]" in text
    assert "lease prov lost: its grant ran out and N2 got it, token 5 [lease_taken_over]" in text
