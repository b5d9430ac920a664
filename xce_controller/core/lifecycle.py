"""The elastic-host lifecycle: decisions as pure functions of state, event and time.

Each function reads the cluster and returns the facts to append (and, for joins and
heartbeats, the answer). The live server and the simulator both call these, so the
scheduler sees one lifecycle in both. Nothing here touches a clock, a socket or a disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xce_controller.core import credentials, tokens
from xce_controller.core.config import ClusterConfig
from xce_controller.core.model import (
    JOINED,
    TERMINAL,
    AdminAction,
    Cluster,
    DrainPolicy,
    Fact,
    Host,
    HostState,
)
from xce_protocol.reasons import Reason, refusal

CONTROLLER = "controller"


class Refused(Exception):
    """A request the lifecycle turns down; `kind` is stable for clients to act on."""

    def __init__(
        self,
        kind: str,
        status: int,
        message: str,
        record: list[Fact] | None = None,
        **details: Any,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.code = refusal(kind)  # the reason code answers and metrics carry
        self.status = status
        self.message = message
        self.record = record or []  # facts the refusal leaves behind (a refused attempt)
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
    agent_version: str = ""  # "" from an agent too old to say
    token: str = ""  # the bearer: a join token or the host credential of an earlier join
    issue: str = ""  # the sealed host credential this join hands out when accepted
    issue_worker: str = ""  # the sealed worker credential it hands out
    peer: str = ""  # the caller's address, kept with a refused attempt


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
    before = cluster.hosts.get(instance_id)
    if before is not None and before.state is not HostState.RETURNED:
        # A returned instance may be expected again (a machine powered on once more): a new
        # life of the same record, its history kept (facts._fresh). Anything else is a repeat.
        raise Refused(
            "duplicate", 409, f"instance {instance_id} is already recorded ({before.state.value})"
        )
    if token and tokens.weak(token):
        raise Refused("bad_request", 422, f"a per-instance join token must be {tokens.STRENGTH}")
    if token and tokens.role_of(token, tokens.of(cfg)):
        role = tokens.role_of(token, tokens.of(cfg))
        raise Refused("conflict", 409, f"a join token must differ from the {role} token")
    if expected_name:
        _name_free(cluster, expected_name)
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
            token_hash=credentials.seal(token),
            code=Reason.INSTANCE_EXPECTED,
        )
    ]


def _name_free(cluster: Cluster, name: str) -> None:
    """A name belongs to one live record: a joined host, or an instance waiting for its
    join under it. Two would make the join that follows a refusal, and every name-based call
    ambiguous."""
    holder = cluster.by_name(name)
    if holder is None or holder.state in TERMINAL:
        holder = cluster.waiting_match(name, ())
    if holder is not None and holder.state not in TERMINAL:
        raise Refused(
            "duplicate",
            409,
            f"host name {name} is taken by instance {holder.instance_id or '-'} "
            f"({holder.state.value})",
            host=holder.name or holder.expected_name,
            instance_id=holder.instance_id,
        )


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


# --- heartbeats (joins, and who may speak for a host: joining.py) ---------------------


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
        reason = why or f"{action.done} by {by}"
        last = host.history[-1] if host.history else None
        if host.state is state and last is not None and (last.by, last.why) == (by, reason):
            return []  # asked again: nothing changes, so nothing is recorded
        code = Reason.ADMIN_OPENED if action is AdminAction.OPEN else Reason.ADMIN_CLOSED
        return [
            fact(
                "state",
                now,
                by,
                key=host.key,
                state=state.value,
                why=reason,
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
