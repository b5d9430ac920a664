"""xcecli with a list of replicas against fake controllers on loopback: a change whose outcome
one replica could not tell, or whose connection broke once it was sent, is never sent to the
next (exit 4), "cannot reach" names only the URLs a command tried, each with how it failed,
and an events stream that broke off is read on from its last event on the next URL."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.unit.test_error_exits import _one_line, _runner
from xce_controller.cli.xcecli import main
from xce_controller.http.errors import storage_answer
from xce_controller.store.base import OutcomeUnknown, StorageUnavailable

JOB = {"id": 7, "state": "queued", "slots": 1, "host": "", "command": ["true"], "note": ""}


def _answer_of(exc: StorageUnavailable) -> tuple[int, dict[str, Any]]:
    """What the controller's own error mapping answers for `exc`."""
    response = storage_answer(exc)
    return response.status_code, json.loads(bytes(response.body))


class FakeServer:
    """A handler class served on 127.0.0.1:0 from a thread, until `stop`."""

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Replica(FakeServer):
    """A fake controller on 127.0.0.1:0 that counts the requests it gets, by method and path.
    `answer` is (status, body) for every request; `close` cuts each one without an answer."""

    def __init__(self, answer: tuple[int, Any] = (200, JOB), close: bool = False) -> None:
        self.answer, self.close, self.got = answer, close, list[str]()
        replica = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                replica.got.append(f"{self.command} {self.path.split('?')[0]}")
                if replica.close:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, body = replica.answer
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.serve(Handler)


@pytest.fixture
def replicas() -> Iterator[list[Replica]]:
    made: list[Replica] = []
    yield made
    for replica in made:
        replica.stop()


def _closed_port() -> str:
    with socket.socket() as sock:  # bound, never listening: the connection is refused
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def _xcecli(urls: list[str], *args: str) -> Any:
    return _runner().invoke(main, ["--url", ",".join(urls), "--token", "t", *args])


SUBMIT = ("submit", "--", "true")


def test_an_unknown_outcome_is_never_sent_to_the_next_url(replicas: list[Replica]) -> None:
    unknown = _answer_of(OutcomeUnknown("did not answer within 5s"))
    assert unknown[0] == 500  # the mapping's answer, whatever status it picks
    a, b = Replica(unknown), Replica()
    replicas += [a, b]
    result = _xcecli([a.url, b.url], *SUBMIT)
    assert a.got == ["POST /v1/jobs"]  # the change arrived, once
    assert b.got == []  # and was never sent to the next URL
    assert result.exit_code == 4, result.output
    line = _one_line(result, "xcecli")
    assert line.startswith(f"xcecli: {a.url} lost its database's answer to POST /v1/jobs")
    assert "may have been made" in line and "`xcecli jobs`" in line
    # The check it names works, and reads go on to the next URL as before.
    a.answer = _answer_of(StorageUnavailable("disk I/O error"))
    b.answer = (200, [JOB])
    listed = _xcecli([a.url, b.url], "jobs")
    assert listed.exit_code == 0, listed.output
    assert b.got == ["GET /v1/jobs"]


def test_the_code_decides_whatever_the_status(replicas: list[Replica]) -> None:
    # A 503 with the code (a proxy's rewrite, another version) stays where it was too.
    _, body = _answer_of(OutcomeUnknown("connection lost"))
    a, b = Replica((503, body)), Replica()
    replicas += [a, b]
    result = _xcecli([a.url, b.url], "cancel", "7")
    assert (result.exit_code, a.got, b.got) == (4, ["POST /v1/jobs/7/cancel"], [])
    assert "`xcecli jobs`" in _one_line(result, "xcecli")


def test_a_storage_outage_still_moves_the_change_on(replicas: list[Replica]) -> None:
    a, b = Replica(_answer_of(StorageUnavailable("disk I/O error"))), Replica()
    replicas += [a, b]
    result = _xcecli([a.url, b.url], *SUBMIT)
    assert result.exit_code == 0, result.output
    assert (a.got, b.got) == (["POST /v1/jobs"], ["POST /v1/jobs"])


@pytest.mark.parametrize(
    ("path", "verb"),
    [
        ("/v1/hosts/n1/close", "xcecli host n1"),
        ("/v1/expected", "xcecli expected"),
        ("/v1/to-return/i-1/ack", "xcecli to-return"),
        ("/v1/provisioned/i-1/power", "xcecli events"),
    ],
)
def test_the_check_named_is_the_changes_own(path: str, verb: str) -> None:
    from xce_controller.cli.client_errors import check_verb

    assert check_verb(path) == verb


def test_a_change_cut_once_sent_is_an_unknown_outcome(replicas: list[Replica]) -> None:
    # A change whose connection broke once sent may have been made: it stops there, exit 4,
    # and the URL after it is never tried. A URL that refused the connection got nothing.
    refused, cut, spare = _closed_port(), Replica(close=True), Replica()
    replicas += [cut, spare]
    result = _xcecli([refused, cut.url, spare.url], *SUBMIT)
    assert cut.got == ["POST /v1/jobs"]  # the change arrived
    assert result.exit_code == 4, result.output
    line = _one_line(result, "xcecli")
    said = f"xcecli: {cut.url} did not answer POST /v1/jobs once it was sent ("
    assert line.startswith(said), line
    assert "may have been made" in line and "`xcecli jobs`" in line
    assert spare.url not in line and spare.got == []
    # A read cut the same way goes on to the next URL; a refused connection does, for a change.
    spare.answer = (200, [JOB])
    assert _xcecli([cut.url, spare.url], "jobs").exit_code == 0
    spare.answer = (200, JOB)
    assert _xcecli([refused, spare.url], *SUBMIT).exit_code == 0
    # So does a change whose TLS handshake failed (https to a plain port): nothing was sent.
    plain = Replica()
    replicas.append(plain)
    assert _xcecli([plain.url.replace("http:", "https:"), spare.url], *SUBMIT).exit_code == 0
    assert plain.got == []
    assert spare.got == ["GET /v1/jobs", "POST /v1/jobs", "POST /v1/jobs"]


def test_cannot_reach_names_only_the_urls_tried(replicas: list[Replica]) -> None:
    # A read tries every URL; each is named with how it failed, a 503 by its status.
    refused, spare = _closed_port(), Replica()
    busy = Replica(_answer_of(StorageUnavailable("disk I/O error")))
    replicas += [busy, spare]
    result = _xcecli([busy.url, refused], "jobs")
    assert result.exit_code == 3, result.output
    line = _one_line(result, "xcecli")
    assert line == f"xcecli: cannot reach {busy.url} (HTTP 503), {refused} (connection refused)"
    # A change that no URL took: every one tried, each named.
    other = _closed_port()
    change = _one_line(_xcecli([refused, other], *SUBMIT), "xcecli")
    assert change == (
        f"xcecli: cannot reach {refused} (connection refused), {other} (connection refused)"
    )
    # One URL: the line it always was.
    alone = _one_line(_xcecli([refused], "jobs"), "xcecli")
    assert alone == f"xcecli: cannot reach {refused}: connection refused"
    assert _xcecli([spare.url], *SUBMIT).exit_code == 0  # the spare served all along


class EventsReplica(FakeServer):
    """A fake controller serving `/v1/events` from `log` (seq 1..N), chunked as the
    controller streams it; with `cut_after`, the stream breaks off after that many events
    (no final chunk: the connection closes). `asked` is each request's `since`."""

    def __init__(self, log: int, cut_after: int | None = None) -> None:
        self.asked: list[int] = []
        replica = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                since = int(parse_qs(urlsplit(self.path).query).get("since", ["0"])[0])
                replica.asked.append(since)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for n, seq in enumerate(range(since + 1, log + 1)):
                    if cut_after is not None and n == cut_after:
                        self.wfile.flush()
                        self.close_connection = True
                        return  # no final chunk: the answer broke off
                    line = json.dumps({"seq": seq, "kind": "expected"}).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, *args: Any) -> None:
                pass

        self.serve(Handler)


def _seqs(output: str) -> list[int]:
    return [json.loads(line)["seq"] for line in output.splitlines()]


def test_an_events_stream_broken_off_reads_on_from_its_last_event_on_the_next_url() -> None:
    broken, whole = EventsReplica(5, cut_after=2), EventsReplica(5)
    try:
        result = _xcecli([broken.url, whole.url], "events", "--json")
        assert result.exit_code == 0, result.output
        assert _seqs(result.stdout) == [1, 2, 3, 4, 5]  # every event, none twice
        assert (broken.asked, whole.asked) == ([0], [2])
        # Every URL broke off: one line saying where, and how to read on from there.
        alone = _xcecli([broken.url], "events", "--json", "--since", "1")
        assert alone.exit_code == 3, alone.output
        assert _seqs(alone.stdout) == [2, 3]
        assert _one_line(alone, "xcecli") == (
            f"xcecli: the events stream from {broken.url} broke off after event #3 (the "
            "answer broke off before its end); `xcecli events --since 3` reads on from there"
        )
    finally:
        broken.stop()
        whole.stop()
