"""A request must arrive within its read deadline: a client dripping its headers or body, or
saying nothing at all, loses its connection; a long answer or an idle kept-alive connection
does not. Both of uvicorn's HTTP/1.1 implementations, then the controller as a process."""

from __future__ import annotations

import asyncio
import http.client
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import uvicorn

from tests.integration.controller_proc import ControllerProcess
from xce_controller import read_deadline

TIMEOUT = 1.0


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers after reading the whole body; /slow answers after 2 s (longer than TIMEOUT)."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    if scope["path"] == "/slow":
        await asyncio.sleep(2 * TIMEOUT)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(params=["h11", "httptools"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    implementation = str(request.param)
    protocol = read_deadline.protocol(TIMEOUT, implementation)
    if implementation == "httptools" and protocol.__mro__[1] is read_deadline.TimedH11:
        pytest.skip("httptools is not installed")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    config = uvicorn.Config(app, http=protocol, log_level="warning", lifespan="off")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(srv.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.01)
    yield sock.getsockname()
    srv.should_exit = True
    thread.join(10)
    sock.close()


def closed_by_server(conn: socket.socket, within: float) -> float | None:
    """Seconds until the server closed the connection (EOF or reset), or None."""
    began = time.monotonic()
    conn.settimeout(within)
    try:
        while conn.recv(4096):
            pass
    except socket.timeout:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - began


def drip(conn: socket.socket, data: bytes, gap: float, stop: threading.Event) -> int:
    sent = 0
    for byte in data:
        if stop.wait(gap):
            break
        try:
            conn.sendall(bytes([byte]))
        except OSError:
            break
        sent += 1
    return sent


def answered(addr: tuple[str, int], path: str = "/") -> bool:
    return requests.get(f"http://{addr[0]}:{addr[1]}{path}", timeout=10).text == "ok"


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200 + b"\r\n\r\n",  # headers drip
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n" + b"b" * 300,  # body drip
    ],
    ids=["headers", "body"],
)
def test_a_dripping_request_loses_its_connection(
    server: tuple[str, int], request_bytes: bytes
) -> None:
    conn = socket.create_connection(server)
    stop = threading.Event()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(drip(conn, request_bytes, 0.05, stop)))
    began = time.monotonic()
    thread.start()
    took = closed_by_server(conn, 10 * TIMEOUT)
    stop.set()
    thread.join(5)
    conn.close()
    assert took is not None, "the server kept a dripping connection open"
    assert TIMEOUT * 0.9 <= time.monotonic() - began <= TIMEOUT + 5
    assert result and 5 < result[0] < len(request_bytes)  # bytes arrived, not all of them
    assert answered(server)  # and the server still serves


def test_a_connection_that_says_nothing_is_closed(server: tuple[str, int]) -> None:
    conn = socket.create_connection(server)
    took = closed_by_server(conn, 10 * TIMEOUT)
    conn.close()
    assert took is not None and TIMEOUT * 0.9 <= took <= TIMEOUT + 5
    assert answered(server)


def test_a_slow_answer_and_an_idle_kept_alive_connection_are_not_reads(
    server: tuple[str, int],
) -> None:
    conn = http.client.HTTPConnection(server[0], server[1], timeout=10)
    began = time.monotonic()
    conn.request("GET", "/slow")  # answered after twice the deadline
    assert conn.getresponse().read() == b"ok"
    assert time.monotonic() - began >= 2 * TIMEOUT
    time.sleep(1.5 * TIMEOUT)  # idle on the kept-alive connection: the case under test
    conn.request("GET", "/")  # the same connection: http.client never reconnects by itself
    assert conn.getresponse().read() == b"ok"
    conn.close()


CONFIG = """\
version: 1
auth: {admin_token: adm1n}
limits: {request_read_timeout: 1s}
templates: {default: {slots: 1}}
"""


def test_the_controller_closes_a_dripping_client_and_counts_it(tmp_path: Path) -> None:
    ctl = ControllerProcess(tmp_path, CONFIG).start()
    try:
        host, port = ctl.url.removeprefix("http://").split(":")
        conn = socket.create_connection((host, int(port)))
        stop = threading.Event()
        data = b"GET /v1/info HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: y\r\n" * 50 + b"\r\n"
        thread = threading.Thread(target=drip, args=(conn, data, 0.05, stop))
        thread.start()
        took = closed_by_server(conn, 10)
        stop.set()
        thread.join(5)
        conn.close()
        assert took is not None, "the controller kept a dripping connection open"
        metrics = requests.get(
            ctl.url + "/metrics", headers={"Authorization": "Bearer adm1n"}, timeout=10
        ).text
        assert "xce_controller_read_timeouts_total 1.0" in metrics
        assert requests.get(ctl.url + "/v1/info", timeout=10).status_code == 200
    finally:
        ctl.stop()
