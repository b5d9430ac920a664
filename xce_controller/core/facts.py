"""Apply a fact to the cluster state: the only code that changes it, live or on replay.

Deterministic and free of I/O, so replaying the stored facts in order rebuilds exactly the
state the controller had when it wrote them.
"""

from __future__ import annotations

from typing import Any

from xce_controller.core.codec import notice_from_json
from xce_controller.core.model import (
    Change,
    Cluster,
    Drain,
    DrainPolicy,
    Fact,
    Host,
    HostState,
    Job,
    JobState,
    PowerStep,
    evolve,
)

PAST_CREDENTIALS = 8  # earlier credentials kept to tell a stale incarnation from a wrong one
# A host's record keeps its newest changes; the whole story stays in the facts (`xcecli why`).
# Unbounded, a host flapping for months (or reporting a crash loop on and off) made every
# change cost the length of its history, and every answer about it carry all of it.
HISTORY_KEPT = 100


def apply(cluster: Cluster, fact: Fact) -> set[str]:
    """Change `cluster` by `fact`; returns the keys of the hosts it touched."""
    handler = _HANDLERS[fact.kind]
    touched = handler(cluster, fact, fact.data)
    cluster.version += 1
    return touched


def _with_state(host: Host, state: HostState, fact: Fact, why: str) -> Host:
    change = Change(fact.at, state, fact.by, why, str(fact.data.get("code", "")))
    history = (*host.history[-(HISTORY_KEPT - 1) :], change)
    return evolve(host, state=state, reason=why, history=history)


def _expected(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    key = d["instance_id"]
    host = _fresh(cluster.hosts.get(key), fact, d)
    cluster.put_host(_with_state(host, HostState.EXPECTED, fact, "instance recorded"))
    return {key}


def _fresh(before: Host | None, fact: Fact, d: dict[str, Any]) -> Host:
    """The record of an expected instance. A returned one expected again (an on-premise
    machine powered on once more) starts a new life under the same key: its history, its
    earlier credentials (refused as stale from now on) and its power steps are kept."""
    key = d["instance_id"]
    host = Host(
        key=key,
        state=HostState.EXPECTED,
        template=d["template"],
        instance_id=d["instance_id"],
        provider=d.get("provider", ""),
        provisioned=True,
        expected_name=d.get("expected_name", ""),
        expected_address=d.get("expected_address", ""),
        expected_at=fact.at,
        deadline=d["deadline"],
        token_hash=d.get("token_hash", ""),
    )
    if before is None:
        return host
    retired = _past(before, before.credential_hash, before.next_credential_hash)
    return evolve(
        host,
        history=before.history,
        past_credentials=retired,
        refusals=before.refusals,
        last_refusal=before.last_refusal,
        power=before.power,
    )


def _issued(host: Host, d: dict[str, Any]) -> Host:
    """A join issued a new credential: the old one becomes a past incarnation's."""
    if "credential_hash" not in d:
        return host
    return evolve(
        host,
        incarnation=int(d.get("incarnation", host.incarnation + 1)),
        credential_hash=d["credential_hash"],
        next_credential_hash="",
        worker_hash=d.get("worker_hash", ""),
        past_credentials=_past(host, host.credential_hash, host.next_credential_hash),
    )


def _past(host: Host, *retired: str) -> tuple[str, ...]:
    return (*host.past_credentials, *(r for r in retired if r))[-PAST_CREDENTIALS:]


def _renewed(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    """A new credential for the next incarnation; the current one stays good until the host
    presents the new one (an answer lost on the way must not lock the host out)."""
    key = d["key"]
    host = cluster.hosts[key]
    cluster.put_host(
        evolve(
            host,
            incarnation=int(d["incarnation"]),
            next_credential_hash=d["credential_hash"],
            past_credentials=_past(host, host.next_credential_hash),
            boot_id=d.get("boot_id") or host.boot_id,  # a renewal after a reboot
            agent_version=d.get("agent_version") or host.agent_version,
        )
    )
    return {key}


def _confirmed(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    """The host presented its renewed credential: the one before it is now stale."""
    key = d["key"]
    host = cluster.hosts[key]
    cluster.put_host(
        evolve(
            host,
            credential_hash=host.next_credential_hash,
            next_credential_hash="",
            past_credentials=_past(host, host.credential_hash),
        )
    )
    return {key}


def _joined(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    key = d["key"]
    base = cluster.hosts.get(key) or Host(key=key, state=HostState.OPEN, template=d["template"])
    host = evolve(
        base,
        name=d["name"],
        instance_id=d.get("instance_id", base.instance_id),
        template=d["template"],
        provisioned=d["provisioned"],
        provider=d.get("provider") or base.provider,
        joined_at=fact.at,
        boot_id=d.get("boot_id", ""),
        addresses=tuple(d.get("addresses", ())),
        roles=tuple(d.get("roles", ())),
        resources=dict(d.get("resources", {})),
        agent_version=d.get("agent_version", ""),
        drain=base.drain if base.before_loss == HostState.DRAINING.value else None,
        before_loss="",
    )
    # A lost host joining again returns to the state it was lost in (a drain is kept).
    state = HostState(d.get("state", HostState.OPEN.value))
    host = _issued(host, d)
    why = "joined as provisioned instance" if d["provisioned"] else "joined (not provisioned)"
    cluster.put_host(_with_state(host, state, fact, d.get("why", why)))
    return {key}


def _rejoined(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    key = d["key"]
    host = cluster.hosts[key]
    host = evolve(
        host,
        boot_id=d.get("boot_id", ""),
        addresses=tuple(d.get("addresses", ())),
        agent_version=d.get("agent_version") or host.agent_version,
    )
    cluster.put_host(_issued(host, d))
    return {key}


def _refused(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    """An attempt the controller refused and keeps a record of (a stale incarnation, ...)."""
    key = d["key"]
    host = cluster.hosts[key]
    why = f"{d.get('why', '')}: {d.get('detail', '')}"
    cluster.put_host(evolve(host, refusals=host.refusals + 1, last_refusal=why))
    return {key}


def _state(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    key = d["key"]
    state = HostState(d["state"])
    host = cluster.hosts[key]
    if state is HostState.LOST:
        # Remember what it was doing: a lost draining host still owes its decommission.
        host = evolve(host, before_loss=host.state.value)
    else:
        host = evolve(host, before_loss="")
        if state is not HostState.DRAINING:
            host = evolve(host, drain=None)
    cluster.put_host(_with_state(host, state, fact, d.get("why", "")))
    return {key}


def _drain(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    key = d["key"]
    drain = Drain(fact.at, d["timeout"], DrainPolicy(d["policy"]), fact.by, d.get("why", ""))
    host = evolve(cluster.hosts[key], drain=drain)
    why = f"decommission requested: {drain.why}" if drain.why else "decommission requested"
    cluster.put_host(_with_state(host, HostState.DRAINING, fact, why))
    return {key}


DONE_NOTICES_KEPT = 8


def _notice(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    key = d["key"]
    host = cluster.hosts[key]
    notice = notice_from_json(d.get("notice"))
    done = host.done_notices
    if notice is None and host.notice is not None:
        over = (host.notice.event_id, host.notice.deadline)
        if over not in done:
            done = (*done, over)[-DONE_NOTICES_KEPT:]
    cluster.put_host(evolve(host, notice=notice, done_notices=done))
    return {key}


def _job_submitted(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    job = Job(
        id=d["id"],
        command=tuple(d["command"]),
        slots=d["slots"],
        state=JobState.PENDING,
        submitted_at=fact.at,
        host=d.get("host", ""),
    )
    cluster.put_job(job)
    cluster.next_job = max(cluster.next_job, job.id + 1)
    return set()


def _job_update(cluster: Cluster, job_id: int, **changes: Any) -> set[str]:
    job = cluster.jobs[job_id]
    touched = {job.assigned} if job.assigned else set()
    cluster.put_job(new := evolve(job, **changes))
    if new.assigned:
        touched.add(new.assigned)
    return touched


def _job_assigned(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    # A note says why the job waits or came back (its old host lost): placed, it is stale.
    return _job_update(cluster, d["id"], state=JobState.ASSIGNED, assigned=d["key"], note="")


def _job_started(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    return _job_update(cluster, d["id"], state=JobState.RUNNING, started_at=fact.at)


def _job_finished(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    code = d["exit_code"]
    state = JobState.DONE if code == 0 else JobState.FAILED
    return _job_update(cluster, d["id"], state=state, finished_at=fact.at, exit_code=code)


def _job_requeued(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    job = cluster.jobs[d["id"]]
    touched = {job.assigned} if job.assigned else set()
    cluster.put_job(
        evolve(
            job,
            state=JobState.PENDING,
            assigned="",
            started_at=None,
            requeues=job.requeues + 1,
            note=d.get("why", ""),
        )
    )
    return touched


def _job_killed(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    return _job_update(
        cluster, d["id"], state=JobState.KILLED, finished_at=fact.at, note=d.get("why", "")
    )


def _job_waiting(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    cluster.put_job(evolve(cluster.jobs[d["id"]], note=d.get("why", "")))
    return set()


POWER_KEPT = 32  # a record keeps its newest power steps; the facts keep them all


def _power(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    """A step of the provisioner's effect journal on the machine of this record."""
    key = d["key"]
    host = cluster.hosts[key]
    step = PowerStep(
        at=fact.at,
        decision=d["decision"],
        action=d["action"],
        phase=d["phase"],
        attempt=int(d.get("attempt", 1)),
        code=str(d.get("code", "")),
        why=d.get("why", ""),
        token=int(d.get("token", 0)),
    )
    cluster.put_host(evolve(host, power=(*host.power[-(POWER_KEPT - 1) :], step)))
    return {key}


def _lease(cluster: Cluster, fact: Fact, d: dict[str, Any]) -> set[str]:
    """Leases are not cluster state: xce_controller/core/leases.py replays these facts."""
    return set()


_HANDLERS = {
    "expected": _expected,
    "joined": _joined,
    "rejoined": _rejoined,
    "refused": _refused,
    "renewed": _renewed,
    "confirmed": _confirmed,
    "state": _state,
    "drain": _drain,
    "notice": _notice,
    "job_submitted": _job_submitted,
    "job_assigned": _job_assigned,
    "job_started": _job_started,
    "job_finished": _job_finished,
    "job_requeued": _job_requeued,
    "job_killed": _job_killed,
    "job_waiting": _job_waiting,
    "power": _power,
    "lease_granted": _lease,
    "lease_released": _lease,
    "lease_forgotten": _lease,
}
