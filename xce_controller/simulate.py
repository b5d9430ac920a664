"""`xce-controller simulate`: the live lifecycle functions driven in virtual time.

Hosts are expected, join after a drawn delay (or never), run jobs, are lost to spot
reclaims or decommissioned by the provisioner with a drain, and are returned. Heartbeats are
not simulated one by one: a live host is "seen now", a lost host was last seen when it died.
"""

from __future__ import annotations

import csv
import functools
import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xce_controller import jobs as jobmodel
from xce_controller import lifecycle as lc
from xce_controller.facts import apply
from xce_controller.model import Cluster, Fact, Host, HostState, JobState
from xce_controller.scenario import Scenario


@dataclass
class Summary:
    hosts: int
    counts: dict[str, int]
    drains: list[float]
    jobs: dict[str, int]
    requeued: int
    facts: int
    virtual_seconds: float

    def render(self) -> str:
        drains = sorted(self.drains)

        def pct(p: float) -> str:
            if not drains:
                return "-"
            return f"{drains[min(len(drains) - 1, round(p / 100 * (len(drains) - 1)))]:.0f}s"

        states = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        jobs = ", ".join(f"{k} {v}" for k, v in sorted(self.jobs.items()))
        return "\n".join(
            [
                f"simulated {self.hosts} hosts over {self.virtual_seconds / 3600:.1f} "
                f"virtual hours ({self.facts} facts)",
                f"hosts by final state: {states}",
                f"drain duration: p50 {pct(50)}, p95 {pct(95)} over {len(drains)} drains",
                f"jobs by final state: {jobs}; requeued {self.requeued} times",
            ]
        )


class Simulation:
    def __init__(self, spec: Scenario, timeline: Callable[[float, Fact], None] | None = None):
        self.spec = spec
        self.cfg = spec.cluster
        self.rng = random.Random(spec.seed)  # noqa: S311 - a seeded simulation, not crypto
        self.cluster = Cluster()
        self.now = 0.0
        self.queue: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = itertools.count()
        self.dead_at: dict[str, float] = {}
        self.drain_started: dict[str, float] = {}
        self.drains: list[float] = []
        self.requeued = 0
        self.facts = 0
        self.timeline = timeline

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.queue, (when, next(self.seq), action))

    def commit(self, facts: list[Fact]) -> None:
        for fact in facts:
            for key in apply(self.cluster, fact):
                self._observe(key, fact)
            self.facts += 1
            if fact.kind == "job_requeued":
                self.requeued += 1
                self.at(self.now, functools.partial(self._rehome, int(fact.data["id"])))
            if self.timeline:
                self.timeline(self.now, fact)

    def _observe(self, key: str, fact: Fact) -> None:
        host = self.cluster.hosts[key]
        if fact.kind == "drain":
            self.drain_started[key] = self.now
        if fact.kind == "state" and host.state in (
            HostState.DECOMMISSIONED,
            HostState.LOST,
            HostState.OVERDUE,
        ):
            if key in self.drain_started and host.state is HostState.DECOMMISSIONED:
                self.drains.append(self.now - self.drain_started.pop(key))
            self.at(self.now + self.spec.return_delay, lambda: self._return(key))

    def seen(self, key: str) -> float:
        return self.dead_at.get(key, self.now)

    def check(self, key: str) -> None:
        host = self.cluster.hosts[key]
        self.commit(lc.host_due(self.cluster, self.cfg, self.now, host, self.seen(key)))
        due = lc.next_due(self.cluster.hosts[key], self.cfg, self.seen(key))
        if due is not None and due > self.now and key in self.dead_at:
            self.at(due, lambda: self.check(key))

    def run(self) -> Summary:
        spec = self.spec
        for i in range(spec.hosts):
            key = f"i-{i:06d}"
            self.commit(
                lc.expect(
                    self.cluster,
                    self.cfg,
                    0.0,
                    "provisioner",
                    key,
                    spec.template,
                    expected_name=f"node{i:06d}",
                )
            )
            deadline = self.cluster.hosts[key].deadline or 0.0
            self.at(deadline, functools.partial(self.check, key))
            if self.rng.random() >= spec.never_join:
                self.at(spec.join_delay.draw(self.rng), functools.partial(self._join, key, i))
        for _ in range(spec.reclaims):
            when = self.rng.uniform(*spec.reclaim_window)
            self.at(when, self._reclaim)
        while self.queue and self.queue[0][0] <= spec.duration:
            self.now, _, action = heapq.heappop(self.queue)
            action()
        return self._summary()

    def _join(self, key: str, index: int) -> None:
        if self.cluster.hosts[key].state is not HostState.EXPECTED:
            return  # overdue already: the provisioner is returning it
        req = lc.JoinRequest(name=f"node{index:06d}", instance_id=key)
        _, facts = lc.join(self.cluster, self.cfg, self.now, req)
        self.commit(facts)
        for _ in range(self.spec.jobs_per_host):
            self._run_job(key)
        if self.spec.spot_loss_per_hour > 0:
            life = self.rng.expovariate(self.spec.spot_loss_per_hour / 3600)
            self.at(self.now + life, lambda: self._lose(key))

    def _run_job(self, key: str) -> None:
        job_id = self.cluster.next_job
        name = self.cluster.hosts[key].name
        self.commit(jobmodel.submit(self.cluster, self.now, "sim", ["job"], 1, host=name))
        self.commit(
            [
                Fact("job_assigned", self.now, "controller", {"id": job_id, "key": key}),
                Fact("job_started", self.now, name, {"id": job_id}),
            ]
        )
        self.at(self.now + self.spec.job_duration.draw(self.rng), lambda: self._finish(job_id))

    def _finish(self, job_id: int) -> None:
        job = self.cluster.jobs[job_id]
        if job.state is not JobState.RUNNING or job.assigned in self.dead_at:
            return
        self.commit([Fact("job_finished", self.now, "worker", {"id": job_id, "exit_code": 0})])
        self.check(job.assigned)
        if self.cluster.hosts[job.assigned].state is HostState.OPEN:
            self._run_job(job.assigned)  # the queue keeps every open host busy

    def _lose(self, key: str) -> None:
        if self.cluster.hosts[key].state in (HostState.OPEN, HostState.CLOSED, HostState.DRAINING):
            self.dead_at[key] = self.now
            self.at(self.now + self.cfg.host_loss_grace + 0.001, lambda: self.check(key))

    def _random_open_host(self) -> Host | None:
        """A random live open host, by sampling rather than scanning all of them."""
        for _ in range(64):
            candidate = self.cluster.hosts[f"i-{self.rng.randrange(self.spec.hosts):06d}"]
            if candidate.state is HostState.OPEN and candidate.key not in self.dead_at:
                return candidate
        return None

    def _rehome(self, job_id: int) -> None:
        """A requeued job goes back to the queue and runs on another open host."""
        job = self.cluster.jobs[job_id]
        host = self._random_open_host()
        if job.state is not JobState.PENDING or host is None:
            return
        self.commit(
            [
                Fact("job_assigned", self.now, "controller", {"id": job_id, "key": host.key}),
                Fact("job_started", self.now, host.name, {"id": job_id}),
            ]
        )
        self.at(self.now + self.spec.job_duration.draw(self.rng), lambda: self._finish(job_id))

    def _reclaim(self) -> None:
        host = self._random_open_host()
        if host is None:
            return
        self.commit(
            lc.control(
                self.cluster,
                self.cfg,
                self.now,
                "provisioner",
                host,
                "decommission",
                drain_timeout=self.spec.drain_timeout,
                policy=self.spec.drain_policy,
                why="reclaimed by provider",
            )
        )
        self.check(host.key)
        deadline = self.cluster.hosts[host.key].drain
        if deadline is not None and deadline.deadline is not None:
            self.at(deadline.deadline, lambda: self.check(host.key))

    def _return(self, key: str) -> None:
        if lc.returnable(self.cluster.hosts[key]):
            self.commit(lc.ack_return(self.cluster, self.now, "provisioner", key))

    def _summary(self) -> Summary:
        counts: dict[str, int] = {}
        for host in self.cluster.hosts.values():
            counts[host.state.value] = counts.get(host.state.value, 0) + 1
        jobs: dict[str, int] = {}
        for job in self.cluster.jobs.values():
            jobs[job.state.value] = jobs.get(job.state.value, 0) + 1
        return Summary(
            self.spec.hosts,
            counts,
            self.drains,
            jobs,
            self.requeued,
            self.facts,
            self.spec.duration,
        )


def run_scenario(spec: Scenario, csv_path: Path | None = None) -> Summary:
    if csv_path is None:
        return Simulation(spec).run()
    with open(csv_path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["virtual_seconds", "fact", "host", "job", "state", "by", "why"])

        def row(now: float, fact: Fact) -> None:
            d: dict[str, Any] = fact.data
            writer.writerow(
                [
                    f"{now:.3f}",
                    fact.kind,
                    d.get("key", d.get("instance_id", "")),
                    d.get("id", ""),
                    d.get("state", ""),
                    fact.by,
                    d.get("why", ""),
                ]
            )

        return Simulation(spec, row).run()
