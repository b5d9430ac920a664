"""What the controller answers its hosts' agents: joins, renewals, heartbeats and reports,
watches, notices (mixed into service.Controller, which owns the state these read and move).

Each verb is a decision of the pure core (joining, lifecycle, notices, crash, jobs) made
durable by the controller's one commit; a refusal that leaves facts (a clone's attempt, say)
keeps them, at most one per host and kind a minute.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from xce_controller import replicas
from xce_controller.core import crash, credentials, joining, notices
from xce_controller.core import jobs as jobmodel
from xce_controller.core import lifecycle as lc
from xce_controller.core.config import ClusterConfig
from xce_controller.core.gave_up import gave_up
from xce_controller.core.model import (
    JOINED,
    TERMINAL,
    Cluster,
    Fact,
    Host,
    HostState,
    Job,
    JobEvent,
)
from xce_controller.store.base import StaleState, StorageUnavailable, Store
from xce_controller.watch_expiry import Expiries
from xce_protocol.notices import Notice

RECORD_EVERY = 60.0  # seconds between recorded refusals of one kind for one host


class AgentVerbs:
    # The controller's, declared for the verbs (service.Controller sets them).
    cluster: Cluster
    cfg: ClusterConfig
    clock: Callable[[], float]
    store: Store
    replica: replicas.Replica | None
    reports: dict[str, dict[str, Any]]
    host_version: dict[str, int]
    expiries: Expiries
    _waiters: dict[str, list[asyncio.Future[None]]]
    _recorded: dict[tuple[str, str], float]
    _released: bool

    def commit(self, facts: list[Fact]) -> set[str]:
        raise NotImplementedError  # service.Controller.commit

    def _heard(self, key: str, now: float) -> None:
        raise NotImplementedError  # service.Controller._heard

    def _storage_failed(self, cause: str) -> None:
        raise NotImplementedError  # service.Controller._storage_failed

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
