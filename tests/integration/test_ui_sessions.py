"""The status page's sessions, its sign-in's guards, and what readers of events may see."""

from __future__ import annotations

import json
from pathlib import Path

import requests

from tests.integration.helpers import wait_for
from tests.integration.test_observe_controller import ADMIN, JOIN, READ, call, ctl, story_setup
from xce_controller.core.config import load_cluster_config
from xce_controller.http import ui_sessions
from xce_controller.http.server import EmbeddedController

__all__ = ["ctl"]  # the fixture


def login(ctl: EmbeddedController, token: str, **headers: str) -> requests.Response:
    return requests.post(
        ctl.url + "/ui/login", data={"token": token}, headers=headers, allow_redirects=False,
        timeout=10,
    )  # fmt: skip


def page(ctl: EmbeddedController, cookie: str, path: str = "/ui") -> requests.Response:
    return requests.get(
        ctl.url + path, cookies={"xce_session": cookie}, allow_redirects=False, timeout=10
    )


def test_the_cookie_is_a_random_session_that_logout_ends(ctl: EmbeddedController) -> None:
    """Before: an unsalted hash of the token, the same on every login, never ending."""
    first, second = login(ctl, "r3ad"), login(ctl, "r3ad")
    assert first.status_code == second.status_code == 303
    a, b = first.cookies["xce_session"], second.cookies["xce_session"]
    assert a != b and "r3ad" not in a and len(a) >= 40
    assert page(ctl, a).status_code == 200
    assert 0 < int(first.headers["set-cookie"].split("Max-Age=")[1].split(";")[0]) <= 8 * 3600
    out = requests.post(
        ctl.url + "/ui/logout", cookies={"xce_session": a}, allow_redirects=False, timeout=10
    )
    assert out.status_code == 303
    assert page(ctl, a).status_code == 303  # to the sign-in page again
    assert page(ctl, b).status_code == 200  # the other session lives on
    r = requests.get(ctl.url + "/ui/events?since=0", cookies={"xce_session": a}, timeout=10)
    assert r.status_code == 401


def test_a_session_ends_when_its_token_changes(ctl: EmbeddedController, tmp_path: Path) -> None:
    cookie = login(ctl, "r3ad").cookies["xce_session"]
    admin = login(ctl, "adm1n").cookies["xce_session"]
    new = (tmp_path / "cluster.yaml").read_text().replace("r3ad", "r3ad-new")
    (tmp_path / "cluster.yaml").write_text(new)
    assert (
        ctl.controller.reload_config(lambda: load_cluster_config(tmp_path / "cluster.yaml")) == []
    )
    assert page(ctl, cookie).status_code == 303
    assert page(ctl, admin).status_code == 200  # the admin token did not change


def test_login_from_another_origin_is_refused(ctl: EmbeddedController) -> None:
    host = ctl.url.split("//", 1)[1]
    r = login(ctl, "adm1n", Origin="https://evil.example")
    assert r.status_code == 403 and "xce_session" not in r.cookies
    assert login(ctl, "adm1n", Origin=f"http://{host}").status_code == 303


def test_login_guesses_are_throttled_per_client(ctl: EmbeddedController) -> None:
    """Before: about 1,500 guesses a second."""
    codes = [login(ctl, f"guess{i}").status_code for i in range(ui_sessions.LOGIN_ATTEMPTS)]
    assert codes == [401] * ui_sessions.LOGIN_ATTEMPTS  # the guesses arrived, and were wrong
    r = login(ctl, "adm1n")  # even the right token waits now
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert requests.get(ctl.url + "/v1/hosts", headers=ADMIN, timeout=10).status_code == 200


def test_readers_get_no_hashes_and_no_boot_ids(ctl: EmbeddedController) -> None:
    """Before: the read-only stream carried worker_hash and boot ids (and the /ui too)."""
    call(
        ctl,
        "POST",
        "/v1/expected",
        {"instance_id": "i-1", "template": "gpu", "expected_name": "g1"},
    )
    body = {"host": "g1", "instance_id": "i-1", "boot_id": "boot-1234"}
    assert requests.post(ctl.url + "/v1/join", json=body, headers=JOIN, timeout=10).ok
    read = requests.get(ctl.url + "/v1/events", headers=READ, timeout=10).text
    admin = requests.get(ctl.url + "/v1/events", headers=ADMIN, timeout=10).text
    assert '"joined"' in read and "boot-1234" in admin  # the join arrived
    assert "boot-1234" not in read and "hash" not in read and "hmac-sha256" not in read
    assert "hmac-sha256" not in admin
    cookie = login(ctl, "r3ad").cookies["xce_session"]
    shown = page(ctl, cookie, "/ui/hosts/g1").text
    assert "g1" in shown and "boot-1234" not in shown and "hmac" not in shown


def test_job_events_name_their_job_and_the_ui_hides_returned_hosts(
    ctl: EmbeddedController,
) -> None:
    story_setup(ctl)
    wait_for(lambda: call(ctl, "GET", "/v1/hosts/i-1")["state"] == "decommissioned")
    events = [json.loads(x) for x in requests.get(
        ctl.url + "/v1/events", headers=ADMIN, timeout=10).text.splitlines() if x]  # fmt: skip
    jobs = [e for e in events if e["kind"].startswith("job_")]
    assert jobs and all(e["job"] == 1 for e in jobs)
    cookie = login(ctl, "adm1n").cookies["xce_session"]
    timeline = page(ctl, cookie, "/ui/hosts/gpu1").text
    assert "(job 1)" in timeline
    listing = page(ctl, cookie).text
    assert 'data-host="gpu1"' not in listing.split("id=to-return")[0]  # as `xcecli hosts`
    assert 'data-host="gpu1"' in page(ctl, cookie, "/ui?all=1").text
    assert 'data-host="gpu1"' in page(ctl, cookie, "/ui?state=decommissioned").text


def test_an_unknown_host_page_does_not_poll(ctl: EmbeddedController) -> None:
    """Before: its page followed the events and refreshed into a 404 ("refresh failed")."""
    cookie = login(ctl, "r3ad").cookies["xce_session"]
    r = page(ctl, cookie, "/ui/hosts/nobody")
    assert r.status_code == 404 and "no host nobody" in r.text
    assert "app.js" not in r.text and "data-seq" not in r.text


def test_a_page_number_that_is_not_one_shows_the_first_page(ctl: EmbeddedController) -> None:
    cookie = login(ctl, "r3ad").cookies["xce_session"]
    first = page(ctl, cookie, "/ui?page=1")
    assert first.status_code == 200 and "<table id=hosts>" in first.text
    for bad in ("abc", "0", "-2", "99999999999999"):
        shown = page(ctl, cookie, f"/ui?page={bad}")
        assert shown.status_code == 200, (bad, shown.text[:200])
        assert shown.headers["content-type"].startswith("text/html") and "<table id=hosts>" in (
            shown.text
        )


def test_open_streams_end_when_their_token_changes_or_their_session_ends(
    ctl: EmbeddedController, tmp_path: Path
) -> None:
    """Before: a follower's stream went on after its token was changed (a leaked read token
    replaced) or its session signed out, sending every new fact for as long as it stayed."""
    cookie = login(ctl, "r3ad").cookies["xce_session"]
    bearer = requests.get(ctl.url + "/v1/events?follow=true", headers=READ, stream=True, timeout=10)
    page_stream = requests.get(
        ctl.url + "/ui/events", cookies={"xce_session": cookie}, stream=True, timeout=10
    )
    assert bearer.status_code == page_stream.status_code == 200
    requests.post(  # signs the page out
        ctl.url + "/ui/logout", cookies={"xce_session": cookie}, allow_redirects=False, timeout=10
    )
    new = (tmp_path / "cluster.yaml").read_text().replace("r3ad", "r3ad-new")
    (tmp_path / "cluster.yaml").write_text(new)
    assert (
        ctl.controller.reload_config(lambda: load_cluster_config(tmp_path / "cluster.yaml")) == []
    )
    call(ctl, "post", "/v1/jobs", {"command": ["true"], "host": "after-the-change"})
    for stream in (bearer, page_stream):
        text = b"".join(stream.iter_content(None)).decode()  # ends, rather than times out
        assert "after-the-change" not in text
