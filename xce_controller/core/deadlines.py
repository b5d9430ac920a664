"""What time alone makes due for a host: the join deadline, the loss grace, the drain timeout,
and a cloud notice's requeue point or lapse (notices.py). A host whose agent announced a
planned stop is not lost by its silence.

Pure functions, like the rest of the lifecycle; the live controller's timers (timers.py) and
the simulator ask `next_due` when to look again and `host_due` what is due then.

`alive_since` is when this controller process started. Time it was down does not count
against hosts: none could reach it, so each gets a fresh grace (and an expected instance
recorded before the start a fresh join allowance) from the start. A drain begun before the
start gets the same: its jobs may have finished while no report could arrive.
"""

from __future__ import annotations

from xce_controller.core import notices
from xce_controller.core.config import ClusterConfig
from xce_controller.core.lifecycle import CONTROLLER, fact
from xce_controller.core.model import JOINED, Cluster, DrainPolicy, Fact, Host, HostState
from xce_protocol.reasons import Reason


def heard_from(host: Host, last_seen: float | None, alive_since: float) -> float:
    """The latest sign of life: a heartbeat, a join or return, or the controller's start."""
    heard = max(alive_since, host.joined_at or 0.0, last_seen or 0.0)
    if host.history and host.history[-1].at > heard:  # only then can a change be later
        changed = host.self_changed_at
        if changed is not None and changed > heard:
            heard = changed
    return heard


def join_deadline(host: Host, cfg: ClusterConfig, alive_since: float) -> float | None:
    if host.deadline is None:
        return None
    if host.expected_at is not None and host.expected_at < alive_since:
        return max(host.deadline, alive_since + cfg.host_loss_grace)
    return host.deadline


def drain_deadline(host: Host, cfg: ClusterConfig, alive_since: float) -> float | None:
    """When the drain's timeout acts. A drain begun before this process started waits at
    least a grace from the start: a job that finished meanwhile is reported, not requeued
    to run twice or killed after it succeeded."""
    if host.drain is None or host.drain.deadline is None:
        return None
    if host.drain.started_at < alive_since:
        return max(host.drain.deadline, alive_since + cfg.host_loss_grace)
    return host.drain.deadline


def host_due(
    cluster: Cluster,
    cfg: ClusterConfig,
    now: float,
    host: Host,
    last_seen: float | None,
    alive_since: float = 0.0,
) -> list[Fact]:
    """Facts that time alone makes due for one host: overdue, drained, lost."""
    if host.state is HostState.EXPECTED:
        deadline = join_deadline(host, cfg, alive_since)
        if deadline is not None and now >= deadline:
            return [
                fact(
                    "state",
                    now,
                    CONTROLLER,
                    key=host.key,
                    state=HostState.OVERDUE.value,
                    why="not joined by its deadline",
                    code=Reason.JOIN_DEADLINE_MISSED,
                )
            ]
        return []
    if host.state not in JOINED:
        return []
    seen = heard_from(host, last_seen, alive_since)
    if now - seen > cfg.host_loss_grace and not notices.planned_stop(host):
        facts = [
            fact(
                "job_requeued",
                now,
                CONTROLLER,
                id=j.id,
                key=host.key,
                why=f"host {host.name} lost",
                code=Reason.JOB_REQUEUED_HOST_LOST,
            )
            for j in cluster.jobs_on(host.key)
        ]
        return [
            *facts,
            fact(
                "state",
                now,
                CONTROLLER,
                key=host.key,
                state=HostState.LOST.value,
                why=f"no heartbeat for {now - seen:.0f}s",
                code=Reason.HEARTBEAT_LOST,
            ),
        ]
    noticed = notices.due(cluster, now, host)
    if noticed:
        return noticed
    if host.state is HostState.DRAINING and host.drain is not None:
        return _drain_due(cluster, now, host, drain_deadline(host, cfg, alive_since))
    return []


def _drain_due(cluster: Cluster, now: float, host: Host, deadline: float | None) -> list[Fact]:
    assert host.drain is not None
    jobs = cluster.jobs_on(host.key)
    why = host.drain.why or "decommissioned"
    if not jobs:
        return [
            fact(
                "state",
                now,
                CONTROLLER,
                key=host.key,
                state=HostState.DECOMMISSIONED.value,
                why=why,
                code=Reason.DRAINED,
            )
        ]
    if deadline is None or now < deadline:
        return []
    killing = host.drain.policy is DrainPolicy.KILL
    kind = "job_killed" if killing else "job_requeued"
    code = Reason.DRAIN_TIMEOUT_KILLED if killing else Reason.DRAIN_TIMEOUT_REQUEUED
    timeout = f"drain timeout on {host.name}"
    facts = [
        fact(kind, now, CONTROLLER, id=j.id, key=host.key, why=timeout, code=code) for j in jobs
    ]
    done = f"{why} (drain timed out after {host.drain.timeout:g}s: {host.drain.policy.value})"
    ended = fact(
        "state",
        now,
        CONTROLLER,
        key=host.key,
        state=HostState.DECOMMISSIONED.value,
        why=done,
        code=code,
    )
    return [*facts, ended]


def next_due(
    host: Host, cfg: ClusterConfig, last_seen: float | None, alive_since: float = 0.0
) -> float | None:
    """When `host_due` may next return facts for this host by time alone. A drain's end by
    its last job is not a time: it is evaluated on the job's finish or requeue."""
    if host.state is HostState.EXPECTED:
        return join_deadline(host, cfg, alive_since)
    if host.state not in JOINED:
        return None
    due = heard_from(host, last_seen, alive_since) + cfg.host_loss_grace + 1e-3
    if notices.planned_stop(host):
        due = float("inf")  # its agent is down on purpose: silence is no loss
    drain = drain_deadline(host, cfg, alive_since)
    if drain is not None:
        due = min(due, drain)
    noticed = notices.next_due(host)
    when = due if noticed is None else min(due, noticed)
    return None if when == float("inf") else when
