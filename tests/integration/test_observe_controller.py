"""The controller's /metrics, events stream and `xcecli why`/`events`, on a real server."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.helpers import wait_for
from xce_controller.core.config import load_cluster_config
from xce_controller.http.server import EmbeddedController

CONFIG = """\
version: 1
heartbeat_interval: 1s
host_loss_grace: 30s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
defaults: {join_deadline: 10m, drain_timeout: 1s, drain_policy: requeue}
auth: {admin_token: adm1n, read_token: r3ad, join_token: j0in-t0ken}
templates:
  default: {slots: 2}
  gpu: {slots: 8}
"""
ADMIN = {"Authorization": "Bearer adm1n"}
JOIN = {"Authorization": "Bearer j0in-t0ken"}
READ = {"Authorization": "Bearer r3ad"}


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[EmbeddedController]:
    cfg_file = tmp_path / "cluster.yaml"
    cfg_file.write_text(CONFIG)
    ctl = EmbeddedController(load_cluster_config(cfg_file), tmp_path / "c.db").start()
    yield ctl
    ctl.stop()


def call(ctl: EmbeddedController, method: str, path: str, body: Any = None) -> Any:
    r = requests.request(method, ctl.url + path, json=body, headers=ADMIN, timeout=10)
    assert r.status_code < 300, r.text
    return r.json()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(ctl: EmbeddedController) -> str:
    r = requests.get(ctl.url + "/metrics", headers=READ, timeout=10)
    assert r.status_code == 200
    return r.text


def story_setup(ctl: EmbeddedController) -> None:
    """gpu1 expected, joined, runs a job, is decommissioned; the drain times out (requeue)."""
    call(
        ctl,
        "POST",
        "/v1/expected",
        {"instance_id": "i-1", "template": "gpu", "expected_name": "gpu1"},
    )
    body = {"host": "gpu1", "instance_id": "i-1"}
    r = requests.post(ctl.url + "/v1/join", json=body, headers=JOIN, timeout=10)
    assert r.status_code == 200
    call(ctl, "POST", "/v1/jobs", {"command": ["sleep", "60"], "slots": 1})
    call(ctl, "POST", "/v1/hosts/gpu1/decommission", {"reason": "scale in"})


def test_metrics_need_a_token_and_the_read_token_cannot_change_anything(
    ctl: EmbeddedController,
) -> None:
    assert requests.get(ctl.url + "/metrics", timeout=5).status_code == 401
    bad = {"Authorization": "Bearer nope"}
    assert requests.get(ctl.url + "/metrics", headers=bad, timeout=5).status_code == 401
    assert "xce_controller_hosts" in scrape(ctl)
    r = requests.post(ctl.url + "/v1/jobs", json={"command": ["x"]}, headers=READ, timeout=5)
    assert r.status_code == 401
    # The refusals above were counted, by endpoint and kind.
    text = scrape(ctl)
    assert (
        value(
            text, "xce_controller_refusals_total", endpoint="/v1/jobs", code="refused_unauthorized"
        )
        == 1
    )


def test_metrics_follow_the_decommission_story(ctl: EmbeddedController) -> None:
    before = scrape(ctl)
    assert value(before, "xce_controller_hosts", state="open", template="gpu") == 0
    story_setup(ctl)
    wait_for(lambda: call(ctl, "GET", "/v1/hosts/gpu1")["state"] == "decommissioned")
    text = scrape(ctl)
    assert value(text, "xce_controller_joins_total", template="gpu", code="joined_provisioned") == 1
    assert value(text, "xce_controller_hosts", state="decommissioned", template="gpu") == 1
    assert (
        value(
            text,
            "xce_controller_decommissions_total",
            template="gpu",
            code="drain_timeout_requeued",
        )
        == 1
    )
    drained = value(
        text,
        "xce_controller_drain_duration_seconds_count",
        policy="requeue",
        code="drain_timeout_requeued",
    )
    assert drained == 1
    assert (
        value(
            text,
            "xce_controller_jobs_ended_total",
            action="requeued",
            code="drain_timeout_requeued",
        )
        == 1
    )
    assert value(text, "xce_controller_to_return_hosts") == 1
    assert value(text, "xce_controller_to_return_oldest_age_seconds") >= 0
    joins = value(
        text, "xce_controller_request_duration_seconds_count", method="POST", endpoint="/v1/join"
    )
    assert joins == 1
    call(ctl, "POST", "/v1/to-return/i-1/ack")
    text = scrape(ctl)
    assert value(text, "xce_controller_to_return_hosts") == 0
    assert value(text, "xce_controller_return_delay_seconds_count") == 1


def test_promtool_accepts_the_scrape(ctl: EmbeddedController, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus; make e2e-deps)")
    story_setup(ctl)
    out = subprocess.run(
        [promtool, "check", "metrics"], input=scrape(ctl), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def events(ctl: EmbeddedController, **params: object) -> list[dict[str, Any]]:
    r = requests.get(ctl.url + "/v1/events", headers=READ, params=params, timeout=10)  # type: ignore[arg-type]
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in r.text.splitlines() if line]


def test_events_in_order_by_host_and_without_secrets(ctl: EmbeddedController) -> None:
    call(
        ctl,
        "POST",
        "/v1/expected",
        {"instance_id": "i-9", "template": "default", "join_token": "s3cret-0123456789"},
    )
    story_setup(ctl)
    wait_for(lambda: call(ctl, "GET", "/v1/hosts/gpu1")["state"] == "decommissioned")
    every = events(ctl)
    assert [e["seq"] for e in every] == list(range(1, len(every) + 1))
    assert all("token_hash" not in e["data"] for e in every)
    mine = events(ctl, host="gpu1")
    kinds = [e["kind"] for e in mine]
    assert kinds[:2] == ["expected", "joined"] and "job_requeued" in kinds
    assert mine[-1]["state"] == "decommissioned" and all(e["key"] == "i-1" for e in mine)
    later = events(ctl, since=mine[1]["seq"], host="gpu1")
    assert later == mine[2:]


def test_follow_delivers_a_commit_without_polling(ctl: EmbeddedController) -> None:
    got: list[dict[str, Any]] = []
    opened = threading.Event()

    def follow() -> None:
        with requests.get(
            ctl.url + "/v1/events",
            params={"follow": "true", "host": "gpu1"},
            headers=READ,
            stream=True,
            timeout=30,
        ) as r:
            opened.set()
            for line in r.iter_lines():
                if line:
                    got.append(json.loads(line))
                if any(e.get("state") == "decommissioned" for e in got):
                    return

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert opened.wait(10)
    story_setup(ctl)
    reader.join(20)
    assert not reader.is_alive() and got[0]["kind"] == "expected"
    assert got[-1]["state"] == "decommissioned"


def xcecli(ctl: EmbeddedController, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "xce_controller.cli.xcecli",
            "--url",
            ctl.url,
            "--token",
            "r3ad",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_xcecli_why_tells_the_story(ctl: EmbeddedController) -> None:
    story_setup(ctl)
    wait_for(lambda: call(ctl, "GET", "/v1/hosts/gpu1")["state"] == "decommissioned")
    call(ctl, "POST", "/v1/to-return/i-1/ack")
    out = xcecli(ctl, "why", "gpu1")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith("gpu1 is returned")
    for words in (
        "expected: instance i-1 of template gpu",
        "joined as gpu1",
        "decommission requested by admin: scale in",
        "job 1 requeued",
        "after the decommission request",
        "returned",
    ):
        assert words in text, text
    missing = xcecli(ctl, "why", "nosuch")
    assert missing.returncode == 1 and "no host nosuch" in missing.stderr


def test_xcecli_events_json_and_text(ctl: EmbeddedController) -> None:
    story_setup(ctl)
    out = xcecli(ctl, "events", "--host", "gpu1", "--json")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert lines[0]["kind"] == "expected"
    text = xcecli(ctl, "events", "--host", "gpu1").stdout
    assert "joined" in text and "gpu1" in text


def test_followers_that_hang_up_leave_nothing_behind(ctl: EmbeddedController) -> None:
    app: Any = ctl.server.config.app
    hub = app.state.events
    call(ctl, "POST", "/v1/expected", {"instance_id": "i-5", "template": "default"})
    for _ in range(20):
        with requests.get(
            ctl.url + "/v1/events",
            params={"follow": "true"},
            headers=READ,
            stream=True,
            timeout=10,
        ) as r:
            assert json.loads(next(r.iter_lines()))["kind"] == "expected"
    wait_for(lambda: not hub._waiters, 10)
    # and the stream still works for the next one
    assert events(ctl)[0]["kind"] == "expected"


@pytest.mark.parametrize(
    ("outcome_unknown", "status", "code"),
    [(False, 503, "refused_storage_unavailable"), (True, 500, "refused_outcome_unknown")],
)
def test_storage_errors_are_counted_and_shown(
    ctl: EmbeddedController, outcome_unknown: bool, status: int, code: str
) -> None:
    from xce_controller.store.base import OutcomeUnknown
    from xce_controller.store.sqlite import StorageUnavailable

    store = ctl.controller.store
    real = store.commit

    def full(*args: Any, **kw: Any) -> None:
        if outcome_unknown:
            raise OutcomeUnknown("the database did not answer within 5s")
        raise StorageUnavailable("database or disk is full")

    store.commit = full  # type: ignore[method-assign]
    try:
        r = requests.post(ctl.url + "/v1/jobs", json={"command": ["x"]}, headers=ADMIN, timeout=5)
        assert r.status_code == status and r.json()["code"] == code
        assert ("nothing was changed" in r.json()["message"]) is not outcome_unknown
        text = scrape(ctl)
        assert value(text, "xce_controller_storage_errors_total") == 1
        assert value(text, "xce_controller_storage_available") == 0
        refused = value(
            text,
            "xce_controller_refusals_total",
            endpoint="/v1/jobs",
            code=code,
        )
        assert refused == 1
    finally:
        store.commit = real  # type: ignore[method-assign]
    call(ctl, "POST", "/v1/jobs", {"command": ["x"]})  # stored again: the gauge says so
    assert value(scrape(ctl), "xce_controller_storage_available") == 1
