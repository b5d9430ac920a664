"""A small Redfish BMC on loopback for what sushy-tools' emulator cannot do: a session service
whose sessions expire on demand, iDRAC-style "not ready" answers, redirects, headers dripped a
byte at a time, malformed documents, and TLS with any certificate.

Each request is recorded (method, path, headers) so a test proves it arrived, and counts the
resets. `script` maps (method, path) to a one-shot or lasting answer the test chooses.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SYSTEM_PATH = "/redfish/v1/Systems/1"
RESET_PATH = f"{SYSTEM_PATH}/Actions/ComputerSystem.Reset"
SESSIONS = "/redfish/v1/SessionService/Sessions"
ROOT = {
    "@odata.id": "/redfish/v1/",
    "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot",
    "Id": "RootService",
    "Name": "Root",
    "RedfishVersion": "1.5.0",
    "Systems": {"@odata.id": "/redfish/v1/Systems"},
    "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
    "Links": {"Sessions": {"@odata.id": SESSIONS}},
}


def system(power: Any = "On") -> dict[str, Any]:
    return {
        "@odata.id": SYSTEM_PATH,
        "@odata.type": "#ComputerSystem.v1_10_0.ComputerSystem",
        "Id": "1",
        "Name": "node1",
        "PowerState": power,
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": RESET_PATH,
                "ResetType@Redfish.AllowableValues": [
                    "On",
                    "ForceOff",
                    "GracefulShutdown",
                    "ForceRestart",
                ],
            }
        },
    }


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


# An answer: (status, headers, body); or a callable that writes the answer itself.
Answer = Any


@dataclass
class FakeBmc:
    user: str = ""
    password: str = ""
    power: Any = "On"
    seen: list[Seen] = field(default_factory=list)
    tokens: set[str] = field(default_factory=set)
    script: dict[tuple[str, str], list[Answer]] = field(default_factory=dict)
    lasting: dict[tuple[str, str], Answer] = field(default_factory=dict)
    url: str = ""
    _server: ThreadingHTTPServer | None = None
    _count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def resets(self) -> list[Seen]:
        return [s for s in self.seen if s.method == "POST" and s.path == RESET_PATH]

    def expire_sessions(self) -> None:
        self.tokens.clear()

    def once(self, method: str, path: str, answer: Answer) -> None:
        self.script.setdefault((method, path), []).append(answer)

    def always(self, method: str, path: str, answer: Answer) -> None:
        self.lasting[(method, path)] = answer

    def next_answer(self, method: str, path: str) -> Answer | None:
        with self.lock:
            queue = self.script.get((method, path))
            if queue:
                return queue.pop(0)
            return self.lasting.get((method, path))

    def new_token(self) -> tuple[str, str]:
        with self.lock:
            self._count += 1
            token = f"token-{self._count}"
            self.tokens.add(token)
            return token, f"{SESSIONS}/{self._count}"


def _handler(bmc: FakeBmc) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def answer(
            self, status: int, body: Any = b"", headers: dict[str, str] | None = None
        ) -> None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(data)

        def authorized(self) -> bool:
            if not (bmc.user or bmc.password):
                return True
            token = self.headers.get("X-Auth-Token")
            if token is not None:
                return token in bmc.tokens
            import base64

            basic = base64.b64encode(f"{bmc.user}:{bmc.password}".encode()).decode()
            return self.headers.get("Authorization") == f"Basic {basic}"

        def handle_any(self, method: str) -> None:
            path = self.path.split("?")[0].rstrip("/") or "/"
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            bmc.seen.append(Seen(method, path, dict(self.headers.items())))
            scripted = bmc.next_answer(method, path)
            if callable(scripted):
                scripted(self)
                return None
            if scripted is not None:
                return self.answer(*scripted)
            if method == "POST" and path == SESSIONS:
                doc = json.loads(body or b"{}")
                if doc.get("UserName") != bmc.user or doc.get("Password") != bmc.password:
                    return self.answer(401, {"error": {"message": "bad credentials"}})
                token, where = bmc.new_token()
                return self.answer(
                    201, {"@odata.id": where}, {"X-Auth-Token": token, "Location": where}
                )
            if path == "/redfish/v1":
                return self.answer(200, ROOT)
            if not self.authorized():
                return self.answer(401, {"error": {"message": "unauthorized"}})
            if method == "DELETE" and path.startswith(SESSIONS):
                return self.answer(204)
            if method == "GET" and path == SYSTEM_PATH:
                return self.answer(200, system(bmc.power))
            if method == "POST" and path == RESET_PATH:
                return self.answer(204)
            return self.answer(404, {"error": {"message": "not here"}})

        def do_GET(self) -> None:
            self.handle_any("GET")

        def do_POST(self) -> None:
            self.handle_any("POST")

        def do_DELETE(self) -> None:
            self.handle_any("DELETE")

    return Handler


@contextlib.contextmanager
def serving(bmc: FakeBmc | None = None, tls: tuple[Path, Path] | None = None) -> Iterator[FakeBmc]:
    """Serve `bmc` on a free loopback port (https with `tls`: certificate, key)."""
    bmc = bmc or FakeBmc()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(bmc))
    server.daemon_threads = True
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = context.wrap_socket(server.socket, server_side=True)
    scheme = "https" if tls else "http"
    bmc.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    bmc._server = server
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield bmc
    finally:
        server.shutdown()
        server.server_close()


def drip(raw: bytes, every: float) -> Callable[[BaseHTTPRequestHandler], None]:
    """An answer written a byte every `every` seconds (the status line and headers too)."""

    def write(handler: BaseHTTPRequestHandler) -> None:
        try:
            for i in range(len(raw)):
                handler.wfile.write(raw[i : i + 1])
                handler.wfile.flush()
                time.sleep(every)
        except OSError:
            return

    return write


def endless_headers(every: float) -> Callable[[BaseHTTPRequestHandler], None]:
    """A status line, then one header after another, each a byte at a time, without end."""
    head = b"HTTP/1.1 200 OK\r\n"

    def write(handler: BaseHTTPRequestHandler) -> None:
        try:
            handler.wfile.write(head)
            handler.wfile.flush()
            n = 0
            while True:
                n += 1
                for b in f"X-Drip-{n}: a\r\n".encode():
                    handler.wfile.write(bytes([b]))
                    handler.wfile.flush()
                    time.sleep(every)
        except OSError:
            return

    return write


class _Forget(list):  # type: ignore[type-arg]
    """A request log that keeps nothing (a long run's BMC in its own process)."""

    def append(self, item: object) -> None:
        pass


def main() -> None:
    """`python -m tests.integration.fake_bmc`: serve one BMC (user `u`, password `p`), print
    its URL, keep serving until killed."""
    with serving(FakeBmc(user="u", password="p", seen=_Forget())) as bmc:
        print(bmc.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
