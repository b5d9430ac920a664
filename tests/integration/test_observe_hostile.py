"""Hostile inputs to what the controller shows about itself: cursors no sequence number can
reach, forged Last-Event-IDs, markup in a host page's address, forged HTTP methods, and
terminal escapes in the reasons `xcecli why` and `xcecli events` print."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.test_observe_controller import ADMIN, CONFIG, JOIN, READ, call
from xce_controller.core.config import load_cluster_config
from xce_controller.http.api import create_app
from xce_controller.http.server import EmbeddedController
from xce_controller.service import Controller
from xce_controller.store.sqlite import Store

HOSTILE = "\x1b]0;owned\x07\x1b[2J<script>alert(1)</script>\r\nforged line \x9b31m"


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[EmbeddedController]:
    cfg_file = tmp_path / "cluster.yaml"
    cfg_file.write_text(CONFIG)
    ctl = EmbeddedController(load_cluster_config(cfg_file), tmp_path / "c.db").start()
    yield ctl
    ctl.stop()


def first_data(ctl: EmbeddedController, headers: dict[str, str], query: str = "") -> Any:
    """The first event the status page's stream sends."""
    with requests.get(
        ctl.url + "/ui/events" + query, headers=headers, stream=True, timeout=10
    ) as r:
        assert r.status_code == 200, r.text
        for line in r.iter_lines():
            if line.startswith(b"data: "):
                return json.loads(line[6:])
    raise AssertionError("the stream ended without an event")


def test_cursors_past_any_sequence_number_get_a_one_line_refusal(
    ctl: EmbeddedController,
) -> None:
    call(ctl, "POST", "/v1/expected", {"instance_id": "i-1", "template": "default"})
    huge = "9" * 30  # larger than any integer SQLite holds
    for path in ("/v1/events", "/ui/events"):
        r = requests.get(f"{ctl.url}{path}?since={huge}", headers=READ, timeout=10)
        assert r.status_code == 422, (path, r.status_code, r.text)
        assert "since" in r.text and "\n" not in r.text.strip()
    # The largest one allowed is answered (nothing after it), and the stream still works.
    r = requests.get(f"{ctl.url}/v1/events?since={2**63 - 1}", headers=READ, timeout=10)
    assert r.status_code == 200 and r.text == ""
    r = requests.get(ctl.url + "/v1/events", headers=READ, timeout=10)
    assert [json.loads(line)["seq"] for line in r.text.splitlines()] == [1]


def test_a_forged_last_event_id_resumes_from_the_page_cursor(ctl: EmbeddedController) -> None:
    call(ctl, "POST", "/v1/expected", {"instance_id": "i-1", "template": "default"})
    # "²" passes str.isdigit() and not int(); 5000 digits exceed int()'s limit; 40 digits
    # exceed SQLite's integers. Each was a 500 or a stream cut off with a traceback.
    for forged in ("\u00b2", "9" * 5000, "9" * 40, "-3", "1e3"):
        body = first_data(ctl, {**READ, "Last-Event-ID": forged})
        assert body["seq"] == 1 and body["kind"] == "expected", forged
    # A real one still resumes after it: nothing before seq 2 is sent again.
    call(ctl, "POST", "/v1/expected", {"instance_id": "i-2", "template": "default"})
    assert first_data(ctl, {**READ, "Last-Event-ID": "1"})["seq"] == 2


def test_the_host_page_escapes_the_name_it_did_not_find(ctl: EmbeddedController) -> None:
    r = requests.get(ctl.url + "/ui/hosts/%3Cimg%20src=x%3E", headers=READ, timeout=10)
    assert r.status_code == 404 and "no host" in r.text  # the name reached the page
    assert "<img" not in r.text and "&lt;img src=x&gt;" in r.text
    assert requests.get(ctl.url + "/ui", headers=READ, timeout=10).status_code == 200


def test_forged_methods_share_one_latency_series(tmp_path: Path) -> None:
    """uvicorn's httptools parser knows a fixed list of methods, h11 takes any token: each
    forged method must not become a series of its own."""
    cfg = tmp_path / "cluster.yaml"
    cfg.write_text(CONFIG)
    controller = Controller(load_cluster_config(cfg), Store(tmp_path / "c.db"))
    app = create_app(controller)
    statuses: list[int] = []

    async def one(method: str) -> None:
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": method, "scheme": "http", "path": "/v1/hosts", "raw_path": b"/v1/hosts",
            "query_string": b"", "root_path": "", "headers": [(b"host", b"x")],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
        }  # fmt: skip

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Any) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        await app(scope, receive, send)

    async def run() -> None:
        for n in range(50):
            await one(f"FORGED{n}")
        await one("GET")

    asyncio.run(run())
    assert len(statuses) == 51  # every forged request was answered
    text = app.state.metrics.exposition().decode()
    methods = set(re.findall(r'request_duration_seconds_count\{[^}]*method="([^"]*)"', text))
    assert methods == {"GET", "other"}, methods
    controller.store.close()


def xcecli(ctl: EmbeddedController, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "xce_controller.cli.xcecli",
            "--url",
            ctl.url,
            "--token",
            "adm1n",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_terminal_escapes_in_reasons_are_shown_not_obeyed(ctl: EmbeddedController) -> None:
    expected = {"instance_id": "i-1", "template": "default", "expected_name": "h1"}
    call(ctl, "POST", "/v1/expected", expected)
    body = {"host": "h1", "instance_id": "i-1"}
    assert requests.post(ctl.url + "/v1/join", json=body, headers=JOIN, timeout=10).ok
    call(ctl, "POST", "/v1/hosts/h1/close", {"reason": HOSTILE})
    assert call(ctl, "GET", "/v1/hosts/h1")["reason"] == HOSTILE  # it was stored as given
    outputs = [xcecli(ctl, "why", "h1"), xcecli(ctl, "events"), xcecli(ctl, "host", "h1")]
    for out in outputs:
        assert out.returncode == 0, out.stderr
        assert "\\x1b]0;owned\\x07" in out.stdout and "\\x0d\\x0aforged line \\x9b" in out.stdout
        assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f]", out.stdout), out.stdout
        assert not any(line.startswith("forged") for line in out.stdout.splitlines())
    events = xcecli(ctl, "events", "--json")  # JSON is for programs: the text, exactly
    assert HOSTILE in [json.loads(line)["why"] for line in events.stdout.splitlines()]


def test_the_loss_counter_is_there_at_zero_before_the_first_loss(
    ctl: EmbeddedController,
) -> None:
    """XceHostsFlapping takes increase() of it: a series born at 1 would hide that loss."""
    r = requests.get(ctl.url + "/metrics", headers=READ, timeout=10)
    assert r.status_code == 200
    line = 'xce_controller_host_transitions_total{code="heartbeat_lost",state="lost"} 0.0'
    assert line in r.text.splitlines()


def test_a_bearer_or_cookie_with_non_ascii_bytes_is_refused_not_a_500(
    ctl: EmbeddedController,
) -> None:
    forged = "caf\u00e9".encode("latin-1")  # a header may carry any byte above 127
    for path in ("/v1/events", "/metrics"):
        r = requests.get(ctl.url + path, headers={"Authorization": b"Bearer " + forged}, timeout=10)
        assert r.status_code == 401, (path, r.status_code, r.text)
    # The page answers its sign-in form to anyone not signed in, by bearer or by cookie.
    for headers in ({"Authorization": b"Bearer " + forged}, {"Cookie": b"xce_view=" + forged}):
        r = requests.get(ctl.url + "/ui", headers=headers, timeout=10)
        assert r.status_code == 200 and "sign in" in r.text, (r.status_code, r.text[:200])
    # The real token still reads.
    assert requests.get(ctl.url + "/v1/events", headers=READ, timeout=10).status_code == 200


def test_a_refused_second_joins_boot_id_is_the_admins_to_see(ctl: EmbeddedController) -> None:
    """Before: the refusal's text named the other boot, so readers saw a boot id in the
    events, the host's `last_refusal` and its page."""
    join = {"protocol": "1.3", "host": "bt1", "boot_id": "boot-one-1111"}
    assert requests.post(ctl.url + "/v1/join", json=join, headers=JOIN, timeout=10).ok
    again = {**join, "boot_id": "boot-two-2222"}
    r = requests.post(ctl.url + "/v1/join", json=again, headers=JOIN, timeout=10)
    assert r.status_code == 409, r.text
    for path in ("/v1/events?host=bt1", "/v1/hosts/bt1", "/ui/hosts/bt1", "/v1/hosts"):
        seen = requests.get(ctl.url + path, headers=READ, timeout=10)
        assert seen.status_code == 200 and "refus" in seen.text, (path, seen.text)
        assert "boot-two" not in seen.text and "boot-one" not in seen.text, path
    admin = requests.get(ctl.url + "/v1/events?host=bt1", headers=ADMIN, timeout=10).text
    assert "boot-two-2222" in admin  # the admin still learns which boot tried


def test_the_last_report_of_a_decommissioned_host_shows_no_boot_id(
    ctl: EmbeddedController,
) -> None:
    """Before: the report `to-return` and the host's record show carried the agent's boot id
    (to readers too), which the API shows no one."""
    call(ctl, "post", "/v1/expected", {"instance_id": "i-tr", "template": "default"})
    join = {"protocol": "1.3", "host": "tr1", "instance_id": "i-tr", "boot_id": "boot-tr-3333"}
    joined = requests.post(ctl.url + "/v1/join", json=join, headers=JOIN, timeout=10).json()
    call(ctl, "post", "/v1/hosts/tr1/decommission", {"reason": "done"})
    report = {
        "protocol": "1.3",
        "instance_id": "i-tr",
        "boot_id": "boot-tr-3333",
        "agent_state": "decommissioned",
        "components": [{"name": "xce-worker", "state": "stopped", "pid": 0, "restarts": 0}],
    }
    bearer = {"Authorization": f"Bearer {joined['credential']}"}
    r = requests.post(ctl.url + "/v1/hosts/tr1/heartbeat", json=report, headers=bearer, timeout=10)
    assert r.status_code == 410, r.text
    for path in ("/v1/to-return", "/v1/hosts/tr1", "/v1/hosts?all=true"):
        for who in (READ, ADMIN):
            seen = requests.get(ctl.url + path, headers=who, timeout=10)
            assert seen.status_code == 200 and '"stopped"' in seen.text, (path, seen.text)
            assert "boot-tr" not in seen.text, (path, seen.text)
