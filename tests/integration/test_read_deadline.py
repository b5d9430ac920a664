"""A request must arrive within its read deadline: a client dripping its headers or body, or
saying nothing at all, loses its connection; a long answer or an idle kept-alive connection
does not. Both of uvicorn's HTTP/1.1 implementations, then the controller as a process."""

from __future__ import annotations

import asyncio
import http.client
import resource
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import requests
import uvicorn

from tests.integration.controller_proc import ControllerProcess
from xce_controller.core.config import load_cluster_config
from xce_controller.http import read_deadline
from xce_controller.http.server import EmbeddedController

TIMEOUT = 1.0


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers after reading the whole body; /slow answers after 2 s (longer than TIMEOUT) and,
    like a FastAPI GET route, reads no body."""
    if scope["type"] != "http":
        return
    more = scope["path"] != "/slow"
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


def drip_until_closed(conn: socket.socket, data: bytes, within: float) -> tuple[float | None, int]:
    """Drip `data` a byte every 50 ms until the server closes the connection or `within`
    passes: how long that took (None: never closed) and how many bytes went out."""
    stop = threading.Event()
    sent: list[int] = []
    thread = threading.Thread(target=lambda: sent.append(drip(conn, data, 0.05, stop)))
    thread.start()
    took = closed_by_server(conn, within)
    stop.set()
    thread.join(5)
    conn.close()
    return took, sent[0] if sent else 0


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
    began = time.monotonic()
    took, sent = drip_until_closed(conn, request_bytes, 10 * TIMEOUT)
    assert took is not None, "the server kept a dripping connection open"
    assert TIMEOUT * 0.9 <= time.monotonic() - began <= TIMEOUT + 5
    assert 5 < sent < len(request_bytes)  # bytes arrived, not all of them
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
        data = b"GET /v1/info HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: y\r\n" * 50 + b"\r\n"
        took, _ = drip_until_closed(conn, data, 10)
        assert took is not None, "the controller kept a dripping connection open"
        metrics = requests.get(
            ctl.url + "/metrics", headers={"Authorization": "Bearer adm1n"}, timeout=10
        ).text
        assert "xce_controller_read_timeouts_total 1.0" in metrics
        assert requests.get(ctl.url + "/v1/info", timeout=10).status_code == 200
    finally:
        ctl.stop()


def test_a_request_pipelined_behind_a_slow_answer_waits_unread_and_is_not_timed(
    server: tuple[str, int],
) -> None:
    """The server reads nothing more of a connection while it answers the request before
    (httptools pauses reading): the next request's body, sent on time, is no drip."""
    with socket.create_connection(server) as conn:
        conn.sendall(
            b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n"
        )
        time.sleep(0.2)  # the body follows in its own segment, long before the deadline
        conn.sendall(b"hi")
        conn.settimeout(10 * TIMEOUT)
        received = b""
        while received.count(b"ok") < 2:
            chunk = conn.recv(4096)
            assert chunk, f"the server closed the connection after {received!r}"
            received += chunk
    assert received.count(b"HTTP/1.1 200") == 2


def test_a_slow_answer_to_a_request_offering_an_upgrade_is_not_a_read(
    server: tuple[str, int],
) -> None:
    """`curl --http2 http://...` offers h2c: h11 holds such a request as "might switch
    protocol" once it has arrived, which is still a request read."""
    conn = http.client.HTTPConnection(server[0], server[1], timeout=10)
    headers = {
        "Connection": "Upgrade, HTTP2-Settings",
        "Upgrade": "h2c",
        "HTTP2-Settings": "AAMAAABkAAQCAAAAAAIAAAAA",
    }
    conn.request("GET", "/slow", headers=headers)  # answered after twice the deadline
    response = conn.getresponse()  # Debian 12's uvicorn 0.17 refuses the upgrade at once
    assert response.read() == b"ok" or response.status == 400
    conn.close()


def test_the_controller_holds_more_connections_than_systemds_default_file_limit(
    tmp_path: Path,
) -> None:
    """systemd starts a service allowed 1024 open files (soft): a thousand agents' watches, or
    as many silent connections for the read deadline's 30 s, and nobody could connect."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = 256
    if hard < 4 * low:
        pytest.skip(f"the hard limit of open files ({hard}) leaves no room above {low}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))  # the controller inherits it
    try:
        ctl = ControllerProcess(tmp_path, CONFIG).start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    conns: list[socket.socket] = []
    try:
        host, port = ctl.url.removeprefix("http://").split(":")
        conns = [socket.create_connection((host, int(port))) for _ in range(low + 50)]
        assert requests.get(ctl.url + "/v1/info", timeout=10).status_code == 200
    finally:
        for conn in conns:
            conn.close()
        ctl.stop()


def test_blank_lines_dripped_between_requests_lose_the_connection(
    server: tuple[str, int],
) -> None:
    """httptools skips CRLFs between requests without starting one, and every byte stops
    uvicorn's keep-alive timeout: blank lines dripped after an answer held the connection."""
    conn = socket.create_connection(server)
    conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    conn.settimeout(10)
    answer = b""
    while not answer.endswith(b"0\r\n\r\n"):
        answer += conn.recv(4096)
    took, _ = drip_until_closed(conn, b"\r\n" * 200, 10 * TIMEOUT)
    assert took is not None, "the server kept a connection dripping blank lines open"
    assert took <= TIMEOUT + 5
    assert answered(server)


def test_a_reloaded_read_timeout_applies_to_new_connections(tmp_path: Path) -> None:
    """SIGHUP reloads the config and says so: the read timeout is part of it."""
    (tmp_path / "cluster.yaml").write_text(CONFIG.replace("request_read_timeout: 1s", ""))
    cfg = load_cluster_config(tmp_path / "cluster.yaml")
    assert cfg.request_read_timeout == 30.0
    ctl = EmbeddedController(cfg, tmp_path / "c.db").start()
    try:
        assert ctl.controller.reload_config(lambda: replace(cfg, request_read_timeout=1.0)) == []
        conn = socket.create_connection(("127.0.0.1", ctl.port))
        took = closed_by_server(conn, 10)
        conn.close()
        assert took is not None, "a new connection still had the read timeout of the start"
        assert requests.get(ctl.url + "/v1/info", timeout=10).status_code == 200
    finally:
        ctl.stop()


def test_a_reloaded_body_limit_applies(tmp_path: Path) -> None:
    """The other limit a reload must not leave at its value of the start."""
    (tmp_path / "cluster.yaml").write_text(CONFIG.replace("request_read_timeout: 1s", ""))
    cfg = load_cluster_config(tmp_path / "cluster.yaml")
    ctl = EmbeddedController(cfg, tmp_path / "c.db").start()
    try:
        body = {"host": "n1", "pad": "x" * 3000}
        join = {"Authorization": f"Bearer {ctl.join_token}"}
        url = ctl.url + "/v1/join"
        assert requests.post(url, json=body, headers=join, timeout=10).status_code != 413
        assert ctl.controller.reload_config(lambda: replace(cfg, max_request_body=1024)) == []
        answer = requests.post(url, json=body, headers=join, timeout=10)
        assert answer.status_code == 413, answer.text
        assert "the limit is 1024 bytes" in answer.json()["message"]
    finally:
        ctl.stop()


def test_a_request_head_is_bounded(server: tuple[str, int]) -> None:
    """Before, with httptools: a 1 MiB head was read and answered (and one that never ended
    was kept, every byte of it, until the read deadline: 60 MB a connection in a second)."""
    url = f"http://{server[0]}:{server[1]}/"
    assert requests.get(url, headers={"X-Pad": "a" * 8000}, timeout=10).text == "ok"
    try:
        big = requests.get(url, headers={f"X-Pad-{i}": "a" * 1000 for i in range(1024)}, timeout=10)
    except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError):
        return  # cut off while it was still sending or reading: refused too
    assert big.status_code in (400, 431), big.text
    if big.status_code == 431:
        assert big.json()["error"] == "too_large"
