"""The minimal job model the drain needs: submit, FIFO placement by free slots, reports.

Not a scheduler: just enough for the controller to know what runs where. Pure functions of
the cluster state, like the host lifecycle, returning facts.
"""

from __future__ import annotations

from collections.abc import Iterable

from xce_controller.core.config import ClusterConfig
from xce_controller.core.lifecycle import CONTROLLER, Refused, fact
from xce_controller.core.model import (
    ACTIVE_JOB,
    TERMINAL,
    Cluster,
    Fact,
    Host,
    HostState,
    Job,
    JobEvent,
    JobState,
    same_name,
)
from xce_protocol.reasons import Reason


def submit(
    cluster: Cluster, now: float, by: str, command: Iterable[str], slots: int, host: str = ""
) -> list[Fact]:
    argv = list(command)
    if not argv:
        raise Refused("bad_request", 422, "a job needs a command")
    return [
        fact("job_submitted", now, by, id=cluster.next_job, command=argv, slots=slots, host=host)
    ]


def place(
    cluster: Cluster, cfg: ClusterConfig, now: float, keys: Iterable[str] | None = None
) -> list[Fact]:
    """FIFO placement of pending jobs on open hosts by free slots.

    `keys` limits the hosts looked at to those an event just touched (a join, a finished job):
    placement then costs nothing per host of the cluster. Without it every open host is a
    candidate, and a pending job that no host can ever take gets a `job_waiting` fact saying
    why (once, when the reason changes).
    """
    if not cluster.pending:
        return []
    scan = keys is None
    pool = cluster.hosts.values() if keys is None else (cluster.hosts[k] for k in keys)
    free = {h.key: _free(cluster, cfg, h) for h in pool if h.state is HostState.OPEN}
    facts = []
    for job_id in sorted(cluster.pending):
        job = cluster.jobs[job_id]
        fits = [
            k
            for k, n in free.items()
            if n >= job.slots and (not job.host or same_name(cluster.hosts[k].name, job.host))
        ]
        if fits:
            key = max(fits, key=lambda k: free[k])
            free[key] -= job.slots
            facts.append(fact("job_assigned", now, CONTROLLER, id=job.id, key=key))
        elif scan:
            why = unplaceable(cluster, cfg, job)
            if why and why != job.note:
                facts.append(fact("job_waiting", now, CONTROLLER, id=job.id, why=why))
    return facts


def _free(cluster: Cluster, cfg: ClusterConfig, host: Host) -> int:
    template = cfg.templates.get(host.template)
    used = sum(cluster.jobs[i].slots for i in cluster.active.get(host.key, ()))
    return (template.slots if template else 1) - used


def unplaceable(cluster: Cluster, cfg: ClusterConfig, job: Job) -> str:
    """Why no host can take this job as the cluster stands, or "" if one could."""
    if job.host:
        named = cluster.host_by_name(job.host)
        if named is None or named.state in TERMINAL:
            return f"waiting: no live host named {job.host}"
    largest = max(cfg.templates.values(), key=lambda t: t.slots, default=None)
    if largest is not None and job.slots > largest.slots:
        return (
            f"waiting: needs {job.slots} slots; the largest template "
            f"({largest.name}) has {largest.slots}"
        )
    return ""


def cancel(cluster: Cluster, now: float, by: str, job_id: int) -> list[Fact]:
    """Cancel a pending or active job; a job on a host is killed there (the worker sees it
    killed on its watch and stops it)."""
    job = cluster.jobs.get(job_id)
    if job is None:
        raise Refused("not_found", 404, f"no job {job_id}")
    if job.state not in (JobState.PENDING, *ACTIVE_JOB):
        raise Refused("conflict", 409, f"job {job_id} is already {job.state.value}")
    return [
        fact("job_killed", now, by, id=job_id, why=f"cancelled by {by}", code=Reason.JOB_CANCELLED)
    ]


def job_report(
    cluster: Cluster,
    now: float,
    host: Host,
    job_id: int,
    event: JobEvent,
    exit_code: int | None = None,
) -> list[Fact]:
    job = cluster.jobs.get(job_id)
    if job is None or job.assigned != host.key:
        raise Refused("not_found", 404, f"job {job_id} is not assigned to {host.name}")
    if event is JobEvent.STARTED and job.state is JobState.ASSIGNED:
        return [fact("job_started", now, host.name, id=job_id)]
    if event is JobEvent.FINISHED and job.state in (JobState.ASSIGNED, JobState.RUNNING):
        return [fact("job_finished", now, host.name, id=job_id, exit_code=exit_code or 0)]
    return []
