"""POST /v1/hosts/{host}/notice against the controller process: recorded, acted on, shown."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.bearers import Bearers
from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import wait_for
from xce_controller.store.sqlite import Store

CONFIG = """\
version: 1
heartbeat_interval: 1s
host_loss_grace: 3s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
auth: {admin_token: adm1n, join_token: j0in-t0ken}
templates:
  default: {slots: 2}
notices: {margin: 10s, rebalance_reopen: 2s}
"""
BEARERS = Bearers("adm1n", "j0in-t0ken")


# On PostgreSQL too: the notice timers (requeue at the deadline, once) and a lost host's
# notice; the rest decides nothing a store sees differently, and each run costs a process.
PG_TESTS = {
    "test_the_requeue_on_a_notice_happens_once_and_the_old_host_cannot_finish_it",
    "test_preemption_closes_the_host_and_requeues_at_deadline_minus_margin",
    "test_lost_host_with_a_notice_is_listed_to_return_with_it",
    "test_rebalance_reopens_by_itself",
}


@pytest.fixture
def ctl(tmp_path: Path, store_db: str) -> Iterator[ControllerProcess]:
    proc = ControllerProcess(tmp_path, CONFIG, db=store_db).start()
    yield proc
    proc.stop()


def call(ctl: ControllerProcess, method: str, path: str, body: Any = None) -> requests.Response:
    return BEARERS.call(ctl.url, method, path, body)


def joined_with_job(ctl: ControllerProcess, name: str = "n1") -> int:
    r = call(ctl, "POST", "/v1/join", {"host": name, "instance_id": f"i-{name}", "boot_id": "b1"})
    assert r.status_code == 200, r.text
    job = call(ctl, "POST", "/v1/jobs", {"command": ["sleep", "600"], "host": name}).json()
    assert call(ctl, "POST", f"/v1/hosts/{name}/jobs/{job['id']}/started", {}).status_code == 200
    return int(job["id"])


def notice(ctl: ControllerProcess, name: str = "n1", **body: Any) -> requests.Response:
    return call(ctl, "POST", f"/v1/hosts/{name}/notice", {"instance_id": f"i-{name}", **body})


def job_state(ctl: ControllerProcess, job_id: int) -> dict[str, Any]:
    return next(j for j in call(ctl, "GET", "/v1/jobs").json() if j["id"] == job_id)


def xcecli(ctl: ControllerProcess, *args: str) -> str:
    cmd = [sys.executable, "-m", "xce_controller.cli.xcecli", "--url", ctl.url, "--token", "adm1n"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, check=True).stdout


def test_preemption_closes_the_host_and_requeues_at_deadline_minus_margin(
    ctl: ControllerProcess,
) -> None:
    job = joined_with_job(ctl)
    sent = time.time()
    r = notice(
        ctl,
        kind="preemption",
        provider="aws",
        event_id="aws-spot",
        deadline=sent + 12,
        raw='{"action": "terminate", "time": "..."}',
    )
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["state"] == "closed" and answer["notice"]["kind"] == "preemption"
    assert answer["notice"]["drained"] is False
    assert job_state(ctl, job)["state"] == "running"  # 2 s left before deadline - margin
    wait_for(lambda: job_state(ctl, job)["state"] == "pending", timeout=10)
    assert time.time() >= sent + 2 - 0.1
    assert "preemption notice (aws)" in job_state(ctl, job)["note"]
    beat = call(ctl, "POST", "/v1/hosts/n1/heartbeat", {"instance_id": "i-n1"}).json()
    assert beat["notice"]["drained"] is True
    host = call(ctl, "GET", "/v1/hosts/n1").json()
    assert host["notice"]["event_id"] == "aws-spot" and host["notice"]["acted"] is True
    assert "preemption" in xcecli(ctl, "hosts")
    assert "notice            preemption from aws (aws-spot)" in xcecli(ctl, "host", "n1")


def test_shutdown_requeues_before_the_answer(ctl: ControllerProcess) -> None:
    job = joined_with_job(ctl)
    assert notice(ctl, kind="shutdown", provider="os").json()["notice"]["drained"] is True
    assert job_state(ctl, job)["state"] == "pending"


def test_rebalance_reopens_by_itself(ctl: ControllerProcess) -> None:
    joined_with_job(ctl)
    assert notice(ctl, kind="rebalance", provider="aws").json()["state"] == "closed"
    wait_for(lambda: call(ctl, "GET", "/v1/hosts/n1").json()["state"] == "open", timeout=10)
    assert call(ctl, "GET", "/v1/hosts/n1").json()["notice"] is None


def test_a_host_an_admin_closes_during_rebalance_advice_stays_closed(
    ctl: ControllerProcess,
) -> None:
    joined_with_job(ctl)
    assert notice(ctl, kind="rebalance", provider="aws").json()["state"] == "closed"
    assert call(ctl, "POST", "/v1/hosts/n1/close", {"reason": "bad disk"}).status_code == 200
    wait_for(lambda: call(ctl, "GET", "/v1/hosts/n1").json()["notice"] is None, timeout=10)
    host = call(ctl, "GET", "/v1/hosts/n1").json()
    assert host["state"] == "closed", host  # the advice lapsed; the admin's close holds
    assert call(ctl, "POST", "/v1/hosts/n1/open", {}).json()["state"] == "open"


def test_maintenance_reboot_reopens_when_the_host_rejoins_after_it(ctl: ControllerProcess) -> None:
    job = joined_with_job(ctl)
    r = notice(
        ctl,
        kind="maintenance",
        provider="aws",
        event_id="instance-event-1",
        deadline=time.time() + 5,
        impact="reboot",
    )
    assert r.json()["state"] == "closed"
    assert job_state(ctl, job)["state"] == "pending"  # NotBefore - margin has passed
    again = {"host": "n1", "instance_id": "i-n1", "boot_id": "b1"}
    assert call(ctl, "POST", "/v1/join", again).json()["state"] == "closed"  # same boot
    rebooted = call(ctl, "POST", "/v1/join", {**again, "boot_id": "b2"}).json()
    assert rebooted["state"] == "open" and rebooted["notice"] is None


def test_a_host_back_from_the_shutdown_it_announced_reopens_on_its_renewing_heartbeat(
    ctl: ControllerProcess,
) -> None:
    """A rebooted agent resumes with its credential (a heartbeat that renews it), not a join:
    that heartbeat ends the notice and reopens the host, as a join after the reboot would."""
    joined_with_job(ctl)
    assert notice(ctl, kind="shutdown", provider="os").json()["state"] == "closed"

    def renew(boot: str) -> dict[str, Any]:
        body = {"instance_id": "i-n1", "boot_id": boot, "renew": True}
        r = call(ctl, "POST", "/v1/hosts/n1/heartbeat", body)
        assert r.status_code == 200, r.text
        BEARERS.held[(ctl.url, "n1")] = r.json()["credential"]
        answer: dict[str, Any] = r.json()
        return answer

    same_boot = renew("b1")  # an agent restart, no reboot: the notice still stands
    assert same_boot["state"] == "closed" and same_boot["notice"]["kind"] == "shutdown"
    rebooted = renew("b2")
    assert rebooted["state"] == "open" and rebooted["notice"] is None
    host = call(ctl, "GET", "/v1/hosts/n1").json()
    assert host["state"] == "open" and host["notice"] is None


def test_lost_host_with_a_notice_is_listed_to_return_with_it(ctl: ControllerProcess) -> None:
    call(ctl, "POST", "/v1/expected", {"instance_id": "i-n1", "template": "default"})
    joined_with_job(ctl)
    notice(ctl, kind="preemption", provider="gce", deadline=time.time() + 30)
    wait_for(lambda: call(ctl, "GET", "/v1/to-return").json(), timeout=15)
    [listed] = call(ctl, "GET", "/v1/to-return").json()
    assert listed["notice"]["kind"] == "preemption"
    assert "preemption" in xcecli(ctl, "to-return")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"kind": "explosion"}, "kind"),
        ({"kind": "preemption", "deadline": "soon"}, "deadline"),
        ({"kind": "preemption", "deadline": -1}, "deadline"),
        ({"kind": "preemption", "raw": "x" * 9000}, "raw"),
        ({"kind": "preemption", "state": "maybe"}, "state"),
    ],
)
def test_bad_notices_are_refused_with_the_field(
    ctl: ControllerProcess, body: dict[str, Any], message: str
) -> None:
    job = joined_with_job(ctl)
    r = notice(ctl, **body)
    assert r.status_code == 422 and message in r.json()["message"]
    assert call(ctl, "GET", "/v1/hosts/n1").json()["state"] == "open"  # nothing changed
    still_obeys_a_valid_notice(ctl, job)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "1e11"])
def test_non_finite_or_absurd_deadlines_are_refused(ctl: ControllerProcess, literal: str) -> None:
    job = joined_with_job(ctl)
    body = f'{{"instance_id": "i-n1", "kind": "preemption", "deadline": {literal}}}'
    r = requests.post(
        ctl.url + "/v1/hosts/n1/notice",
        data=body,
        headers={
            "Authorization": f"Bearer {BEARERS.held[(ctl.url, 'n1')]}",
            "Content-Type": "application/json",
        },
        timeout=10,
    )
    assert r.status_code == 422, r.text
    assert call(ctl, "GET", "/v1/hosts/n1").json()["state"] == "open"
    still_obeys_a_valid_notice(ctl, job)


def test_control_characters_in_a_notice_never_reach_the_admins_terminal(
    ctl: ControllerProcess,
) -> None:
    joined_with_job(ctl)
    hostile = "\x1b]0;owned\x07\x1b[2J\nforged line"
    r = notice(ctl, kind="preemption", provider=hostile, event_id=hostile, raw=hostile)
    assert r.status_code == 200, r.text
    for args in (("host", "n1"), ("hosts",), ("why", "n1")):
        out = xcecli(ctl, *args)
        assert "\x1b" not in out and "\x07" not in out, (args, out)
        assert "\nforged line" not in out, (args, out)


def test_a_notice_that_races_the_join_waits_for_it_and_then_closes_the_host(
    ctl: ControllerProcess,
) -> None:
    # The watcher starts with the agent: a notice already posted at boot can reach the
    # controller before the join. Taken on the expected record, the join then dropped it.
    expect = {"instance_id": "i-n1", "template": "default", "expected_name": "n1"}
    assert call(ctl, "POST", "/v1/expected", expect).status_code == 201
    spot: dict[str, Any] = {"kind": "preemption", "provider": "aws", "deadline": time.time() + 120}
    # Before its join's answer the agent holds no host credential: refused as not joined
    # (unauthorized), which the agent retries once it has joined.
    for name in ("n1", "i-n1"):
        early = call(ctl, "POST", f"/v1/hosts/{name}/notice", {**spot, "instance_id": "i-n1"})
        assert early.status_code == 401 and early.json()["error"] == "unauthorized", early.text
    assert call(ctl, "GET", "/v1/hosts/n1").json()["notice"] is None  # nothing kept
    joined = call(ctl, "POST", "/v1/join", {"host": "n1", "instance_id": "i-n1", "boot_id": "b1"})
    assert joined.json()["state"] == "open"
    retried = notice(ctl, **spot)  # the agent retries the refusal
    assert retried.json()["state"] == "closed" and retried.json()["notice"]["kind"] == "preemption"


def still_obeys_a_valid_notice(ctl: ControllerProcess, job: int, name: str = "n1") -> None:
    """After a refused or ignored notice, a valid one from the host still acts at once."""
    r = notice(ctl, name, kind="shutdown", provider="os", event_id="shutdown-b1")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "closed" and job_state(ctl, job)["state"] == "pending"


def test_notice_for_another_instance_or_unknown_host_is_refused(ctl: ControllerProcess) -> None:
    job = joined_with_job(ctl)
    # n1's credential speaks for n1 only: as another instance, or for a host it is not.
    r = call(ctl, "POST", "/v1/hosts/n1/notice", {"kind": "shutdown", "instance_id": "i-other"})
    assert (r.status_code, r.json()["error"]) == (401, "unknown_credential")
    held = BEARERS.held[(ctl.url, "n1")]
    r = requests.post(
        ctl.url + "/v1/hosts/ghost/notice",
        json={"kind": "shutdown"},
        headers={"Authorization": f"Bearer {held}"},
        timeout=10,
    )
    assert (r.status_code, r.json()["error"]) == (401, "unknown_credential")
    assert call(ctl, "GET", "/v1/hosts/n1").json()["state"] == "open"
    assert job_state(ctl, job)["state"] == "running"
    still_obeys_a_valid_notice(ctl, job)


def test_notice_for_a_decommissioned_host_is_refused_and_changes_nothing(
    ctl: ControllerProcess,
) -> None:
    job = joined_with_job(ctl)
    r = call(ctl, "POST", "/v1/join", {"host": "n2", "instance_id": "i-n2", "boot_id": "b1"})
    assert r.status_code == 200
    r = call(ctl, "POST", "/v1/hosts/n2/decommission", {"reason": "gone"})
    assert r.status_code == 200, r.text

    def host() -> dict[str, Any]:
        answer: dict[str, Any] = call(ctl, "GET", "/v1/hosts/n2").json()
        return answer

    wait_for(lambda: host()["state"] == "decommissioned", timeout=10)  # nothing ran on it
    facts = len(call(ctl, "GET", "/v1/events").text.splitlines())
    r = notice(ctl, "n2", kind="preemption", provider="aws", deadline=time.time() + 60)
    assert r.status_code == 410 and r.json()["error"] == "decommissioned"
    assert host()["state"] == "decommissioned" and host()["notice"] is None
    assert len(call(ctl, "GET", "/v1/events").text.splitlines()) == facts  # no fact
    still_obeys_a_valid_notice(ctl, job)


def test_deadlines_in_the_past_act_at_once_far_future_ones_wait(ctl: ControllerProcess) -> None:
    job = joined_with_job(ctl)
    far = notice(ctl, kind="preemption", provider="aws", event_id="far", deadline=9.9e10)
    assert far.status_code == 200 and far.json()["state"] == "closed"
    beat = call(ctl, "POST", "/v1/hosts/n1/heartbeat", {"instance_id": "i-n1"})
    assert beat.status_code == 200 and job_state(ctl, job)["state"] == "running"
    job2 = joined_with_job(ctl, "n2")
    past = notice(ctl, "n2", kind="preemption", provider="aws", event_id="past", deadline=1.0)
    assert past.status_code == 200 and job_state(ctl, job2)["state"] == "pending"
    assert job_state(ctl, job)["state"] == "running"  # the far one still waits
    still_obeys_a_valid_notice(ctl, job)  # and a stronger one still acts


def test_a_lost_host_that_relays_a_preemption_comes_back_closed(ctl: ControllerProcess) -> None:
    # Its agent was partitioned longer than the grace; the notice is the first thing heard.
    job = joined_with_job(ctl)
    wait_for(lambda: call(ctl, "GET", "/v1/hosts/n1").json()["state"] == "lost", timeout=15)
    assert job_state(ctl, job)["state"] == "pending"  # requeued at the loss
    r = notice(ctl, kind="preemption", provider="aws", event_id="s", deadline=time.time() + 60)
    assert r.status_code == 200 and r.json()["state"] == "closed", r.text
    beat = call(ctl, "POST", "/v1/hosts/n1/heartbeat", {"instance_id": "i-n1"}).json()
    assert beat["state"] == "closed"  # not open again: it is about to go
    assert call(ctl, "GET", "/v1/hosts/n1").json()["notice"]["event_id"] == "s"
    assert job_state(ctl, job)["assigned"] == ""  # no work placed on it


def test_the_requeue_on_a_notice_happens_once_and_the_old_host_cannot_finish_it(
    ctl: ControllerProcess,
) -> None:
    r = call(ctl, "POST", "/v1/join", {"host": "n1", "instance_id": "i-n1", "boot_id": "b1"})
    assert r.status_code == 200
    job = int(call(ctl, "POST", "/v1/jobs", {"command": ["sleep", "600"]}).json()["id"])
    assert call(ctl, "POST", f"/v1/hosts/n1/jobs/{job}/started", {}).status_code == 200
    call(ctl, "POST", "/v1/join", {"host": "n2", "instance_id": "i-n2", "boot_id": "b1"})
    spot = {"kind": "preemption", "provider": "aws", "event_id": "aws-spot"}
    assert notice(ctl, **spot, deadline=time.time() + 11).status_code == 200
    wait_for(lambda: job_state(ctl, job)["state"] in ("assigned", "running"), timeout=10)
    wait_for(lambda: job_state(ctl, job)["requeues"] == 1, timeout=10)
    n2 = call(ctl, "GET", "/v1/hosts/n2").json()["key"]
    wait_for(lambda: job_state(ctl, job)["assigned"] == n2, timeout=10)
    assert call(ctl, "POST", f"/v1/hosts/n2/jobs/{job}/started", {}).status_code == 200
    # The same notice again (its time moved), and a stronger one: nothing is requeued again.
    assert notice(ctl, **spot, deadline=time.time() + 5).status_code == 200
    assert notice(ctl, kind="shutdown", provider="os").status_code == 200
    finished = call(ctl, "POST", f"/v1/hosts/n1/jobs/{job}/finished", {"exit_code": 0})
    assert finished.status_code == 404  # the old copy's report does not count
    listed = job_state(ctl, job)
    assert (listed["state"], listed["assigned"], listed["requeues"]) == ("running", n2, 1)


def test_notices_are_facts_replay_rebuilds_them(tmp_path: Path) -> None:
    ctl = ControllerProcess(tmp_path, CONFIG).start()
    try:
        joined_with_job(ctl)
        notice(ctl, kind="maintenance", provider="azure", event_id="E1", deadline=time.time() + 11)
        wait_for(lambda: call(ctl, "GET", "/v1/hosts/n1").json()["notice"]["acted"], timeout=10)
    finally:
        ctl.stop()
    store = Store(ctl.db)
    stored, _ = store.load()
    replayed = store.replay()
    assert stored.hosts == replayed.hosts and stored.jobs == replayed.jobs
    assert [f.kind for f in store.facts()].count("notice") == 2  # received, then acted on
    store.close()
