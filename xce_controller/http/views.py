"""The JSON shapes the API answers with: a host as its agent sees it, a host as an operator
sees it, a job. Read-only views of the controller's state; no route builds these itself.
Times leave here as RFC 3339 in UTC (protocol 1.2; the records keep epoch seconds)."""

from __future__ import annotations

from typing import Any

from xce_controller.core import notices
from xce_controller.core.codec import host_to_json, job_to_json
from xce_controller.core.model import Host, Job
from xce_controller.service import Controller
from xce_protocol.protocol import PROTOCOL
from xce_protocol.times import rfc3339_or_none, times_to_rfc3339

# Never shown by the API: secrets (as hashes) and the boot id.
HIDDEN = (
    "token_hash",
    "credential_hash",
    "next_credential_hash",
    "past_credentials",
    "worker_hash",
    "boot_id",
)


def agent_answer(ctl: Controller, host: Host) -> dict[str, Any]:
    """What every answer to an agent carries: where the host stands and the published timers."""
    notice = None
    if host.notice is not None:
        notice = {
            "kind": host.notice.kind,
            "event_id": host.notice.event_id,
            "deadline": rfc3339_or_none(host.notice.deadline),
            "drained": notices.drained(ctl.cluster, host),
        }
    return {
        "notice": notice,
        "protocol": PROTOCOL,
        "host": host.name,
        "instance_id": host.instance_id,
        "state": host.state.value,
        "reason": host.reason,
        "version": ctl.host_version.get(host.key, ctl.cluster.version),
        "heartbeat_interval": ctl.cfg.heartbeat_interval,
        "host_loss_grace": ctl.cfg.host_loss_grace,
    }


def job_view(ctl: Controller, j: Job) -> dict[str, Any]:
    data = job_to_json(j)
    placed = ctl.cluster.hosts.get(j.assigned)
    data["assigned_host"] = placed.name if placed is not None else ""
    return dict(times_to_rfc3339(data))


def host_detail(ctl: Controller, host: Host) -> dict[str, Any]:
    data = host_to_json(host)
    for hidden in HIDDEN:
        data.pop(hidden)
    data["last_seen"] = ctl.seen.get(host.key)
    data["jobs_running"] = len(ctl.cluster.jobs_on(host.key))
    report = ctl.reports.get(host.key)
    # The agent's report carries its boot id too, which the API shows no one (HIDDEN).
    data["report"] = {k: v for k, v in report.items() if k not in HIDDEN} if report else report
    template = ctl.cfg.templates.get(host.template)
    data["slots"] = template.slots if template is not None else None
    return dict(times_to_rfc3339(data))
