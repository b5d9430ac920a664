"""The live controller: lifecycle decisions made durable, timers, and long-poll watchers.

Runs on one asyncio loop. Every change goes decision -> facts -> apply -> what they make due
(drains that end, jobs placed) -> one commit (fsync) of all of it, before any answer leaves;
then the watchers of the touched hosts are woken. Timers are per-host due times in a heap
(timer_passes.py): nothing runs while nothing is due. The verbs the API calls are in
agent_verbs.py (the hosts' agents) and admin_verbs.py (the provisioner and the admins).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any, cast

from xce_controller import collector, replicas
from xce_controller.admin_verbs import AdminVerbs
from xce_controller.agent_verbs import AgentVerbs
from xce_controller.clock import SharedClock, SteadyClock
from xce_controller.core import (
    deadlines,
    tokens,
)
from xce_controller.core import jobs as jobmodel
from xce_controller.core import lifecycle as lc
from xce_controller.core.config import ClusterConfig
from xce_controller.core.facts import apply
from xce_controller.core.model import (
    Fact,
    Host,
)
from xce_controller.core.timers import Timers
from xce_controller.lease_desk import LeaseDesk
from xce_controller.stall_watch import StallWatch
from xce_controller.store.base import SharedStore, StaleState, StorageUnavailable, Store
from xce_controller.timer_passes import TimerPasses
from xce_controller.watch_expiry import Expiries
from xce_protocol.errors import ConfigError

log = logging.getLogger(__name__)
RESCAN = ("job_submitted", "job_requeued")  # facts after which every open host may take work


class Controller(AgentVerbs, AdminVerbs):
    def __init__(
        self, cfg: ClusterConfig, store: Store, clock: Callable[[], float] | None = None
    ) -> None:
        # Admin calls always need a token: without one in the config, one is made
        # (`xce-controller serve` keeps it next to the database for xcecli and later runs).
        self.generated_token = not cfg.admin_token
        if self.generated_token:
            cfg = tokens.with_token(cfg, "admin", secrets.token_urlsafe(24), generated=True)
        # Joins always need a token too: without a cluster join token, one is made.
        self.generated_join_token = not cfg.join_token
        if self.generated_join_token:
            cfg = tokens.with_token(cfg, "join", secrets.token_urlsafe(24), generated=True)
        self.store = store
        # A stepped wall clock moves no interval; replicas share the database's clock.
        self.clock = clock or (
            SharedClock(cast(SharedStore, store).db_time) if store.shared else SteadyClock()
        )
        self.cluster, self.seen = store.load()
        problems = lc.template_problems(self.cluster, cfg)
        problems += tokens.problems(cfg, self.cluster.hosts.values())
        if problems:
            raise ConfigError(problems)
        self.cfg = cfg
        # On a shared store the stored expiries are on the database's clock.
        self.leases = LeaseDesk(store, self.clock) if store.shared else LeaseDesk(store)
        # Time the controller was down does not count against hosts (lifecycle.heard_from).
        self.alive_since = self.clock()
        self.reports: dict[str, dict[str, Any]] = store.reports()
        base = self.cluster.version
        self.host_version: dict[str, int] = dict.fromkeys(self.cluster.hosts, base)
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self.expiries = Expiries()  # when held watches end (watch_expiry.py)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._freezer: asyncio.TimerHandle | None = None
        self._freeze_period = collector.MAX_PERIOD
        self.tune_gc = False  # `serve` sets it: the policy is process-wide (collector.py)
        self.storage_down = ""  # the cause while writes fail, logged once
        self.storage_errors = 0  # changes the database refused since start
        # Told of every committed batch, in order (metrics, the events stream).
        self.on_commit: list[Callable[[list[Fact]], None]] = []
        # Told of the facts other replicas committed, once applied here (the events stream).
        self.on_applied: list[Callable[[list[Fact]], None]] = []
        self.replica = replicas.Replica(self) if store.shared else None
        self.leases.on_commit.append(self._leases_committed)
        # Told once the controller is stopping, on its loop (the events stream's followers).
        self.on_release: list[Callable[[], None]] = []
        self._recorded: dict[tuple[str, str], float] = {}  # (host key, kind) -> last recorded
        shared = cast(SharedStore, store)
        self.passes = TimerPasses(self, shared.reachable if store.shared else lambda: True)
        for key in self.cluster.hosts:
            self._schedule(key)
        self._released = False  # stopping: watches answer at once

    # --- changes ----------------------------------------------------------------------
    def _leases_committed(self, facts: list[Fact]) -> None:
        """Lease facts are stored by the lease desk; followers hear of them all the same."""
        for listener in self.on_commit:
            listener(facts)

    def commit(self, facts: list[Fact]) -> set[str]:
        """Apply facts and what they make due, persist all of it in one transaction, then
        wake watchers and reset timers; returns the touched hosts. On a storage failure
        nothing is applied (taken back, or the state reloaded) and StorageUnavailable is raised."""
        if not facts:
            # Nothing decided: nothing to store. Among replicas an empty commit would still be
            # refused as stale when another replica appended meanwhile, and a request's second
            # step (a join's notice check) would run the whole request again: a join already
            # committed would then be answered 409 and its credential never handed out.
            return set()
        touched: set[str] = set()
        jobs: set[int] = set()
        done: list[Fact] = []
        after = self.cluster.version if self.store.shared else None
        # Among replicas the change is recorded as made, so that a refusal takes back only
        # what it touched (then the facts appended since are applied), never a whole reload.
        mark = self.cluster.mark() if self.replica is not None else None
        try:
            for _ in range(64):  # settling always converges; the bound guards a bug
                if not facts:
                    break
                hosts: set[str] = set()
                for fact in facts:
                    hosts |= apply(self.cluster, fact)
                    if "id" in fact.data and fact.kind.startswith("job_"):
                        jobs.add(int(fact.data["id"]))
                done += facts
                touched |= hosts
                facts = self._settle(hosts, any(f.kind in RESCAN for f in facts))
            began = time.monotonic()
            self.store.commit(done, self.cluster, touched, jobs, after)
            if self.replica is not None:
                self.replica.commits += 1
                self.replica.commit_seconds += time.monotonic() - began
        except StaleState:  # decided on an old state: nothing stored, the caller decides again
            assert self.replica is not None and mark is not None
            self.replica.stale += 1
            self.replica.rewind(mark)
            raise
        except StorageUnavailable as exc:
            self.storage_errors += 1
            self._storage_failed(exc.cause)
            if mark is not None:
                # Stored or not (a connection lost at COMMIT), the state at the mark is the
                # log's up to it: the next catch-up reads the commit back if it happened.
                assert self.replica is not None
                self.replica.rewind(mark)
            else:
                self._reload()
            raise
        except Exception:
            log.exception("commit failed; reloading the stored state")
            self.cluster.journal = None
            self._reload()
            raise
        self.cluster.journal = None  # stored: nothing to take back
        if self.storage_down:
            log.warning("storage writes resumed")
            self.storage_down = ""
        for listener in self.on_commit:
            listener(done)
        self._wake(touched)
        for key in touched:
            self._schedule(key)
        return touched

    def _reload(self) -> None:
        if self.replica is not None:
            self.replica.dirty = True  # until a reload succeeds: no decision on this state
            self.replica.reload()
            return
        self.cluster, _ = self.store.load()

    def wake(self, keys: set[str]) -> None:
        """Wake the watchers of these hosts (facts another replica committed touched them)."""
        self._wake(keys)

    def reschedule(self, key: str) -> None:
        self._schedule(key)

    def _heard(self, key: str, now: float) -> None:
        """The host's agent spoke: in memory, and for the other replicas in the store (an
        isolated replica refuses it: replicas.isolated_after)."""
        if self.replica is not None:
            self.replica.heard(key, now)
        self.seen[key] = now

    def _storage_failed(self, cause: str) -> None:
        if not self.storage_down:
            log.error("storage unavailable, changes are refused until it recovers: %s", cause)
        self.storage_down = cause

    def _settle(self, keys: set[str], rescan: bool) -> list[Fact]:
        now = self.clock()
        facts: list[Fact] = []
        for key in keys:
            host = self.cluster.hosts.get(key)
            if host is not None:
                facts += self.due(host, now)
        if facts:
            return facts
        return jobmodel.place(self.cluster, self.cfg, now, None if rescan else keys)

    def due(self, host: Host, now: float) -> list[Fact]:
        """What time alone makes due for the host now (deadlines.host_due)."""
        seen = self.seen.get(host.key)
        return deadlines.host_due(self.cluster, self.cfg, now, host, seen, self.alive_since)

    def _wake(self, keys: set[str]) -> None:
        for key in keys:
            self.host_version[key] = self.cluster.version
            for fut in self._waiters.pop(key, []):
                if not fut.done():
                    fut.set_result(None)

    # --- timers -----------------------------------------------------------------------
    def _schedule(self, key: str, at: float | None = None) -> None:
        self.passes.schedule(key, at)

    @property
    def timers(self) -> Timers:
        return self.passes.timers

    @property
    def stall(self) -> StallWatch:
        return self.passes.stall

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.replica is not None:
            self.replica.start(self._loop)
            with contextlib.suppress(StorageUnavailable, StaleState):  # the first pass retries
                self.replica.refresh(())
        self.passes.start(self._loop)
        if self.tune_gc:
            self._freeze()

    def _freeze(self) -> None:
        """Freeze the young survivors, as often as keeps each pass short (collector.py)."""
        pause = collector.freeze_young()
        self._freeze_period = collector.next_period(self._freeze_period, pause)
        if self._loop is not None:
            self._freezer = self._loop.call_later(self._freeze_period, self._freeze)

    def release_watchers(self) -> None:
        """Answer every open long-poll now, and every later one at once, from any thread or a
        signal handler: a stopping server then waits for no watch timeout (Debian 12's
        uvicorn has no bound on it; an agent re-polls on its kept-alive connection), and a
        restart is over before any host misses its heartbeats."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._release)

    @property
    def watches_held(self) -> int:
        """Long-polls (watches) held now, waiting for their host to change or their hold to end."""
        return sum(len(futures) for futures in self._waiters.values())

    @property
    def stopping(self) -> bool:
        """Told to stop (release_watchers): the health check says so to load balancers."""
        return self._released

    def _release(self) -> None:
        self._released = True
        for listener in self.on_release:
            listener()
        waiters, self._waiters = self._waiters, {}
        for futures in waiters.values():
            for fut in futures:
                if not fut.done():
                    fut.set_result(None)

    async def stop(self) -> None:
        self.passes.stop()
        if self._freezer is not None:
            self._freezer.cancel()
        self.expiries.close()
        self._loop = None
        if self.replica is not None:
            self.replica.stop()
            return  # heartbeat times are in the store already, newest from every replica
        try:
            self.store.save_seen(self.seen)  # for display after a restart; never decides
        except StorageUnavailable as exc:
            log.warning("heartbeat times not saved: %s", exc.cause)

    def reload_config(self, load: Callable[[], ClusterConfig]) -> list[str]:
        """Replace the config with a checked new one; on any problem keep the running one
        and return the problems."""
        try:
            cfg = load()
        except ConfigError as exc:
            problems = list(exc.problems)
        else:
            cfg = self._keep_generated(cfg)
            problems = lc.template_problems(self.cluster, cfg)
            problems += tokens.problems(cfg, self.cluster.hosts.values())
        if problems:
            for problem in problems:
                log.error("config not reloaded, keeping the running one: %s", problem)
            return problems
        self.cfg = cfg
        for key in self.cluster.hosts:
            self._schedule(key)
        log.info("config reloaded")
        # Templates may have grown or shrunk: place what now fits, and say why the rest waits.
        placed = jobmodel.place(self.cluster, cfg, self.clock())
        if placed:
            with contextlib.suppress(StorageUnavailable):  # logged; the next change retries
                self.commit(placed)
        return []

    def _keep_generated(self, cfg: ClusterConfig) -> ClusterConfig:
        """A reloaded config without an admin or join token keeps the running one."""
        for role in ("admin", "join"):
            if not tokens.of(cfg)[role]:
                made = role in self.cfg.generated_tokens
                cfg = tokens.with_token(cfg, role, tokens.of(self.cfg)[role], made)
        return cfg
