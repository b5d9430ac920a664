"""The heartbeat's fast path (xce_controller/http/fast.py) answers as the FastAPI route does:
each request of a matrix is sent to one controller with the fast path off (FastAPI's route
answers) and on, and the two answers compared byte for byte; the fast path's own count shows
which requests it answered itself, so the test fails if it is removed or stops serving."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Union

import pytest
import requests
from starlette.routing import Match

from xce_controller.core.config import load_cluster_config
from xce_controller.http.fast import Served
from xce_controller.http.server import EmbeddedController
from xce_controller.store.base import OutcomeUnknown, StorageUnavailable

CONFIG = """\
version: 1
heartbeat_interval: 10s
host_loss_grace: 300s
unmatched_joins: accept
limits: {max_request_body: 2048}
auth: {admin_token: adm1n-t0ken, join_token: j0in-t0ken}
templates:
  default: {slots: 2}
"""
JSON = "application/json"
BEAT = {"agent_state": "running", "components": [{"name": "worker", "state": "running", "pid": 7}]}
# Answer headers that differ between any two answers, whoever gives them.
VARYING = {"date"}
# What a request sends: a heartbeat's body (in chunks when a list), or a watch's query.
Sent = Union[bytes, list[bytes], str]


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[EmbeddedController]:
    (tmp_path / "cluster.yaml").write_text(CONFIG)
    embedded = EmbeddedController(load_cluster_config(tmp_path / "cluster.yaml"), tmp_path / "db")
    yield embedded.start()
    embedded.stop()


def app_of(ctl: EmbeddedController) -> Any:
    return ctl.server.config.app


def served(ctl: EmbeddedController) -> Served:
    state: Served = app_of(ctl).state.fast_path
    return state


def join(ctl: EmbeddedController, name: str) -> dict[str, Any]:
    answer = requests.post(
        ctl.url + "/v1/join",
        json={"host": name, "instance_id": f"i-{name}", "protocol": "1.3"},
        headers={"Authorization": f"Bearer {ctl.join_token}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def send(
    ctl: EmbeddedController, name: str, body: bytes | Iterable[bytes], headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    answer = requests.post(
        f"{ctl.url}/v1/hosts/{name}/heartbeat", data=body, headers=headers, timeout=10
    )
    kept = {k.lower(): v for k, v in answer.headers.items() if k.lower() not in VARYING}
    return answer.status_code, kept, answer.content


def watch(
    ctl: EmbeddedController, name: str, query: str, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    answer = requests.get(f"{ctl.url}/v1/hosts/{name}/watch?{query}", headers=headers, timeout=10)
    kept = {k.lower(): v for k, v in answer.headers.items() if k.lower() not in VARYING}
    return answer.status_code, kept, answer.content


def ask(
    ctl: EmbeddedController, verb: str, name: str, sent: Sent, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    """One request: a heartbeat sends `sent` as its body, a watch as its query."""
    if verb == "watch":
        assert isinstance(sent, str)
        return watch(ctl, name, sent, headers)
    assert not isinstance(sent, str)
    return send(ctl, name, iter(sent) if isinstance(sent, list) else sent, headers)


def both(
    ctl: EmbeddedController,
    name: str,
    sent: Sent,
    headers: dict[str, str],
    verb: str = "heartbeat",
) -> tuple[tuple[int, dict[str, str], bytes], tuple[int, dict[str, str], bytes], int]:
    """FastAPI's answer, the fast path's, and how many the fast path answered itself."""
    state = served(ctl)
    state.enabled = False
    route = ask(ctl, verb, name, sent, headers)
    state.enabled = True
    before = state.answered
    fast = ask(ctl, verb, name, sent, headers)
    return route, fast, state.answered - before


def bearer(credential: str, content_type: str | None = JSON) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {credential}"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    return headers


def body(**fields: Any) -> bytes:
    return json.dumps({**BEAT, **fields}).encode()


HB, WATCH = "heartbeat", "watch"
# Credentials are named in the headers and filled in once the hosts joined (`world`): {h1}
# the host h1's, {worker} its worker's, {gone} a decommissioned host's, {stale} the first
# credential of old, renewed since.
H1, ONLY_H1 = bearer("{h1}"), {"Authorization": "Bearer {h1}"}
# (verb, host, the heartbeat's body or the watch's query, headers, answered by the fast path)
CASES: list[tuple[str, str, Sent, dict[str, str], bool]] = [
    (HB, "h1", body(), H1, True),
    (HB, "h1", b"{}", H1, True),
    (HB, "h1", body(instance_id="i-h1", agent_version="9.1", extra={"x": 1}), H1, True),
    (HB, "h1", body(protocol="1.9", agent_state="draining"), H1, True),
    (HB, "h1", [body()[:10], body()[10:]], H1, True),  # chunked, within the limit
    (HB, "h1", body(), {"Authorization": "bearer  {h1} ", "Content-Type": JSON}, True),
    # Refusals by the decision: the same function decides, the same handler answers.
    (HB, "h1", body(), {"Content-Type": JSON}, True),
    (HB, "h1", body(), bearer("wrong"), True),
    (HB, "h1", body(), {"Authorization": "Basic {h1}", "Content-Type": JSON}, True),
    (HB, "nobody", body(), H1, True),
    (HB, "h1", body(instance_id="i-other"), H1, True),
    (HB, "gone", body(), bearer("{gone}"), True),
    (HB, "old", body(), bearer("{stale}"), True),
    (HB, "bad name!", body(), H1, True),
    # What FastAPI answers itself: handed to it.
    (HB, "h1", b"", H1, False),
    (HB, "h1", b"{", H1, False),
    (HB, "h1", b"[]", H1, False),
    (HB, "h1", b"null", H1, False),
    (HB, "h1", body(protocol="2.0"), H1, False),
    (HB, "h1", body(agent_state=5), H1, False),
    (HB, "h1", body(components=[{"name": "w"}] * 100), H1, False),
    (HB, "h1", body(instance_id="no spaces allowed"), H1, False),
    (HB, "h1", body(renew="yes please"), H1, False),
    (HB, "h1", body(), bearer("{h1}", "text/plain"), False),
    (HB, "h1", body(), bearer("{h1}", content_type=None), False),
    (HB, "h1", body(), bearer("{h1}", "application/json; charset=utf-8"), False),
    (HB, "h1", body(pad="x" * 4000), H1, False),  # 413, announced
    (HB, "h1", [body(pad="x" * 1000)] * 4, H1, False),  # 413, chunked
    # A watch answered at once (`since` below the host's version, or no wait).
    (WATCH, "h1", "since=0&timeout=0", ONLY_H1, True),
    (WATCH, "h1", "since=0", ONLY_H1, True),
    (WATCH, "h1", "", ONLY_H1, True),
    (WATCH, "h1", "timeout=0&since=00", ONLY_H1, True),
    (WATCH, "h1", "since=0&timeout=1.5&instance_id=i-h1", ONLY_H1, True),
    (WATCH, "h1", "since=0&timeout=300&instance_id=", ONLY_H1, True),
    (WATCH, "h1", "since=0&timeout=0", {"Authorization": "Bearer {worker}"}, True),
    (WATCH, "h1", "since=0&timeout=0&instance_id=i-other", ONLY_H1, True),
    (WATCH, "h1", "since=0&timeout=0", {}, True),
    (WATCH, "h1", "since=0&timeout=0", {"Authorization": "Bearer wrong"}, True),
    (WATCH, "nobody", "since=0&timeout=0", ONLY_H1, True),
    (WATCH, "gone", "since=0&timeout=0", {"Authorization": "Bearer {gone}"}, True),
    # Read by FastAPI: invalid, repeated, escaped or unknown parameters.
    (WATCH, "h1", "since=-1", ONLY_H1, False),
    (WATCH, "h1", "since=abc", ONLY_H1, False),
    (WATCH, "h1", "since=1.5", ONLY_H1, False),
    (WATCH, "h1", "since=", ONLY_H1, False),
    (WATCH, "h1", "since=0&timeout=301", ONLY_H1, False),
    (WATCH, "h1", "since=0&timeout=300.5", ONLY_H1, False),
    (WATCH, "h1", "since=0&timeout=-1", ONLY_H1, False),
    (WATCH, "h1", "since=0&timeout=nan", ONLY_H1, False),
    (WATCH, "h1", "since=0&since=1&timeout=0", ONLY_H1, False),
    (WATCH, "h1", "since=0&timeout=0&instance_id=" + "i" * 254, ONLY_H1, False),
    (WATCH, "h1", "since=0&timeout=0&instance_id=i%20h1", ONLY_H1, False),
    (WATCH, "h1", "since=0&timeout=0&instance_id=i+h1", ONLY_H1, False),
    (WATCH, "h1", "since=0&timeout=0&other=1", ONLY_H1, False),
    (WATCH, "h1", "since&timeout=0", ONLY_H1, False),
]


def world(ctl: EmbeddedController, with_job: bool) -> dict[str, str]:
    """h1 joined; gone joined and decommissioned; old joined and renewed since; with_job: a
    job for h1 (a watch's answer lists it). The credentials, by the names CASES uses."""
    joined = join(ctl, "h1")
    gone = join(ctl, "gone")["credential"]
    stale = join(ctl, "old")["credential"]
    beat = f"{ctl.url}/v1/hosts/old/heartbeat"
    renewed = requests.post(beat, data=body(renew=True), headers=bearer(stale), timeout=10)
    current = renewed.json()["credential"]
    requests.post(beat, data=body(), headers=bearer(current), timeout=10).raise_for_status()
    admin = {"Authorization": "Bearer adm1n-t0ken"}
    decommission = requests.post(
        ctl.url + "/v1/hosts/gone/decommission",
        json={"drain_timeout": 0},
        headers=admin,
        timeout=10,
    )
    assert decommission.status_code == 200, decommission.text
    if with_job:
        job = {"command": "sleep 1", "slots": 1}
        requests.post(ctl.url + "/v1/jobs", json=job, headers=admin, timeout=10)
    h1, worker = joined["credential"], joined["worker_credential"]
    return {"h1": h1, "worker": worker, "gone": gone, "stale": stale}


def fill(named: dict[str, str], credentials: dict[str, str]) -> dict[str, str]:
    return {key: value.format(**credentials) for key, value in named.items()}


@pytest.mark.parametrize("verb", [HB, WATCH])
def test_the_fast_path_answers_as_the_route_does(ctl: EmbeddedController, verb: str) -> None:
    """Each request of the verb's rows, answered by FastAPI's route and by the fast path:
    the same bytes, and the fast path answered itself the ones it should."""
    credentials = world(ctl, with_job=verb == WATCH)
    rows = [row for row in CASES if row[0] == verb]
    for _, name, sent, named, fast_served in rows:
        route, fast, answered = both(ctl, name, sent, fill(named, credentials), verb)
        what = f"{name} {sent!r:.80} {named}"
        assert fast == route, what
        assert answered == (1 if fast_served else 0), what
    _, name, sent, named, _ = rows[0]  # still answered: the others left the host as it was
    assert ask(ctl, verb, name, sent, fill(named, credentials))[0] == 200


def test_a_renewal_answers_as_the_route_does(ctl: EmbeddedController) -> None:
    """A renewal issues a new credential each time: compared with it and the incarnation
    set aside (the second is the first's next)."""
    credential = join(ctl, "h1")["credential"]
    state = served(ctl)
    answers = []
    for enabled in (False, True):
        state.enabled = enabled
        status, headers, data = send(ctl, "h1", body(renew=True), bearer(credential))
        assert status == 200, data
        answer = json.loads(data)
        credential = answer["credential"]
        requests.post(  # present the new credential, as an agent does
            f"{ctl.url}/v1/hosts/h1/heartbeat", data=body(), headers=bearer(credential), timeout=10
        ).raise_for_status()
        answers.append((headers, answer, data))
    (h0, a0, d0), (h1, a1, d1) = answers
    assert a1["incarnation"] == a0["incarnation"] + 1
    assert h0 == h1
    mask = re.compile(rb'"credential":"[^"]*"|"incarnation":\d+|"version":\d+')
    assert mask.sub(b"", d0) == mask.sub(b"", d1)
    assert list(a0) == list(a1)


@pytest.mark.parametrize(
    ("failure", "status", "code"),
    [
        (StorageUnavailable("disk full"), 503, "refused_storage_unavailable"),
        (OutcomeUnknown("connection lost at COMMIT"), 500, "refused_outcome_unknown"),
    ],
)
def test_a_storage_outage_answers_as_the_route_does(
    ctl: EmbeddedController,
    monkeypatch: pytest.MonkeyPatch,
    failure: StorageUnavailable,
    status: int,
    code: str,
) -> None:
    credential = join(ctl, "h1")["credential"]

    def down(*args: Any) -> Any:
        raise failure

    monkeypatch.setattr(ctl.controller, "heartbeat", down)
    route, fast, answered = both(ctl, "h1", body(), bearer(credential))
    assert route == fast
    assert route[0] == status and json.loads(route[2])["code"] == code
    assert route[1].get("retry-after") == ("5" if status == 503 else None)
    assert answered == 1


def test_metrics_count_the_fast_path_as_the_route(ctl: EmbeddedController) -> None:
    credential = join(ctl, "h1")["credential"]
    for _ in range(3):
        both(ctl, "h1", body(), bearer(credential))
        both(ctl, "h1", body(), bearer("wrong"))
    scrape = requests.get(
        ctl.url + "/metrics", headers={"Authorization": "Bearer adm1n-t0ken"}, timeout=10
    ).text
    endpoint = 'endpoint="/v1/hosts/{name}/heartbeat"'
    latency = [
        line
        for line in scrape.splitlines()
        if line.startswith("xce_controller_request_duration_seconds_count") and endpoint in line
    ]
    assert latency == [
        "xce_controller_request_duration_seconds_count{" + endpoint + ',method="POST"} 12.0'
    ]
    refusals = [
        line
        for line in scrape.splitlines()
        if line.startswith("xce_controller_refusals_total") and endpoint in line
    ]
    assert refusals == [
        'xce_controller_refusals_total{code="refused_unknown_credential",' + endpoint + "} 6.0"
    ]


def test_the_fast_path_is_the_route_the_router_would_pick(ctl: EmbeddedController) -> None:
    """No route declared before the heartbeat's takes its requests: the fast path answers
    the requests FastAPI would route to it, and only those."""
    routes = app_of(ctl).routes
    for method, path in (("POST", "heartbeat"), ("GET", "watch")):
        scope = {"type": "http", "method": method, "path": f"/v1/hosts/h1/{path}", "root_path": ""}
        first = next(r for r in routes if r.matches(scope)[0] is Match.FULL)
        assert getattr(first, "path", None) == "/v1/hosts/{name}/" + path
