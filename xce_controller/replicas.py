"""One controller replica among several on a shared store (docs/ha.md).

Each replica keeps the whole cluster state in memory, as the single controller does, and
keeps it current by applying the facts the others append, in log order: told by a NOTIFY that
carries only the new head, and by a poll that alone keeps it correct. Before each request it
catches up; a change decided on a state that another replica moved meanwhile is refused by
the store (StaleState), and decided again on the new state. Heartbeat times are shared
through the store's unlogged table, never as facts; timers read them before they decide.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from typing import Any, Protocol, cast

from xce_controller.core.facts import apply
from xce_controller.core.model import Cluster, Fact
from xce_controller.store.base import SharedStore, StorageUnavailable, Store

log = logging.getLogger(__name__)
POLL = 1.0  # seconds between reads of the log's head when no NOTIFY came


class Controller(Protocol):
    """What a replica reads and moves of its controller (service.Controller)."""

    store: Store
    cluster: Cluster
    seen: dict[str, float]
    alive_since: float
    on_applied: list[Callable[[list[Fact]], None]]

    def wake(self, keys: set[str]) -> None: ...

    def reschedule(self, key: str) -> None: ...


class Replica:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.store = cast(SharedStore, ctl.store)
        self.id = os.environ.get("XCE_REPLICA_ID") or f"{socket.gethostname()}:{os.getpid()}"
        self.listener: Any = None
        self.applied = 0  # facts of other replicas applied here
        self.reloads = 0  # full reloads (a change refused as stale, a gap in the log)
        self.stale = 0  # changes refused as decided on an old state
        self.lag = 0.0  # seconds from a NOTIFY to its facts applied here, the latest
        self.listener_up = False
        self.store_seconds = 0.0  # time spent reading the log to catch up
        self.commits = 0  # commits to the store, and the time they took
        self.commit_seconds = 0.0
        self.liveness_restarts = 0  # the shared heartbeat table found begun anew
        self._loop: asyncio.AbstractEventLoop | None = None
        self._liveness = 0.0
        self.dirty = False  # a reload failed: the memory may hold facts never stored

    # --- the log ------------------------------------------------------------------------
    def catch_up(self) -> int:
        """Apply what others appended since this replica's version; the facts applied."""
        ctl = self.ctl
        if self.dirty:
            self.reload()
            return 0
        started = time.monotonic()
        rows = ctl.store.facts_after(ctl.cluster.version)
        self.store_seconds += time.monotonic() - started
        if not rows:
            return 0
        if rows[0][0] != ctl.cluster.version + 1:  # never for a gapless log; guards a bug
            log.error("fact log gap after %d (next %d): reloading", ctl.cluster.version, rows[0][0])
            self.reload()
            return len(rows)
        touched: set[str] = set()
        facts = [fact for _, fact in rows]
        for fact in facts:
            touched |= apply(ctl.cluster, fact)
        self.applied += len(facts)
        self._told(facts, touched)
        return len(facts)

    def rewind(self, mark: tuple[int, int], catch_up: bool = True) -> None:
        """A change not stored (refused as stale, or the database away) taken back in the
        entries it touched, then what the others appended applied: the cost is the change's
        and the new facts', not the cluster's. The whole reload stays the fallback."""
        try:
            self.ctl.cluster.rewind(mark)
        except Exception:  # a bug in the journal: the stored state is the truth
            log.exception("rewind failed; reloading the stored state")
            self.dirty = True
        if catch_up:
            with suppress(StorageUnavailable):  # the next catch-up (before any decision) tries
                self.catch_up()

    def reload(self) -> None:
        """The whole state read again (after a stale change): every changed host is woken."""
        ctl = self.ctl
        before = ctl.cluster.hosts
        ctl.cluster, _ = ctl.store.load()
        self.dirty = False
        self.reloads += 1
        changed = {k for k, h in ctl.cluster.hosts.items() if before.get(k) is not h}
        self._told([], changed)

    def _told(self, facts: list[Fact], touched: set[str]) -> None:
        ctl = self.ctl
        for listener in ctl.on_applied:
            listener(facts)
        ctl.wake(touched)
        for key in touched:
            ctl.reschedule(key)

    # --- liveness -----------------------------------------------------------------------
    def heard(self, key: str, now: float) -> None:
        self.store.beat(key, now)

    def refresh(self, keys: Iterable[str]) -> None:
        """Heartbeat times other replicas stored, and when the shared table last started
        empty (a crash or failover): no host is judged lost by beats the database lost."""
        store = self.store
        wanted = list(keys)
        if wanted:
            for key, at in store.seen_of(wanted).items():
                if at > self.ctl.seen.get(key, 0.0):
                    self.ctl.seen[key] = at
        since = store.liveness_since()
        if since > self._liveness:
            self._liveness = since
            if since > self.ctl.alive_since:
                if since > self.ctl.alive_since + 1.0:  # not this replica's own first start
                    self.liveness_restarts += 1
                    log.warning("heartbeat times began anew at %.0f: all hosts get a grace", since)
                self.ctl.alive_since = since

    # --- the listener -------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.listener = self.store.listen(self._notified, POLL).start()

    def _notified(self, head: int | None) -> None:
        """From the listener's thread: catch up on the controller's loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            told = time.monotonic()
            loop.call_soon_threadsafe(self._on_loop, head, told)

    def _on_loop(self, head: int | None, told: float) -> None:
        self.listener_up = bool(self.listener is not None and self.listener.connected.is_set())
        if head is not None and head <= self.ctl.cluster.version:
            return  # this replica's own commit, or one already applied
        try:
            self.catch_up()
        except Exception as exc:  # the database is down: the next poll tries again
            log.debug("catch-up failed: %s", exc)
            return
        if head is not None:
            self.lag = time.monotonic() - told

    def stop(self) -> None:
        if self.listener is not None:
            self.listener.stop()
            self.listener = None
        self._loop = None
