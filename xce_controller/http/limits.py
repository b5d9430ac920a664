"""Request bodies are bounded before they are read: an ASGI middleware in front of the API.

A body announced larger than the limit gets 413 without a byte of it read; a body without a
length (chunked) is counted while it streams and cut off with 413 as soon as it passes the
limit. Nothing past the limit is ever buffered, parsed or stored.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

from xce_protocol.reasons import Reason

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class TooLarge(HTTPException):
    """Raised from `receive`: FastAPI passes an HTTPException from there through unchanged,
    so the API's error handler answers it (413, JSON) like any other refusal."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413, f"request body of more than {limit} bytes: the limit is {limit} bytes"
        )


class BodyLimit:
    """`limit` is read for each request: a reloaded config applies at once."""

    def __init__(self, app: App, limit: Callable[[], int], protocol: str) -> None:
        self.app = app
        self.limit = limit
        self.protocol = protocol

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit()
        announced = _content_length(scope)
        if announced is not None and announced > limit:
            await self._refuse(send, f"request body of {announced} bytes", limit)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise TooLarge(limit)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except TooLarge:
            if not started:
                await self._refuse(send, f"request body of more than {limit} bytes", limit)

    async def _refuse(self, send: Send, what: str, limit: int) -> None:
        body = json.dumps(
            {
                "error": "too_large",
                "code": Reason.REFUSED_TOO_LARGE.value,  # the shape of every other error
                "message": f"{what}: the limit is {limit} bytes",
                "protocol": self.protocol,
            }
        ).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
