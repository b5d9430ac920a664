"""The append lock, taken without holding the event loop twice for a session that holds it.

A commit runs on the replica's event loop and waits for the append lock up to the lock
timeout. A session that holds the lock and does not go on (a replica stopped inside its
transaction, until the server's idle timeout ends it) made every change in turn wait out that
timeout, one after another, and the replica's heartbeats waited behind them all. So once one
wait ran out, the lock is taken as stuck: a change then tries it without waiting, at most one
try per PROBE_EVERY, and every other change is refused at once (LockBusy, nothing stored);
each is decided again after a pause off the loop (http/replicas.py). The first try that gets
the lock opens the gate again. One gate per store, used from the event loop's thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

from xce_controller.store.base import LockBusy

PROBE_EVERY = 0.05  # seconds between two tries of a stuck lock: a round trip each


class AppendGate:
    def __init__(self, key: int, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.key = key
        self.monotonic = monotonic
        self.stuck = False
        self._tried = float("-inf")
        self.refused = 0  # changes refused at once while the lock was stuck (a metric)

    def take(self, cur: psycopg.Cursor[Any]) -> None:
        """The append lock in `cur`'s transaction, or LockBusy (the transaction then rolls
        back; nothing of it is stored)."""
        if not self.stuck:
            try:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (self.key,))
            except psycopg.errors.LockNotAvailable:
                self.stuck = True  # waited out the lock timeout: the holder does not go on
                raise
            return
        now = self.monotonic()
        if now - self._tried < PROBE_EVERY:
            self.refused += 1
            raise LockBusy("the append lock is held by a session that does not go on")
        self._tried = now
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", (self.key,))
        row = cur.fetchone()
        if row is None or not row[0]:
            self.refused += 1
            raise LockBusy("the append lock is still held by a session that does not go on")
        self.stuck = False
