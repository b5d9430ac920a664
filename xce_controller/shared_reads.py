"""One read of the shared log serving many requests (replicas.py).

Each request must see every fact committed before it arrived, so it needs a read of the log
that began after its arrival. A read under way when a request arrives may have begun before a
commit the request must see, so it does not serve that request; the next read does, and one
next read serves every request that arrived meanwhile. At most one read runs and one waits:
at a few hundred requests a second a replica makes a few hundred reads a second fewer, and
while the database is slow the reads do not pile up behind one another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class SharedReads:
    def __init__(self, read: Callable[[], Awaitable[None]]) -> None:
        self._read = read
        self._running: asyncio.Future[None] | None = None  # the read under way
        self._next: asyncio.Future[None] | None = None  # served by the read after it
        self.reads = 0  # reads begun, and the calls they served
        self.calls = 0

    def after_now(self) -> asyncio.Future[None]:
        """Done once a read that began at or after this call has been applied."""
        self.calls += 1
        if self._running is None:
            self._running = self._begin()
            return self._running
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        return self._next

    def _begin(self) -> asyncio.Future[None]:
        self.reads += 1
        task = asyncio.ensure_future(self._read())
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Future[None]) -> None:
        _retrieved(task)
        self._running = None
        waiting, self._next = self._next, None
        if waiting is None:
            return
        self._running = self._begin()
        self._running.add_done_callback(lambda done: _copy(done, waiting))


def _copy(done: asyncio.Future[None], into: asyncio.Future[None]) -> None:
    if into.done():
        return
    exc = None if done.cancelled() else done.exception()
    if done.cancelled():
        into.cancel()
    elif exc is not None:
        into.set_exception(exc)
        _retrieved(into)
    else:
        into.set_result(None)


def _retrieved(fut: asyncio.Future[None]) -> None:
    """A read's failure reaches each caller still waiting; those that stopped waiting (past
    their bound) need not hear of it, nor the loop's log of failures nobody read."""
    if not fut.cancelled():
        fut.exception()
