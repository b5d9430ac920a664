"""The live controller: lifecycle decisions made durable, timers, and long-poll watchers.

Runs on one asyncio loop. Every change goes decision -> facts -> apply -> what they make due
(drains that end, jobs placed) -> one commit (fsync) of all of it, before any answer leaves;
then the watchers of the touched hosts are woken. Timers are per-host due times in a heap
(xce_controller/core/timers.py): nothing runs while nothing is due.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

from xce_controller import collector, replicas
from xce_controller.clock import SharedClock, SteadyClock
from xce_controller.core import (
    addressing,
    crash,
    credentials,
    deadlines,
    joining,
    notices,
    power,
    tokens,
)
from xce_controller.core import jobs as jobmodel
from xce_controller.core import lifecycle as lc
from xce_controller.core.config import ClusterConfig
from xce_controller.core.facts import apply
from xce_controller.core.gave_up import gave_up
from xce_controller.core.model import (
    JOINED,
    TERMINAL,
    AdminAction,
    Fact,
    Host,
    HostState,
    Job,
    JobEvent,
)
from xce_controller.core.timers import Timers
from xce_controller.lease_desk import LeaseDesk
from xce_controller.stall_watch import StallWatch
from xce_controller.store.base import SharedStore, StaleState, StorageUnavailable, Store
from xce_controller.timer_passes import TimerPasses
from xce_controller.watch_expiry import Expiries
from xce_protocol.errors import ConfigError
from xce_protocol.notices import Notice

log = logging.getLogger(__name__)
RECORD_EVERY = 60.0  # seconds between recorded refusals of one kind for one host
RESCAN = ("job_submitted", "job_requeued")  # facts after which every open host may take work


@dataclass(frozen=True)
class Expectation:
    """What the provisioner says of an instance it created: `POST /v1/expected`."""

    instance_id: str
    template: str
    name: str = ""
    address: str = ""
    deadline_in: float | None = None
    provider: str = ""
    join_token: str = ""
    mint_join_token: bool = False


class Controller:
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
        """The host's agent spoke: in memory, and for the other replicas in the store."""
        self.seen[key] = now
        if self.replica is not None:
            self.replica.heard(key, now)

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

    # --- agents -----------------------------------------------------------------------
    def join(self, req: lc.JoinRequest) -> tuple[Host, str, str]:
        """The joined host and the host and worker credentials its answer carries (shown only
        there)."""
        now = self.clock()
        secret, worker = credentials.mint(), credentials.mint()
        sealed = replace(req, issue=credentials.seal(secret), issue_worker=credentials.seal(worker))
        try:
            host, facts = joining.join(self.cluster, self.cfg, now, sealed)
        except lc.Refused as refused:
            self._keep_record(refused)
            raise
        self._heard(host.key, now)  # before the commit: what it settles must see the join
        self.commit(facts)
        self._after_join(now, host.key, host.boot_id)
        return self.cluster.hosts[host.key], secret, worker

    def gave_up(self, req: lc.JoinRequest, reason: str) -> Host:
        """An instance's agent gave up joining by its own deadline (gave_up.py)."""
        host, facts = gave_up(self.cluster, self.cfg, self.clock(), req, reason)
        self.commit(facts)
        return self.cluster.hosts[host.key]

    def agent_host(
        self, name: str, instance_id: str, token: str, peer: str = "", worker: bool = False
    ) -> Host:
        try:
            host, facts = joining.speaker(
                self.cluster, self.clock(), name, token, instance_id, peer, worker
            )
        except lc.Refused as refused:
            self._keep_record(refused)
            raise
        if facts:
            self.commit(facts)
        return self.cluster.hosts[host.key]

    def renew(self, host: Host, boot_id: str = "", agent_version: str = "") -> tuple[Host, str]:
        """A new credential for the host's next incarnation (its agent started). A host back
        from a reboot resumes here, without a join: what a join does after a notice's reboot
        (the notice ends, a host it closed reopens) is done here too."""
        now = self.clock()
        secret = credentials.mint()
        self.commit([joining.renew(host, now, credentials.seal(secret), boot_id, agent_version)])
        self._after_join(now, host.key, host.boot_id)
        return self.cluster.hosts[host.key], secret

    def _after_join(self, now: float, key: str, boot_id_before: str) -> None:
        """A join's or renewal's second step, once its first is stored: a notice the reboot
        ended. Refused as stale (another replica appended between the two), it is decided
        again on the reloaded state, never the whole request (its first step is stored)."""
        for _ in range(20):
            try:
                self.commit(notices.after_join(now, self.cluster.hosts[key], boot_id_before))
                return
            except StaleState:
                assert self.replica is not None  # only a shared store refuses as stale
                self.replica.catch_up()  # the facts appended meanwhile, then decided again
        raise StorageUnavailable("other replicas kept changing the state under this join")

    def _keep_record(self, refused: lc.Refused) -> None:
        """Commit the facts a refusal leaves, at most one per host and kind a minute, so a
        clone retrying every second cannot grow the database without bound."""
        now = self.clock()
        kept = []
        for fact in refused.record:
            mark = (str(fact.data.get("key")), str(fact.data.get("why")))
            if now - self._recorded.get(mark, -RECORD_EVERY) >= RECORD_EVERY:
                self._recorded[mark] = now
                kept.append(fact)
        if kept:
            self.commit(kept)

    def record_report(self, host: Host, report: dict[str, Any]) -> None:
        """Keep what a decommissioned host's agent last said (its worker stopped, say), so
        the provisioner can see it before returning the instance; its heartbeat is refused.
        Only called once the host's credential was checked."""
        self.reports[host.key] = {**report, "at": self.clock()}
        try:  # a restart must not empty what to-return shows
            self.store.save_report(host.key, self.reports[host.key])
        except StorageUnavailable as exc:
            self._storage_failed(exc.cause)

    def reporting_host(
        self, name: str, instance_id: str, token: str, peer: str, report: dict[str, Any]
    ) -> Host:
        """The host a heartbeat speaks for. A decommissioned host's refusal keeps what its
        agent said (its credential was checked, so its word counts)."""
        try:
            return self.agent_host(name, instance_id, token, peer)
        except lc.Refused as refused:
            gone = self.cluster.by_name(name) if refused.kind == "decommissioned" else None
            if gone is not None:
                self.record_report(gone, report)
            raise

    def job_report(self, host: Host, job_id: int, event: str, exit_code: int) -> Job:
        """The host's worker reports a job started or finished."""
        if event not in {e.value for e in JobEvent}:
            raise lc.Refused("not_found", 404, f"unknown job event {event!r}")
        now = self.clock()
        self.commit(
            jobmodel.job_report(self.cluster, now, host, job_id, JobEvent(event), exit_code)
        )
        return self.cluster.jobs[job_id]

    def heartbeat(self, host: Host, report: dict[str, Any]) -> Host:
        now = self.clock()
        self._heard(host.key, now)  # no fact: docs/controller.md, "Persistence"
        self.reports[host.key] = {**report, "at": now}
        facts = lc.heartbeat(self.cluster, now, host)
        facts += crash.on_report(self.cluster, self.cfg, now, host, report)
        if facts:
            self.commit(facts)
        host = self.cluster.hosts[host.key]
        if host.state in TERMINAL:  # a lost draining host came back and finished its drain
            raise lc.decommissioned(host)
        return host

    async def watch(self, host: Host, since: int, timeout: float) -> Host:
        """Return once the host changed after version `since`, or when its hold ends (a
        random share of `timeout`, a residual one for a round's first: watch_expiry.py)."""
        if self.host_version.get(host.key, 0) <= since and timeout > 0 and not self._released:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            first = self.expiries.first(host.key, bool(self._waiters.get(host.key)))
            self._waiters.setdefault(host.key, []).append(fut)
            self.expiries.add(fut, self.expiries.hold(timeout, first))  # watch_expiry.py
            try:
                await fut
            finally:
                waiters = self._waiters.get(host.key)
                if waiters and fut in waiters:
                    waiters.remove(fut)
                self.expiries.answered(host.key)
        return self.cluster.hosts[host.key]

    def notice(self, host: Host, notice: Notice) -> Host:
        """A provider's warning the host's agent relays: recorded, then acted on."""
        if host.state not in (*JOINED, HostState.LOST):
            # Not joined yet (expected, overdue): the join would drop a notice kept on the
            # record. Refused like an unknown host, which the agent retries after its join.
            name = host.name or host.expected_name or host.key
            raise lc.Refused("unknown_host", 404, f"host {name} has not joined yet: join first")
        now = self.clock()
        self._heard(host.key, now)  # the agent spoke: as good as a heartbeat
        # A lost host is heard again first, so the notice closes it: acted on while it was
        # lost, its next heartbeat would have reopened it for work just before it goes.
        resumed = lc.heartbeat(self.cluster, now, host)
        after = replace(host, state=lc.returned_state(host)) if resumed else host
        self.commit([*resumed, *notices.receive(self.cluster, self.cfg, now, after, notice)])
        return self.cluster.hosts[host.key]

    # --- provisioner --------------------------------------------------------------------
    def expect(self, by: str, wanted: Expectation) -> tuple[Host, str]:
        """Record an expected instance; the join token minted for it, if asked (shown once)."""
        if wanted.join_token and wanted.mint_join_token:
            raise lc.Refused("conflict", 409, "join_token and mint_join_token: one of them")
        token = credentials.mint() if wanted.mint_join_token else wanted.join_token
        # Its strength, and that it is no role's token: lc.expect (core/tokens.py).
        now = self.clock()
        deadline = now + wanted.deadline_in if wanted.deadline_in else None
        self.commit(
            lc.expect(
                self.cluster,
                self.cfg,
                now,
                by,
                wanted.instance_id,
                wanted.template,
                wanted.name,
                wanted.address,
                deadline,
                wanted.provider,
                token,
            )
        )
        return self.cluster.hosts[wanted.instance_id], token if wanted.mint_join_token else ""

    def expected_hosts(self) -> list[Host]:
        wanted = (HostState.EXPECTED, HostState.OVERDUE)
        return [h for h in self.cluster.hosts.values() if h.state in wanted]

    def to_return(self) -> list[Host]:
        return lc.to_return(self.cluster)

    def ack_return(self, by: str, instance_id: str) -> Host:
        self.commit(lc.ack_return(self.cluster, self.clock(), by, instance_id))
        return self.cluster.hosts[instance_id]

    def provisioned_hosts(self) -> list[Host]:
        hosts = [h for h in self.cluster.hosts.values() if h.provisioned]
        return sorted(hosts, key=lambda h: h.key)

    def retire(self, by: str, instance_id: str, why: str, drain_timeout: float | None) -> Host:
        """The provisioner decommissions one of its own instances (its idle policy): a drain
        like an admin's, for a provisioned record only, named by its instance id."""
        host = self.cluster.by_instance(instance_id)
        if host is None or not host.provisioned:
            raise lc.Refused("not_found", 404, f"no provisioned instance {instance_id}")
        now = self.clock()
        action = AdminAction.DECOMMISSION
        self.commit(
            lc.control(self.cluster, self.cfg, now, by, host, action, drain_timeout, None, why)
        )
        return self.cluster.hosts[host.key]

    def power_step(self, by: str, report: power.PowerReport) -> Host:
        """Record a provisioner's power step (core/power.py), fenced by its lease."""
        if report.lease:
            held = self.leases.current(report.lease)
            power.check_lease(report, held.token, held.live(self.leases.monotonic()))
        self.commit(power.report(self.cluster, self.clock(), by, report))
        found = self.cluster.by_instance(report.instance_id)
        assert found is not None  # power.report refused an unknown one
        return found

    # --- admin ------------------------------------------------------------------------
    def listed_hosts(self, everything: bool) -> list[Host]:
        """Hosts by name; the decommissioned and returned ones only with `everything`."""
        hidden = () if everything else TERMINAL
        shown = [h for h in self.cluster.hosts.values() if h.state not in hidden]
        return sorted(shown, key=lambda h: h.name or h.key)

    def template_uses(self) -> dict[str, int]:
        """How many live hosts use each template."""
        uses: dict[str, int] = {}
        for h in self.cluster.hosts.values():
            if h.state not in TERMINAL:
                uses[h.template] = uses.get(h.template, 0) + 1
        return uses

    def submit(self, by: str, command: list[str], slots: int, host: str = "") -> Job:
        facts = jobmodel.submit(self.cluster, self.clock(), by, command, slots, host)
        job_id = int(facts[0].data["id"])
        self.commit(facts)
        return self.cluster.jobs[job_id]

    def find_host(self, name: str) -> Host:
        """The record `name` means: a host name, an instance id or an expected address."""
        return addressing.resolve(self.cluster, name)

    def cancel(self, job_id: int, by: str) -> None:
        self.commit(jobmodel.cancel(self.cluster, self.clock(), by, job_id))

    def control(self, name: str, action: AdminAction, by: str, **params: Any) -> Host:
        host = self.find_host(name)
        now = self.clock()
        facts = lc.control(self.cluster, self.cfg, now, by, host, action, **params)
        if action is AdminAction.CLOSE:
            facts += notices.after_admin_close(now, by, host)
        self.commit(facts)
        return self.cluster.hosts[host.key]
