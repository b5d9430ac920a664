"""A controller that answers what a test tells it to, and counts every answer it gave.

Raw sockets, one request per connection, so a test controls every byte: redirects, drips,
compression bombs, deep JSON, held or dropped connections. Each endpoint (join, heartbeat,
watch) answers by the current phase: "valid" (well-formed answers, the watch held like a
long-poll), "hostile" (the case's answer, on the endpoints it names) or "refuse" (a valid
decommission refusal; a held watch is answered with it at once).
"""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import ssl
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

HOST, INSTANCE = "node1", "i-1"
TEMPLATE = {
    "name": "default",
    "slots": 1,
    "type": "",
    "model": "",
    "resources": {},
    "host_groups": [],
    "dispatch_windows": [],
    "roles": ["worker"],
}
HOST_ANSWER = {
    "protocol": "1.0",
    "host": HOST,
    "instance_id": INSTANCE,
    "state": "open",
    "reason": "",
    "version": 1,
    "heartbeat_interval": 1.0,
    "host_loss_grace": 5.0,
}
ACCEPT = {
    **HOST_ANSWER,
    "status": "accepted",
    "key": INSTANCE,
    "provisioned": True,
    "template": TEMPLATE,
    "protocol": "1.1",
    "credential": "host-credential-1",
    "worker_credential": "worker-credential-1",
    "incarnation": 1,
}
REFUSAL = {
    "protocol": "1.0",
    "error": "decommissioned",
    "host": HOST,
    "instance_id": INSTANCE,
    "reason": "reclaimed",
    "message": "host node1 was decommissioned",
}

Writer = Callable[["Exchange"], None]


class Exchange:
    """One request and the socket to answer it on."""

    def __init__(self, server: FakeController, sock: socket.socket, endpoint: str) -> None:
        self.server = server
        self.sock = sock
        self.endpoint = endpoint

    def send(self, data: bytes) -> bool:
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        return True

    def answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send(response(status, data, headers))

    def drip(self, head: bytes, seconds: float = 30.0, every: float = 0.2) -> None:
        """Send `head`, then one byte every `every` until the client goes away."""
        started = time.monotonic()
        self.send(head)
        while time.monotonic() - started < seconds and self.send(b"a"):
            time.sleep(every)
        self.server.record_drip(time.monotonic() - started)


def response(status: int, data: bytes, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(data)}", "Connection: close"]
    if not any(k.lower() == "content-type" for k in headers or {}):
        lines.append("Content-Type: application/json")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


class FakeController:
    def __init__(
        self,
        hostile: Writer,
        on: tuple[str, ...],
        tls: tuple[Path, Path] | None = None,
        watch_hold: float = 1.5,
    ) -> None:
        self.hostile = hostile
        self.on = on
        self.phase = "hostile" if "join" in on else "valid"
        self.counts: Counter[tuple[str, str]] = Counter()
        self.first_refusal: float | None = None
        self.drips: list[float] = []
        self.watches = 0
        self.max_watches = 0
        self.watch_hold = watch_hold
        self.version = 1
        self._cond = threading.Condition()
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                owner.serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self._tls: ssl.SSLContext | None = None
        if tls is not None:
            self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._tls.load_cert_chain(str(tls[0]), str(tls[1]))
        self.port = self._server.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.set_phase("closed")
        self._server.shutdown()
        self._server.server_close()

    # --- what the test sees -----------------------------------------------------------
    def set_phase(self, phase: str) -> None:
        with self._cond:
            self.phase = phase
            self._cond.notify_all()

    def count(self, phase: str, *endpoints: str) -> int:
        with self._cond:
            return sum(self.counts[(e, phase)] for e in endpoints or ("join", "heartbeat", "watch"))

    def record_drip(self, seconds: float) -> None:
        with self._cond:
            self.drips.append(seconds)

    # --- serving ----------------------------------------------------------------------
    def serve(self, raw: socket.socket) -> None:
        sock = raw
        if self._tls is not None:
            try:
                sock = self._tls.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError):
                return
        try:
            self._serve(sock)
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(10)
        try:
            endpoint = self._read_request(sock)
        except (OSError, ValueError):
            return
        if endpoint is None:
            return
        with self._cond:
            phase = self.phase
            if phase == "hostile" and endpoint not in self.on:
                phase = "valid"
            self.counts[(endpoint, phase)] += 1
        exchange = Exchange(self, sock, endpoint)
        with contextlib.suppress(OSError):
            if phase == "hostile":
                self.hostile(exchange)
            elif phase == "refuse":
                self._refuse(exchange)
            elif phase == "valid":
                self._valid(exchange)

    def _read_request(self, sock: socket.socket) -> str | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        if path.startswith("/v1/join"):
            return "join"
        if "/heartbeat" in path:
            return "heartbeat"
        if "/watch" in path:
            return "watch"
        if "/notice" in path:
            return "notice"
        return "other"

    def _refuse(self, exchange: Exchange) -> None:
        with self._cond:
            if self.first_refusal is None:
                self.first_refusal = time.monotonic()
        exchange.answer(410, REFUSAL)

    def _valid(self, exchange: Exchange) -> None:
        if exchange.endpoint == "join":
            exchange.answer(200, ACCEPT)
        elif exchange.endpoint == "heartbeat":
            exchange.answer(200, HOST_ANSWER)
        elif exchange.endpoint == "watch":
            self._long_poll(exchange)
        else:
            exchange.answer(404, {"protocol": "1.0", "error": "not_found", "message": "?"})

    def _long_poll(self, exchange: Exchange) -> None:
        with self._cond:
            self.watches += 1
            self.max_watches = max(self.max_watches, self.watches)
            try:
                self._cond.wait_for(lambda: self.phase != "valid", self.watch_hold)
                phase = self.phase
            finally:
                self.watches -= 1
        if phase == "refuse":
            self._refuse(exchange)
        else:
            exchange.answer(200, {**HOST_ANSWER, "jobs": []})


def gzip_bomb(decoded: int) -> bytes:
    """`decoded` zero bytes (a multiple of 1 MiB), gzip-compressed to about a thousandth."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    parts = [comp.compress(block) for _ in range(decoded >> 20)]
    return b"".join([*parts, comp.flush()])


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (openssl), for https cases."""
    import subprocess

    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
