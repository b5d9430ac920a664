"""The hostile-server table: no answer but the controller's refusal stops the worker.

Each case runs a real agent against a fake controller that gives one kind of bad answer on
the endpoints the case names, then valid answers, then a valid decommission refusal. A case
passes only if
- the agent saw the bad answer (the server counts what it answered, per endpoint),
- the worker kept running with the same pid and no tombstone was written (or, for a bad
  join answer, the worker was not started),
- the agent recovered: after the switch the server answers valid heartbeats and watches
  again (and a join, for join cases), and
- the refusal that follows stops the worker within a second of the server sending it.
The cases run a few at a time, each with its own agent and server, so the table stays short.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agents import SAMPLE_WORKER, AgentProcess
from tests.integration.fake_controller import (
    ACCEPT,
    HOST,
    HOST_ANSWER,
    INSTANCE,
    REFUSAL,
    TEMPLATE,
    Exchange,
    FakeController,
    gzip_bomb,
    self_signed,
)
from tests.integration.helpers import alive, wait_for
from xce_agent.config.agent import ControllerConfig
from xce_agent.controller.client import ControllerClient
from xce_protocol.protocol import Identity, Outcome

# Cases mostly wait (on the agent's retry intervals): 8 at once use about half of two cores
# and take half the time of 4.
PARALLEL = 8
LATENCIES: dict[str, float] = {}  # refusal sent -> worker gone, per case
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
Writer = Callable[[Exchange], None]


@dataclass
class Run:
    name: str
    server: FakeController
    agent: AgentProcess
    pid: int | None = None


@dataclass(frozen=True)
class Case:
    write: Writer
    on: tuple[str, ...] = ("heartbeat", "watch")
    seen: int = 2  # bad answers the agent must have received, on each endpoint in `on`
    check: Callable[[Run], None] | None = None  # more assertions once the answers were seen
    tls: bool = False
    sample_worker: bool = False  # the worker is `xce-agent sample-worker`, which watches too


def answer(status: int, body: Any, headers: dict[str, str] | None = None) -> Writer:
    return lambda x: x.answer(status, body, headers)


# --- the origin a redirect points to: it would refuse, and must never be asked ----------
_origin: list[FakeController] = []


def origin() -> FakeController:
    if not _origin:
        other = FakeController(answer(410, REFUSAL), ())
        other.set_phase("refuse")
        _origin.append(other)
    return _origin[0]


def redirect(code: int) -> Writer:
    def write(x: Exchange) -> None:
        target = origin().url + "/v1/hosts/node1/heartbeat"
        x.answer(code, REFUSAL, {"Location": target})

    return write


def held(seconds: float) -> Writer:
    return lambda x: time.sleep(seconds)


def dropped(x: Exchange) -> None:
    x.sock.close()


def drip_headers(x: Exchange) -> None:
    x.drip(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: ")


def drip_body(x: Exchange) -> None:
    x.drip(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nContent-Type: application/json\r\n\r\n{")


_BOMB: list[bytes] = []


def bomb(x: Exchange) -> None:
    if not _BOMB:
        _BOMB.append(gzip_bomb(256 << 20))
    x.answer(200, _BOMB[0], {"Content-Encoding": "gzip"})


def deep(depth: int, around: dict[str, Any] | None = None) -> bytes:
    nested = "[" * depth + "]" * depth
    if around is None:
        return nested.encode()
    return (json.dumps(around)[:-1] + f', "x": {nested}}}').encode()


# --- checks -----------------------------------------------------------------------------
def state_of(run: Run) -> dict[str, Any]:
    contact: dict[str, Any] = run.agent.state().get("controller") or {}
    return contact


def proc_status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def agent_pid(run: Run) -> int:
    assert run.agent.proc is not None
    return run.agent.proc.pid


def drips_cut(run: Run) -> None:
    wait_for(lambda: run.server.drips, timeout=15)
    # The request's deadline is the agent's controller timeout (2 s), not per read.
    assert max(run.server.drips) < 5.0, run.server.drips


def rss_bounded(run: Run) -> None:
    peak_kib = proc_status(agent_pid(run), "VmHWM")
    assert peak_kib < 150 * 1024, f"agent peak RSS {peak_kib} KiB"


def worker_rss_bounded(run: Run) -> None:
    assert run.pid is not None
    peak_kib = proc_status(run.pid, "VmHWM")
    assert peak_kib < 150 * 1024, f"worker peak RSS {peak_kib} KiB"


def rate_at_most(endpoint: str, per_window: int, window: float = 3.0) -> Callable[[Run], None]:
    def check(run: Run) -> None:
        before = run.server.count("hostile", endpoint)
        time.sleep(window)  # measuring a rate over a window, not waiting for a condition
        seen = run.server.count("hostile", endpoint) - before
        assert seen <= per_window, f"{seen} {endpoint} requests in {window}s"

    return check


def shown_as_refused(kind: str) -> Callable[[Run], None]:
    def check(run: Run) -> None:
        wait_for(lambda: state_of(run).get("state") == "refused", timeout=5)
        assert kind in state_of(run).get("detail", "")

    return check


def detail_says(text: str) -> Callable[[Run], None]:
    def check(run: Run) -> None:
        wait_for(lambda: text in state_of(run).get("detail", ""), timeout=5)

    return check


def one_watch_and_few_threads(run: Run) -> None:
    assert run.server.count("valid", "join") >= 4  # it rejoined after each 404
    assert run.server.max_watches <= 1, f"{run.server.max_watches} watches at once"
    threads = proc_status(agent_pid(run), "Threads")
    assert threads <= 10, f"{threads} threads in the agent"


def no_traceback(run: Run) -> None:
    assert "Traceback" not in run.agent.log()


def all_of(*checks: Callable[[Run], None]) -> Callable[[Run], None]:
    def check(run: Run) -> None:
        for each in checks:
            each(run)

    return check


def gzipped(body: dict[str, Any]) -> bytes:
    import gzip

    return gzip.compress(json.dumps(body).encode())


NO_PROTOCOL = {k: v for k, v in REFUSAL.items() if k != "protocol"}
BAD_JOBS = [
    {"id": 1},
    {"id": "2", "state": "assigned", "command": ["true"]},
    {"id": 3, "state": "assigned", "command": "true"},
    {"id": 4, "state": "assigned", "command": ["/nonexistent/job"]},
    {"id": 5, "state": "assigned", "command": ["tr\u0000ue"]},
]
UNKNOWN = {"protocol": "1.0", "error": "unknown_host", "message": "no such host"}

CASES: dict[str, Case] = {
    # garbage and forgeries
    "garbage-200": Case(answer(200, b"\x00not json at all")),
    "html-404": Case(answer(404, b"<html>not found</html>", {"Content-Type": "text/html"})),
    "refusal-with-500": Case(answer(500, REFUSAL)),
    "refusal-with-503": Case(answer(503, REFUSAL, {"Retry-After": "1"})),
    # Retry-After is only for 429/503: on anything else it would silence the link for minutes
    "retry-after-300-on-a-500": Case(answer(500, REFUSAL, {"Retry-After": "300"})),
    "retry-after-300-on-garbage": Case(answer(200, b"<html>", {"Retry-After": "300"})),
    "refusal-for-another-host": Case(answer(410, {**REFUSAL, "host": "node2"})),
    "refusal-for-another-instance": Case(answer(410, {**REFUSAL, "instance_id": "i-2"})),
    "410-without-refusal": Case(answer(410, {"protocol": "1.0", "error": "gone"})),
    "refusal-with-malformed-fields": Case(answer(410, {**REFUSAL, "host": 7})),
    "refusal-without-reason": Case(
        answer(410, {k: v for k, v in REFUSAL.items() if k != "reason"})
    ),
    "decommissioned-state-in-a-200": Case(answer(200, {**HOST_ANSWER, "state": "decommissioned"})),
    "answer-for-another-host": Case(answer(200, {**HOST_ANSWER, "host": "node2", "jobs": []})),
    "json-list": Case(answer(200, [REFUSAL])),
    "nan-in-a-refusal": Case(answer(410, json.dumps(REFUSAL)[:-1].encode() + b', "n": NaN}')),
    # versions
    "newer-major-protocol": Case(answer(410, {**REFUSAL, "protocol": "2.0"})),
    "numeric-protocol-1": Case(answer(410, {**REFUSAL, "protocol": 1})),
    "numeric-protocol-1.0": Case(answer(410, {**REFUSAL, "protocol": 1.0})),
    "refusal-without-protocol": Case(answer(410, NO_PROTOCOL)),
    "join-accepted-without-protocol": Case(
        answer(200, {k: v for k, v in ACCEPT.items() if k != "protocol"}), on=("join",)
    ),
    "join-without-a-credential": Case(  # a controller before protocol 1.1
        answer(
            200,
            {
                **{k: v for k, v in ACCEPT.items() if "credential" not in k},
                "protocol": "1.0",
            },
        ),
        on=("join",),
        check=detail_says(
            "controller (protocol 1.0) issues no host credential: this agent needs protocol 1.1"
        ),
    ),
    "join-without-template": Case(
        answer(200, {k: v for k, v in ACCEPT.items() if k != "template"}),
        on=("join",),
        check=detail_says("join answer without a usable template"),
    ),
    **{
        f"join-template-name-{what}": Case(
            answer(200, {**ACCEPT, "template": {**TEMPLATE, "name": name}}),
            on=("join",),
            check=detail_says("join answer without a usable template"),
        )
        for what, name in (("with-a-nul", "gpu\u0000large"), ("of-200-kib", "x" * 200_000))
    },
    # credentials the agent would send later: one it cannot send would make it deaf for good
    **{
        f"join-credential-{what}": Case(
            answer(200, {**ACCEPT, key: value}),
            on=("join",),
            check=detail_says(f"join answer with a {key.replace('_', ' ')} that is not"),
        )
        for what, key, value in (
            ("with-crlf", "credential", "abc\r\nX-Forged: 1"),
            ("with-a-space", "credential", "abc def"),
            ("of-600-characters", "credential", "x" * 600),
            ("not-ascii", "credential", "caf\u00e9"),
            ("empty", "credential", ""),
            ("worker-with-crlf", "worker_credential", "w\r\nX-Forged: 1"),
        )
    },
    "join-without-a-worker-credential": Case(
        answer(200, {k: v for k, v in ACCEPT.items() if k != "worker_credential"}),
        on=("join",),
        check=detail_says("join answer without a worker credential"),
    ),
    # framing: only an exactly framed answer counts
    "refusal-with-duplicate-keys": Case(
        answer(410, json.dumps({**REFUSAL, "host": "node2"})[:-1].encode() + b', "host": "node1"}')
    ),
    "refusal-as-text-plain": Case(answer(410, REFUSAL, {"Content-Type": "text/plain"})),
    "refusal-without-content-type": Case(answer(410, REFUSAL, {"Content-Type": ""})),
    "refusal-gzip-cut-before-its-trailer": Case(
        answer(410, gzipped(REFUSAL)[:-8], {"Content-Encoding": "gzip"}),
        check=detail_says("compressed body does not end where the body ends"),
    ),
    "refusal-gzip-with-bytes-after-it": Case(
        answer(410, gzipped(REFUSAL) + b"more", {"Content-Encoding": "gzip"}),
        check=detail_says("compressed body does not end where the body ends"),
    ),
    # redirects to another origin that would refuse: never followed
    **{
        f"redirect-{code}": Case(redirect(code), check=detail_says(f"HTTP {code} redirect"))
        for code in (301, 302, 303, 307, 308)
    },
    "redirect-on-join": Case(redirect(307), on=("join",), check=detail_says("redirect")),
    "https-redirected-to-http": Case(redirect(301), tls=True, check=detail_says("redirect")),
    # the network
    "timeout": Case(held(4.0)),
    "connection-dropped": Case(dropped),
    "dripped-headers": Case(drip_headers, on=("heartbeat",), seen=1, check=drips_cut),
    "dripped-body": Case(drip_body, on=("heartbeat",), seen=1, check=drips_cut),
    "dripped-headers-on-join": Case(drip_headers, on=("join",), seen=1, check=drips_cut),
    "dripped-body-on-join": Case(drip_body, on=("join",), seen=1, check=drips_cut),
    # sizes and shapes
    "deep-json": Case(answer(200, deep(1000))),
    "deep-json-in-a-refusal": Case(answer(410, deep(1000, REFUSAL))),
    "decompression-bomb": Case(bomb, check=rss_bounded),
    "refusal-claiming-gzip": Case(
        answer(410, REFUSAL, {"Content-Encoding": "gzip"}),
        check=all_of(detail_says("declared content encoding"), no_traceback),
    ),
    "unterminated-string-of-escaped-quotes": Case(answer(200, b'"' + b'\\"' * 500_000)),
    # rates and intervals
    "instant-watch-answers": Case(
        answer(200, {**HOST_ANSWER, "jobs": []}), on=("watch",), check=rate_at_most("watch", 8)
    ),
    "tiny-intervals": Case(
        answer(200, {**HOST_ANSWER, "heartbeat_interval": 1e-6, "host_loss_grace": 1e-6}),
        check=all_of(rate_at_most("heartbeat", 5), rate_at_most("watch", 8)),
    ),
    "huge-intervals": Case(
        answer(200, {**HOST_ANSWER, "heartbeat_interval": 1e9, "host_loss_grace": 1e9}),
        on=("heartbeat",),
        seen=1,
    ),
    "zero-and-negative-intervals": Case(
        answer(200, {**HOST_ANSWER, "heartbeat_interval": 0, "host_loss_grace": -5}),
        check=rate_at_most("heartbeat", 5),
    ),
    "repeated-404-unknown-host": Case(
        answer(404, UNKNOWN), on=("heartbeat",), seen=4, check=one_watch_and_few_threads
    ),
    # the sample worker watches as well: it neither spins nor dies on what it is told
    "sample-worker-watch-answered-500-at-once": Case(
        answer(500, {"protocol": "1.0", "error": "internal"}),
        on=("watch",),
        sample_worker=True,
        check=rate_at_most("watch", 15),  # the agent 6, the worker 6
    ),
    "sample-worker-instant-watch-answers": Case(
        answer(200, {**HOST_ANSWER, "jobs": []}),
        on=("watch",),
        sample_worker=True,
        check=rate_at_most("watch", 15),  # the agent 6, the worker 6
    ),
    "sample-worker-infinite-version": Case(
        answer(
            200,
            json.dumps({**HOST_ANSWER, "jobs": []})
            .replace('"version": 1', '"version": 1e400')
            .encode(),
        ),
        on=("watch",),
        sample_worker=True,
    ),
    "sample-worker-decompression-bomb": Case(
        bomb, on=("watch",), sample_worker=True, check=worker_rss_bounded
    ),
    "sample-worker-deep-json": Case(
        answer(200, deep(100_000, {**HOST_ANSWER, "jobs": []})), on=("watch",), sample_worker=True
    ),
    "sample-worker-malformed-and-unstartable-jobs": Case(
        answer(200, {**HOST_ANSWER, "jobs": BAD_JOBS}), on=("watch",), seen=4, sample_worker=True
    ),
    # definite refusals are shown as refusals, and never obeyed as a decommission
    "401-unauthorized": Case(
        answer(401, {"protocol": "1.0", "error": "unauthorized", "message": "bad token"}),
        check=shown_as_refused("unauthorized"),
    ),
    "403-unmatched-join": Case(
        answer(403, {"protocol": "1.0", "error": "unmatched", "message": "no such instance"}),
        on=("join",),
        check=shown_as_refused("unmatched"),
    ),
    "repeated-401-unknown-credential": Case(
        answer(401, {"protocol": "1.1", "error": "unknown_credential", "message": "?"}),
        on=("heartbeat",),
        seen=4,
        check=one_watch_and_few_threads,
    ),
    # Not an answer of this protocol (no version): the sample worker killed its jobs and exited
    # on it, as if the agent had joined again.
    "sample-worker-401-unknown-credential-without-protocol": Case(
        answer(401, {"error": "unknown_credential", "message": "forged"}),
        on=("watch",),
        seen=6,
        sample_worker=True,
    ),
    "409-stale-incarnation": Case(
        answer(409, {"protocol": "1.1", "error": "stale_incarnation", "message": "old"}),
        check=shown_as_refused("host credential refused: HTTP 409 stale_incarnation"),
    ),
    "409-duplicate": Case(
        answer(409, {"protocol": "1.0", "error": "duplicate", "message": "taken"}),
        check=shown_as_refused("duplicate"),
    ),
}


def run_case(name: str, case: Case, workdir: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    tls = self_signed(workdir) if case.tls else None
    server = FakeController(case.write, case.on, tls=tls)
    ca = str(tls[0]) if tls else ""
    worker = SAMPLE_WORKER if case.sample_worker else SLEEPER
    agent = AgentProcess(workdir, server.url, INSTANCE, HOST, worker=worker, ca_file=ca)
    run = Run(name, server, agent)
    try:
        agent.start()
        _hostile_phase(run, case)
        _recover(run, case)
        _refuse(run)
    except Exception as exc:
        tail = "\n    ".join(agent.log().splitlines()[-15:])
        raise AssertionError(f"{type(exc).__name__}: {exc}\n    {tail}") from exc
    finally:
        agent.stop()
        server.close()


def _hostile_phase(run: Run, case: Case) -> None:
    joins_first = "join" in case.on
    if not joins_first:
        wait_for(run.agent.worker_pid, timeout=20)
        run.pid = run.agent.worker_pid()
        run.server.set_phase("hostile")
    for endpoint in case.on:
        wait_for(lambda e=endpoint: run.server.count("hostile", e) >= case.seen, timeout=25)  # type: ignore[misc]
    if case.check is not None:
        case.check(run)
    state = run.agent.state()
    assert state.get("tombstone") is None
    assert state_of(run).get("state") != "decommissioned"
    if joins_first:
        assert run.agent.worker().get("phase") in (None, "stopped"), run.agent.worker()
    else:
        assert run.agent.worker_pid() == run.pid and run.pid is not None and alive(run.pid)


def _recover(run: Run, case: Case) -> None:
    run.server.set_phase("valid")
    before = {e: run.server.count("valid", e) for e in ("join", "heartbeat", "watch")}
    endpoints = ("join", "heartbeat", "watch") if "join" in case.on else ("heartbeat", "watch")
    for endpoint in endpoints:
        wait_for(lambda e=endpoint: run.server.count("valid", e) > before[e], timeout=25)  # type: ignore[misc]
    wait_for(run.agent.worker_pid, timeout=10)
    if run.pid is not None:
        assert run.agent.worker_pid() == run.pid
    run.pid = run.agent.worker_pid()
    wait_for(lambda: state_of(run).get("state") == "connected", timeout=10)


def _refuse(run: Run) -> None:
    pid = run.pid
    assert pid is not None
    run.server.set_phase("refuse")
    wait_for(lambda: not alive(pid), timeout=10)
    stopped = time.monotonic()
    sent = run.server.first_refusal
    assert sent is not None
    assert stopped - sent < 1.0, f"worker stopped {stopped - sent:.2f}s after the refusal"
    LATENCIES[run.name] = stopped - sent
    wait_for(lambda: run.agent.state().get("tombstone") is not None, timeout=5)


def _outcome(name: str, workdir: Path) -> str:
    try:
        run_case(name, CASES[name], workdir)
    except Exception:
        return (
            traceback.format_exc(limit=1).strip().splitlines()[-1] + "\n" + str(sys.exc_info()[1])
        )
    return ""


@pytest.fixture
def selected() -> Iterator[list[str]]:
    """All cases, or those named in XCE_HOSTILE_CASES (comma-separated) when debugging."""
    wanted = [n for n in os.environ.get("XCE_HOSTILE_CASES", "").split(",") if n]
    unknown = set(wanted) - set(CASES)
    assert not unknown, f"no such cases: {sorted(unknown)}"
    yield wanted or sorted(CASES)
    for server in _origin:
        server.close()
    _origin.clear()


def test_hostile_answers_table(selected: list[str], tmp_path: Path) -> None:
    started = time.monotonic()
    with ThreadPoolExecutor(PARALLEL) as pool:
        outcomes = dict(zip(selected, pool.map(lambda n: _outcome(n, tmp_path / n), selected)))
    failed = {name: why for name, why in outcomes.items() if why}
    assert not failed, "\n".join(f"{name}: {why}" for name, why in sorted(failed.items()))
    if _origin:
        assert _origin[0].count("refuse") == 0, "a redirect was followed"
    worst = max(LATENCIES.values(), default=0.0)
    print(f"{len(selected)} hostile cases in {time.monotonic() - started:.1f}s; refusal to worker")
    print(f"stopped: worst {worst * 1000:.0f} ms, median {_median(LATENCIES) * 1000:.0f} ms")


def _median(values: dict[str, float]) -> float:
    ordered = sorted(values.values())
    return ordered[len(ordered) // 2] if ordered else 0.0


def test_tls_failure_is_a_failed_contact_not_a_refusal(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    server = FakeController(answer(410, REFUSAL), (), tls=(cert, key))
    server.set_phase("refuse")  # a valid refusal, over TLS
    plain = FakeController(answer(410, REFUSAL), ())
    plain.set_phase("refuse")  # a valid refusal over plain HTTP, that never speaks TLS
    me = Identity(HOST, INSTANCE)
    try:
        untrusted = ControllerClient(ControllerConfig(server.url, timeout=2.0), me).heartbeat({})
        assert untrusted.outcome is Outcome.RETRY
        assert untrusted.detail == "TLS failure talking to the controller (certificate)"
        https_to_plain = ControllerClient(
            ControllerConfig(f"https://127.0.0.1:{plain.port}", timeout=2.0), me
        ).heartbeat({})
        # The plain server waits for a request the handshake never sends: the deadline ends it.
        assert https_to_plain.outcome is Outcome.RETRY
        assert https_to_plain.detail == "controller did not answer within 2s"
        # The control cases: the same refusals, trusted and in plain HTTP, are obeyed.
        trusted = ControllerClient(ControllerConfig(server.url, timeout=2.0, ca_file=cert), me)
        assert trusted.heartbeat({}).outcome is Outcome.DECOMMISSIONED
        assert server.count("refuse") == 1  # only the trusted handshake reached the request
        plain_client = ControllerClient(ControllerConfig(plain.url, timeout=2.0), me)
        assert plain_client.heartbeat({}).outcome is Outcome.DECOMMISSIONED
    finally:
        server.close()
        plain.close()


def test_a_confirmation_against_a_failing_controller_does_not_spin(tmp_path: Path) -> None:
    # The worker's "my rejoin was refused" exit is confirmed with the controller; a failed
    # confirmation used to be retried at once: 1,700 heartbeats in 2 s against a 500.
    go = tmp_path / "go"
    script = tmp_path / "worker.py"
    script.write_text(
        "import os, sys, time\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
        f"os.unlink({str(go)!r}); sys.exit(100)\n"
    )
    server = FakeController(answer(500, {"protocol": "1.0", "error": "internal"}), ("heartbeat",))
    agent = AgentProcess(tmp_path, server.url, INSTANCE, HOST, worker=[sys.executable, str(script)])
    agent.start()
    try:
        wait_for(agent.worker_pid, timeout=20)
        first = agent.worker_pid()
        server.set_phase("hostile")
        go.write_text("exit")
        wait_for(lambda: "(rejoin refused): asking the controller" in agent.log(), timeout=10)
        wait_for(lambda: server.count("hostile", "heartbeat") >= 1, timeout=10)
        seen = server.count("hostile", "heartbeat")
        time.sleep(2.0)  # measuring a rate over a window, not waiting for a condition
        assert server.count("hostile", "heartbeat") - seen <= 4
        server.set_phase("valid")  # confirmed active: the worker runs again
        wait_for(lambda: agent.worker_pid() not in (None, first), timeout=15)
        pid = agent.worker_pid()
        assert pid is not None and agent.state().get("tombstone") is None
        server.set_phase("refuse")
        wait_for(lambda: not alive(pid), timeout=10)
        wait_for(lambda: agent.state().get("tombstone") is not None, timeout=5)
    finally:
        agent.stop()
        server.close()
