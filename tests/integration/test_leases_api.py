"""Leases on a real controller process: grants, refusals, release, xcecli, kill -9 and restart."""

from __future__ import annotations

import http.server
import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.controller_proc import ControllerProcess
from xce_controller.core import leases
from xce_controller.http.events import KEEPALIVE
from xce_controller.store.open import open_store

TTL = 1.5
RESTART_TTL = 4.0  # outlasts a kill -9 and restart on a loaded machine
CONFIG = """\
version: 1
heartbeat_interval: 1s
host_loss_grace: 60s
auth: {admin_token: adm1n, join_token: j0in-t0ken}
templates:
  default: {slots: 2}
"""
ADMIN = {"Authorization": "Bearer adm1n"}


# On PostgreSQL too, all but the damaged SQLite row (a file of its own).
PG_TESTS = {
    "test_grant_refuse_renew_release",
    "test_expired_lease_goes_to_the_next_host_with_the_next_token",
    "test_bad_requests_are_one_line_and_change_nothing",
    "test_kill_9_and_restart_keep_tokens_and_wait_one_ttl",
    "test_decommissioned_host_cannot_hold",
    "test_grants_and_releases_reach_the_events_stream_with_their_codes",
    "test_why_tells_each_hosts_grants_releases_and_losses",
    "test_every_provisioner_write_under_an_old_grant_is_refused_and_changes_nothing",
}


@pytest.fixture
def ctl(tmp_path: Path, store_db: str) -> Iterator[ControllerProcess]:
    proc = ControllerProcess(tmp_path, CONFIG, db=store_db).start()
    yield proc
    proc.stop()


def join(ctl: ControllerProcess, name: str) -> dict[str, str]:
    r = requests.post(
        ctl.url + "/v1/join",
        json={"host": name, "boot_id": "b1"},
        headers={"Authorization": "Bearer j0in-t0ken"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['credential']}"}


def take(
    ctl: ControllerProcess,
    cred: dict[str, str],
    host: str,
    session: str = "s1",
    ttl: float = TTL,
) -> requests.Response:
    body = {"host": host, "session": session, "ttl": ttl}
    return requests.post(ctl.url + "/v1/leases/prov", json=body, headers=cred, timeout=10)


def give_back(ctl: ControllerProcess, cred: dict[str, str], host: str) -> requests.Response:
    params = {"host": host, "session": "s1"}
    return requests.delete(ctl.url + "/v1/leases/prov", params=params, headers=cred, timeout=10)


def listing(ctl: ControllerProcess) -> dict[str, dict[str, object]]:
    r = requests.get(ctl.url + "/v1/leases", headers=ADMIN, timeout=10)
    assert r.status_code == 200, r.text
    return {le["lease"]: le for le in r.json()}


def wait_for(what: str, check, timeout: float = 20.0) -> requests.Response:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer.status_code == 200 or time.monotonic() > deadline:
            assert answer.status_code == 200, f"{what}: {answer.text}"
            return answer  # type: ignore[no-any-return]
        time.sleep(0.05)


def test_grant_refuse_renew_release(ctl: ControllerProcess) -> None:
    a, b = join(ctl, "a"), join(ctl, "b")
    first = take(ctl, a, "a")
    assert first.status_code == 200, first.text
    assert (first.json()["token"], first.json()["host"], first.json()["state"]) == (1, "a", "held")
    busy = take(ctl, b, "b")
    assert busy.status_code == 409 and busy.json()["error"] == "lease_held"
    assert busy.json()["host"] == "a" and 0 < busy.json()["expires_in"] <= TTL
    renewed = take(ctl, a, "a")
    assert renewed.status_code == 200 and renewed.json()["token"] == 1
    # A host cannot speak for another, nor release what it does not hold.
    forged = take(ctl, b, "a")
    assert forged.status_code == 401 and forged.json()["error"] == "unknown_credential"
    assert give_back(ctl, b, "b").status_code == 409
    assert listing(ctl)["prov"]["host"] == "a"
    released = give_back(ctl, a, "a")
    assert released.status_code == 200 and released.json()["state"] == "free"
    second = take(ctl, b, "b")  # at once: no TTL to wait out after a release
    assert second.status_code == 200 and second.json()["token"] == 2
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "xce_controller.cli.xcecli",
            "--url",
            ctl.url,
            "--token",
            "adm1n",
            "leases",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert shown.split("\n")[0].split()[:4] == ["LEASE", "STATE", "HOLDER", "TOKEN"]
    assert shown.split("\n")[1].split()[:4] == ["prov", "held", "b", "2"]


def test_expired_lease_goes_to_the_next_host_with_the_next_token(ctl: ControllerProcess) -> None:
    a, b = join(ctl, "a"), join(ctl, "b")
    assert take(ctl, a, "a").json()["token"] == 1
    started = time.monotonic()
    got = wait_for("b takes over", lambda: take(ctl, b, "b"))
    assert time.monotonic() - started >= TTL - 0.1  # not before a's TTL ran out
    assert got.json()["token"] == 2
    assert take(ctl, a, "a").status_code == 409


def test_bad_requests_are_one_line_and_change_nothing(ctl: ControllerProcess) -> None:
    a = join(ctl, "a")
    for body in (
        {"host": "a", "session": "s1", "ttl": 0.1},
        {"host": "a", "session": "s1", "ttl": "5"},
        {"host": "a", "session": "bad session", "ttl": 5},
        {"host": "a", "session": "s1", "ttl": 5, "extra": 1},
        {"host": "a", "session": "s1"},
    ):
        r = requests.post(ctl.url + "/v1/leases/prov", json=body, headers=a, timeout=10)
        assert r.status_code == 422 and r.json()["error"] == "bad_request", body
    r = requests.post(
        ctl.url + "/v1/leases/Bad%20Name",
        json={"host": "a", "session": "s1", "ttl": 5},
        headers=a,
        timeout=10,
    )
    assert r.status_code == 422 and "not a lease name" in r.json()["message"]
    assert listing(ctl) == {}
    assert take(ctl, a, "a").json()["token"] == 1  # and it still works


def test_kill_9_and_restart_keep_tokens_and_wait_one_ttl(ctl: ControllerProcess) -> None:
    # On PostgreSQL a lease's expiry is the stored one (the database's clock), so a restart
    # slower than the TTL would free it legitimately: the TTL here outlasts a restart under
    # load (CI once took over 1.5 s), and the test checks it did.
    ttl = RESTART_TTL
    a, b = join(ctl, "a"), join(ctl, "b")
    taken = time.monotonic()  # before the request: the expiry runs from no sooner
    assert take(ctl, a, "a", ttl=ttl).json()["token"] == 1
    ctl.kill()
    ctl.start()
    restarted = time.monotonic()
    # Nobody but the holder before the restart gets it for one TTL from the start ...
    assert take(ctl, b, "b", ttl=ttl).status_code == 409
    # ... and the holder keeps its token when it renews in time.
    renewed = take(ctl, a, "a", ttl=ttl)
    assert time.monotonic() - taken < ttl, "the restart outlasted the TTL: the test says nothing"
    assert renewed.status_code == 200 and renewed.json()["token"] == 1
    asked: list[float] = []

    def b_takes() -> requests.Response:
        asked.append(time.monotonic())
        return take(ctl, b, "b", ttl=ttl)

    got = wait_for("b takes over", b_takes)
    assert time.monotonic() - restarted >= ttl - 0.1
    assert got.json()["token"] == 2
    taken = asked[-1]
    ctl.kill()
    store = open_store(ctl.store)
    try:
        rows = {r["name"]: r for r in store.leases()}
        replayed = leases.replay(store.facts())
    finally:
        store.close()
    assert rows["prov"]["token"] == 2 and rows["prov"]["host"] == "b"
    stored = {k: v for k, v in rows["prov"].items() if k != "expires"}  # shared store: its expiry
    assert leases.to_row(replayed.get("prov")) == stored
    ctl.start()
    assert take(ctl, a, "a", ttl=ttl).status_code == 409
    assert time.monotonic() - taken < ttl, "the restart outlasted the TTL: the test says nothing"
    got = wait_for("a takes over", lambda: take(ctl, a, "a", ttl=ttl))
    assert got.json()["token"] == 3


def test_decommissioned_host_cannot_hold(ctl: ControllerProcess) -> None:
    a = join(ctl, "a")
    r = requests.post(ctl.url + "/v1/hosts/a/decommission", json={}, headers=ADMIN, timeout=10)
    assert r.status_code == 200
    wait_for(
        "decommissioned", lambda: requests.get(ctl.url + "/v1/hosts/a", headers=ADMIN, timeout=10)
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = take(ctl, a, "a")
        if r.status_code != 200:
            break
        time.sleep(0.05)
    assert r.status_code == 410 and r.json()["error"] == "decommissioned"


def _under(
    ctl: ControllerProcess, path: str, token: int, body: dict[str, Any] | None = None
) -> requests.Response:
    params = {"lease": "prov", "token": str(token)}
    return requests.post(ctl.url + path, json=body, params=params, headers=ADMIN, timeout=10)


def _state(ctl: ControllerProcess, instance_id: str) -> str:
    r = requests.get(ctl.url + "/v1/provisioned", headers=ADMIN, timeout=10)
    assert r.status_code == 200, r.text
    states = {rec["instance_id"]: rec["state"] for rec in r.json()}
    return str(states.get(instance_id, "absent"))


def test_every_provisioner_write_under_an_old_grant_is_refused_and_changes_nothing(
    ctl: ControllerProcess,
) -> None:
    """Expect, retire and ack are fenced as a power step is: a holder that lost the lease
    and does not know it yet changes nothing; the current holder's same calls pass."""
    a, b = join(ctl, "a"), join(ctl, "b")
    assert take(ctl, a, "a").json()["token"] == 1
    expect = {"instance_id": "rf-1", "template": "default"}
    assert _under(ctl, "/v1/expected", 1, expect).status_code == 201
    assert give_back(ctl, a, "a").status_code == 200
    assert take(ctl, b, "b").json()["token"] == 2
    old = [
        ("/v1/expected", {"instance_id": "rf-2", "template": "default"}),
        ("/v1/provisioned/rf-1/decommission", {"reason": "idle"}),
        ("/v1/to-return/rf-1/ack", None),
    ]
    for path, body in old:
        refused = _under(ctl, path, 1, body)
        assert refused.status_code == 409, (path, refused.text)
        assert refused.json()["error"] == "stale_lease", (path, refused.text)
        assert "lease prov token 1 is not the current grant" in refused.json()["message"]
    assert (_state(ctl, "rf-1"), _state(ctl, "rf-2")) == ("expected", "absent")
    # Read strictly: a lease half named, named twice or a token as a parser reads it leniently
    # is refused, and changes nothing either.
    for query in ("token=2", "lease=&token=2"):
        odd = requests.post(
            f"{ctl.url}/v1/expected?{query}", json=old[0][1], headers=ADMIN, timeout=10
        )
        assert odd.status_code == 409 and odd.json()["error"] == "conflict", (query, odd.text)
    for query in (
        "lease=prov&token=1&token=2",
        "lease=nope&lease=prov&token=2",
        "lease=prov&token=%2B2",
        "lease=prov&token=02",
        "lease=prov&token=%202",
    ):
        odd = requests.post(
            f"{ctl.url}/v1/expected?{query}", json=old[0][1], headers=ADMIN, timeout=10
        )
        assert odd.status_code == 422 and odd.json()["error"] == "bad_request", (query, odd.text)
    step = {"decision": "expected@1.0", "action": "on", "phase": "begun", "lease": "", "token": 2}
    odd = requests.post(
        ctl.url + "/v1/provisioned/rf-1/power", json=step, headers=ADMIN, timeout=10
    )
    assert odd.status_code == 409 and "without its lease" in odd.json()["message"], odd.text
    del step["lease"], step["token"]
    for query in ("token=5", "lease=prov&token=1"):  # the query form, unread here: refused
        odd = requests.post(
            f"{ctl.url}/v1/provisioned/rf-1/power?{query}", json=step, headers=ADMIN, timeout=10
        )
        assert odd.status_code == 422 and "in its body" in odd.json()["message"], odd.text
    assert (_state(ctl, "rf-1"), _state(ctl, "rf-2")) == ("expected", "absent")
    retired = _under(ctl, "/v1/provisioned/rf-1/decommission", 2, {"reason": "idle"})
    assert retired.status_code == 200, retired.text
    assert _state(ctl, "rf-1") == "decommissioned"
    assert _under(ctl, "/v1/to-return/rf-1/ack", 2).status_code == 200
    assert _state(ctl, "rf-1") == "returned"
    assert _under(ctl, "/v1/expected", 2, old[0][1]).status_code == 201


def test_grants_and_releases_reach_the_events_stream_with_their_codes(
    ctl: ControllerProcess,
) -> None:
    a = join(ctl, "a")
    got: list[dict[str, Any]] = []
    opened = threading.Event()

    def follow() -> None:
        since = max(int(e["seq"]) for e in events(ctl))  # after the joins
        params = {"follow": "true", "since": str(since)}
        with requests.get(
            ctl.url + "/v1/events", params=params, headers=ADMIN, stream=True, timeout=30
        ) as r:
            opened.set()
            for line in r.iter_lines():
                if line:
                    got.append(json.loads(line))
                if any(e.get("kind") == leases.RELEASED for e in got):
                    return

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert opened.wait(10)
    assert take(ctl, a, "a").status_code == 200
    assert give_back(ctl, a, "a").status_code == 200
    # Woken by the lease facts themselves: well before the stream's 15 s keepalive, after
    # which a follower reads again anyway.
    reader.join(KEEPALIVE / 2)
    assert not reader.is_alive(), got
    kinds = [(e["kind"], e["code"], e["host"]) for e in got]
    assert kinds == [
        (leases.GRANTED, "lease_granted", "a"),
        (leases.RELEASED, "lease_released", "a"),
    ]


def events(ctl: ControllerProcess) -> list[dict[str, Any]]:
    r = requests.get(ctl.url + "/v1/events", headers=ADMIN, timeout=10)
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.text.splitlines() if line]


def test_why_tells_each_hosts_grants_releases_and_losses(ctl: ControllerProcess) -> None:
    a, b = join(ctl, "a"), join(ctl, "b")
    assert take(ctl, a, "a").json()["token"] == 1
    assert wait_for("b takes over", lambda: take(ctl, b, "b")).json()["token"] == 2
    assert give_back(ctl, b, "b").status_code == 200
    assert listing(ctl)["prov"]["state"] == "free"
    assert listing(ctl)["prov"]["last_holder"] == "b"  # who to ask why nobody holds it

    def why(name: str) -> str:
        cli = [sys.executable, "-m", "xce_controller.cli.xcecli", "--url", ctl.url]
        return subprocess.run(
            [*cli, "--token", "adm1n", "why", name],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout

    told_a, told_b = why("a"), why("B")
    assert "lease prov granted, token 1 [lease_granted]" in told_a
    assert "lease prov lost: its grant ran out and b got it, token 2 [lease_taken_over]" in told_a
    assert "given back" not in told_a
    assert (
        "lease prov granted, token 2, taken over from a (its grant had run out)"
        " [lease_taken_over]" in told_b
    )
    assert "lease prov given back, token 2 [lease_released]" in told_b
    assert "token 1" not in told_b
    # The events stream filtered by host carries the same facts.
    r = requests.get(ctl.url + "/v1/events", params={"host": "a"}, headers=ADMIN, timeout=10)
    kinds = [(e["kind"], e["data"]["token"]) for e in map(json.loads, r.text.splitlines())
             if e["kind"].startswith("lease_")]  # fmt: skip
    assert kinds == [(leases.GRANTED, 1), (leases.GRANTED, 2)]


@pytest.mark.parametrize(
    "damage",
    [
        '{"name": "prov"',  # cut short
        "[1]",
        '{"name": "prov", "token": 2, "host": "a", "session": "s1", "ttl": NaN, "granted_at": 0}',
    ],
)
def test_a_damaged_lease_row_is_rebuilt_from_the_facts(ctl: ControllerProcess, damage: str) -> None:
    a, b = join(ctl, "a"), join(ctl, "b")
    assert take(ctl, a, "a").json()["token"] == 1
    assert give_back(ctl, a, "a").status_code == 200
    assert take(ctl, a, "a").json()["token"] == 2
    ctl.kill()
    db = sqlite3.connect(ctl.db)
    db.execute("UPDATE leases SET data = ? WHERE name = 'prov'", (damage,))
    db.commit()
    db.close()
    # Counted from before the start: the controller counts the TTL from its own start, which
    # comes before it answers (on Debian 12's packages ~0.3 s before).
    restarted = time.monotonic()
    ctl.start()
    # As the facts say: held by a (token 2) for one TTL from the start, then the next token.
    assert take(ctl, b, "b").status_code == 409
    got = wait_for("b takes over", lambda: take(ctl, b, "b"))
    assert time.monotonic() - restarted >= TTL - 0.1
    assert got.json()["token"] == 3
    assert "lease rows unreadable" in (ctl.workdir / "controller.log").read_text()


class _Answers(http.server.BaseHTTPRequestHandler):
    """Whatever the test sets: not a controller (a proxy's page, another service)."""

    status, body = 200, b""

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (200, b"<html>hi</html>", "answered something that is not a list of leases"),
        (200, b'{"leases": []}', "answered something that is not a list of leases"),
        (200, b'[{"lease": 5}]', "answered something that is not a list of leases"),
        (200, b"[1, null]", "answered something that is not a list of leases"),
        (
            502,
            b"<html>\n<body>bad gateway</body>\n</html>",
            r"not a controller's answer: <html>\x0a<body>bad",
        ),
        (500, b'{"message": "two\\nlines\\u001b[2J"}', r"500: two\x0alines\x1b[2J"),
    ],
)
def test_xcecli_leases_says_one_line_for_an_answer_that_is_no_lease_list(
    status: int, body: bytes, said: str
) -> None:
    handler = type("Answers", (_Answers,), {"status": status, "body": body})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        cli = [sys.executable, "-m", "xce_controller.cli.xcecli", "--url", url, "--token", "t"]
        shown = subprocess.run(
            [*cli, "leases"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert shown.returncode == 1 and shown.stdout == ""
    assert shown.stderr.count("\n") == 1 and said in shown.stderr, shown.stderr
    assert "Traceback" not in shown.stderr
