"""What the PostgreSQL store does off its caller's thread, so a replica's event loop never
waits on the database for a heartbeat, nor for a connect timeout while the primary is away.

- `Beats`: heartbeat times kept in memory and written by a thread every FLUSH seconds, all
  of them in one statement (an upsert keeping the newest time). A heartbeat is answered from
  the replica's memory; the other replicas read the time at most FLUSH later, far inside any
  grace. While the database is away the times wait and are written once it is back.
- `Outage`: once a call finds the database unreachable, further calls fail at once
  (StorageUnavailable) instead of each waiting for the pool's connect timeout on the loop; a
  thread probes with a connection of its own every PROBE seconds and ends the outage when
  one succeeds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import psycopg

log = logging.getLogger(__name__)
FLUSH = 0.5  # seconds between writes of the heartbeat times heard
PROBE = 0.5  # seconds between attempts to reach the database during an outage


class Beats:
    def __init__(self, write: Callable[[dict[str, float]], None]) -> None:
        self._write = write  # one transaction; raises on any failure
        self._pending: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.written = 0  # heartbeat times stored, and the writes that stored them
        self.writes = 0
        self._thread = threading.Thread(target=self._run, name="pg-beats", daemon=True)
        self._thread.start()

    def beat(self, key: str, at: float) -> None:
        with self._lock:
            if at > self._pending.get(key, 0.0):
                self._pending[key] = at

    def pending(self) -> dict[str, float]:
        with self._lock:
            return dict(self._pending)

    def flush(self) -> None:
        """Write what was heard since the last write; on a failure keep it for the next."""
        with self._lock:
            batch, self._pending = self._pending, {}
        if not batch:
            return
        try:
            self._write(batch)
        except Exception as exc:
            with self._lock:
                for key, at in batch.items():
                    if at > self._pending.get(key, 0.0):
                        self._pending[key] = at
            log.debug("heartbeat times not written yet (%s)", exc)
            return
        self.written += len(batch)
        self.writes += 1

    def _run(self) -> None:
        while not self._stop.wait(FLUSH):
            self.flush()

    def stop(self) -> None:
        """The last times written (best effort: the database may be away)."""
        self._stop.set()
        self._thread.join(timeout=5)
        self.flush()


class Outage:
    def __init__(self, probe: Callable[[], None], after: Callable[[], None] = lambda: None) -> None:
        self._probe = probe  # connects once; raises while the database is unreachable
        # Once it is over, best effort and unbounded (a check of the pool's connections): a
        # step that hangs on a connection the outage broke must not hold the outage open.
        self._after = after
        self.cause = ""  # while set, calls fail at once with it
        self._since = 0.0  # monotonic time the outage began, while there is one
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._prober: threading.Thread | None = None

    def begin(self, cause: str) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            if not self.cause:
                self._since = time.monotonic()
            self.cause = cause
            if self._prober is None:
                log.warning("database unreachable (%s); probing every %.1f s", cause, PROBE)
                self._prober = threading.Thread(target=self._run, name="pg-probe", daemon=True)
                self._prober.start()

    def lasted(self) -> float:
        """Seconds the outage under way has lasted; 0 when there is none."""
        with self._lock:
            return time.monotonic() - self._since if self.cause else 0.0

    def _run(self) -> None:
        while not self._closed.wait(PROBE):
            try:
                self._probe()
            except (psycopg.Error, OSError) as exc:
                log.debug("database still unreachable: %s", exc)
                continue
            with self._lock:
                self.cause = ""
                self._prober = None
            log.warning("database reachable again")
            try:
                self._after()
            except Exception as exc:  # best effort: a later call finds out
                log.debug("after the outage: %s", exc)
            return

    def close(self) -> None:
        self._closed.set()
        prober = self._prober
        if prober is not None:
            prober.join(timeout=10)
