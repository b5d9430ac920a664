"""The provisioner's controller client against odd or hostile answers on loopback: each is one
ControllerError (the runner's one failure), never a traceback that ends the run; an answer is
bounded in time and size; a redirect carries the provisioner token nowhere."""

from __future__ import annotations

import contextlib
import json
import resource
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from xce_provisioner.config import Config, ControllerSettings
from xce_provisioner.controller import ControllerClient, ControllerError, Lease
from xce_provisioner.drivers.base import Power, Request
from xce_provisioner.plan import Machine, Phase, Policy
from xce_provisioner.runner import Runner

RECORD = {
    "instance_id": "rf-1",
    "state": "expected",
    "decision": "expected@1.0",
    "jobs_running": 0,
    "power": [],
}
Writer = Callable[[BaseHTTPRequestHandler], None]


class Controller:
    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], Writer] = {}
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.queries: list[str] = []
        ctl = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def go(self, method: str) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                path, _, query = self.path.partition("?")
                ctl.seen.append((method, path, dict(self.headers.items())))
                ctl.queries.append(query)
                writer = ctl.answers.get((method, path))
                if writer is None:
                    return json_answer(200, [RECORD])(self)
                writer(self)

            def do_GET(self) -> None:
                self.go("GET")

            def do_POST(self) -> None:
                self.go("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def json_answer(status: int, doc: Any, raw: bytes | None = None) -> Writer:
    def write(h: BaseHTTPRequestHandler) -> None:
        data = raw if raw is not None else json.dumps(doc).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        with contextlib.suppress(OSError):
            h.wfile.write(data)

    return write


@pytest.fixture
def controller() -> Iterator[Controller]:
    c = Controller()
    yield c
    c.server.shutdown()
    c.server.server_close()


@pytest.fixture
def other() -> Iterator[Controller]:
    c = Controller()
    yield c
    c.server.shutdown()
    c.server.server_close()


def client(url: str, timeout: float = 2.0) -> ControllerClient:
    return ControllerClient(
        ControllerSettings((url,), Path("/unused"), timeout=timeout), "prov-secret", Lease("p", 7)
    )


ODD_STEP_ANSWERS = {
    "empty": json_answer(200, None, raw=b""),
    "null": json_answer(200, None),
    "a list": json_answer(200, [1, 2]),
    "no power": json_answer(200, {"instance_id": "rf-1"}),
    "power a string": json_answer(200, {**RECORD, "power": "abc"}),
    "unknown phase": json_answer(
        200,
        {
            **RECORD,
            "power": [{"decision": "d", "action": "on", "phase": "x", "attempt": 1, "code": "c"}],
        },
    ),
    "not json": json_answer(200, None, raw=b"<html>"),
}


@pytest.mark.parametrize("name", list(ODD_STEP_ANSWERS))
def test_an_odd_answer_to_a_power_step_is_a_controller_error(
    controller: Controller, name: str
) -> None:
    controller.answers[("POST", "/v1/provisioned/rf-1/power")] = ODD_STEP_ANSWERS[name]
    with pytest.raises(ControllerError):
        client(controller.url).step("rf-1", "expected@1.0", "on", Phase.BEGUN, 1, "x")
    assert controller.seen[-1][1] == "/v1/provisioned/rf-1/power"


@pytest.mark.parametrize("name", list(ODD_STEP_ANSWERS))
def test_odd_records_are_a_controller_error(controller: Controller, name: str) -> None:
    writer = ODD_STEP_ANSWERS[name]
    controller.answers[("GET", "/v1/provisioned")] = writer
    with pytest.raises(ControllerError):
        client(controller.url).records()
    assert controller.seen[-1][1] == "/v1/provisioned"
    assert controller.queries[-1] == "lease=p&token=7", "the records are read under the lease"


def test_expect_retire_and_ack_are_sent_under_the_lease(controller: Controller) -> None:
    """The controller fences these as it fences a step (tests/integration/test_leases_api.py);
    without a lease (a provisioner run by hand) they name none."""
    machine = Machine("node1", "rf-1", "small", "lab", "/redfish/v1/Systems/1")
    for held in (
        client(controller.url),
        ControllerClient(
            ControllerSettings((controller.url,), Path("/unused"), timeout=2.0),
            "prov-secret",
            Lease(),
        ),
    ):
        held.expect(machine, None)
        held.retire("rf-1", "idle")
        held.ack("rf-1")
    paths = [seen[1] for seen in controller.seen]
    assert (
        paths == ["/v1/expected", "/v1/provisioned/rf-1/decommission", "/v1/to-return/rf-1/ack"] * 2
    )
    assert controller.queries == ["lease=p&token=7"] * 3 + [""] * 3


def listed(*urls: str) -> ControllerClient:
    settings = ControllerSettings(urls, Path("/unused"), timeout=2.0)
    return ControllerClient(settings, "prov-secret", Lease("p", 7))


def unavailable(code: str = "refused_storage_unavailable") -> Writer:
    return json_answer(503, {"error": "storage_unavailable", "code": code, "message": "away"})


def test_listed_replicas_are_tried_in_turn_by_the_agent_s_rules(
    controller: Controller, other: Controller
) -> None:
    """No answer or a 503 moves on to the next replica and stays there; the controller's own
    word (a 409, a 401) and an outcome unknown do not: each was answered by the first asked."""
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    dead = f"http://127.0.0.1:{closed.server_address[1]}"
    closed.server_close()  # nothing listens there now: refused
    moving = listed(dead, controller.url, other.url)
    assert "rf-1" in moving.records(), "the dead one skipped"
    controller.answers[("GET", "/v1/provisioned")] = unavailable()
    assert "rf-1" in moving.records(), "the 503 one skipped"
    assert (len(controller.seen), len(other.seen)) == (2, 1)
    moving.records()
    assert (len(controller.seen), len(other.seen)) == (2, 2), "stays on the one that served"
    for status, doc in (
        (409, {"error": "stale_lease", "code": "refused_stale_lease", "message": "old"}),
        (401, {"error": "unknown_credential", "message": "who"}),
        (503, {"error": "storage_unavailable", "code": "refused_outcome_unknown", "message": "?"}),
    ):
        asked = len(other.seen), len(controller.seen)
        other.answers[("POST", "/v1/to-return/rf-1/ack")] = json_answer(status, doc)
        with pytest.raises(ControllerError) as refused:
            moving.ack("rf-1")
        assert (refused.value.status, refused.value.kind) == (status, doc["error"])
        assert refused.value.args[0].startswith(f"{other.url}: POST /v1/to-return/rf-1/ack:")
        assert (len(other.seen), len(controller.seen)) == (asked[0] + 1, asked[1]), status
    other.answers[("GET", "/v1/provisioned")] = unavailable()
    with pytest.raises(ControllerError) as away:
        moving.records()  # every one tried once, then the last failure
    assert away.value.status == 503 and (len(other.seen), len(controller.seen)) == (6, 3)


class Bmc:
    def __init__(self) -> None:
        self.requests: list[Request] = []

    def power(self, system: str) -> Power:
        return Power.OFF

    def request(self, system: str, what: Request) -> None:
        self.requests.append(what)

    def close(self) -> None:
        pass


def test_a_pass_survives_an_odd_answer_to_its_step(controller: Controller) -> None:
    """The step is written ahead: an answer that is not a record must not end the run (nor
    send the request: whether the step was stored is unknown)."""
    controller.answers[("POST", "/v1/provisioned/rf-1/power")] = json_answer(200, None, raw=b"")
    machine = Machine("node1", "rf-1", "small", "lab", "/redfish/v1/Systems/1")
    cfg = Config(ControllerSettings((controller.url,), Path("/t")), Policy(), {}, (machine,))
    bmc = Bmc()
    runner = Runner(cfg, client(controller.url), {"lab": bmc})
    runner.once()  # must not raise
    assert any(p.endswith("/power") for _, p, _ in controller.seen), "the step was written"
    assert bmc.requests == [], "no request after a step write whose outcome is unknown"
    assert runner.metrics.controller_errors == 1
    controller.answers.clear()
    runner.once()  # works again once the controller does


def test_an_answer_without_end_is_cut_off(controller: Controller) -> None:
    def endless(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        chunk = b"[" + b" " * 65535
        with contextlib.suppress(OSError):
            for _ in range(4096):  # 256 MiB
                h.wfile.write(chunk)

    controller.answers[("GET", "/v1/provisioned")] = endless
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    began = time.monotonic()
    with pytest.raises(ControllerError):
        client(controller.url, timeout=5.0).records()
    assert time.monotonic() - began < 8.0
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    assert grew < 100 * 1024, f"one answer grew the process by {grew} KiB"


def test_dripped_headers_are_cut_off_at_the_timeout(controller: Controller) -> None:
    def drip(h: BaseHTTPRequestHandler) -> None:
        with contextlib.suppress(OSError):
            h.wfile.write(b"HTTP/1.1 200 OK\r\n")
            for n in range(10000):
                for b in f"X-{n}: a\r\n".encode():
                    h.wfile.write(bytes([b]))
                    h.wfile.flush()
                    time.sleep(0.1)

    controller.answers[("GET", "/v1/provisioned")] = drip
    began = time.monotonic()
    with pytest.raises(ControllerError):
        client(controller.url, timeout=1.0).records()
    took = time.monotonic() - began
    assert took < 4.0, f"a call to the controller took {took:.1f} s"


@pytest.mark.parametrize("status", [302, 307])
def test_a_redirect_takes_the_token_nowhere(
    controller: Controller, other: Controller, status: int
) -> None:
    def redirect(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Location", other.url + "/v1/provisioned")
        h.send_header("Content-Length", "0")
        h.end_headers()

    controller.answers[("GET", "/v1/provisioned")] = redirect
    with pytest.raises(ControllerError):
        client(controller.url).records()
    assert controller.seen, "the redirect was answered"
    assert not other.seen
