"""A bound on every wait for the database: a server that accepts but never answers (stopped,
a frozen machine, a partition that drops packets without a reset) must not hold a caller's
thread, and so a replica's event loop, for longer than a few seconds.

libpq has no client-side deadline of its own: a statement sent to a server that stopped
answering waits until the kernel gives up on the connection, minutes later or never (the
server's kernel still acknowledges every packet while the process is stopped, so neither
keepalives nor tcp_user_timeout fire). A watchdog thread keeps the deadline of each call in
progress and, once one passes, shuts the call's socket down: the blocked read returns at once,
psycopg raises OperationalError, the connection is discarded by the pool, and the caller sees
StorageUnavailable (pg_background.Outage then fails later calls at once). What the server did
with the statement is decided by what was sent: a transaction cut before its COMMIT was sent is
rolled back by the server; one cut while its COMMIT was in flight has an unknown outcome
(base.OutcomeUnknown).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)


class Watchdog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._due: list[tuple[float, int]] = []  # (deadline, call id), a heap
        self._calls: dict[int, tuple[int, float]] = {}  # call id -> (socket fd, limit)
        self._ids = itertools.count(1)
        self._closed = False
        self.cuts = 0  # calls cut at their deadline since start
        self._thread = threading.Thread(target=self._run, name="pg-deadline", daemon=True)
        self._thread.start()

    @contextmanager
    def bound(self, fileno: int, limit: float | None) -> Iterator[list[bool]]:
        """While inside, the call on socket `fileno` is cut once `limit` seconds pass (no bound
        for None). Yields a one-item list that reads [True] once the call was cut."""
        cut = [False]
        if limit is None:
            yield cut
            return
        call = next(self._ids)
        with self._wake:
            self._calls[call] = (fileno, limit)
            heapq.heappush(self._due, (time.monotonic() + limit, call))
            self._wake.notify()
        try:
            yield cut
        finally:
            with self._lock:
                # Gone from the table under the lock: the watchdog never shuts a socket down
                # once its call ended (the descriptor may then belong to another connection).
                if self._calls.pop(call, None) is None:
                    cut[0] = True

    def _run(self) -> None:
        with self._wake:
            while not self._closed:
                now = time.monotonic()
                while self._due and self._due[0][0] <= now:
                    _, call = heapq.heappop(self._due)
                    entry = self._calls.pop(call, None)
                    if entry is not None:
                        self._cut(*entry)
                wait = self._due[0][0] - now if self._due else None
                self._wake.wait(wait)

    def _cut(self, fileno: int, limit: float) -> None:
        self.cuts += 1
        log.warning("the database did not answer within %.1f s: connection cut", limit)
        try:
            # A duplicate of the descriptor: shutting it down ends the socket for every one of
            # its descriptors (libpq's own included), and closing it leaves libpq's open.
            with socket.socket(fileno=os.dup(fileno)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError as exc:  # already closed by the driver: nothing left to cut
            log.debug("cut: %s", exc)

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=5)
