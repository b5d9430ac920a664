"""A `requests` transport that bounds each call to a management endpoint in time and size,
and refuses redirects.

`requests`' timeouts bound each wait for bytes, not a call: a BMC that drips a byte every
second, in its TLS handshake, its status line, its headers or its body, keeps a call going for
as long as it likes; and `sushy` reads a whole answer into memory, so one that never ends grows
the provisioner without bound. Mounted on the client's session, this adapter gives each call a
deadline (`seconds`, from the connection to the last byte of the answer): a watchdog timer
shuts the connection's socket down when it passes, which ends whatever read is waiting, and
the call fails as a read timeout. The body is read here with a size cap.

A redirect is an error, whatever its status and target: `requests` would follow it with the
session's headers, `X-Auth-Token` included, to any host the BMC names, and would send a reset
again to the new place (307, 308) or report a reset that a 302 turned into a GET as accepted.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from typing import Any

import requests
import requests.adapters
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

ANSWER_LIMIT = 8 * 1024 * 1024  # bytes: a Redfish resource is kilobytes


class AnswerTooLarge(requests.exceptions.RequestException):
    """The endpoint's answer passed the size cap."""


class Redirected(requests.exceptions.RequestException):
    """The endpoint answered a redirect (3xx): never followed."""


class _Watch:
    """The deadline of one call: shuts down the sockets of its connections when it passes.

    It holds a duplicate of each socket (the same connection, its own descriptor), so a
    shutdown never reaches a descriptor number the call closed and the process reused."""

    def __init__(self, seconds: float) -> None:
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self.fired = False
        self._done = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def add(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            if self._done:
                return
            try:  # an SSLSocket has no dup(): the descriptor underneath it
                copy = socket.socket(fileno=os.dup(sock.fileno()))
            except OSError:
                return
            self._socks.append(copy)
            if self.fired:
                _shutdown(copy)

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            for s in self._socks:
                _shutdown(s)

    def end(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._done = True
            socks, self._socks = self._socks, []
        for s in socks:
            s.close()


def _shutdown(s: socket.socket) -> None:
    with contextlib.suppress(OSError):  # closed already: nothing is waiting on it
        s.shutdown(socket.SHUT_RDWR)


_current = threading.local()  # the watch of the call this thread is making


def _watch() -> _Watch | None:
    return getattr(_current, "watch", None)


class _Watched:
    """Hands each new connection's socket (and a reused one's) to the current call's watch."""

    sock: Any

    def _new_conn(self) -> socket.socket:
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        watch = _watch()
        if watch is not None:
            watch.add(sock)
        return sock

    def getresponse(self, *args: Any, **kwargs: Any) -> Any:
        watch = _watch()
        if watch is not None:
            watch.add(self.sock)  # a second duplicate of a new socket is harmless
        return super().getresponse(*args, **kwargs)  # type: ignore[misc]


class _HTTPConnection(_Watched, HTTPConnection):
    pass


class _HTTPSConnection(_Watched, HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


class BoundedAdapter(requests.adapters.HTTPAdapter):
    def __init__(self, seconds: float, limit: int = ANSWER_LIMIT) -> None:
        self.seconds = seconds
        self.limit = limit
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}

    def send(
        self,
        request: Any,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        watch = _Watch(self.seconds)
        _current.watch = watch
        try:
            response = self._send(watch, request, timeout, verify, cert, proxies)
        except BaseException as exc:
            if watch.fired:
                raise self._late(request) from exc
            raise
        finally:
            _current.watch = None
            watch.end()
        if 300 <= response.status_code < 400:
            where = str(response.headers.get("Location", ""))[:200]
            raise Redirected(
                f"the endpoint answered a redirect ({response.status_code} to {where!r}):"
                " redirects are refused",
                request=request,
                response=response,
            )
        return response

    def _late(self, request: Any) -> requests.exceptions.ReadTimeout:
        return requests.exceptions.ReadTimeout(
            f"the answer took longer than {self.seconds:g} s", request=request
        )

    def _send(
        self, watch: _Watch, request: Any, timeout: Any, verify: Any, cert: Any, proxies: Any
    ) -> requests.Response:
        end = time.monotonic() + self.seconds
        response = super().send(request, True, timeout, verify, cert, proxies)
        body = bytearray()
        try:
            while True:
                if time.monotonic() > end or watch.fired:
                    raise self._late(request)
                chunk = response.raw.read1(65536)
                if not chunk:
                    break
                body += chunk
                if len(body) > self.limit:
                    raise AnswerTooLarge(
                        f"the answer is larger than {self.limit} bytes", request=request
                    )
            if watch.fired:  # the end of the body was the watchdog's shutdown
                raise self._late(request)
        finally:
            response.close()
        response._content = bytes(body)
        setattr(response, "_content_consumed", True)  # noqa: B010 (private to requests)
        return response
