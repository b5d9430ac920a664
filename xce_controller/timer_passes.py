"""The controller's timers: when each host is next due by time alone (a join deadline, a drain
timeout, a loss), the passes that decide what has come due, and the tick that looks for a stall.

One heap of due times (core/timers.py), one loop timer armed for its earliest entry. A pass
of the single controller decides at once; among replicas it first reads the log and every
replica's heartbeat times, off the event loop, and whichever replica commits first decides
(the others then find nothing due, or are refused as stale and look again). A grace that every
host began at once (a start, a stall, a failover) is looked at first at a random moment of its
last half (stall_watch.first_look), so the fleet's checks spread as its heartbeats do.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Protocol

from xce_controller import replicas
from xce_controller.core import deadlines
from xce_controller.core.config import ClusterConfig
from xce_controller.core.model import Cluster, Fact, Host
from xce_controller.core.timers import Timers
from xce_controller.stall_watch import TICK, StallWatch, first_look
from xce_controller.store.base import LOCK_PAUSE, LockBusy, StaleState, StorageUnavailable

log = logging.getLogger("xce_controller.service")  # the name operators' filters know
MAX_SLEEP = 60.0  # re-read the wall clock at least this often (due times are wall-clock)
RETRY = 5.0  # a timer whose facts could not be stored tries again after this long


class Judge(Protocol):
    """What a timer pass reads and moves of its controller (service.Controller)."""

    cluster: Cluster
    cfg: ClusterConfig
    seen: dict[str, float]
    alive_since: float
    clock: Callable[[], float]
    replica: replicas.Replica | None
    storage_down: str

    def commit(self, facts: list[Fact]) -> set[str]: ...

    def due(self, host: Host, now: float) -> list[Fact]: ...


class TimerPasses:
    def __init__(self, ctl: Judge, hearing: Callable[[], bool]) -> None:
        self.ctl = ctl
        self.timers = Timers()
        self.stall = StallWatch(hearing)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._armed: float | None = None
        self._ticker: asyncio.TimerHandle | None = None

    def schedule(self, key: str, at: float | None = None) -> None:
        """Set the host's next due time: `at`, or the one its state gives."""
        ctl = self.ctl
        host = ctl.cluster.hosts.get(key)
        if at is None and host is not None:
            seen = ctl.seen.get(key)
            at = deadlines.next_due(host, ctl.cfg, seen, ctl.alive_since)
            if at is not None and deadlines.heard_from(host, seen, ctl.alive_since) == (
                ctl.alive_since
            ):  # a grace from a start, a stall or a failover: the same for every host
                draw = random.random()  # noqa: S311 (spread, no secret)
                at = first_look(at, ctl.clock(), ctl.cfg.host_loss_grace, draw)
        self.timers.set(key, at)
        self._arm()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.stall.begin()  # loading a large store before the loop ran is no stall
        self._arm()
        self._tick()

    def stop(self) -> None:
        for handle in (self._handle, self._ticker):
            if handle is not None:
                handle.cancel()
        self._loop = None

    def _arm(self) -> None:
        if self._loop is None:
            return
        due = self.timers.next()
        if due is None or (self._armed is not None and self._armed <= due):
            return
        if self._handle is not None:
            self._handle.cancel()
        self._armed = due
        delay = min(max(0.0, due - self.ctl.clock()), MAX_SLEEP)
        self._handle = self._loop.call_later(delay, self._fire)

    def _tick(self) -> None:
        self.stalled()
        if self._loop is not None:
            self._ticker = self._loop.call_later(TICK, self._tick)

    def stalled(self) -> None:
        """A stall just ended (stall_watch.py): every host's grace starts again now."""
        gap = self.stall.ended()
        if not gap:
            return
        log.warning("could not hear hosts for %.1f s (a stall): every host gets a fresh grace", gap)
        ctl = self.ctl
        ctl.alive_since = max(ctl.alive_since, ctl.clock())
        for key in ctl.cluster.hosts:
            self.schedule(key)

    def _fire(self) -> None:
        self._handle = self._armed = None
        self.stalled()  # before anything is judged: the timer may run first after a stall
        now = self.ctl.clock()
        keys = self.timers.pop_due(now)
        if self.ctl.replica is not None:
            self.ctl.replica.spawn(self._shared_pass(keys, now))
            return
        try:
            facts = self._due(keys, now)
            if facts:
                self.ctl.commit(facts)
        except Exception:  # a timer must never end the timers; StorageUnavailable is logged
            if not self.ctl.storage_down:
                log.exception("timer pass failed")
            for key in keys:
                self.schedule(key, now + RETRY)
        else:
            for key in keys:
                self.schedule(key)
        self._arm()

    async def _shared_pass(self, keys: list[str], now: float) -> None:
        """A pass among replicas: decided on the whole log and every replica's heartbeat
        times, its reads made off the event loop (a database that stops answering holds no
        request)."""
        ctl = self.ctl
        assert ctl.replica is not None
        retry = RETRY
        try:
            await ctl.replica.current()
            await ctl.replica.refreshed(keys)
            now = max(now, ctl.clock())  # the reads took a while
            facts = self._due(keys, now)
            if facts:
                ctl.commit(facts)
        except LockBusy:
            retry = LOCK_PAUSE  # a lock is stuck: tried again in a while (store/lock_gate.py)
        except StaleState:
            retry = 0.0  # another replica moved the log: look again at once, on the new state
        except (StorageUnavailable, asyncio.TimeoutError):
            pass  # the database away or not answering: the pass is tried again in RETRY
        except Exception:
            log.exception("timer pass failed")
        else:
            retry = -1.0
        for key in keys:
            self.schedule(key, now + retry if retry >= 0 else None)
        self._arm()

    def _due(self, keys: list[str], now: float) -> list[Fact]:
        # Every judgement looks for a stall first: a replica's reads may be what found the
        # database back after it stopped answering, and judged on the clock alone every host
        # unheard meanwhile would be lost before its first heartbeat could be shared.
        self.stalled()
        hosts = self.ctl.cluster.hosts
        return [f for key in keys if key in hosts for f in self.ctl.due(hosts[key], now)]
