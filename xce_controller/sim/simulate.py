"""`xce-controller simulate`: the live lifecycle functions driven in virtual time, with faults.

Hosts are expected, join after a drawn delay (or never), run jobs, get spot interruption
notices, are lost (some come back: a partition, a hang), are reclaimed with a drain, and are
returned; the controller itself restarts. The simulation keeps two views apart: what is true
(a host is silent since some time, or not) and what the controller knows (the last time it
heard from a host; nothing at all for a while after its own restart). Every decision is the
live controller's: lifecycle.host_due, join, heartbeat, control, the same facts applied.
Heartbeats are not simulated one by one: a live host is heard "now", except in the first
interval after a controller restart, before its first beat reaches the new process.
"""

from __future__ import annotations

import csv
import functools
import gc
import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from xce_controller.core import deadlines, joining, notices
from xce_controller.core import jobs as jobmodel
from xce_controller.core import lifecycle as lc
from xce_controller.core.facts import apply
from xce_controller.core.model import JOINED, AdminAction, Cluster, Fact, HostState, JobState
from xce_controller.sim.report import (
    TIMELINE_COLUMNS,
    Series,
    Summary,
    stuck_hosts,
    timeline_row,
)
from xce_controller.sim.scenario import Scenario
from xce_protocol.notices import Notice, NoticeKind

HOST_FACTS = ("expected", "joined", "rejoined", "state", "drain")
# Facts after which nothing can be due for the host by time or by a drain's end: a job given
# to it or starting there. The live controller evaluates them anyway; here it is skipped.
INERT = ("job_submitted", "job_assigned", "job_started")
SAMPLES = 288  # plot points over the run


class Simulation:
    def __init__(self, spec: Scenario, timeline: Callable[[float, Fact], None] | None = None):
        self.spec = spec
        self.cfg = spec.cluster
        self.rng = random.Random(spec.seed)  # noqa: S311 - a seeded simulation, not crypto
        self.cluster = Cluster()
        self.now = 0.0
        self.queue: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = itertools.count()
        self.timeline = timeline
        # What is true: hosts silent since a time (dead, or partitioned and coming back).
        self.silent: dict[str, float] = {}
        self.coming_back: set[str] = set()
        # What the controller knows, and whether it is running.
        self.up = True
        self.alive_since = 0.0
        self.went_down = 0.0
        self.first_beat: dict[str, float] = {}  # after a restart: when each host is heard
        self.deferred: list[Callable[[], None]] = []
        self.unreported: set[int] = set()  # jobs that finished while the controller was down
        self.due: dict[str, float] = {}
        # What happened.
        self.facts = 0
        self.states: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.missed: Counter[str] = Counter()
        self.drain_started: dict[str, float] = {}
        self.drains: list[float] = []
        self.asked: set[str] = set()  # hosts with a decommission requested
        self.forgotten = 0
        self.lost_alive = 0
        self.restarts = 0
        self.series = Series()

    # --- the event queue and the controller's availability ------------------------------
    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.queue, (when, next(self.seq), action))

    def ctl(self, action: Callable[[], None]) -> None:
        """Something that needs the controller: done now, or when it is back (agents and the
        provisioner retry)."""
        if self.up:
            action()
        else:
            self.deferred.append(action)

    # --- applying the lifecycle's facts, as the live controller does --------------------
    def commit(self, facts: list[Fact]) -> None:
        while facts:
            touched: set[str] = set()
            settle = False
            for fact in facts:
                kind = fact.kind
                key = fact.data.get("key", fact.data.get("instance_id", ""))
                host_fact = kind in HOST_FACTS
                before = self.cluster.hosts.get(key) if host_fact else None
                if kind == "job_requeued":
                    self._requeued(fact)
                touched |= apply(self.cluster, fact)
                self.facts += 1
                settle = settle or kind not in INERT
                if host_fact:
                    self._observe(key, before.state if before else None, fact)
                elif kind in ("job_finished", "job_killed"):
                    job = self.cluster.jobs.pop(int(fact.data["id"]))  # keep only live jobs
                    self.outcomes[job.state.value] += 1
                if self.timeline:
                    self.timeline(self.now, fact)
            facts = []
            if settle:
                for key in touched:
                    facts += self._host_due(key)
                for key in touched:
                    self._schedule(key)

    def _host_due(self, key: str) -> list[Fact]:
        host = self.cluster.hosts[key]
        return deadlines.host_due(
            self.cluster, self.cfg, self.now, host, self.heard(key), self.alive_since
        )

    def heard(self, key: str) -> float:
        """The last time the controller heard from the host."""
        heard = self.silent.get(key, self.now)
        first = self.first_beat.get(key)
        if first is not None and self.now < first:
            heard = min(heard, self.went_down)
        return heard

    def _schedule(self, key: str) -> None:
        """The host's next due time, as the live controller's timers keep it; a host that is
        heard from needs no loss timer here (it would only be pushed on)."""
        host = self.cluster.hosts[key]
        due = None
        if host.state is HostState.EXPECTED:
            due = deadlines.join_deadline(host, self.cfg, self.alive_since)
        elif host.state in JOINED:
            if key in self.silent or self.first_beat.get(key, -1.0) > self.now:
                due = deadlines.next_due(host, self.cfg, self.heard(key), self.alive_since)
            else:
                due = deadlines.drain_deadline(host, self.cfg, self.alive_since)
        if due is not None and self.due.get(key) != due:
            self.due[key] = due
            self.at(due, functools.partial(self._check, key, due))

    def _check(self, key: str, due: float) -> None:
        if self.due.get(key) != due:
            return  # superseded
        del self.due[key]
        if self.up:
            self.commit(self._host_due(key))
            self._schedule(key)

    def _observe(self, key: str, before: HostState | None, fact: Fact) -> None:
        host = self.cluster.hosts[key]
        state = host.state
        if before is not state:
            if before is not None:
                self.states[before.value] -= 1
            self.states[state.value] += 1
        if fact.kind == "drain":
            self.drain_started[key] = self.now
            self.asked.add(key)
        if state is HostState.OPEN and key in self.asked:
            self.forgotten += 1  # a decommission requested, and the host takes work again
            self.asked.discard(key)
        if before is state:
            return
        if state is HostState.LOST and key not in self.silent:
            self.lost_alive += 1  # it was only silent to the controller: it beats again
            self.at(self.first_beat.get(key, self.now), functools.partial(self._beat, key))
        if state is HostState.DECOMMISSIONED:
            self.asked.discard(key)
            if key in self.drain_started:
                self.drains.append(self.now - self.drain_started.pop(key))
        if lc.returnable(host):
            self.at(self.now + self.spec.return_delay, functools.partial(self._return, key))

    def _requeued(self, fact: Fact) -> None:
        job = self.cluster.jobs[int(fact.data["id"])]
        self.outcomes["requeued"] += 1
        if "notice" in str(fact.data.get("why", "")):
            self.outcomes["requeued on notice"] += 1  # before the instance went
        lost = job.assigned
        by_loss = job.state is JobState.RUNNING and "lost" in str(fact.data.get("why", ""))
        if by_loss:
            self.outcomes["requeued after loss"] += 1  # a host-loss grace after it went
        if by_loss and (lost not in self.silent or lost in self.coming_back):
            self.outcomes["run twice"] += 1  # its first run goes on where it was
        elif job.id in self.unreported:
            self.unreported.discard(job.id)
            self.outcomes["run twice"] += 1  # it finished while the controller was down
        self.at(self.now, functools.partial(self._rehome, job.id))

    # --- the run -------------------------------------------------------------------------
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
            if self.rng.random() >= spec.never_join:
                self.at(spec.join_delay.draw(self.rng), functools.partial(self._join, key, i))
        for _ in range(spec.reclaims):
            self.at(self.rng.uniform(*spec.reclaim_window), lambda: self.ctl(self._reclaim))
        for k in range(spec.restarts):
            self.at(spec.duration * (k + 1) / (spec.restarts + 1), self._go_down)
        for k in range(SAMPLES + 1):
            self.at(spec.duration * k / SAMPLES, self._sample)
        # The run makes millions of records and no reference cycles: the cyclic collector's
        # passes over the growing heap cost 40 % of the time and would free nothing.
        collecting = gc.isenabled()
        gc.disable()
        try:
            while self.queue and self.queue[0][0] <= spec.duration:
                self.now, _, action = heapq.heappop(self.queue)
                action()
        finally:
            if collecting:
                gc.enable()
        return self._summary()

    def _sample(self) -> None:
        self.series.sample(self.now, dict(self.states), dict(self.outcomes))

    def _go_down(self) -> None:
        self.up = False
        self.went_down = self.now
        self.restarts += 1
        self.at(self.now + self.spec.downtime, self._come_up)

    def _come_up(self) -> None:
        """A new controller process: it knows what is stored, not when it last heard hosts."""
        self.up = True
        self.alive_since = self.now
        interval = self.cfg.heartbeat_interval
        self.first_beat = {
            key: self.now + self.rng.uniform(0, interval)
            for key, host in self.cluster.hosts.items()
            if host.state in JOINED or host.state is HostState.LOST
        }
        # Agents and the provisioner retry on their own schedule: what waited reaches the new
        # process over its first interval, after its timers have looked at every host.
        deferred, self.deferred = self.deferred, []
        for action in deferred:
            self.at(self.now + self.rng.uniform(0, interval), action)
        for key in list(self.cluster.hosts):  # every timer of the new process, due or not
            self.due.pop(key, None)
            self.commit(self._host_due(key))
            self._schedule(key)

    # --- hosts ---------------------------------------------------------------------------
    def _join(self, key: str, index: int) -> None:
        if not self.up:
            self.deferred.append(functools.partial(self._join, key, index))
            return
        if self.cluster.hosts[key].state is not HostState.EXPECTED:
            return  # overdue already: the provisioner is returning it
        req = lc.JoinRequest(name=f"node{index:06d}", instance_id=key)
        _, facts = joining.join(self.cluster, self.cfg, self.now, req)
        self.commit(facts)
        for _ in range(self.spec.jobs_per_host):
            self._run_job(key)
        if self.spec.spot_loss_per_hour > 0:
            life = self.rng.expovariate(self.spec.spot_loss_per_hour / 3600)
            self.at(self.now + life, functools.partial(self._lose, key))
        if self.spec.notices_per_hour > 0:
            life = self.rng.expovariate(self.spec.notices_per_hour / 3600)
            self.at(self.now + life, functools.partial(self._notice, key))

    def _lose(self, key: str) -> None:
        if self.cluster.hosts[key].state not in JOINED or key in self.silent:
            return
        self.silent[key] = self.now
        if self.rng.random() < self.spec.return_share:
            self.coming_back.add(key)
            back = self.now + self.spec.return_after.draw(self.rng)
            self.at(back, functools.partial(self._come_back, key))
        if self.up:
            self._schedule(key)

    def _come_back(self, key: str) -> None:
        if key not in self.coming_back:
            return  # returned to the provider meanwhile
        self.coming_back.discard(key)
        del self.silent[key]
        self.ctl(functools.partial(self._beat, key))

    def _beat(self, key: str) -> None:
        """A heartbeat the controller acts on: a lost host is heard again."""
        host = self.cluster.hosts[key]
        if host.state is HostState.LOST and key not in self.silent:
            self.commit(lc.heartbeat(self.cluster, self.now, host))

    def _notice(self, key: str) -> None:
        """A spot interruption notice: the instance goes in `notice_lead`; the provisioner
        asks for a decommission with that drain timeout, or the agent relays the notice
        (`handling: notice`), or nobody acts on it (`handling: none`)."""
        if self.cluster.hosts[key].state not in JOINED or key in self.silent:
            return
        gone = self.now + self.spec.notice_lead
        self.at(gone, functools.partial(self._die, key))
        if self.spec.notice_handling != "none":
            self.ctl(functools.partial(self._noticed, key, gone))

    def _noticed(self, key: str, gone: float) -> None:
        host = self.cluster.hosts[key]
        if self.now >= gone:
            self.missed["spot notice: the controller was down until the instance went"] += 1
        elif host.state not in (HostState.OPEN, HostState.CLOSED):
            self.missed[f"spot notice: host already {host.state.value}"] += 1
        elif self.spec.notice_handling == "notice":
            notice = Notice(NoticeKind.PREEMPTION, "aws", "aws-spot", gone)
            self.commit(notices.receive(self.cluster, self.cfg, self.now, host, notice))
        else:
            self._decommission(key, gone - self.now, "spot interruption notice")

    def _die(self, key: str) -> None:
        self.silent.setdefault(key, self.now)
        self.coming_back.discard(key)
        if self.up:
            self._schedule(key)

    def _reclaim(self) -> None:
        host = self._random_open_host()
        if host is None:
            self.missed["reclaim: no open host found"] += 1
            return
        self._decommission(host, self.spec.drain_timeout, "reclaimed by provider")

    def _decommission(self, key: str, timeout: float, why: str) -> None:
        host = self.cluster.hosts[key]
        try:
            facts = lc.control(
                self.cluster,
                self.cfg,
                self.now,
                "provisioner",
                host,
                AdminAction.DECOMMISSION,
                drain_timeout=timeout,
                policy=self.spec.drain_policy,
                why=why,
            )
        except lc.Refused as exc:
            self.missed[f"{why}: refused ({exc.kind})"] += 1
            return
        self.commit(facts)

    def _random_open_host(self) -> str | None:
        """A random live open host, by sampling rather than scanning all of them."""
        for _ in range(64):
            key = f"i-{self.rng.randrange(self.spec.hosts):06d}"
            if self.cluster.hosts[key].state is HostState.OPEN and key not in self.silent:
                return key
        return None

    def _return(self, key: str) -> None:
        if not self.up:
            self.deferred.append(functools.partial(self._return, key))
        elif lc.returnable(self.cluster.hosts[key]):
            self.commit(lc.ack_return(self.cluster, self.now, "provisioner", key))
            self.coming_back.discard(key)  # given back: it will not be heard again
            self.silent.setdefault(key, self.now)

    # --- jobs ----------------------------------------------------------------------------
    def _run_job(self, key: str) -> None:
        job_id = self.cluster.next_job
        name = self.cluster.hosts[key].name
        facts = jobmodel.submit(self.cluster, self.now, "sim", ["job"], 1, host=name)
        facts.append(Fact("job_assigned", self.now, "controller", {"id": job_id, "key": key}))
        facts.append(Fact("job_started", self.now, name, {"id": job_id}))
        self.commit(facts)
        self.at(
            self.now + self.spec.job_duration.draw(self.rng),
            functools.partial(self._finish, job_id),
        )

    def _finish(self, job_id: int) -> None:
        job = self.cluster.jobs.get(job_id)
        if job is None or job.state is not JobState.RUNNING or job.assigned in self.silent:
            return  # taken away, or its host is silent: it never reports
        if not self.up:
            self.unreported.add(job_id)
            self.deferred.append(functools.partial(self._finish, job_id))
            return
        self.unreported.discard(job_id)
        self.commit([Fact("job_finished", self.now, "worker", {"id": job_id, "exit_code": 0})])
        if self.cluster.hosts[job.assigned].state is HostState.OPEN:
            self._run_job(job.assigned)  # the queue keeps every open host busy

    def _rehome(self, job_id: int) -> None:
        """A requeued job goes back to the queue and runs on another open host."""
        if not self.up:
            self.deferred.append(functools.partial(self._rehome, job_id))
            return
        job = self.cluster.jobs.get(job_id)
        key = self._random_open_host()
        if job is None or job.state is not JobState.PENDING or key is None:
            return
        name = self.cluster.hosts[key].name
        self.commit(
            [
                Fact("job_assigned", self.now, "controller", {"id": job_id, "key": key}),
                Fact("job_started", self.now, name, {"id": job_id}),
            ]
        )
        self.at(
            self.now + self.spec.job_duration.draw(self.rng),
            functools.partial(self._finish, job_id),
        )

    # --- the report ----------------------------------------------------------------------
    def _summary(self) -> Summary:
        end = self.spec.duration
        bound = self.spec.stuck_after
        stuck = stuck_hosts(self.cluster.hosts.values(), end, bound)
        jobs = dict(self.outcomes)
        jobs["pending"] = len(self.cluster.pending)
        jobs["running"] = sum(len(ids) for ids in self.cluster.active.values())
        self._sample()
        return Summary(
            self.spec.hosts,
            end,
            self.facts,
            {k: v for k, v in self.states.items() if v},
            jobs,
            self.drains,
            stuck,
            bound,
            dict(self.missed),
            self.restarts,
            self.forgotten,
            self.lost_alive,
            self.series,
        )


def run_scenario(spec: Scenario, csv_path: Path | None = None) -> Summary:
    if csv_path is None:
        return Simulation(spec).run()
    with open(csv_path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(TIMELINE_COLUMNS)
        return Simulation(spec, lambda now, fact: writer.writerow(timeline_row(now, fact))).run()
