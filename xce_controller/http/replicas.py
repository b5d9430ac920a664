"""The API among replicas: each request sees every fact committed before it arrived, on any
replica, and a change decided on a state another replica moved meanwhile is decided again.

Before the request, the replica applies what the others appended (one indexed read of the
log past its version, made off the event loop and shared by every request that arrived
before it began: shared_reads.py). A commit decided on an older log is refused by the
store (StaleState), nothing of it stored; the request is then run again on the caught-up
state, from its buffered body, up to RETRIES times, and answered 503 (retry) past that. Only
a request whose answer has not started can be run again; a refusal comes before any answer.
After the first tries, each waits a random while (up to a bound that doubles): replicas
racing on every change (a burst of joins over all of them) otherwise overtake one another in
lockstep until one runs out of tries. A change refused because a lock it needs is held by a
session that does not go on (LockBusy, store/lock_gate.py) is tried again after a pause of
LOCK_PAUSE on average, off the loop, for LOCK_RETRY_FOR at most (past the server's idle
timeout, which frees such a lock), and does not use up the tries. A database that stops
answering holds a request for FOLLOW_WAIT at most (replicas.py): it is then answered from
memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from xce_controller.service import Controller
from xce_controller.store.base import LOCK_PAUSE, LockBusy, StaleState, StorageUnavailable
from xce_protocol.protocol import PROTOCOL
from xce_protocol.reasons import Reason

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
RETRIES = 20
IMMEDIATE = 2  # tries run again at once; each later one first waits up to backoff(n)
BACKOFF_FIRST = 0.005
BACKOFF_MAX = 0.2
LOCK_RETRY_FOR = 8.0  # the idle timeout (2 s) and the store's deadline (4 s), with margin


def backoff(attempt: int) -> float:
    """The bound of the random wait before try `attempt` (0-based): 0 for the first ones."""
    if attempt < IMMEDIATE:
        return 0.0
    return float(min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (attempt - IMMEDIATE)))


class CatchUp:
    def __init__(self, app: ASGIApp, controller: Controller) -> None:
        self.app = app
        self.ctl = controller

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.ctl.replica is None:
            await self.app(scope, receive, send)
            return
        body = await _buffered(receive)
        loop = asyncio.get_running_loop()
        attempt, locked_until = 0, 0.0
        while True:
            outcome = await self._attempt(scope, list(body), receive, send)
            if outcome is None:
                return
            if isinstance(outcome, LockBusy):
                locked_until = locked_until or loop.time() + LOCK_RETRY_FOR
                if loop.time() >= locked_until:
                    await _busy(send, LOCKED.format(LOCK_RETRY_FOR))
                    return
                pause = random.uniform(LOCK_PAUSE / 2, LOCK_PAUSE * 1.5)  # noqa: S311 (jitter)
                await asyncio.sleep(pause)
                continue
            attempt += 1
            if attempt > RETRIES:
                break
            bound = backoff(attempt)
            if bound:
                await asyncio.sleep(random.uniform(0, bound))  # noqa: S311 (jitter, no secret)
        await _busy(send)

    async def _attempt(
        self, scope: Scope, body: list[Message], receive: Receive, send: Send
    ) -> StaleState | None:
        """Run the request once on the caught-up state; what refused it if it must run
        again (None: answered)."""
        assert self.ctl.replica is not None
        started = False

        async def replay() -> Message:
            # The body, then the client's own messages (a stream waits for its disconnect).
            return body.pop(0) if body else await receive()

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        # The database down or not answering within FOLLOW_WAIT: answered from memory; a
        # change decided there is refused by the store anyway (stale, or unavailable).
        with contextlib.suppress(StorageUnavailable, asyncio.TimeoutError):
            await self.ctl.replica.current()
        try:
            await self.app(scope, replay, sending)
        except StaleState as refused:
            if started:
                raise
            return refused
        return None


OVERTAKEN = "other replicas kept changing the state under this change; nothing was changed"
LOCKED = (
    "a lock this change needs stayed held for {:g}s by a session that does not go on; "
    "nothing was changed"
)


async def _busy(send: Send, message: str = OVERTAKEN) -> None:
    """Every try was overtaken by another replica's change, or met a stuck lock: the client
    retries later."""
    text = json.dumps(
        {
            "error": "storage_unavailable",
            "code": Reason.REFUSED_STORAGE_UNAVAILABLE.value,
            "message": message,
            "protocol": PROTOCOL,
        }
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(text)).encode()),  # not chunked: every client reads it
        (b"retry-after", b"1"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": text})


async def _buffered(receive: Receive) -> list[Message]:
    messages = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request" or not message.get("more_body", False):
            return messages
