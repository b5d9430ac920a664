"""Lock waits on the event loop, made once for a lock whose holder does not go on.

A change's transaction runs on the replica's event loop and waits for the locks it needs (the
append lock, a lease's row, a report's row) up to the lock timeout. A session that holds one
and does not go on (a replica stopped inside its transaction, until the server's idle timeout
ends it) made every change in turn wait out that timeout, one after another, and the
replica's heartbeats waited behind them all. So once one wait ran out, the locks are taken as
stuck: one change per PROBE_EVERY is let through as a probe, its waits cut at PROBE_TIMEOUT,
and every other change is refused at once (LockBusy, nothing stored, not even a round trip);
each is decided again after a pause off the loop (base.LOCK_PAUSE, http/replicas.py). The
first probe that commits opens the gate. One gate per store, for the transactions made on
the event loop's thread (the heartbeat writer's thread does not use it).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from xce_controller.store.base import LockBusy

PROBE_EVERY = 0.1  # seconds between two probes while a lock is stuck
# The probe's lock waits: above a healthy holder's few milliseconds, and short enough that
# probing holds the loop a fifth of the time at most.
PROBE_TIMEOUT = "20ms"
PROBE_SQL = f"SET LOCAL lock_timeout = '{PROBE_TIMEOUT}'"


class LockGate:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic
        self.stuck = False
        self._probed = float("-inf")
        self.refused = 0  # changes refused at once or probes cut while stuck (a metric)

    def enter(self) -> bool:
        """Before a transaction: whether it is a probe (its lock waits then cut short);
        LockBusy at once while the locks are stuck and a probe went less than PROBE_EVERY
        ago."""
        if not self.stuck:
            return False
        now = self.monotonic()
        if now - self._probed < PROBE_EVERY:
            self.refused += 1
            raise LockBusy("a lock is held by a session that does not go on")
        self._probed = now
        return True

    def ran_out(self, probing: bool) -> None:
        """A lock wait of the transaction ran out (its timeout, or the probe's)."""
        self.stuck = True
        if probing:
            self.refused += 1

    def went_through(self, probing: bool) -> None:
        """The transaction committed: a probe that did opens the gate."""
        if probing:
            self.stuck = False
