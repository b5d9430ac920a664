"""The elastic-host lifecycle: decisions as pure functions of state, event and time.

Each function reads the cluster and returns the facts to append (and, for joins and
heartbeats, the answer). The live server and the simulator both call these, so the
scheduler sees one lifecycle in both. Nothing here touches a clock, a socket or a disk.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any

from xce_controller.config import ClusterConfig
from xce_controller.model import (
    JOINED,
    TERMINAL,
    AdminAction,
    Cluster,
    DrainPolicy,
    Fact,
    Host,
    HostState,
    UnmatchedJoins,
)
from xce_protocol.reasons import Reason, refusal

CONTROLLER = "controller"


class Refused(Exception):
    """A request the lifecycle turns down; `kind` is stable for clients to act on."""

    def __init__(self, kind: str, status: int, message: str, **details: Any) -> None:
        super().__init__(message)
        self.kind = kind
        self.code = refusal(kind)  # the reason code answers and metrics carry
        self.status = status
        self.message = message
        self.details = details


@dataclass(frozen=True)
class JoinRequest:
    name: str
    instance_id: str = ""
    template: str = ""
    provider: str = ""
    addresses: tuple[str, ...] = ()
    boot_id: str = ""
    roles: tuple[str, ...] = ()
    resources: dict[str, Any] = field(default_factory=dict)
    token: str = ""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest() if token else ""


def decommissioned(host: Host) -> Refused:
    why = host.reason or "decommissioned"
    return Refused(
        "decommissioned",
        410,
        f"host {host.name or host.key} (instance {host.instance_id or '-'}) was "
        f"decommissioned: {why}",
        host=host.name,
        instance_id=host.instance_id,
        reason=why,
    )


def fact(kind: str, now: float, by: str, **data: Any) -> Fact:
    """A fact; a `code` (xce_protocol.reasons) is stored as its plain string."""
    if isinstance(data.get("code"), Reason):
        data["code"] = data["code"].value
    return Fact(kind, now, by, data)


# --- provisioner ----------------------------------------------------------------------


def expect(
    cluster: Cluster,
    cfg: ClusterConfig,
    now: float,
    by: str,
    instance_id: str,
    template: str,
    expected_name: str = "",
    expected_address: str = "",
    deadline: float | None = None,
    provider: str = "",
    token: str = "",
) -> list[Fact]:
    if template not in cfg.templates:
        known = ", ".join(sorted(cfg.templates))
        raise Refused("unknown_template", 404, f"unknown template {template!r} (known: {known})")
    if instance_id in cluster.hosts:
        raise Refused("duplicate", 409, f"instance {instance_id} is already recorded")
    when = deadline if deadline is not None else now + cfg.join_deadline
    return [
        fact(
            "expected",
            now,
            by,
            instance_id=instance_id,
            template=template,
            expected_name=expected_name,
            expected_address=expected_address,
            deadline=when,
            provider=provider,
            token_hash=token_hash(token),
            code=Reason.INSTANCE_EXPECTED,
        )
    ]


def returnable(host: Host) -> bool:
    wanted = (HostState.OVERDUE, HostState.DECOMMISSIONED, HostState.LOST)
    return host.provisioned and host.state in wanted


def to_return(cluster: Cluster) -> list[Host]:
    """Provisioned instances the provisioner should give back."""
    return [h for h in cluster.hosts.values() if returnable(h)]


def ack_return(cluster: Cluster, now: float, by: str, instance_id: str) -> list[Fact]:
    host = cluster.hosts.get(instance_id)
    if host is None or not returnable(host):
        raise Refused("not_returnable", 409, f"instance {instance_id} is not on the to-return list")
    return [
        fact(
            "state",
            now,
            by,
            key=host.key,
            state=HostState.RETURNED.value,
            why="instance returned",
            code=Reason.INSTANCE_RETURNED,
        )
    ]


# --- joins and heartbeats -------------------------------------------------------------


def _match(cluster: Cluster, req: JoinRequest) -> Host | None:
    if req.instance_id and req.instance_id in cluster.hosts:
        return cluster.hosts[req.instance_id]
    return cluster.waiting_match(req.name, req.addresses)


def join(
    cluster: Cluster, cfg: ClusterConfig, now: float, req: JoinRequest
) -> tuple[Host, list[Fact]]:
    """The host the request joins as, and the facts; Refused when it may not join."""
    host = _match(cluster, req)
    if host is not None:
        return host, _join_matched(cluster, cfg, now, req, host)
    key = f"host:{req.name}"
    known = cluster.hosts.get(key)
    if known is not None:
        if known.state in TERMINAL:
            raise decommissioned(known)
        return known, _join_again(now, req, known)
    if cfg.unmatched_joins is UnmatchedJoins.REFUSE:
        raise Refused(
            "unmatched",
            403,
            f"host {req.name} (instance {req.instance_id or '-'}) matches no expected "
            "instance and this cluster refuses unmatched joins",
        )
    if cfg.join_token and not hmac.compare_digest(
        token_hash(req.token), token_hash(cfg.join_token)
    ):
        raise Refused("unauthorized", 401, "join token missing or wrong")
    joined = _joined_fact(now, req, key, "default", provisioned=False, provider=req.provider)
    return Host(key=key, state=HostState.OPEN, template="default"), [joined]


def _join_matched(
    cluster: Cluster, cfg: ClusterConfig, now: float, req: JoinRequest, host: Host
) -> list[Fact]:
    if host.state in TERMINAL:
        raise decommissioned(host)
    expected = host.token_hash or token_hash(cfg.join_token)
    if expected and not hmac.compare_digest(token_hash(req.token), expected):
        raise Refused("unauthorized", 401, f"join token for instance {host.instance_id} is wrong")
    if host.name and host.name != req.name and host.state is not HostState.LOST:
        raise Refused(
            "duplicate",
            409,
            f"instance {host.instance_id} already joined as {host.name}; "
            f"{req.name} cannot claim it",
            host=host.name,
            instance_id=host.instance_id,
        )
    if host.state in JOINED or host.state is HostState.LOST:
        return _join_again(now, req, host)
    return [
        _joined_fact(
            now,
            req,
            host.key,
            host.template,
            provisioned=True,
            provider=host.provider,
            instance_id=host.instance_id,
        )
    ]


def _join_again(now: float, req: JoinRequest, host: Host) -> list[Fact]:
    if host.state is HostState.LOST:
        joined = _joined_fact(
            now,
            req,
            host.key,
            host.template,
            host.provisioned,
            host.provider,
            host.instance_id,
            why="rejoined after loss",
            code=Reason.REJOINED_AFTER_LOSS,
        )
        joined.data["state"] = returned_state(host).value
        return [joined]
    return [
        fact(
            "rejoined",
            now,
            req.name,
            key=host.key,
            boot_id=req.boot_id,
            addresses=list(req.addresses),
            code=Reason.AGENT_RECONNECTED,
        )
    ]


def _joined_fact(
    now: float,
    req: JoinRequest,
    key: str,
    template: str,
    provisioned: bool,
    provider: str,
    instance_id: str = "",
    why: str = "",
    code: Reason | None = None,
) -> Fact:
    data: dict[str, Any] = dict(
        key=key,
        name=req.name,
        instance_id=instance_id or req.instance_id,
        template=template,
        provisioned=provisioned,
        provider=provider,
        boot_id=req.boot_id,
        addresses=list(req.addresses),
        roles=list(req.roles),
        resources=dict(req.resources),
    )
    if why:
        data["why"] = why
    data["code"] = (
        code or (Reason.JOINED_PROVISIONED if provisioned else Reason.JOINED_UNPROVISIONED)
    ).value
    return Fact("joined", now, req.name, data)


def check_agent(cluster: Cluster, key: str, instance_id: str) -> Host:
    """The host an agent speaks for on heartbeat/watch; Refused if it may not. A name before
    a record key: a host may be called what another record is keyed by (an instance id)."""
    host = cluster.host_by_name(key) or cluster.hosts.get(key)
    if host is None:
        raise Refused("unknown_host", 404, f"unknown host {key}: join first")
    if instance_id and host.instance_id and instance_id != host.instance_id:
        raise Refused(
            "unknown_host",
            404,
            f"host {host.name} is instance {host.instance_id}, not {instance_id}",
        )
    if host.state in TERMINAL:
        raise decommissioned(host)
    return host


def returned_state(host: Host) -> HostState:
    """The state a lost host returns to: the one it was lost in. A draining host resumes its
    drain (and, its jobs having been requeued at the loss, completes the decommission)."""
    try:
        state = HostState(host.before_loss)
    except ValueError:
        return HostState.OPEN
    return state if state in JOINED else HostState.OPEN


def heartbeat(cluster: Cluster, now: float, host: Host) -> list[Fact]:
    if host.state is HostState.LOST:
        state = returned_state(host)
        return [
            fact(
                "state",
                now,
                host.name,
                key=host.key,
                state=state.value,
                why=f"heartbeat resumed after loss ({state.value} again)",
                code=Reason.HEARTBEAT_RESUMED,
            )
        ]
    return []


def template_problems(cluster: Cluster, cfg: ClusterConfig) -> list[str]:
    """A template may only leave the config once no live record uses it: a host expected or
    joined with it would otherwise silently change shape."""
    users: dict[str, list[str]] = {}
    for host in cluster.hosts.values():
        if host.state not in TERMINAL and host.template not in cfg.templates:
            users.setdefault(host.template, []).append(host.name or host.key)
    problems = []
    for name, hosts in sorted(users.items()):
        shown = ", ".join(sorted(hosts)[:5]) + (", ..." if len(hosts) > 5 else "")
        problems.append(
            f"templates.{name}: expected the template while hosts use it "
            f"({len(hosts)}: {shown}), got nothing"
        )
    return problems


# --- admin control ---------------------------------------------------------------------


def control(
    cluster: Cluster,
    cfg: ClusterConfig,
    now: float,
    by: str,
    host: Host,
    action: AdminAction,
    drain_timeout: float | None = None,
    policy: str | None = None,
    why: str = "",
) -> list[Fact]:
    if host.state in TERMINAL:
        raise Refused("conflict", 409, f"host {host.name or host.key} is {host.state.value}")
    if action in (AdminAction.OPEN, AdminAction.CLOSE):
        allowed = (HostState.OPEN, HostState.CLOSED)
        if host.state not in allowed:
            raise Refused(
                "conflict",
                409,
                f"cannot {action.value} host {host.name or host.key}: it is {host.state.value}",
            )
        state = HostState.OPEN if action is AdminAction.OPEN else HostState.CLOSED
        code = Reason.ADMIN_OPENED if action is AdminAction.OPEN else Reason.ADMIN_CLOSED
        return [
            fact(
                "state",
                now,
                by,
                key=host.key,
                state=state.value,
                why=why or f"{action.done} by {by}",
                code=code,
            )
        ]
    if host.state is HostState.DRAINING:
        raise Refused("conflict", 409, f"host {host.name} is already draining")
    if host.state not in JOINED:  # expected, overdue, lost: nothing runs there
        return [
            fact(
                "state",
                now,
                by,
                key=host.key,
                state=HostState.DECOMMISSIONED.value,
                why=why or f"{action.done} by {by}",
                code=Reason.DECOMMISSIONED_IDLE,
            )
        ]
    chosen = DrainPolicy(policy) if policy else cfg.drain_policy
    timeout = (
        None
        if chosen is DrainPolicy.WAIT
        else (drain_timeout if drain_timeout is not None else cfg.drain_timeout)
    )
    facts = [
        fact(
            "drain",
            now,
            by,
            key=host.key,
            timeout=timeout,
            policy=chosen.value,
            why=why or f"{action.done} by {by}",
            code=Reason.DECOMMISSION_REQUESTED,
        )
    ]
    return facts
