"""Bounded HTTP to a metadata service, treated like a hostile network.

No redirects are followed, no proxy is used (metadata must not leave the host), nothing is
decompressed, the body is cut off above a size limit and the whole exchange (connect, headers,
every read of a slow drip) must finish by one deadline. Every failure is a MetadataError with
a one-line reason; nothing else escapes.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

MAX_BODY = 256 * 1024  # the largest real answer (a scheduled-events document) is a few KiB
_CHUNK = 8192


class MetadataError(Exception):
    """The metadata service could not be asked, or did not answer within bounds."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)  # names lower-cased

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class MetadataHttp(Protocol):
    def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        timeout: float,
        body: bytes | None = None,
    ) -> Reply: ...


class BoundedHttp:
    """The real seam: http.client, one connection per request, a total deadline."""

    def __init__(self, max_body: int = MAX_BODY) -> None:
        self.max_body = max_body
        self._open: set[http.client.HTTPConnection] = set()
        self._lock = threading.Lock()
        self._aborted = False

    def abort(self) -> None:
        """End every request in flight (a long-poll would otherwise hold its thread)."""
        with self._lock:
            self._aborted = True
            conns = list(self._open)
        for conn in conns:
            if conn.sock is not None:
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(socket.SHUT_RDWR)

    def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        timeout: float,
        body: bytes | None = None,
    ) -> Reply:
        deadline = time.monotonic() + timeout
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise MetadataError(f"not an http URL: {url[:80]}")
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(parts.hostname, parts.port, timeout=timeout)
        with self._lock:
            if self._aborted:
                raise MetadataError("stopped")
            self._open.add(conn)
        try:
            conn.request(method, target, body=body, headers=dict(headers))
            with self._lock:
                if self._aborted:  # abort() ran before the socket existed
                    raise MetadataError("stopped")
            sock = conn.sock  # getresponse() may drop conn.sock; the reads still use it
            _rearm(sock, deadline)
            response = conn.getresponse()
            data = self._read(sock, response, deadline)
            names = {k.lower(): v for k, v in response.getheaders()}
            return Reply(response.status, data, names)
        except socket.timeout:
            raise MetadataError(f"no answer within {timeout:g}s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise MetadataError(f"{type(exc).__name__}: {str(exc)[:80]}") from None
        except ValueError as exc:  # a header value or URL http.client will not send
            raise MetadataError(f"cannot send the request: {str(exc)[:80]}") from None
        finally:
            with self._lock:
                self._open.discard(conn)
            conn.close()

    def _read(
        self, sock: socket.socket | None, response: http.client.HTTPResponse, deadline: float
    ) -> bytes:
        length = response.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > self.max_body:
            raise MetadataError(f"answer of {int(length)} bytes, more than {self.max_body}")
        chunks: list[bytes] = []
        size = 0
        while True:
            _rearm(sock, deadline)
            chunk = response.read1(_CHUNK)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_body:
                raise MetadataError(f"answer longer than {self.max_body} bytes")
            chunks.append(chunk)


def _rearm(sock: socket.socket | None, deadline: float) -> None:
    """Each blocking read gets only what is left of the total deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("deadline passed")
    if sock is not None:
        sock.settimeout(left)
