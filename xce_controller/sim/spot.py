"""A spot scenario in virtual time: what a controller that hears notices saves, job by job.

Hosts run jobs back to back; spot interruptions come at a rate per host-hour, each announced
`lead` seconds before the instance goes (AWS: two minutes). The same lifecycle functions as
the live controller decide. Without notice handling the controller learns of the loss only
after `host_loss_grace` of silence: jobs running when the instance went are lost (their work
is gone and they are requeued late), and jobs placed on the doomed host in the meantime too.
With notices the agent relays the notice `detect` seconds after it appears; the host closes,
and jobs still running at `deadline - notices.margin` are requeued in time, before the
instance goes, so a worker told by its notice_signal can checkpoint them. A lost host is
replaced by a fresh one at once, so capacity stays the same in both runs.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from xce_controller.core import deadlines, joining, notices
from xce_controller.core import jobs as jobmodel
from xce_controller.core import lifecycle as lc
from xce_controller.core.config import ClusterConfig, Template
from xce_controller.core.facts import apply
from xce_controller.core.model import Cluster, Fact, HostState, JobEvent, JobState
from xce_protocol.notices import Notice, NoticeKind


@dataclass(frozen=True)
class SpotScenario:
    hosts: int = 100
    slots: int = 4
    hours: float = 12.0
    interruptions_per_host_hour: float = 0.05
    lead: float = 120.0  # notice to instance gone
    detect: float = 1.0  # notice in the metadata to notice at the controller (1 s polling)
    job_minutes: float = 30.0  # mean of an exponential job duration
    seed: int = 7


@dataclass
class SpotOutcome:
    handled: bool
    jobs: Counter[str]
    interruptions: int
    lost_work_hours: float
    requeue_delays: list[float]


class SpotRun:
    def __init__(self, spec: SpotScenario, handle_notices: bool, cfg: ClusterConfig) -> None:
        self.spec = spec
        self.handle = handle_notices
        self.cfg = cfg
        # Two streams, so both runs see the same interruptions whatever their jobs do.
        self.rng = random.Random(spec.seed)  # noqa: S311 - a seeded simulation, not crypto
        self.job_rng = random.Random(spec.seed + 1)  # noqa: S311
        self.cluster = Cluster()
        self.now = 0.0
        self.queue: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = itertools.count()
        self.gone: dict[str, float] = {}  # host key -> when its instance went
        self.outcome = SpotOutcome(handle_notices, Counter(), 0, 0.0, [])
        self.serial = itertools.count()

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.queue, (when, next(self.seq), action))

    def commit(self, facts: list[Fact]) -> None:
        for fact in facts:
            apply(self.cluster, fact)
            if fact.kind == "job_assigned":
                self._started(int(fact.data["id"]), str(fact.data["key"]))
            elif fact.kind == "job_requeued":
                self._requeued(int(fact.data["id"]))

    def run(self) -> SpotOutcome:
        for _ in range(self.spec.hosts):
            self._new_host()
        for _ in range(self.spec.hosts * self.spec.slots * 2):
            self.commit(jobmodel.submit(self.cluster, 0.0, "admin", ["job"], 1))
        self.commit(jobmodel.place(self.cluster, self.cfg, 0.0))
        end = self.spec.hours * 3600
        while self.queue and self.queue[0][0] <= end:
            self.now, _, action = heapq.heappop(self.queue)
            action()
        return self.outcome

    # --- hosts --------------------------------------------------------------------------
    def _new_host(self) -> None:
        name = f"spot{next(self.serial)}"
        req = lc.JoinRequest(name=name, boot_id=name)
        host, facts = joining.join(self.cluster, self.cfg, self.now, req)
        self.commit(facts)
        rate = self.spec.interruptions_per_host_hour / 3600
        if rate > 0:
            self.at(
                self.now + self.rng.expovariate(rate), functools.partial(self._notice, host.key)
            )
        self.commit(jobmodel.place(self.cluster, self.cfg, self.now))

    def _notice(self, key: str) -> None:
        gone = self.now + self.spec.lead
        self.at(gone, functools.partial(self._gone, key))
        if self.handle:
            self.at(self.now + self.spec.detect, functools.partial(self._heard, key, gone))

    def _heard(self, key: str, gone: float) -> None:
        host = self.cluster.hosts[key]
        notice = Notice(NoticeKind.PREEMPTION, "aws", "aws-spot", gone)
        self.commit(notices.receive(self.cluster, self.cfg, self.now, host, notice))
        self._check(key)

    def _gone(self, key: str) -> None:
        self.gone[key] = self.now
        self.outcome.interruptions += 1
        for job in self.cluster.jobs_on(key):
            self.outcome.jobs["lost (running when the instance went)"] += 1
            started = job.started_at if job.started_at is not None else self.now
            self.outcome.lost_work_hours += (self.now - started) / 3600
        self._new_host()  # the provisioner replaces the capacity
        self._check(key)

    def _check(self, key: str) -> None:
        """Run what time makes due for the host, and come back when more is due."""
        host = self.cluster.hosts[key]
        seen = self.gone.get(key, self.now)
        self.commit(deadlines.host_due(self.cluster, self.cfg, self.now, host, seen))
        self.commit(jobmodel.place(self.cluster, self.cfg, self.now))
        host = self.cluster.hosts[key]
        due = deadlines.next_due(host, self.cfg, seen)
        watched = key in self.gone or host.notice is not None
        if watched and host.state is not HostState.LOST and due is not None and due > self.now:
            self.at(due, functools.partial(self._check, key))

    # --- jobs ---------------------------------------------------------------------------
    def _started(self, job_id: int, key: str) -> None:
        host = self.cluster.hosts[key]
        if key in self.gone:
            self.outcome.jobs["lost (placed on a host already gone)"] += 1
            return
        self.commit(jobmodel.job_report(self.cluster, self.now, host, job_id, JobEvent.STARTED))
        duration = self.job_rng.expovariate(1 / (self.spec.job_minutes * 60))
        self.at(self.now + duration, functools.partial(self._finished, job_id, key))

    def _finished(self, job_id: int, key: str) -> None:
        job = self.cluster.jobs.get(job_id)
        if (
            job is None
            or key in self.gone
            or job.assigned != key
            or job.state is not JobState.RUNNING
        ):
            return  # the instance went first, or the job was requeued
        host = self.cluster.hosts[key]
        self.commit(jobmodel.job_report(self.cluster, self.now, host, job_id, JobEvent.FINISHED, 0))
        if host.notice is not None:
            self.outcome.jobs["finished before the instance went"] += 1
        else:
            self.outcome.jobs["finished"] += 1
        del self.cluster.jobs[job_id]  # done for good: keeps placement scans short
        self.commit(jobmodel.submit(self.cluster, self.now, "admin", ["job"], 1))
        self.commit(jobmodel.place(self.cluster, self.cfg, self.now))

    def _requeued(self, job_id: int) -> None:
        job = self.cluster.jobs[job_id]
        note = job.note
        if "notice" in note:
            self.outcome.jobs["requeued in time (before the instance went)"] += 1
        else:
            self.outcome.jobs["requeued after the host-loss grace"] += 1
            gone = [
                t for k, t in self.gone.items() if f"host {self.cluster.hosts[k].name} " in note
            ]
            if gone:
                self.outcome.requeue_delays.append(self.now - gone[0])


def spot_cluster(slots: int) -> ClusterConfig:
    return ClusterConfig(templates={"default": Template("default", slots=slots)})


def run_spot(spec: SpotScenario) -> tuple[SpotOutcome, SpotOutcome]:
    """The same interruptions without and with notice handling."""
    cfg = spot_cluster(spec.slots)
    return SpotRun(spec, False, cfg).run(), SpotRun(spec, True, cfg).run()


def render(spec: SpotScenario, without: SpotOutcome, with_: SpotOutcome) -> str:
    keys = sorted(set(without.jobs) | set(with_.jobs))
    width = max(len(k) for k in [*keys, "lost work (job-hours)", "instances interrupted"])
    lines = [
        f"spot scenario: {spec.hosts} hosts x {spec.slots} slots, {spec.hours:g} virtual hours, "
        f"{spec.interruptions_per_host_hour:g} interruptions per host-hour, "
        f"{spec.lead:g} s notice",
        f"{'':<{width}}  {'without notices':>15}  {'with notices':>12}",
    ]
    lines.append(
        f"{'instances interrupted':<{width}}  {without.interruptions:>15,}  "
        f"{with_.interruptions:>12,}"
    )
    lines += [f"{k:<{width}}  {without.jobs[k]:>15,}  {with_.jobs[k]:>12,}" for k in keys]
    lines.append(
        f"{'lost work (job-hours)':<{width}}  {without.lost_work_hours:>15,.1f}  "
        f"{with_.lost_work_hours:>12,.1f}"
    )
    return "\n".join(lines)
