"""JSON forms of hosts, jobs and facts: for the store, the REST answers and replay checks."""

from __future__ import annotations

import dataclasses
from typing import Any

from xce_controller.core.model import (
    Change,
    Drain,
    DrainPolicy,
    Host,
    HostNotice,
    HostState,
    Job,
    JobState,
    PowerStep,
)


def host_to_json(host: Host) -> dict[str, Any]:
    drain = None
    if host.drain is not None:
        drain = {
            "started_at": host.drain.started_at,
            "timeout": host.drain.timeout,
            "policy": host.drain.policy.value,
            "by": host.drain.by,
            "why": host.drain.why,
            "deadline": host.drain.deadline,
        }
    return {
        "key": host.key,
        "state": host.state.value,
        "template": host.template,
        "name": host.name,
        "instance_id": host.instance_id,
        "provider": host.provider,
        "provisioned": host.provisioned,
        "expected_name": host.expected_name,
        "expected_address": host.expected_address,
        "expected_at": host.expected_at,
        "deadline": host.deadline,
        "token_hash": host.token_hash,
        "incarnation": host.incarnation,
        "credential_hash": host.credential_hash,
        "next_credential_hash": host.next_credential_hash,
        "worker_hash": host.worker_hash,
        "past_credentials": list(host.past_credentials),
        "refusals": host.refusals,
        "last_refusal": host.last_refusal,
        "joined_at": host.joined_at,
        "boot_id": host.boot_id,
        "addresses": list(host.addresses),
        "roles": list(host.roles),
        "resources": dict(host.resources),
        "agent_version": host.agent_version,
        "drain": drain,
        "reason": host.reason,
        "code": host.history[-1].code if host.history else "",
        "history": [
            {"at": c.at, "state": c.state.value, "by": c.by, "why": c.why, "code": c.code}
            for c in host.history
        ],
        "before_loss": host.before_loss,
        "notice": notice_to_json(host.notice),
        "done_notices": [list(done) for done in host.done_notices],
        "power": [dataclasses.asdict(step) for step in host.power],
    }


def notice_to_json(notice: HostNotice | None) -> dict[str, Any] | None:
    return None if notice is None else dataclasses.asdict(notice)


def notice_from_json(d: dict[str, Any] | None) -> HostNotice | None:
    return None if not d else HostNotice(**d)


def host_from_json(d: dict[str, Any]) -> Host:
    drain = None
    if d.get("drain"):
        x = d["drain"]
        drain = Drain(x["started_at"], x["timeout"], DrainPolicy(x["policy"]), x["by"], x["why"])
    return Host(
        key=d["key"],
        state=HostState(d["state"]),
        template=d["template"],
        name=d["name"],
        instance_id=d["instance_id"],
        provider=d["provider"],
        provisioned=d["provisioned"],
        expected_name=d["expected_name"],
        expected_address=d["expected_address"],
        expected_at=d["expected_at"],
        deadline=d["deadline"],
        token_hash=d["token_hash"],
        incarnation=int(d.get("incarnation", 0)),
        credential_hash=d.get("credential_hash", ""),
        next_credential_hash=d.get("next_credential_hash", ""),
        worker_hash=d.get("worker_hash", ""),
        past_credentials=tuple(d.get("past_credentials", ())),
        refusals=int(d.get("refusals", 0)),
        last_refusal=d.get("last_refusal", ""),
        joined_at=d["joined_at"],
        boot_id=d["boot_id"],
        addresses=tuple(d["addresses"]),
        roles=tuple(d["roles"]),
        resources=dict(d["resources"]),
        agent_version=d.get("agent_version", ""),
        drain=drain,
        reason=d["reason"],
        history=tuple(
            Change(c["at"], HostState(c["state"]), c["by"], c["why"], c.get("code", ""))
            for c in d["history"]
        ),
        before_loss=d.get("before_loss", ""),
        notice=notice_from_json(d.get("notice")),
        done_notices=tuple(_done_notice(e) for e in d.get("done_notices", ())),
        power=tuple(PowerStep(**step) for step in d.get("power", ())),
    )


def _done_notice(entry: Any) -> tuple[str, float | None]:
    """[event id, time it announced]; a bare id (the first form stored) names no time."""
    if isinstance(entry, str):
        return entry, None
    return str(entry[0]), entry[1]


def job_to_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "command": list(job.command),
        "slots": job.slots,
        "state": job.state.value,
        "submitted_at": job.submitted_at,
        "host": job.host,
        "assigned": job.assigned,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "exit_code": job.exit_code,
        "requeues": job.requeues,
        "note": job.note,
    }


def job_from_json(d: dict[str, Any]) -> Job:
    return Job(
        id=d["id"],
        command=tuple(d["command"]),
        slots=d["slots"],
        state=JobState(d["state"]),
        submitted_at=d["submitted_at"],
        host=d["host"],
        assigned=d["assigned"],
        started_at=d["started_at"],
        finished_at=d["finished_at"],
        exit_code=d["exit_code"],
        requeues=d["requeues"],
        note=d["note"],
    )
