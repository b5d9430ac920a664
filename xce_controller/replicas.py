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
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, cast

from xce_controller.core.config import ClusterConfig
from xce_controller.core.facts import apply
from xce_controller.core.model import Cluster, Fact
from xce_controller.shared_reads import SharedReads
from xce_controller.store.base import Numbered, SharedStore, StorageUnavailable, Store

log = logging.getLogger(__name__)
T = TypeVar("T")
POLL = 1.0  # seconds between reads of the log's head when no NOTIFY came
# The longest a request waits for its read of the log before it is answered from memory (a
# change decided there is still refused by the store if the log moved): a database that
# stops answering holds no request longer, and the store's own deadline ends the read.
FOLLOW_WAIT = 1.0
# FOLLOW_WAIT is the database's time, as the reading thread measures it, not the loop's: a read
# the database answered but the loop did not yet see (a commit waiting for a lock holds the
# loop) is waited for again, this many rounds in all.
FOLLOW_ROUNDS = 3
# How long a replica cut off from its database still answers heartbeats from memory: a
# failover of the primary (under a second) then costs no heartbeat. Past it the replica is
# isolated, and its heartbeats are answered 503 (Replica.heard).
ISOLATED_AFTER = 2.0


def isolated_after(grace: float) -> float:
    """ISOLATED_AFTER, or an eighth of the grace if less: a host handed on then is heard by
    another replica well within its grace."""
    return min(ISOLATED_AFTER, grace / 8)


class Controller(Protocol):
    """What a replica reads and moves of its controller (service.Controller)."""

    store: Store
    cfg: ClusterConfig
    cluster: Cluster
    seen: dict[str, float]
    storage_down: str
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
        # Reads of the database made off the event loop, one at a time (shared_reads.py).
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pg-follow")
        self._reading_since = 0.0  # when the reader thread's read began (0: none under way)
        self.reads = SharedReads(self._read)
        self._tasks: set[asyncio.Future[None]] = set()

    # --- the log ------------------------------------------------------------------------
    def catch_up(self) -> int:
        """Apply what others appended since this replica's version; the facts applied."""
        if self.dirty:
            self.reload()
            return 0
        started = time.monotonic()
        rows = self.ctl.store.facts_after(self.ctl.cluster.version)
        self.store_seconds += time.monotonic() - started
        return self._apply(rows)

    async def current(self) -> None:
        """Every fact committed before this call applied here, read off the event loop; one
        read serves every request that arrived before it began (shared_reads.py). Raises
        StorageUnavailable (at once while the database is known away), or TimeoutError past
        FOLLOW_WAIT without an answer: the caller answers from memory."""
        if self.dirty:
            self.reload()
            return
        if self.store.unreachable_for() > 0:
            # Known away (its probe ends that): no wait behind a read the database holds
            # until the store's deadline cuts it, for this request nor for the next ones.
            raise StorageUnavailable("the database is unreachable")
        read = self.reads.after_now()
        for _ in range(FOLLOW_ROUNDS):
            await asyncio.wait({read}, timeout=FOLLOW_WAIT)
            if read.done():
                return read.result()
            waited = self._in_database()
            if waited >= FOLLOW_WAIT:
                # A database this slow to read is taken as away: a change then fails at once
                # instead of holding the loop for the store's deadline, until its probe answers.
                self.store.unanswered(f"the database did not answer within {FOLLOW_WAIT:.0f} s")
                raise asyncio.TimeoutError
            if waited > 0:
                # A read begun late (behind another) is not yet owed that long: this request
                # is answered from memory, and the database judged by a later one.
                raise asyncio.TimeoutError
            # No read in the database: its answer is in, and only waits for the loop, which
            # was held (a commit waiting for a lock a stopped replica holds). Waited again.
        raise asyncio.TimeoutError  # answered from memory; the database is not taken as away

    def _facts_after(self, version: int) -> list[Numbered]:
        """The log read in the reader thread, timed there (_timed)."""
        return self._timed(lambda: self.ctl.store.facts_after(version))

    def _timed(self, read: Callable[[], T]) -> T:
        """A read in the reader thread, timed there: how long the database takes to answer,
        not how long the event loop took to look at the answer. Every read on that thread is
        (a follow read queued behind a stuck liveness read waits on the database too)."""
        self._reading_since = time.monotonic()
        try:
            return read()
        finally:
            self._reading_since = 0.0

    def _in_database(self) -> float:
        """Seconds the reader thread's read has been waiting for the database (0: none)."""
        since = self._reading_since
        return time.monotonic() - since if since else 0.0

    async def _read(self) -> None:
        """One read of the log past this replica's version, applied on the loop."""
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        rows = await loop.run_in_executor(self._reader, self._facts_after, self.ctl.cluster.version)
        self.store_seconds += time.monotonic() - started
        if self.ctl.storage_down:  # the database answers again: so will a change, likely
            log.warning("storage reachable again")
            self.ctl.storage_down = ""
        if not self.dirty:
            self._apply(rows)

    def _apply(self, rows: list[Numbered]) -> int:
        ctl = self.ctl
        # The replica's own commits, made while the read was under way, are in memory already.
        rows = [row for row in rows if row[0] > ctl.cluster.version]
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

    def rewind(self, mark: tuple[int, int]) -> None:
        """A change not stored (refused as stale, or the database away) taken back in the
        entries it touched: the cost is the change's, not the cluster's; what the others
        appended is applied by the next read, before any decision. The whole reload stays
        the fallback."""
        try:
            self.ctl.cluster.rewind(mark)
        except Exception:  # a bug in the journal: the stored state is the truth
            log.exception("rewind failed; reloading the stored state")
            self.dirty = True

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
    def isolated(self) -> bool:
        """Cut off from the database (an outage under way: pg_background.Outage) for
        longer than isolated_after(grace)."""
        return self.store.unreachable_for() > isolated_after(self.ctl.cfg.host_loss_grace)

    def heard(self, key: str, now: float) -> None:
        """Share a host's heartbeat. Refused while this replica is isolated (StorageUnavailable:
        503, and the agent moves to its next URL): the other replicas would not hear the host
        through it, and would take it for lost once their grace ends, however long this one
        answered it (a short outage, a failover, is answered from memory: isolated_after).
        A database away for every replica costs no host either: each gives every host a
        fresh grace once it is back (stall_watch.py)."""
        if self.isolated():
            raise StorageUnavailable(
                f"this replica has not reached its database for "
                f"{self.store.unreachable_for():.0f} s, so the other replicas would not hear "
                "this host through it: ask another replica"
            )
        self.store.beat(key, now)

    def refresh(self, keys: Iterable[str]) -> None:
        """Heartbeat times other replicas stored, and when the shared table last started
        empty (a crash or failover): no host is judged lost by beats the database lost."""
        self._take_liveness(*self._liveness_of(list(keys)))  # on the loop: not timed

    async def refreshed(self, keys: Iterable[str]) -> None:
        """refresh(), its reads off the event loop."""
        loop = asyncio.get_running_loop()
        read = await loop.run_in_executor(self._reader, self._read_liveness, list(keys))
        self._take_liveness(*read)

    def _read_liveness(self, wanted: list[str]) -> tuple[dict[str, float], float]:
        return self._timed(lambda: self._liveness_of(wanted))

    def _liveness_of(self, wanted: list[str]) -> tuple[dict[str, float], float]:
        seen = self.store.seen_of(wanted) if wanted else {}
        return seen, self.store.liveness_since()

    def _take_liveness(self, seen: dict[str, float], since: float) -> None:
        for key, at in seen.items():
            if at > self.ctl.seen.get(key, 0.0):
                self.ctl.seen[key] = at
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
        self.spawn(self._told_of(head, told))

    async def _told_of(self, head: int | None, told: float) -> None:
        try:
            await self.current()
        except Exception as exc:  # the database is down: the next poll tries again
            log.debug("catch-up failed: %s", exc)
            return
        if head is not None:
            self.lag = time.monotonic() - told

    def spawn(self, work: Any) -> None:
        """A task of this replica's, kept until it ends (the loop holds only weak ones)."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop(self) -> None:
        if self.listener is not None:
            self.listener.stop()
            self.listener = None
        self._loop = None
        self._reader.shutdown(wait=False, cancel_futures=True)
