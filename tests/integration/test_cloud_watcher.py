"""The provider watcher against the metadata emulator and against hostile metadata servers."""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import pytest

from tests.metadata_emulator import Emulator, aws_event_time, rfc1123, rfc3339, spot
from xce_agent.config.cloud import CloudConfig
from xce_agent.notices.fetch import BoundedHttp, MetadataError
from xce_agent.notices.sources import aws_sources
from xce_agent.notices.watcher import Watcher, watcher_for
from xce_protocol.notices import Impact, Notice, NoticeKind, NoticeState

WAIT = 10.0


class Notices:
    def __init__(self) -> None:
        self.q: queue.Queue[Notice] = queue.Queue()

    def __call__(self, notice: Notice) -> None:
        self.q.put(notice)

    def next(self, timeout: float = WAIT) -> Notice:
        return self.q.get(timeout=timeout)

    def none_within(self, seconds: float) -> bool:
        try:
            self.q.get(timeout=seconds)
        except queue.Empty:
            return True
        return False


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    with Emulator() as em:
        yield em


@contextmanager
def watching(provider: str, url: str, interval: float = 0.2) -> Iterator[tuple[Watcher, Notices]]:
    got = Notices()
    watcher = watcher_for(CloudConfig(provider, url, interval), got)
    assert watcher is not None
    watcher.start()
    try:
        yield watcher, got
    finally:
        watcher.stop()
        watcher.join(5.0)


def until(predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


# --- AWS ------------------------------------------------------------------------------------


def test_aws_spot_notice_arrives_with_its_time_over_imdsv2(emulator: Emulator) -> None:
    when = time.time() + 120
    with watching("aws", emulator.url) as (_, got):
        assert until(lambda: emulator.count("GET", "/latest/meta-data/spot") >= 2)
        emulator.change(spot(when))
        notice = got.next()
    assert notice.kind is NoticeKind.PREEMPTION and notice.provider == "aws"
    assert notice.deadline == pytest.approx(int(when), abs=1)
    assert emulator.count("PUT", "/latest/api/token") == 1  # one token, reused


def test_aws_expired_token_is_renewed_and_nothing_is_missed(emulator: Emulator) -> None:
    with watching("aws", emulator.url) as (_, got):
        assert until(lambda: emulator.count("GET", "/latest/meta-data/") >= 3)
        emulator.expire_tokens()
        emulator.change({"aws.rebalance": {"noticeTime": rfc3339(time.time())}})
        notice = got.next()
        assert notice.kind is NoticeKind.REBALANCE and notice.deadline is None
        assert emulator.count("PUT", "/latest/api/token") >= 2
        emulator.change({"aws.rebalance": None})
        ended = got.next()
    assert ended.state is NoticeState.ENDED and ended.event_id == notice.event_id


def test_aws_never_falls_back_to_imdsv1(
    emulator: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    emulator.change({"fault": {"status": 403}})
    with watching("aws", emulator.url) as (_, got):
        assert until(lambda: emulator.count("PUT", "/latest/api/token") >= 4)
        assert emulator.count("GET", "/latest/") == 0  # no unauthenticated read, ever
        emulator.change({"fault": {}})  # recovers once the token is given
        emulator.change(spot(time.time() + 120))
        assert got.next(timeout=WAIT + 10).kind is NoticeKind.PREEMPTION


def test_aws_scheduled_maintenance_then_canceled(emulator: Emulator) -> None:
    event = {
        "NotBefore": aws_event_time(time.time() + 3600),
        "Code": "system-reboot",
        "Description": "scheduled reboot",
        "EventId": "instance-event-0d59937288b749b32",
        "NotAfter": aws_event_time(time.time() + 4600),
        "State": "active",
    }
    with watching("aws", emulator.url) as (_, got):
        emulator.change({"aws.scheduled": [event]})
        notice = got.next()
        assert notice.kind is NoticeKind.MAINTENANCE and notice.impact is Impact.REBOOT
        canceled = {**event, "State": "canceled", "Description": "[Canceled] scheduled reboot"}
        emulator.change({"aws.scheduled": [canceled]})
        assert got.next().state is NoticeState.ENDED


# --- GCE ------------------------------------------------------------------------------------


def test_gce_preemption_arrives_by_long_poll_not_by_polling(emulator: Emulator) -> None:
    # A 30 s interval: only the long-poll can deliver within the wait below.
    with watching("gce", emulator.url, interval=30.0) as (_, got):
        assert until(lambda: emulator.count("GET", "/computeMetadata/v1/instance/") >= 4)
        applied = emulator.change({"gce.instance/preempted": "TRUE"})
        notice = got.next(timeout=5.0)
        latency = time.monotonic() - applied.monotonic
    assert notice.kind is NoticeKind.PREEMPTION
    assert notice.deadline == pytest.approx(applied.wall + 30, abs=2)
    assert latency < 5.0


def test_gce_server_ignoring_wait_for_change_is_paced_not_spun(emulator: Emulator) -> None:
    emulator.change({"fault": {"no_wait": True}})
    with watching("gce", emulator.url, interval=0.5) as (_, got):
        assert until(lambda: emulator.count("GET", "/computeMetadata/v1/instance/") >= 4)
        before = emulator.count("GET", "/computeMetadata/v1/instance/")
        time.sleep(2.0)  # a measuring window, not a synchronisation
        asked = emulator.count("GET", "/computeMetadata/v1/instance/") - before
        assert asked <= 2 * (2.0 / 0.5 + 2)  # two keys, once per interval each: not a spin
        emulator.change({"gce.instance/preempted": "TRUE"})
        assert got.next(timeout=5.0).kind is NoticeKind.PREEMPTION


def test_gce_maintenance_migrate_then_back_to_none(emulator: Emulator) -> None:
    with watching("gce", emulator.url, interval=30.0) as (_, got):
        emulator.change({"gce.instance/maintenance-event": "MIGRATE_ON_HOST_MAINTENANCE"})
        notice = got.next(timeout=5.0)
        assert notice.kind is NoticeKind.MAINTENANCE and notice.impact is Impact.PAUSE
        emulator.change({"gce.instance/maintenance-event": "NONE"})
        assert got.next(timeout=5.0).state is NoticeState.ENDED


def test_gce_server_refuses_requests_without_the_flavor_header(emulator: Emulator) -> None:
    http = BoundedHttp()
    url = emulator.url + "/computeMetadata/v1/instance/preempted"
    assert http.request("GET", url, {}, 2.0).status == 403
    reply = http.request("GET", url, {"Metadata-Flavor": "Google"}, 2.0)
    assert (reply.status, reply.body, reply.header("Metadata-Flavor")) == (200, b"FALSE", "Google")


# --- Azure ----------------------------------------------------------------------------------


def azure_event(event_type: str, resources: list[str], when: float) -> dict[str, object]:
    return {
        "EventId": f"{event_type}-0001",
        "EventStatus": "Scheduled",
        "EventType": event_type,
        "ResourceType": "VirtualMachine",
        "Resources": resources,
        "NotBefore": rfc1123(when),
        "Description": "test",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    }


def test_azure_preempt_for_this_vm_is_a_notice_and_is_approved(emulator: Emulator) -> None:
    when = time.time() + 30
    with watching("azure", emulator.url) as (watcher, got):
        emulator.change({"azure.events": [azure_event("Reboot", ["vm7"], when)]})
        asked = emulator.count("GET", "/metadata/scheduledevents")
        assert until(lambda: emulator.count("GET", "/metadata/scheduledevents") >= asked + 2)
        assert got.none_within(0.5)  # another VM's event, read twice
        # Shared with vm7: a notice, but approving it would release vm7's eviction too.
        emulator.change({"azure.events": [azure_event("Preempt", ["vm0", "vm7"], when)]})
        notice = got.next()
        assert notice.kind is NoticeKind.PREEMPTION
        assert notice.deadline == pytest.approx(int(when), abs=1)
        assert watcher.acknowledge([notice.event_id])  # settled: never to be approved
        assert emulator.count("POST", "/metadata/scheduledevents") == 0
        emulator.change({"azure.events": [azure_event("Preempt", ["vm0"], when)]})
        assert got.next().deadline == pytest.approx(int(when), abs=1)  # changed: now alone
        assert watcher.acknowledge([notice.event_id])
    assert emulator.state.approvals == ["Preempt-0001"]


# --- a metadata service absent, slow or answering garbage ---------------------------------


FAULTS = [
    {"status": 500},
    {"delay": 2.5},
    {"garbage": True},
    {"redirect": True},
    {"huge": True},
    {"deep": True},
    {"drip": True},
]


@pytest.mark.parametrize(
    "fault", FAULTS, ids=["5xx", "slow", "garbage", "redirect", "huge", "deep", "drip"]
)
@pytest.mark.parametrize("provider", ["aws", "gce", "azure"])
def test_bad_metadata_is_logged_once_and_the_watch_recovers(
    emulator: Emulator, caplog: pytest.LogCaptureFixture, provider: str, fault: dict[str, object]
) -> None:
    caplog.set_level(logging.DEBUG, logger="xce_agent.notices")
    emulator.change({"fault": fault})
    sources = len(watcher_for(CloudConfig(provider, emulator.url), print).sources)  # type: ignore[union-attr]

    def warnings() -> int:
        return sum(r.levelno >= logging.WARNING for r in caplog.records)

    with watching(provider, emulator.url) as (_, got):
        # 2.5 s, or a drip, is an ordinary wait for a GCE long-poll (up to 65 s by design),
        # and for Azure's first call, which enables the service (up to 2 min).
        slow = "delay" in fault or "drip" in fault
        waits = (provider == "gce" and slow) or (provider == "azure" and "drip" in fault)
        asked = sources if provider == "gce" and slow else sources * 2  # azure: name, events
        assert until(lambda: len(emulator.state.requests) >= asked, timeout=20)
        if not waits:
            assert until(lambda: warnings() >= 1)
            retried = lambda: any("still unavailable" in r.message for r in caplog.records)  # noqa: E731
            assert until(retried, timeout=20)  # retried, and not warned again
        assert warnings() <= sources  # once per item, not once per attempt
        emulator.change({"fault": {}})
        change = {
            "aws": spot(time.time() + 120),
            "gce": {"gce.instance/preempted": "TRUE"},
            "azure": {"azure.events": [azure_event("Preempt", ["vm0"], time.time() + 30)]},
        }[provider]
        emulator.change(change)
        assert got.next(timeout=30).kind is NoticeKind.PREEMPTION
    assert warnings() <= sources


def test_absent_metadata_service_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    caplog.set_level(logging.DEBUG, logger="xce_agent.notices")
    with watching("aws", f"http://127.0.0.1:{port}") as (watcher, got):
        assert until(lambda: sum("still unavailable" in r.message for r in caplog.records) >= 6)
        warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warned) == len(aws_sources(BoundedHttp(), ""))
        assert all(t.is_alive() for t in watcher._threads)
        with Emulator(port=port) as em:  # the service comes up: the next notice is obeyed
            em.change(spot(time.time() + 120))
            assert got.next(timeout=WAIT + 10).kind is NoticeKind.PREEMPTION


# --- the bounded client itself -------------------------------------------------------------


@contextmanager
def raw_server(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                with suppress(OSError):
                    answer(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        # close() alone leaves a thread blocked in accept() listening, into a later test.
        with suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=5)


def drip(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
    for _ in range(100):
        conn.sendall(b"x")
        time.sleep(0.2)


def huge(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
    chunk = b"y" * 65536
    for _ in range(64):
        conn.sendall(chunk)


def redirect(conn: socket.socket) -> None:
    conn.sendall(
        b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.2:9/\r\nContent-Length: 0\r\n\r\n"
    )


def test_a_slow_drip_ends_at_the_total_deadline() -> None:
    with raw_server(drip) as url:
        started = time.monotonic()
        with pytest.raises(MetadataError, match="no answer within"):
            BoundedHttp().request("GET", url + "/x", {}, 1.0)
        assert time.monotonic() - started < 3.0


def test_a_huge_body_is_cut_off() -> None:
    with raw_server(huge) as url, pytest.raises(MetadataError, match="longer than"):
        BoundedHttp().request("GET", url + "/x", {}, 10.0)


def test_a_redirect_is_not_followed() -> None:
    with raw_server(redirect) as url:
        assert BoundedHttp().request("GET", url + "/x", {}, 2.0).status == 302
