"""The minimal job model the drain needs: submit, FIFO placement by free slots, reports.

Not a scheduler: just enough for the controller to know what runs where. Pure functions of
the cluster state, like the host lifecycle, returning facts.
"""

from __future__ import annotations

from collections.abc import Iterable

from xce_controller.config import ClusterConfig
from xce_controller.lifecycle import CONTROLLER, Refused, fact
from xce_controller.model import Cluster, Fact, Host, HostState, JobState


def submit(
    cluster: Cluster, now: float, by: str, command: Iterable[str], slots: int, host: str = ""
) -> list[Fact]:
    argv = list(command)
    if not argv:
        raise Refused("bad_request", 422, "a job needs a command")
    return [
        fact("job_submitted", now, by, id=cluster.next_job, command=argv, slots=slots, host=host)
    ]


def place(cluster: Cluster, cfg: ClusterConfig, now: float) -> list[Fact]:
    """FIFO placement of pending jobs on open hosts by free slots."""
    free: dict[str, int] = {}
    for host in cluster.hosts.values():
        if host.state is HostState.OPEN:
            template = cfg.templates.get(host.template)
            free[host.key] = template.slots if template else 1
    if not free:
        return []
    for job in cluster.jobs.values():
        if job.state in (JobState.ASSIGNED, JobState.RUNNING) and job.assigned in free:
            free[job.assigned] -= job.slots
    facts = []
    names = {h.key: h.name for h in cluster.hosts.values()}
    for job in sorted(cluster.jobs.values(), key=lambda j: j.id):
        if job.state is not JobState.PENDING:
            continue
        fits = [
            k for k, n in free.items() if n >= job.slots and (not job.host or names[k] == job.host)
        ]
        if not fits:
            continue
        key = max(fits, key=lambda k: free[k])
        free[key] -= job.slots
        facts.append(fact("job_assigned", now, CONTROLLER, id=job.id, key=key))
    return facts


def job_report(
    cluster: Cluster, now: float, host: Host, job_id: int, event: str, exit_code: int | None = None
) -> list[Fact]:
    job = cluster.jobs.get(job_id)
    if job is None or job.assigned != host.key:
        raise Refused("not_found", 404, f"job {job_id} is not assigned to {host.name}")
    if event == "started" and job.state is JobState.ASSIGNED:
        return [fact("job_started", now, host.name, id=job_id)]
    if event == "finished" and job.state in (JobState.ASSIGNED, JobState.RUNNING):
        return [fact("job_finished", now, host.name, id=job_id, exit_code=exit_code or 0)]
    return []
