"""A deadline on reading each request: a connection whose request has not fully arrived
(headers and body) within `limits.request_read_timeout` of its first byte, or of the
connection being opened, is closed.

uvicorn closes kept-alive connections that sit idle after a response, but it times neither a
fresh connection that sends nothing nor a request being read: a client sending its headers a
byte at a time would hold a connection (a descriptor, a parser, its buffer) for as long as it
keeps dripping, without any credential. The deadline is per request, not per connection: a
long-poll's wait and an idle kept-alive connection are not reads.

Both of uvicorn's HTTP/1.1 implementations are covered (httptools when installed, else h11),
from Debian 12's uvicorn 0.17 on; only the methods all of them have are overridden.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

DEFAULT_READ_TIMEOUT = 30.0
_REQUEST_READ = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR)
LOG_EVERY = 10.0  # at most one line per this many seconds: a flood of drips is one line


class _Closed:
    """Counts the connections closed for their deadline, and says so now and then."""

    def __init__(self) -> None:
        self.total = 0
        self._unlogged = 0
        self._logged_at = -LOG_EVERY

    def note(self, peer: Any, timeout: float) -> None:
        self.total += 1
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY:
            who = peer[0] if isinstance(peer, tuple) and peer else "a client"
            log.warning(
                "closed %d connection(s) whose request did not arrive within %gs (last from %s)",
                self._unlogged,
                timeout,
                who,
            )
            self._unlogged, self._logged_at = 0, now


CLOSED = _Closed()


class _Timer:
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.handle: asyncio.TimerHandle | None = None

    def arm(self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport, peer: Any) -> None:
        if self.handle is None:
            self.handle = loop.call_later(self.timeout, self._overdue, transport, peer)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

    def _overdue(self, transport: asyncio.Transport, peer: Any) -> None:
        self.handle = None
        if not transport.is_closing():
            CLOSED.note(peer, self.timeout)
            transport.close()


class TimedH11(H11Protocol):
    """h11: a request is read once h11 says the client's side of the cycle is done."""

    read_timeout = DEFAULT_READ_TIMEOUT

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._read_timer = _Timer(self.read_timeout)
        super().connection_made(transport)
        self._read_timer.arm(self.loop, transport, self.client)

    def handle_events(self) -> None:
        super().handle_events()
        state = self.conn.their_state
        if state in _REQUEST_READ:
            self._read_timer.cancel()
        elif state is h11.SEND_BODY or (state is h11.IDLE and self.conn.trailing_data[0]):
            self._read_timer.arm(self.loop, self.transport, self.client)

    def connection_lost(self, exc: Exception | None) -> None:
        self._read_timer.cancel()
        super().connection_lost(exc)


def _httptools() -> type[asyncio.Protocol] | None:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is not installed: uvicorn uses h11
        return None

    class TimedHttpTools(HttpToolsProtocol):
        """httptools: a request starts at its first byte and is read at its message end."""

        read_timeout = DEFAULT_READ_TIMEOUT

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            self._read_timer = _Timer(self.read_timeout)
            super().connection_made(transport)
            self._read_timer.arm(self.loop, transport, self.client)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._read_timer.arm(self.loop, self.transport, self.client)

        def on_message_complete(self) -> None:
            self._read_timer.cancel()
            super().on_message_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._read_timer.cancel()
            super().connection_lost(exc)

    return TimedHttpTools


def protocol(timeout: float, implementation: str = "auto") -> type[asyncio.Protocol]:
    """The HTTP protocol class for uvicorn.Config(http=...), with this read deadline."""
    base: type[asyncio.Protocol] | None = None
    if implementation in ("auto", "httptools"):
        base = _httptools()
    if base is None:
        base = TimedH11
    return type(f"{base.__name__}{int(timeout * 1000)}ms", (base,), {"read_timeout": timeout})
