"""A cloud metadata emulator for tests: AWS IMDSv2, GCE metadata server, Azure Scheduled Events.

One HTTP server serves all three providers' notice endpoints with their headers and token
semantics (AWS: PUT /latest/api/token with a TTL of 1..21600 s, 401 for a missing, unknown or
expired token, 403 for X-Forwarded-For; GCE: 403 without `Metadata-Flavor: Google`, ETag and
wait_for_change/last_etag/timeout_sec; Azure: 400 without `Metadata: true` or api-version,
DocumentIncarnation, StartRequests approval). Changes can be applied at once or at a given time,
in process (`Emulator.change`, `Emulator.change_at`) or from another process through
`POST /_emulator/change` with `{"set": {...}, "after": SECONDS}`. Every request is logged, so a
test can prove its input arrived. Faults (`fault: {"delay": S, "status": N, "garbage": true}`)
make it slow or wrong; `fault: {"token": T}` hands out T as the IMDSv2 token, `{"etag": E}` puts
E ("" for none) in every GCE answer's ETag, `{"approve_status": N}` answers StartRequests with N and
`{"name_status": N}` the Azure VM name with N; `{"redirect": true}`, `{"huge": true}` (1 MiB),
`{"deep": true}` (a 1 MiB run of `[`) and `{"drip": true}` (a byte every 0.1 s) answer so;
`{"no_wait": true}` makes GCE ignore wait_for_change.

Run it as a process: `python -m tests.metadata_emulator --port-file FILE` (port 0: any free).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

AWS_ITEMS = {
    "/latest/meta-data/spot/instance-action": "aws.spot",
    "/latest/meta-data/events/recommendations/rebalance": "aws.rebalance",
    "/latest/meta-data/events/maintenance/scheduled": "aws.scheduled",
}
GCE_KEYS = ("instance/preempted", "instance/maintenance-event")
GCE_PREFIX = "/computeMetadata/v1/"
AZURE_EVENTS = "/metadata/scheduledevents"
AZURE_NAME = "/metadata/instance/compute/name"
_XHTML = (
    '<?xml version="1.0" encoding="iso-8859-1"?>\n<html><head><title>{t}</title></head>'
    "<body><h1>{t}</h1></body></html>\n"
)


def rfc3339(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def aws_event_time(when: float) -> str:
    return time.strftime("%d %b %Y %H:%M:%S GMT", time.gmtime(when)).lstrip("0")


def rfc1123(when: float) -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(when))


def spot(when: float, action: str = "terminate") -> dict[str, Any]:
    return {"aws.spot": {"action": action, "time": rfc3339(when)}}


@dataclass
class Applied:
    """A change as it took effect: what the notice latency is measured from."""

    change: dict[str, Any]
    monotonic: float
    wall: float


@dataclass
class EmulatorState:
    values: dict[str, Any] = field(
        default_factory=lambda: {
            "aws.spot": None,
            "aws.rebalance": None,
            "aws.scheduled": None,
            "gce.instance/preempted": "FALSE",
            "gce.instance/maintenance-event": "NONE",
            "azure.events": [],
            "azure.name": "vm0",
            "fault": {},
        }
    )
    etags: dict[str, int] = field(default_factory=dict)
    incarnation: int = 1
    tokens: dict[str, float] = field(default_factory=dict)  # token -> monotonic expiry
    approvals: list[str] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    applied: list[Applied] = field(default_factory=list)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer (an aborted long-poll) is not news."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Emulator:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.state = EmulatorState()
        self.cond = threading.Condition()
        self._timers: list[threading.Timer] = []
        handler = type("Handler", (_Handler,), {"emulator": self})
        self.server = _Server((host, port), handler)
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Emulator:
        self._thread.start()
        return self

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        with self.cond:
            self.state.values["fault"] = {}
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- scripting --------------------------------------------------------------------
    def change(self, values: dict[str, Any]) -> Applied:
        with self.cond:
            st = self.state
            for key, value in values.items():
                if key not in st.values:
                    raise KeyError(f"unknown emulator value {key!r}")
                if key.startswith("gce.") and value != st.values[key]:
                    st.etags[key] = st.etags.get(key, 0) + 1
                if key == "azure.events" and value != st.values[key]:
                    st.incarnation += 1
                st.values[key] = value
            applied = Applied(dict(values), time.monotonic(), time.time())
            st.applied.append(applied)
            self.cond.notify_all()
            return applied

    def change_at(self, after: float, values: dict[str, Any]) -> None:
        timer = threading.Timer(max(0.0, after), self.change, args=(values,))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def expire_tokens(self) -> None:
        with self.cond:
            self.state.tokens = dict.fromkeys(self.state.tokens, 0.0)

    def count(self, method: str, prefix: str) -> int:
        with self.cond:
            return sum(1 for m, p in self.state.requests if m == method and p.startswith(prefix))

    def wait_for(self, predicate: Callable[[EmulatorState], bool], timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: predicate(self.state), timeout)


class _Handler(BaseHTTPRequestHandler):
    emulator: Emulator
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet in tests
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        em = self.emulator
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, 1 << 20)) if length else b""
        with em.cond:
            em.state.requests.append((method, parts.path))
            em.cond.notify_all()
            fault = dict(em.state.values["fault"])
        if parts.path.startswith("/_emulator/"):
            self._control(method, parts.path, body)
            return
        if fault.get("delay"):
            time.sleep(float(fault["delay"]))
        if fault.get("status"):
            self._send(int(fault["status"]), b"fault\n")
            return
        if fault.get("redirect"):
            self._send(302, b"", {"Location": "http://127.0.0.2:9/"})
            return
        if fault.get("huge") or fault.get("deep"):
            body = b"[" * (1 << 20) if fault.get("deep") else b"y" * (1 << 20)
            self._send(200, body, {"Metadata-Flavor": "Google", "ETag": "1"})
            return
        if fault.get("drip"):
            self._drip()
            return
        if fault.get("garbage"):
            self._send(200, b"\x00\xff<<garbage>>" * 8, {"Metadata-Flavor": "Google", "ETag": "zz"})
            return
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if parts.path.startswith("/latest/") or parts.path.endswith("/api/token"):
            self._aws(method, parts.path)
        elif parts.path.startswith(GCE_PREFIX):
            self._gce(method, parts.path[len(GCE_PREFIX) :], query)
        elif parts.path in (AZURE_EVENTS, AZURE_NAME):
            self._azure(method, parts.path, query, body)
        else:
            self._send(404, b"not found\n")

    def _drip(self) -> None:
        """Headers, then a byte every 0.1 s until the fault is cleared (or 30 s passed)."""
        self.send_response(200)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        for _ in range(300):
            with self.emulator.cond:
                if not self.emulator.state.values["fault"].get("drip"):
                    break
            self.wfile.write(b"x")
            self.wfile.flush()
            time.sleep(0.1)
        self.close_connection = True

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _xhtml(self, status: int, title: str) -> None:
        self._send(status, _XHTML.format(t=title).encode(), {"Content-Type": "text/html"})

    # --- AWS IMDSv2 ---------------------------------------------------------------------
    def _aws(self, method: str, path: str) -> None:
        st = self.emulator.state
        if method == "PUT":
            if path != "/latest/api/token" or self.headers.get("X-Forwarded-For"):
                self._xhtml(403, "403 - Forbidden")
                return
            ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                self._xhtml(400, "400 - Bad Request")
                return
            forced = self.emulator.state.values["fault"].get("token")
            token = str(forced or secrets.token_urlsafe(32))
            with self.emulator.cond:
                st.tokens[token] = time.monotonic() + int(ttl)
            headers = {"Content-Type": "text/plain", "X-aws-ec2-metadata-token-ttl-seconds": ttl}
            self._send(200, token.encode(), headers)
            return
        token = self.headers.get("X-aws-ec2-metadata-token", "")
        with self.emulator.cond:
            valid = st.tokens.get(token, 0.0) > time.monotonic()
            key = AWS_ITEMS.get(path)
            value = st.values.get(key) if key else None
        if method != "GET" or not valid:  # IMDSv2 required: no unauthenticated reads
            self._xhtml(401, "401 - Unauthorized")
            return
        if value is None:
            self._xhtml(404, "404 - Not Found")
            return
        body = json.dumps(value, indent=2) if not isinstance(value, str) else value
        self._send(200, body.encode(), {"Content-Type": "text/plain"})

    # --- GCE ------------------------------------------------------------------------------
    def _gce(self, method: str, key: str, query: dict[str, str]) -> None:
        if self.headers.get("Metadata-Flavor") != "Google" or self.headers.get("X-Forwarded-For"):
            self._send(
                403, b"Missing Metadata-Flavor:Google header.", {"Content-Type": "text/html"}
            )
            return
        if method != "GET" or key not in GCE_KEYS:
            self._send(404, b"not found\n", {"Metadata-Flavor": "Google"})
            return
        em, name = self.emulator, f"gce.{key}"

        def etag() -> str:
            return f"{em.state.etags.get(name, 0) + 1:016x}"

        with em.cond:
            ignores = bool(em.state.values["fault"].get("no_wait"))  # answers at once
            if query.get("wait_for_change") == "true" and not ignores:
                last = query.get("last_etag", "")
                timeout = float(query.get("timeout_sec") or 3600)
                if last != "0":
                    # Unknown or equal ETag: wait for the next change (or the timeout).
                    seen = etag() if last == etag() or not last else last
                    em.cond.wait_for(lambda: etag() != seen, timeout)
            value, tag = str(em.state.values[name]), etag()
        forced = em.state.values["fault"].get("etag")
        headers = {"Metadata-Flavor": "Google", "Content-Type": "application/text"}
        if forced != "":
            headers["ETag"] = tag if forced is None else str(forced)
        self._send(200, value.encode(), headers)

    # --- Azure ----------------------------------------------------------------------------
    def _azure(self, method: str, path: str, query: dict[str, str], body: bytes) -> None:
        if self.headers.get("Metadata") != "true" or not query.get("api-version"):
            bad = {"error": "Bad request. Required metadata header not specified"}
            self._send(400, json.dumps(bad).encode(), {"Content-Type": "application/json"})
            return
        em, st = self.emulator, self.emulator.state
        fault = st.values["fault"]
        if path == AZURE_NAME:
            if fault.get("name_status"):
                self._send(int(fault["name_status"]), b"fault\n")
                return
            self._send(200, str(st.values["azure.name"]).encode(), {"Content-Type": "text/plain"})
            return
        if method == "POST" and fault.get("approve_status"):
            self._send(int(fault["approve_status"]), b'{"error": "fault"}')
            return
        if method == "POST":
            self._approve(body)
            return
        with em.cond:
            doc = {"DocumentIncarnation": st.incarnation, "Events": st.values["azure.events"]}
        self._send(200, json.dumps(doc).encode(), {"Content-Type": "application/json"})

    def _approve(self, body: bytes) -> None:
        em, st = self.emulator, self.emulator.state
        try:
            ids = [r["EventId"] for r in json.loads(body)["StartRequests"]]
            assert all(isinstance(i, str) for i in ids)
        except (ValueError, KeyError, TypeError, AssertionError):
            self._send(400, b'{"error": "Bad request"}', {"Content-Type": "application/json"})
            return
        with em.cond:
            st.approvals.extend(ids)
            events = [
                {**e, "EventStatus": "Started", "NotBefore": ""} if e["EventId"] in ids else e
                for e in st.values["azure.events"]
            ]
        em.change({"azure.events": events})
        self._send(200, b"", {"Content-Type": "application/json"})

    # --- control --------------------------------------------------------------------------
    def _control(self, method: str, path: str, body: bytes) -> None:
        em = self.emulator
        if method == "POST" and path == "/_emulator/change":
            try:
                doc = json.loads(body)
                values, after = doc["set"], float(doc.get("after", 0))
                if after > 0:
                    em.change_at(after, values)
                else:
                    em.change(values)
            except (ValueError, KeyError, TypeError) as exc:
                self._send(400, f"{exc}\n".encode())
                return
            self._send(200, b"{}")
            return
        if method == "GET" and path == "/_emulator/state":
            with em.cond:
                doc = {
                    "values": em.state.values,
                    "approvals": em.state.approvals,
                    "requests": len(em.state.requests),
                    "applied": [a.__dict__ for a in em.state.applied],
                }
            self._send(200, json.dumps(doc).encode(), {"Content-Type": "application/json"})
            return
        self._send(404, b"not found\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", type=Path)
    args = parser.parse_args()
    emulator = Emulator(args.host, args.port)
    if args.port_file:
        args.port_file.write_text(f"{emulator.server.server_address[1]}\n")
    with contextlib.suppress(KeyboardInterrupt):
        emulator.server.serve_forever()


if __name__ == "__main__":
    main()
