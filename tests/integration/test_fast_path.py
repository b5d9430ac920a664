"""The heartbeat's fast path (xce_controller/http/fast.py) answers as the FastAPI route does:
each request of a matrix is sent to one controller with the fast path off (FastAPI's route
answers) and on, and the two answers compared byte for byte; the fast path's own count shows
which requests it answered itself, so the test fails if it is removed or stops serving."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from starlette.routing import Match

from xce_controller.core.config import load_cluster_config
from xce_controller.http.fast import Served
from xce_controller.http.server import EmbeddedController
from xce_controller.store.base import StorageUnavailable

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


def both(
    ctl: EmbeddedController, name: str, body: bytes | list[bytes], headers: dict[str, str]
) -> tuple[tuple[int, dict[str, str], bytes], tuple[int, dict[str, str], bytes], int]:
    """FastAPI's answer, the fast path's, and how many the fast path answered itself."""
    state = served(ctl)
    state.enabled = False
    route = send(ctl, name, iter(body) if isinstance(body, list) else body, headers)
    state.enabled = True
    before = state.answered
    fast = send(ctl, name, iter(body) if isinstance(body, list) else body, headers)
    return route, fast, state.answered - before


def bearer(credential: str, content_type: str | None = JSON) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {credential}"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    return headers


def body(**fields: Any) -> bytes:
    return json.dumps({**BEAT, **fields}).encode()


def test_the_fast_path_answers_as_the_route_does(ctl: EmbeddedController) -> None:
    h1 = join(ctl, "h1")["credential"]
    gone = join(ctl, "gone")["credential"]
    stale = join(ctl, "old")["credential"]
    beat = f"{ctl.url}/v1/hosts/old/heartbeat"
    renewed = requests.post(beat, data=body(renew=True), headers=bearer(stale), timeout=10)
    current = renewed.json()["credential"]
    requests.post(beat, data=body(), headers=bearer(current), timeout=10).raise_for_status()
    decommission = requests.post(
        ctl.url + "/v1/hosts/gone/decommission",
        json={"drain_timeout": 0},
        headers={"Authorization": "Bearer adm1n-t0ken"},
        timeout=10,
    )
    assert decommission.status_code == 200, decommission.text
    # (name, body, headers, answered by the fast path itself)
    cases: list[tuple[str, bytes | list[bytes], dict[str, str], bool]] = [
        ("h1", body(), bearer(h1), True),
        ("h1", b"{}", bearer(h1), True),
        ("h1", body(instance_id="i-h1", agent_version="9.1", extra={"x": 1}), bearer(h1), True),
        ("h1", body(protocol="1.9", agent_state="draining"), bearer(h1), True),
        ("h1", [body()[:10], body()[10:]], bearer(h1), True),  # chunked, within the limit
        ("h1", body(), {"Authorization": f"bearer  {h1} ", "Content-Type": JSON}, True),
        # Refusals by the decision: the same function decides, the same handler answers.
        ("h1", body(), {"Content-Type": JSON}, True),
        ("h1", body(), bearer("wrong"), True),
        ("h1", body(), {"Authorization": f"Basic {h1}", "Content-Type": JSON}, True),
        ("nobody", body(), bearer(h1), True),
        ("h1", body(instance_id="i-other"), bearer(h1), True),
        ("gone", body(), bearer(gone), True),
        ("old", body(), bearer(stale), True),
        ("bad name!", body(), bearer(h1), True),
        # What FastAPI answers itself: handed to it.
        ("h1", b"", bearer(h1), False),
        ("h1", b"{", bearer(h1), False),
        ("h1", b"[]", bearer(h1), False),
        ("h1", b"null", bearer(h1), False),
        ("h1", body(protocol="2.0"), bearer(h1), False),
        ("h1", body(agent_state=5), bearer(h1), False),
        ("h1", body(components=[{"name": "w"}] * 100), bearer(h1), False),
        ("h1", body(instance_id="no spaces allowed"), bearer(h1), False),
        ("h1", body(renew="yes please"), bearer(h1), False),
        ("h1", body(), bearer(h1, "text/plain"), False),
        ("h1", body(), bearer(h1, content_type=None), False),
        ("h1", body(), bearer(h1, "application/json; charset=utf-8"), False),
        ("h1", body(pad="x" * 4000), bearer(h1), False),  # 413, announced
        ("h1", [body(pad="x" * 1000)] * 4, bearer(h1), False),  # 413, chunked
    ]
    for name, data, headers, fast_served in cases:
        route, fast, answered = both(ctl, name, data, headers)
        what = f"{name} {data!r:.80} {headers}"
        assert fast == route, what
        assert answered == (1 if fast_served else 0), what


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


def test_a_storage_outage_answers_as_the_route_does(
    ctl: EmbeddedController, monkeypatch: pytest.MonkeyPatch
) -> None:
    credential = join(ctl, "h1")["credential"]

    def down(*args: Any) -> Any:
        raise StorageUnavailable("disk full")

    monkeypatch.setattr(ctl.controller, "heartbeat", down)
    route, fast, answered = both(ctl, "h1", body(), bearer(credential))
    assert route == fast
    assert route[0] == 503 and route[1]["retry-after"] == "5"
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


def watch(
    ctl: EmbeddedController, name: str, query: str, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    answer = requests.get(f"{ctl.url}/v1/hosts/{name}/watch?{query}", headers=headers, timeout=10)
    kept = {k.lower(): v for k, v in answer.headers.items() if k.lower() not in VARYING}
    return answer.status_code, kept, answer.content


def test_the_fast_path_watches_as_the_route_does(ctl: EmbeddedController) -> None:
    """Each watch is answered at once (`since` below the host's version, or no wait):
    FastAPI's answer and the fast path's, byte for byte."""
    joined = join(ctl, "h1")
    h1, worker = joined["credential"], joined["worker_credential"]
    gone = join(ctl, "gone")["credential"]
    requests.post(
        ctl.url + "/v1/hosts/gone/decommission",
        json={"drain_timeout": 0},
        headers={"Authorization": "Bearer adm1n-t0ken"},
        timeout=10,
    ).raise_for_status()
    requests.post(  # a job for h1: the answer lists it
        ctl.url + "/v1/jobs",
        json={"command": "sleep 1", "slots": 1},
        headers={"Authorization": "Bearer adm1n-t0ken"},
        timeout=10,
    )
    auth = {"Authorization": f"Bearer {h1}"}
    cases: list[tuple[str, str, dict[str, str], bool]] = [
        ("h1", "since=0&timeout=0", auth, True),
        ("h1", "since=0", auth, True),
        ("h1", "", auth, True),
        ("h1", "timeout=0&since=00", auth, True),
        ("h1", "since=0&timeout=1.5&instance_id=i-h1", auth, True),
        ("h1", "since=0&timeout=300&instance_id=", auth, True),
        ("h1", "since=0&timeout=0", {"Authorization": f"Bearer {worker}"}, True),
        ("h1", "since=0&timeout=0&instance_id=i-other", auth, True),
        ("h1", "since=0&timeout=0", {}, True),
        ("h1", "since=0&timeout=0", {"Authorization": "Bearer wrong"}, True),
        ("nobody", "since=0&timeout=0", auth, True),
        ("gone", "since=0&timeout=0", {"Authorization": f"Bearer {gone}"}, True),
        # Read by FastAPI: invalid, repeated, escaped or unknown parameters.
        ("h1", "since=-1", auth, False),
        ("h1", "since=abc", auth, False),
        ("h1", "since=1.5", auth, False),
        ("h1", "since=", auth, False),
        ("h1", "since=0&timeout=301", auth, False),
        ("h1", "since=0&timeout=300.5", auth, False),
        ("h1", "since=0&timeout=-1", auth, False),
        ("h1", "since=0&timeout=nan", auth, False),
        ("h1", "since=0&since=1&timeout=0", auth, False),
        ("h1", "since=0&timeout=0&instance_id=" + "i" * 254, auth, False),
        ("h1", "since=0&timeout=0&instance_id=i%20h1", auth, False),
        ("h1", "since=0&timeout=0&instance_id=i+h1", auth, False),
        ("h1", "since=0&timeout=0&other=1", auth, False),
        ("h1", "since&timeout=0", auth, False),
    ]
    state = served(ctl)
    for name, query, headers, fast_served in cases:
        state.enabled = False
        route = watch(ctl, name, query, headers)
        state.enabled = True
        before = state.answered
        fast = watch(ctl, name, query, headers)
        what = f"{name} {query} {headers}"
        assert fast == route, what
        assert state.answered - before == (1 if fast_served else 0), what
    assert watch(ctl, "h1", "since=0&timeout=0", auth)[0] == 200
