"""One HTTP request to the controller with hard bounds, whatever the other end does.

- A total deadline covers connect, TLS handshake, request, headers and body. Per-read
  timeouts alone let a server that drips a byte a second hold a request forever, so a timer
  shuts the socket down at the deadline, which ends any blocked read at once.
- Redirects are never followed: a 3xx is returned as it is (the protocol calls it a failed
  contact), so an answer from another origin (or over plain http) is never taken.
- The body is read in a loop and decoded (gzip, deflate) as it arrives, and reading stops as
  soon as the decoded size passes the limit: a small compressed bomb costs a small buffer.
- JSON nesting is measured before parsing, so a deep body cannot exhaust the parser's stack;
  NaN and Infinity are not JSON and are refused.
- Only an exactly framed answer is read as JSON: its Content-Type is application/json, a
  compressed body ends with its trailer exactly where the body ends (Content-Length cutting a
  gzip stream, or bytes after it, is a failure), and no object repeats a key (which of two
  `host` values would count?). Anything else is no answer, so it cannot stop the worker.
Every failure is an `HttpFailure` with a one-line message.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import ssl
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MAX_BODY = 1 << 20  # decoded bytes; the largest legitimate answer (a watch with jobs) is far less
MAX_DEPTH = 32
_CHUNK = 16384
# The closing quote is optional: an unterminated string runs to the end of the body. Without
# that, each quote of a body like `"\"\"\"...` would be rescanned to the end (quadratic: an
# hour of CPU for 1 MiB, holding the interpreter lock and so the whole agent).
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"?', re.S)
_BRACKET = re.compile(rb"[\[\]{}]")


class HttpFailure(Exception):
    """The request got no usable answer; the message says why in one line."""


class TimedOut(HttpFailure):
    pass


class TlsFailure(HttpFailure):
    pass


@dataclass(frozen=True)
class Target:
    """Where the controller is, parsed once from its URL."""

    tls: bool
    host: str
    port: int
    base_path: str

    @classmethod
    def from_url(cls, url: str) -> Target:
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        host = parts.hostname or ""
        return cls(tls, host, parts.port or (443 if tls else 80), parts.path.rstrip("/"))


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # the parsed JSON, or None if the body was not JSON
    retry_after: float | None = None
    location: str = ""


class Inflight:
    """The sockets of requests in progress, so they can all be cut at once (stop, watchdog)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.add(sock)

    def discard(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.discard(sock)

    def abort_all(self) -> None:
        with self._lock:
            socks = list(self._socks)
        for sock in socks:
            _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def request(
    target: Target,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes | None,
    budget: float,
    tls_context: ssl.SSLContext | None = None,
    inflight: Inflight | None = None,
    max_body: int = MAX_BODY,
) -> Reply:
    """Send one request and read its answer within `budget` seconds in total."""
    deadline = time.monotonic() + budget
    try:
        raw = socket.create_connection((target.host, target.port), timeout=budget)
    except socket.timeout:
        raise TimedOut(f"controller did not answer within {budget:g}s") from None
    except OSError as exc:
        raise HttpFailure(f"controller unreachable ({_why(exc)})") from None
    timer = threading.Timer(max(0.0, deadline - time.monotonic()), _shutdown, (raw,))
    timer.daemon = True
    timer.start()
    if inflight is not None:
        inflight.add(raw)
    conn = http.client.HTTPConnection(target.host, target.port)
    try:
        conn.sock = _handshake(raw, target, tls_context, deadline) if target.tls else raw
        sock = conn.sock
        _remaining(sock, deadline)
        conn.request(method, target.base_path + path, body=body, headers=headers)
        _remaining(sock, deadline)
        response = conn.getresponse()
        # From here the response owns the socket; the deadline's timer still bounds reads.
        data = _read_body(response, deadline, max_body)
        media = (response.getheader("Content-Type", "") or "").split(";")[0].strip().lower()
        return Reply(
            response.status,
            parse_json(data) if media == "application/json" else None,
            _retry_after(response.getheader("Retry-After", "")),
            response.getheader("Location", "") or "",
        )
    except HttpFailure:
        raise
    except (socket.timeout, TimeoutError):
        raise TimedOut(f"controller did not answer within {budget:g}s") from None
    except ssl.SSLError:
        if time.monotonic() >= deadline:  # the deadline's shutdown cut the handshake
            raise TimedOut(f"controller did not answer within {budget:g}s") from None
        raise TlsFailure("TLS failure talking to the controller") from None
    except zlib.error:
        raise HttpFailure("controller answer not in its declared content encoding") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if time.monotonic() >= deadline:
            raise TimedOut(f"controller did not answer within {budget:g}s") from None
        raise HttpFailure(f"controller unreachable ({_why(exc)})") from None
    finally:
        timer.cancel()
        if inflight is not None:
            inflight.discard(raw)
        with contextlib.suppress(OSError):
            conn.close()
        with contextlib.suppress(OSError):
            raw.close()


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


def _remaining(sock: socket.socket, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("deadline passed")
    sock.settimeout(left)


def _handshake(
    raw: socket.socket, target: Target, context: ssl.SSLContext | None, deadline: float
) -> socket.socket:
    ctx = context or ssl.create_default_context()
    _remaining(raw, deadline)
    # A duplicate goes to TLS, so `raw` stays usable for the deadline's shutdown.
    try:
        return ctx.wrap_socket(raw.dup(), server_hostname=target.host)
    except ssl.CertificateError:
        raise TlsFailure("TLS failure talking to the controller (certificate)") from None


def _decoder(encoding: str) -> Any:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise HttpFailure(f"answer in an unknown content encoding {encoding[:40]!r}")


def _read_body(response: http.client.HTTPResponse, deadline: float, limit: int) -> bytes:
    declared = response.getheader("Content-Length")
    decoder = _decoder(response.getheader("Content-Encoding", "") or "")
    if declared and declared.isdigit() and decoder is None and int(declared) > limit:
        raise HttpFailure(f"controller answer larger than {limit} bytes: not read")
    out = bytearray()
    while True:
        if time.monotonic() >= deadline:
            raise socket.timeout("deadline passed")
        chunk = response.read(_CHUNK)
        if not chunk:
            break
        if decoder is None:
            out += chunk
        else:
            out += decoder.decompress(chunk, limit + 1 - len(out))
            while decoder.unconsumed_tail and len(out) <= limit:
                out += decoder.decompress(decoder.unconsumed_tail, limit + 1 - len(out))
        if len(out) > limit:
            raise HttpFailure(f"controller answer larger than {limit} bytes (decoded): cut")
    if decoder is not None and (not decoder.eof or decoder.unused_data):
        raise HttpFailure("controller answer's compressed body does not end where the body ends")
    return bytes(out)


def json_depth(data: bytes) -> int:
    """How deeply arrays and objects nest, strings not counted."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub(b'""', data)):
        if match.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data = dict(pairs)
    if len(data) != len(pairs):
        raise ValueError("an object repeats a key")
    return data


def parse_json(data: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """The parsed body, or None for anything that is not bounded, valid JSON whose objects
    each name a key once."""
    if not data or json_depth(data) > max_depth:
        return None
    try:
        return json.loads(
            data.decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=_unique
        )
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def _retry_after(value: str) -> float | None:
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 <= seconds <= 86400 else None
