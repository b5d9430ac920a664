"""A deadline on reading each request: a connection whose request has not fully arrived
(headers and body) within `limits.request_read_timeout` of its first byte, or of the
connection being opened, is closed.

uvicorn closes kept-alive connections that sit idle after a response, but it times neither a
fresh connection that sends nothing nor a request being read: a client sending its headers a
byte at a time would hold a connection (a descriptor, a parser, its buffer) for as long as it
keeps dripping, without any credential. The deadline is per request, not per connection: a
long-poll's wait, an idle kept-alive connection and a request the server has stopped reading
(pipelined behind a slow answer) are not reads.

Both of uvicorn's HTTP/1.1 implementations are covered (httptools when installed, else h11),
from Debian 12's uvicorn 0.17 on; only the methods all of them have are overridden.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import h11
from h11._state import MIGHT_SWITCH_PROTOCOL  # h11 has it, but not in its __all__
from uvicorn.protocols.http.h11_impl import H11Protocol

from xce_protocol.protocol import PROTOCOL
from xce_protocol.reasons import Reason

log = logging.getLogger(__name__)

DEFAULT_READ_TIMEOUT = 30.0
# A request offering an upgrade (h2c: `curl --http2`) ends in MIGHT_SWITCH_PROTOCOL, not DONE.
_REQUEST_READ = (
    h11.DONE,
    h11.MUST_CLOSE,
    h11.CLOSED,
    h11.ERROR,
    MIGHT_SWITCH_PROTOCOL,
    h11.SWITCHED_PROTOCOL,
)
# A request's line and headers: h11 bounds them itself (16 KiB, uvicorn's default), httptools
# does not (TimedHttpTools). A token, a cookie and a few headers need a few hundred bytes.
MAX_HEAD = 64 * 1024
PAUSED_LOOK = 1.0  # how often a deadline run out while the server does not read looks again
LOG_EVERY = 10.0  # at most one line per this many seconds: a flood of drips is one line


class _Closed:
    """Counts the connections closed for their deadline, and says so now and then: the ones
    not told at once are told LOG_EVERY later, so a flood's last connections are not left out
    of the log until the next one."""

    def __init__(self) -> None:
        self.total = 0
        self._unlogged = 0
        self._logged_at = -LOG_EVERY
        self._last = ("a client", DEFAULT_READ_TIMEOUT)
        self._tell_at = 0.0  # when the ones not told yet will be (a loop may end before)

    def note(self, peer: Any, timeout: float) -> None:
        self.total += 1
        self._unlogged += 1
        self._last = (peer[0] if isinstance(peer, tuple) and peer else "a client", timeout)
        now = time.monotonic()
        wait = self._logged_at + LOG_EVERY - now
        if wait <= 0:
            self._tell()
        elif self._tell_at < now:
            self._tell_at = now + wait
            asyncio.get_running_loop().call_later(wait, self._tell)

    def _tell(self) -> None:
        if self._unlogged:
            who, timeout = self._last
            log.warning(
                "closed %d connection(s) whose request did not arrive within %gs (last from %s)",
                self._unlogged,
                timeout,
                who,
            )
            self._unlogged, self._logged_at = 0, time.monotonic()


CLOSED = _Closed()


class _Timer:
    """The deadline of one connection's request. It does not run out while the server itself
    has stopped reading the connection (a pipelined request waiting for the answer before it,
    a body beyond uvicorn's buffer the app has yet to read): that wait is not the client's."""

    def __init__(self, timeout: float, paused: Callable[[], bool]) -> None:
        self.timeout = timeout
        self.paused = paused
        self.handle: asyncio.TimerHandle | None = None

    def arm(self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport, peer: Any) -> None:
        if self.handle is None:
            self.handle = loop.call_later(self.timeout, self._overdue, transport, peer)

    def _look_again(self, transport: asyncio.Transport, peer: Any) -> None:
        """While the server does not read, look again now and then; once it reads again, the
        client has a whole deadline: what it sent meanwhile is not even read yet."""
        loop = asyncio.get_running_loop()
        if self.paused():
            wait = min(PAUSED_LOOK, self.timeout)
            self.handle = loop.call_later(wait, self._look_again, transport, peer)
        else:
            self.handle = None
            self.arm(loop, transport, peer)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

    def _overdue(self, transport: asyncio.Transport, peer: Any) -> None:
        self.handle = None
        if self.paused():
            self._look_again(transport, peer)
        elif not transport.is_closing():
            CLOSED.note(peer, self.timeout)
            transport.close()


class _ReadTimed(asyncio.Protocol):
    """What both implementations share: a timer per connection, armed when it opens, looked
    at while the server has stopped reading, cancelled when it closes. First in the bases, so
    `super()` is the implementation's own protocol."""

    read_timeout: Callable[[], float] = staticmethod(lambda: DEFAULT_READ_TIMEOUT)
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    client: Any
    flow: Any

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._read_timer = _Timer(self.read_timeout(), self._reading_paused)
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._read_timer.cancel()
        super().connection_lost(exc)

    def _reading_paused(self) -> bool:
        return bool(getattr(self.flow, "read_paused", False))

    def _arm(self) -> None:
        self._read_timer.arm(self.loop, self.transport, self.client)


class TimedH11(_ReadTimed, H11Protocol):
    """h11: a request is read once h11 says the client's side of the cycle is done."""

    def handle_events(self) -> None:
        super().handle_events()
        state = self.conn.their_state
        if state in _REQUEST_READ:
            self._read_timer.cancel()
        elif state is h11.SEND_BODY or (state is h11.IDLE and self.conn.trailing_data[0]):
            self._arm()


def _httptools() -> type[asyncio.Protocol] | None:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is not installed: uvicorn uses h11
        return None

    class TimedHttpTools(_ReadTimed, HttpToolsProtocol):
        """httptools: a request starts at any byte and is read at its message end. Its head
        is bounded here (MAX_HEAD): httptools has no bound of its own, and uvicorn kept every
        header line of a head that never ended (60 MB a connection in a second)."""

        _head_open = False  # between a request's first byte and the end of its headers
        _head_bytes = 0

        def data_received(self, data: bytes) -> None:
            # Any byte starts the deadline, not only a request's: httptools skips blank lines
            # between requests without a callback, and each byte stops uvicorn's keep-alive
            # timeout. A request completed by these bytes cancels it again.
            self._arm()
            super().data_received(data)
            if self._head_open:  # these bytes did not end the head: all of them are head
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD and not self.transport.is_closing():
                    self._head_open = False
                    refuse_head(self.transport)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()
            self._head_open, self._head_bytes = True, 0

        def on_headers_complete(self) -> None:
            self._head_open = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._read_timer.cancel()
            super().on_message_complete()

    return TimedHttpTools


def refuse_head(transport: asyncio.Transport) -> None:
    """431 with the API's error shape, and the connection closed (the rest is not read)."""
    body = json.dumps(
        {
            "error": "too_large",
            "code": Reason.REFUSED_TOO_LARGE.value,
            "message": f"request line and headers of more than {MAX_HEAD} bytes",
            "protocol": PROTOCOL,
        }
    ).encode()
    head = (
        "HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    transport.write(head.encode() + body)
    transport.close()


def protocol(
    timeout: float | Callable[[], float], implementation: str = "auto"
) -> type[asyncio.Protocol]:
    """The HTTP protocol class for uvicorn.Config(http=...), with this read deadline: a number,
    or where to read it when a connection opens (a reloaded config applies to new ones)."""
    base: type[asyncio.Protocol] | None = None
    if implementation in ("auto", "httptools"):
        base = _httptools()
    if base is None:
        base = TimedH11
    timeout_of = timeout if callable(timeout) else lambda: timeout
    return type(base.__name__, (base,), {"read_timeout": staticmethod(timeout_of)})
