"""Host identity against the real controller process: every way in that used to work, refused.

Each test reproduces one finding (a join without a token, a decommissioned host back under
another name, a report planted for a decommissioned host, names read as record keys, bodies
without bound, secrets at rest), shows it refused, and shows the system still works after.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.agents import AgentProcess
from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import wait_for
from xce_protocol.times import parse_time

ADMIN, PROVISIONER, JOIN = "admin-0123456789abcdef", "prov-0123456789abcdef", "join-0123456789ab"
CONFIG = f"""\
version: 1
heartbeat_interval: 0.5s
host_loss_grace: 3s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
auth: {{admin_token: {ADMIN}, provisioner_token: {PROVISIONER}, join_token: {JOIN}}}
templates:
  default: {{slots: 1}}
"""


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class Api:
    def __init__(self, ctl: ControllerProcess) -> None:
        self.ctl = ctl

    def call(self, method: str, path: str, token: str = ADMIN, **kw: Any) -> requests.Response:
        return requests.request(
            method, self.ctl.url + path, headers=bearer(token), timeout=30, **kw
        )

    def join(self, body: dict[str, Any], token: str = JOIN) -> requests.Response:
        return self.call("POST", "/v1/join", token, json=body)

    def credential(self, body: dict[str, Any], token: str = JOIN) -> str:
        r = self.join(body, token)
        assert r.status_code == 200, r.text
        secret: str = r.json()["credential"]
        return secret

    def heartbeat(self, name: str, token: str, **body: Any) -> requests.Response:
        return self.call("POST", f"/v1/hosts/{name}/heartbeat", token, json=body)

    def host(self, name: str) -> dict[str, Any]:
        r = self.call("GET", f"/v1/hosts/{name}")
        assert r.status_code == 200, r.text
        result: dict[str, Any] = r.json()
        return result

    def facts(self, *kinds: str) -> list[str]:
        db = sqlite3.connect(f"file:{self.ctl.db}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT kind FROM facts ORDER BY seq").fetchall()
        finally:
            db.close()
        return [k for (k,) in rows if not kinds or k in kinds]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    ctl = ControllerProcess(tmp_path, CONFIG).start()
    yield Api(ctl)
    ctl.stop()


def test_a_known_host_is_not_rejoined_or_revived_without_a_token(api: Api) -> None:
    cred = api.credential({"host": "u1", "addresses": ["10.0.0.1"], "boot_id": "b1"})
    for token in ("", "wrong"):
        r = api.join({"host": "u1", "addresses": ["6.6.6.6"], "boot_id": "evil"}, token)
        assert (r.status_code, r.json()["error"]) == (401, "unauthorized")
    r = api.join({"host": "u1", "addresses": ["6.6.6.6"], "boot_id": "evil"})  # join token
    assert (r.status_code, r.json()["error"]) == (409, "already_joined")
    assert api.host("u1")["addresses"] == ["10.0.0.1"]
    wait_for(lambda: api.host("u1")["state"] == "lost", timeout=15)
    assert api.join({"host": "u1", "addresses": ["6.6.6.6"]}, "").status_code == 401
    assert api.host("u1")["state"] == "lost"
    assert api.heartbeat("u1", cred).status_code == 200  # its own credential revives it
    assert api.host("u1")["state"] == "open"
    # The boot that tried is the admin's to see in the events, not in the record's text.
    assert api.host("u1")["refusals"] == 1 and "another boot" in api.host("u1")["last_refusal"]


def test_a_decommissioned_host_stays_out_in_the_default_config(tmp_path: Path) -> None:
    ctl = ControllerProcess(tmp_path, "version: 1\ntemplates:\n  default: {slots: 1}\n").start()
    try:
        api = Api(ctl)
        admin, join = ctl.admin_headers()["Authorization"][7:], ctl.join_token()
        assert join and join != admin
        r = api.call(
            "POST",
            "/v1/expected",
            admin,
            json={"instance_id": "i-d1", "template": "default", "expected_name": "d1"},
        )
        assert r.status_code == 201
        cred = api.credential({"host": "d1", "instance_id": "i-d1"}, join)
        assert api.call("POST", "/v1/hosts/d1/decommission", admin, json={}).status_code == 200
        for body in (
            {"host": "d1"},
            {"host": "d1", "instance_id": "i-d1"},
            {"host": "x", "instance_id": "i-d1"},
        ):
            r = api.join(body, join)
            assert (r.status_code, r.json()["error"]) == (410, "decommissioned"), body
        r = api.join({"host": "d1", "instance_id": "i-new"}, join)
        assert r.status_code in (409, 410)
        for token in ("", join, "wrong"):
            assert api.heartbeat("d1", token).status_code == 401
            assert api.call("GET", "/v1/hosts/i-d1/watch?timeout=0", token).status_code == 401
        assert api.heartbeat("d1", cred).status_code == 410  # its own credential: the refusal
        # An unprovisioned host, decommissioned, does not come back under a new name.
        api.credential({"host": "d2", "instance_id": "i-d2"}, join)
        assert api.call("POST", "/v1/hosts/d2/decommission", admin, json={}).status_code == 200
        r = api.join({"host": "d3", "instance_id": "i-d2"}, join)
        assert (r.status_code, r.json()["error"]) == (410, "decommissioned")
        names = [h["name"] for h in api.call("GET", "/v1/hosts?all=true", admin).json()]
        assert sorted(names) == ["d1", "d2"]
        assert api.credential({"host": "d4"}, join)  # and joins still work
    finally:
        ctl.stop()


def test_a_decommissioned_hosts_report_needs_its_credential(api: Api) -> None:
    api.call("POST", "/v1/expected", json={"instance_id": "i-r", "template": "default"})
    cred = api.credential({"host": "r1", "instance_id": "i-r"})
    api.call("POST", "/v1/hosts/r1/decommission", json={})
    planted = {
        "agent_state": "running",
        "components": [{"name": "w", "state": "running", "pid": 666}],
    }
    for token in ("", JOIN, "forged"):
        assert api.heartbeat("r1", token, instance_id="i-r", **planted).status_code == 401
    entry = api.call("GET", "/v1/to-return", PROVISIONER).json()[0]
    assert entry["instance_id"] == "i-r" and entry["report"] is None
    honest = {"agent_state": "decommissioned", "components": [{"name": "w", "state": "stopped"}]}
    assert api.heartbeat("r1", cred, instance_id="i-r", **honest).status_code == 410
    entry = api.call("GET", "/v1/to-return", PROVISIONER).json()[0]
    assert entry["report"]["agent_state"] == "decommissioned"


@pytest.mark.parametrize("name", ["host:evil", "i-0abc/x", "a%2fb", "a b", "-x", "x" * 254])
def test_names_are_never_record_keys(api: Api, name: str) -> None:
    api.call(
        "POST",
        "/v1/expected",
        json={"instance_id": "i-0abc", "template": "default", "expected_name": "evil"},
    )
    r = api.join({"host": name})
    assert r.status_code == 422 and r.json()["error"] == "bad_request"
    cred = api.credential({"host": "i-0abc"})  # a host *named* like the instance id
    assert api.heartbeat("i-0abc", cred).status_code == 200
    # The name is one record's, the instance id another's: refused with both (before, the
    # host of that name was taken, and an unnamed expected instance could not be reached).
    both = api.call("GET", "/v1/hosts/i-0abc")
    assert (both.status_code, both.json()["error"]) == (409, "ambiguous")
    assert {c["key"] for c in both.json()["candidates"]} == {"host:i-0abc", "i-0abc"}
    assert api.host("evil")["state"] == "expected" and api.host("evil")["key"] == "i-0abc"
    # A prefixed reference looks in one kind only (no name holds a colon, so none is taken
    # for it): `host:` reaches a host by its name (or an expected name), `instance:` by its
    # instance id.
    assert api.call("GET", "/v1/hosts/host:i-0abc").json()["key"] == "host:i-0abc"
    assert api.call("GET", "/v1/hosts/instance:i-0abc").json()["key"] == "i-0abc"
    assert api.call("GET", "/v1/hosts/host:evil").json()["key"] == "i-0abc"  # its expected name
    assert api.call("GET", "/v1/hosts/instance:evil").status_code == 404
    assert api.call("POST", "/v1/hosts/key:i-0abc/close", json={}).status_code == 404


def test_a_name_in_another_case_is_the_same_name(api: Api) -> None:
    """DNS names are case-insensitive (RFC 4343): `D3` is the decommissioned `d3`, and `N5`
    the live `n5`. Before, each joined as a new host beside the one it names."""
    api.call("POST", "/v1/expected", json={"instance_id": "i-d3", "template": "default"})
    api.credential({"host": "d3", "instance_id": "i-d3"})
    assert api.call("POST", "/v1/hosts/d3/decommission", json={}).status_code == 200
    live = api.credential({"host": "n5", "boot_id": "b1"})
    for body in ({"host": "D3"}, {"host": "D3", "boot_id": "b9"}):
        r = api.join(body)
        assert (r.status_code, r.json()["error"], r.json()["host"]) == (410, "decommissioned", "d3")
    exact = api.join({"host": "d3", "instance_id": "i-other"})
    r = api.join({"host": "D3", "instance_id": "i-other"})
    # Another instance under the gone name: the name rules answer (docs/security.md).
    assert (r.status_code, r.json()) == (exact.status_code, exact.json()) and r.status_code == 409
    assert r.json()["error"] == "name_decommissioned"
    r = api.join({"host": "N5", "boot_id": "b2"})
    assert (r.status_code, r.json()["error"]) == (409, "already_joined")
    assert api.host("n5")["refusals"] == 1  # the attempt arrived and is recorded
    hosts = api.call("GET", "/v1/hosts?all=true").json()
    assert sorted(h["name"] for h in hosts) == ["d3", "n5"]
    # Still working: the live host heartbeats, and obeys its decommission.
    assert api.heartbeat("n5", live).status_code == 200
    assert api.call("POST", "/v1/hosts/N5/close", json={}).status_code == 200
    assert api.host("n5")["state"] == "closed"
    assert api.call("POST", "/v1/hosts/n5/decommission", json={}).status_code == 200
    r = api.heartbeat("n5", live)
    assert (r.status_code, r.json()["error"], r.json()["host"]) == (410, "decommissioned", "n5")
    # A new instance expected under the name may take it, in any case.
    api.call(
        "POST",
        "/v1/expected",
        json={"instance_id": "i-d3b", "template": "default", "expected_name": "d3"},
    )
    assert api.credential({"host": "D3", "instance_id": "i-d3b"})


@pytest.mark.parametrize("iid", ["i-1/2", "i-1%2F2", "i 1", "i:1", "."])
def test_instance_ids_are_validated_on_every_path(api: Api, iid: str) -> None:
    r = api.call("POST", "/v1/expected", json={"instance_id": iid, "template": "default"})
    assert r.status_code == 422
    assert api.join({"host": "ok1", "instance_id": iid}).status_code == 422
    assert api.call("GET", "/v1/hosts?all=true").json() == []


def test_bodies_are_bounded_before_they_are_read(api: Api) -> None:
    cred = api.credential({"host": "b1"})

    def size() -> int:
        files = [Path(f"{api.ctl.db}{s}") for s in ("", "-wal")]
        return sum(f.stat().st_size for f in files if f.exists())

    def early_answer(start: bytes, length: int, token: str) -> bytes:
        """The answer to a POST of `length` bytes of which only `start` goes out: it must
        come before the rest. (A client still sending when the server closes may see a reset
        instead of the answer; urllib3 2 reads the answer then, Debian 12's 1.26 does not.)"""
        auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
        with socket.create_connection(("127.0.0.1", api.ctl.port), timeout=10) as sock:
            sock.sendall(
                b"POST /v1/join HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + auth
                + f"Content-Length: {length}\r\n\r\n".encode()
                + start
            )
            answer = b""
            while b"}" not in answer:
                more = sock.recv(4096)
                if not more:
                    break
                answer += more
        return answer

    before = size()
    big = json.dumps({"host": "b2", "resources": {"blob": "x" * 10_000_000}}).encode()
    for token in ("", JOIN):
        answer = early_answer(big[:60_000], len(big), token)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"] == "too_large"
    assert size() - before < 100_000
    # 100 MB announced: the answer comes before the body is sent.
    assert early_answer(b"{", 100_000_000, "").startswith(b"HTTP/1.1 413")

    # Chunked, no length: counted while it streams.
    def chunks() -> Iterator[bytes]:
        yield b'{"host": "b3", "x": "'
        for _ in range(100):
            yield b"y" * 1024
        yield b'"}'

    r = requests.post(
        api.ctl.url + "/v1/hosts/b1/heartbeat", data=chunks(), headers=bearer(cred), timeout=30
    )
    assert r.status_code == 413
    # The shape of every other error (before: no `code`).
    assert set(r.json()) == {"error", "code", "message", "protocol"}
    assert r.json()["code"] == "refused_too_large"
    many = {f"r{i}": i for i in range(33)}
    assert api.join({"host": "b4", "resources": many}).status_code == 422
    assert api.join({"host": "b4", "resources": {"gpu": {"deep": [1]}}}).status_code == 422
    assert api.join({"host": "b4", "resources": {"gpu": 4, "mem": "192G"}}).status_code == 200
    assert api.heartbeat("b1", cred).status_code == 200


def test_secrets_at_rest_are_sealed_and_private(api: Api) -> None:
    minted = api.call(
        "POST",
        "/v1/expected",
        PROVISIONER,
        json={"instance_id": "i-s", "template": "default", "mint_join_token": True},
    ).json()["join_token"]
    cred = api.credential({"host": "s1", "instance_id": "i-s"}, minted)
    assert api.heartbeat("s1", cred).status_code == 200
    api.ctl.stop()
    data = b"".join(
        Path(f"{api.ctl.db}{s}").read_bytes()
        for s in ("", "-wal")
        if Path(f"{api.ctl.db}{s}").exists()
    )
    for secret in (minted, cred, JOIN, ADMIN):
        assert secret.encode() not in data
        assert hashlib.sha256(secret.encode()).hexdigest().encode() not in data
    for side in ("", "-wal", "-shm"):
        path = Path(f"{api.ctl.db}{side}")
        if path.exists():
            assert path.stat().st_mode & 0o777 == 0o600, side
    api.ctl.start()
    assert api.heartbeat("s1", cred).status_code == 200  # sealed, yet still checked


def test_one_token_for_two_roles_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "version: 1\nauth: {admin_token: same-token, join_token: same-token}\n"
        "templates:\n  default: {}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "xce_controller", "validate", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 78
    assert "auth.join_token: expected a token different from auth.admin_token" in out.stderr


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "expected a file holding the token, got an empty file"),
        (b"\xff\xfe\x00", "expected a readable file holding the token, got not UTF-8 text"),
        (
            "\ufeffs3cret-joins\n".encode(),
            "expected a token of printable ASCII characters without spaces, got a token with "
            "spaces, control or non-ASCII characters",
        ),
    ],
)
def test_a_token_file_that_holds_no_usable_token_is_refused(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    """Before: an empty file read as "no join token" (so one was made up), a binary one was a
    traceback, and a token no header can carry validated (xcecli then failed with one)."""
    secret = tmp_path / "join-token"
    secret.write_bytes(content)
    secret.chmod(0o600)
    config = tmp_path / "c.yaml"
    config.write_text(
        f"version: 1\nauth: {{join_token_file: {secret}}}\ntemplates:\n  default: {{}}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "xce_controller", "validate", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (out.returncode, out.stderr.splitlines()) == (
        78,
        [f"xce-controller: auth.join_token_file: {problem} ({config} line 2)"],
    )
    assert "s3cret" not in out.stderr


def test_xcecli_refuses_a_token_no_header_can_carry(api: Api) -> None:
    cli = [sys.executable, "-m", "xce_controller.cli.xcecli", "--url", api.ctl.url]
    out = subprocess.run(
        [*cli, "--token", "\u20acuro-0123456789", "hosts"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (out.returncode, out.stderr.strip()) == (
        2,
        "xcecli: --token: expected printable ASCII characters without spaces",
    )
    out = subprocess.run(
        [*cli, "--token", ADMIN, "hosts"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr


def test_per_instance_token_is_single_use_and_minted_once(api: Api) -> None:
    cli = [
        sys.executable,
        "-m",
        "xce_controller.cli.xcecli",
        "--url",
        api.ctl.url,
        "--token",
        PROVISIONER,
    ]
    out = subprocess.run(
        [*cli, "expect", "i-m", "--template", "default", "--mint-join-token"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip().splitlines()[-1].split()[-1]
    assert token not in api.call("GET", "/v1/expected", PROVISIONER).text
    first = api.credential({"host": "m1", "instance_id": "i-m", "boot_id": "b1"}, token)
    r = api.join({"host": "m1", "instance_id": "i-m", "boot_id": "b2"}, token)
    assert (r.status_code, r.json()["error"]) == (409, "already_joined")
    assert api.host("m1")["refusals"] == 1
    assert api.heartbeat("m1", first).status_code == 200


def test_a_takeover_under_another_name_is_recorded(api: Api) -> None:
    """A stolen per-instance token joins that instance under any free name; the real host's
    join is then refused (409 duplicate) and, like a second join under the same name,
    recorded: before, the operator saw nothing of it."""
    minted = api.call(
        "POST",
        "/v1/expected",
        PROVISIONER,
        json={
            "instance_id": "i-t",
            "template": "default",
            "expected_name": "t1",
            "mint_join_token": True,
        },
    ).json()["join_token"]
    thief = api.credential({"host": "other", "instance_id": "i-t", "boot_id": "b-thief"}, minted)
    r = api.join({"host": "t1", "instance_id": "i-t", "boot_id": "b-real"}, minted)
    assert (r.status_code, r.json()["error"]) == (409, "duplicate")
    host = api.host("other")
    assert host["refusals"] == 1 and host["last_refusal"].startswith("duplicate")
    assert "join as t1" in host["last_refusal"]
    assert api.facts("refused") == ["refused"]
    # Unauthenticated, the same attempt is refused before it touches the record.
    assert api.join({"host": "t1", "instance_id": "i-t"}, "wrong").status_code == 401
    assert api.host("other")["refusals"] == 1
    # The operator's decommission still reaches the host that holds the record.
    assert api.heartbeat("other", thief).status_code == 200
    assert api.call("POST", "/v1/hosts/other/decommission", json={}).status_code == 200
    assert api.heartbeat("other", thief).status_code == 410


@pytest.mark.parametrize("given", ["two words", "\u00e9t\u00e9-0123456789", "tok-0123456789\n"])
def test_a_given_join_token_no_agent_can_send_is_refused(api: Api, given: str) -> None:
    """Before, it was recorded (201) and the instance could never join with it."""
    body = {"instance_id": "i-g", "template": "default", "join_token": given}
    r = api.call("POST", "/v1/expected", PROVISIONER, json=body)
    assert (r.status_code, r.json()["error"]) == (422, "bad_request")
    assert api.call("GET", "/v1/expected", PROVISIONER).json() == []
    body["join_token"] = "given-0123456789"
    assert api.call("POST", "/v1/expected", PROVISIONER, json=body).status_code == 201
    assert api.credential({"host": "g1", "instance_id": "i-g"}, "given-0123456789")


# --- real agents ----------------------------------------------------------------------------


def agent(tmp: Path, api: Api, name: str, sub: str = "") -> AgentProcess:
    return AgentProcess(tmp / sub if sub else tmp, api.ctl.url, "i-1", name, token=JOIN)


def test_an_agent_restart_keeps_the_host_without_a_second_join(api: Api, tmp_path: Path) -> None:
    a = agent(tmp_path, api, "node1").start()
    try:
        wait_for(a.worker_pid)
        pid = a.worker_pid()
        assert (a.dir / "state" / "credential.json").stat().st_mode & 0o777 == 0o600
        a.restart()
        wait_for(lambda: "resumed as node1" in a.state().get("controller", {}).get("detail", ""))
        assert a.worker_pid() == pid
        assert api.facts("joined", "rejoined") == ["joined"]
        # A restart of the agent is not a shutdown: SIGTERM was seen as one (the log says so),
        # and neither a shutdown notice nor a final report went out; the host stays open.
        assert "SIGTERM: exiting; components keep running" in a.log()
        assert "shutdown announced" not in a.log() and "final report" not in a.log()
        assert api.facts("notice") == [] and api.host("node1")["notice"] is None
        assert api.host("node1")["state"] == "open"
        assert api.host("node1")["incarnation"] == 2  # renewed, not rejoined
        job = api.call("POST", "/v1/jobs", json={"command": ["true"]}).json()
        wait_for(lambda: api.call("GET", "/v1/jobs").json()[0]["state"] == "done", timeout=15)
        assert job["id"] == 1
    finally:
        a.stop()


def test_a_cloned_state_directory_is_refused_and_recorded(api: Api, tmp_path: Path) -> None:
    a = agent(tmp_path, api, "node1", "a").start()
    b = agent(tmp_path, api, "node1", "b")
    try:
        wait_for(a.worker_pid)
        a.term()  # the image is taken while the agent is down
        # What another machine booted from that image holds: the credential and template (its
        # process records name processes of this machine, so they are left out here).
        (b.dir / "state").mkdir(mode=0o700)
        for name in ("credential.json", "template.json"):
            shutil.copy2(a.dir / "state" / name, b.dir / "state" / name)
        a.start()
        cred = a.dir / "state" / "credential.json"
        wait_for(lambda: '"incarnation": 2' in cred.read_text())
        renewed = cred.stat().st_mtime
        wait_for(lambda: (parse_time(api.host("node1")["last_seen"]) or 0) > renewed)  # presented
        b.start()
        wait_for(lambda: "stale_incarnation" in b.state().get("controller", {}).get("detail", ""))
        assert (
            "host credential refused: HTTP 409 stale_incarnation"
            in b.state()["controller"]["detail"]
        )
        assert b.worker_pid() is None
        status = subprocess.run(
            [sys.executable, "-m", "xce_agent", "status", "--state-dir", str(b.dir / "state")],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        assert "host credential refused: HTTP 409 stale_incarnation" in status
        assert "credential:  host credential of incarnation 1 for node1/i-1" in status
        copied = json.loads((b.dir / "state" / "credential.json").read_text())
        assert copied["secret"] not in status
        host = api.host("node1")
        assert host["refusals"] >= 1 and host["last_refusal"].startswith("stale_incarnation")
        assert "refused" in api.facts("refused")
        assert a.worker_pid() is not None and api.heartbeat("node1", "x").status_code == 401
        assert a.state()["controller"]["state"] == "connected"  # the original is untouched
    finally:
        a.stop()
        b.stop()


def test_an_agent_fenced_by_a_stolen_renewal_still_obeys_its_decommission(
    api: Api, tmp_path: Path
) -> None:
    a = agent(tmp_path, api, "node1").start()
    try:
        wait_for(a.worker_pid)
        pid = a.worker_pid()
        stolen = json.loads((a.dir / "state" / "credential.json").read_text())["secret"]
        r = api.heartbeat("node1", stolen, renew=True, instance_id="i-1")
        assert r.status_code == 200
        assert api.heartbeat("node1", r.json()["credential"]).status_code == 200  # presented
        wait_for(lambda: "stale_incarnation" in a.state().get("controller", {}).get("detail", ""))
        assert api.host("node1")["last_refusal"].startswith("stale_incarnation")
        assert a.worker_pid() == pid  # a refusal that is not the decommission stops nothing
        assert api.call("POST", "/v1/hosts/node1/decommission", json={}).status_code == 200
        wait_for(lambda: a.state().get("tombstone") is not None, timeout=15)
        assert a.worker_pid() is None
    finally:
        a.stop()
