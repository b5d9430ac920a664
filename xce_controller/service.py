"""The live controller: lifecycle decisions made durable, timers, and long-poll watchers.

Runs on one asyncio loop. Every change goes decision -> facts -> apply -> commit (fsync)
before any answer leaves, then the watchers of the touched hosts are woken.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from xce_controller import jobs as jobmodel
from xce_controller import lifecycle as lc
from xce_controller.config import ClusterConfig
from xce_controller.facts import apply
from xce_controller.model import TERMINAL, Fact, Host
from xce_controller.store import Store

log = logging.getLogger(__name__)
PROTOCOL = "1.0"
TICK = 0.25  # seconds between sweeps for deadlines, drains and lost hosts


class Controller:
    def __init__(self, cfg: ClusterConfig, store: Store, clock: Callable[[], float] = time.time):
        # Admin calls always need a token: without one in the config, one is made per run
        # (`xce-controller serve` writes it next to the database for xcecli).
        self.generated_token = not cfg.admin_token
        if self.generated_token:
            cfg = replace(cfg, admin_token=secrets.token_urlsafe(24))
        self.cfg = cfg
        self.store = store
        self.clock = clock
        self.cluster, self.seen = store.load()
        self.reports: dict[str, dict[str, Any]] = {}
        base = self.cluster.version
        self.host_version: dict[str, int] = dict.fromkeys(self.cluster.hosts, base)
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._seen_dirty: dict[str, float] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # --- changes ----------------------------------------------------------------------
    def commit(self, facts: list[Fact]) -> set[str]:
        """Apply and persist facts, then settle what they make due; returns touched hosts."""
        touched: set[str] = set()
        while facts:
            hosts: set[str] = set()
            jobs: set[int] = set()
            for fact in facts:
                hosts |= apply(self.cluster, fact)
                if "id" in fact.data and fact.kind.startswith("job_"):
                    jobs.add(int(fact.data["id"]))
            try:
                self.store.commit(facts, self.cluster, hosts, jobs)
            except Exception:
                log.exception("commit failed; reloading the stored state")
                self.cluster, self.seen = self.store.load()
                raise
            touched |= hosts
            self._wake(hosts)
            facts = self._settle(hosts)
        return touched

    def _settle(self, keys: set[str]) -> list[Fact]:
        now = self.clock()
        facts: list[Fact] = []
        for key in keys:
            host = self.cluster.hosts.get(key)
            if host is not None:
                facts += lc.host_due(self.cluster, self.cfg, now, host, self.seen.get(key))
        if facts:
            return facts
        return jobmodel.place(self.cluster, self.cfg, now)

    def _wake(self, keys: set[str]) -> None:
        for key in keys:
            self.host_version[key] = self.cluster.version
            for fut in self._waiters.pop(key, []):
                if not fut.done():
                    fut.set_result(None)

    # --- timers -----------------------------------------------------------------------
    def sweep(self) -> None:
        now = self.clock()
        facts: list[Fact] = []
        for host in list(self.cluster.hosts.values()):
            facts += lc.host_due(self.cluster, self.cfg, now, host, self.seen.get(host.key))
        if facts:
            self.commit(facts)

    def flush_seen(self) -> None:
        if self._seen_dirty:
            dirty, self._seen_dirty = self._seen_dirty, {}
            self.store.save_seen(dirty)

    async def run_timers(self) -> None:
        last_flush = time.monotonic()
        while True:
            await asyncio.sleep(TICK)
            try:
                self.sweep()
                if time.monotonic() - last_flush >= 1.0:
                    self.flush_seen()
                    last_flush = time.monotonic()
            except Exception:  # a timer pass must never end the timers
                log.exception("timer pass failed")

    def start(self) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(self.run_timers()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.flush_seen()

    # --- agents -----------------------------------------------------------------------
    def join(self, req: lc.JoinRequest) -> Host:
        now = self.clock()
        host, facts = lc.join(self.cluster, self.cfg, now, req)
        self.commit(facts)
        joined = self.cluster.hosts[host.key]
        self.seen[host.key] = now
        self._seen_dirty[host.key] = now
        return joined

    def agent_host(self, name: str, instance_id: str, token: str) -> Host:
        host = lc.check_agent(self.cluster, name, instance_id)
        expected = host.token_hash or lc.token_hash(self.cfg.join_token)
        if expected and not hmac.compare_digest(lc.token_hash(token), expected):
            raise lc.Refused("unauthorized", 401, f"token for host {host.name} is wrong")
        return host

    def record_report(self, name: str, instance_id: str, report: dict[str, Any]) -> None:
        """Keep what a decommissioned host's agent last said (its worker stopped, say), so
        the provisioner can see it before returning the instance; its heartbeat is refused."""
        host = self.cluster.host_by_name(name)
        if host is not None and host.state in TERMINAL and host.instance_id == instance_id:
            self.reports[host.key] = {**report, "at": self.clock()}

    def heartbeat(self, host: Host, report: dict[str, Any]) -> Host:
        now = self.clock()
        self.seen[host.key] = now
        self._seen_dirty[host.key] = now
        self.reports[host.key] = {**report, "at": now}
        facts = lc.heartbeat(self.cluster, now, host)
        if facts:
            self.commit(facts)
        return self.cluster.hosts[host.key]

    async def watch(self, host: Host, since: int, timeout: float) -> Host:
        """Return once the host changed after version `since`, or at the timeout."""
        if self.host_version.get(host.key, 0) <= since and timeout > 0:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(host.key, []).append(fut)
            try:
                await asyncio.wait_for(fut, timeout)
            except asyncio.TimeoutError:
                pass
            finally:
                waiters = self._waiters.get(host.key)
                if waiters and fut in waiters:
                    waiters.remove(fut)
        return self.cluster.hosts[host.key]

    # --- admin ------------------------------------------------------------------------
    def find_host(self, name: str) -> Host:
        host = self.cluster.hosts.get(name) or self.cluster.host_by_name(name)
        if host is None:
            raise lc.Refused("not_found", 404, f"no host {name}")
        return host

    def control(self, name: str, action: str, by: str, **params: Any) -> Host:
        host = self.find_host(name)
        self.commit(lc.control(self.cluster, self.cfg, self.clock(), by, host, action, **params))
        return self.cluster.hosts[host.key]
