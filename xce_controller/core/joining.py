"""Who may join as which record, and who may speak for a joined host: pure decisions.

A join names a host and (for provisioned records, always) an instance id, and carries a
bearer: a join token (the instance's own, single use, expiring at its join deadline; or the
cluster's) or the host credential an earlier join of the same record issued. Each accepted
join starts a new incarnation of the record and issues a new credential; every later agent
call must carry the current one. A credential of an earlier incarnation (an old disk image,
a cloned host) is refused as stale, and the attempt is recorded as a fact.
"""

from __future__ import annotations

import enum
from typing import Any

from xce_controller.core import credentials
from xce_controller.core.config import ClusterConfig
from xce_controller.core.lifecycle import JoinRequest, Refused, decommissioned, fact, returned_state
from xce_controller.core.model import (
    TERMINAL,
    Cluster,
    Fact,
    Host,
    HostState,
    UnmatchedJoins,
    same_name,
)
from xce_protocol import names
from xce_protocol.reasons import Reason, refusal

WAITING = (HostState.EXPECTED, HostState.OVERDUE)


class Proof(enum.Enum):
    """What the bearer of a request proved about one record."""

    NONE = "none"
    CURRENT = "current"  # the credential of the record's current incarnation
    STALE = "stale"  # the credential of an earlier incarnation
    JOIN_TOKEN = "join token"  # noqa: S105 - a kind of proof, not a secret
    EXPIRED = "expired join token"


def proof(record: Host | None, cfg: ClusterConfig, token: str, now: float) -> Proof:
    if record is not None and token:
        if credentials.matches(token, record.credential_hash):
            return Proof.CURRENT
        if any(credentials.matches(token, past) for past in record.past_credentials):
            return Proof.STALE
    if record is not None and record.token_hash:
        if not credentials.matches(token, record.token_hash):
            return Proof.NONE
        unused = record.incarnation == 0
        if unused and record.deadline is not None and now >= record.deadline:
            return Proof.EXPIRED
        return Proof.JOIN_TOKEN
    if not cfg.join_token:  # only a simulation runs without one: the server always has one
        return Proof.JOIN_TOKEN
    if credentials.same(token, cfg.join_token):
        return Proof.JOIN_TOKEN
    return Proof.NONE


def _check_names(req: JoinRequest) -> None:
    if not names.is_host_name(req.name):
        raise Refused("bad_request", 422, f"{req.name[:80]!r} is not a host name")
    if req.instance_id and not names.is_instance_id(req.instance_id):
        raise Refused("bad_request", 422, f"{req.instance_id[:80]!r} is not an instance id")


def _expected_match(cluster: Cluster, req: JoinRequest) -> Host | None:
    host = cluster.waiting_match(req.name, req.addresses)
    return host if host is not None and host.provisioned else None


def record_for(cluster: Cluster, req: JoinRequest) -> Host | None:
    """The record a join speaks for: by instance id, then expected name or address, then by
    the name it joined as before. Never by record key."""
    if req.instance_id:
        found = cluster.by_instance(req.instance_id)
        if found is not None:
            return found
    return (
        gone(cluster, req.name, "", req.token)
        or _expected_match(cluster, req)
        or (cluster.by_name(req.name))
    )


def gone(cluster: Cluster, name: str, instance_id: str, token: str) -> Host | None:
    """The decommissioned (or returned) record that issued this credential, by its instance
    id or its unprovisioned key: when a new instance took the name (expected or joined), the
    old agent must still hear 410 and stop for good, not the new record's 401 (and go on
    trying to join)."""
    old = cluster.by_instance(instance_id) if instance_id else cluster.hosts.get(f"host:{name}")
    if old is None or old.state not in TERMINAL or not token:
        return None
    hashes = (old.credential_hash, *old.past_credentials)
    return old if any(credentials.matches(token, h) for h in hashes) else None


def join(
    cluster: Cluster, cfg: ClusterConfig, now: float, req: JoinRequest
) -> tuple[Host, list[Fact]]:
    """The host the request joins as, and the facts; Refused when it may not join."""
    _check_names(req)
    record = record_for(cluster, req)
    if record is None:
        return _join_new(cluster, cfg, now, req)
    shown = proof(record, cfg, req.token, now)
    if record.state in TERMINAL and req.instance_id not in ("", record.instance_id):
        # Another instance under a gone host's name: nothing of the old record is its to
        # prove. The cluster's token admits it to the name rules, which refuse the name.
        if proof(None, cfg, req.token, now) is Proof.NONE:
            raise Refused("unauthorized", 401, "join token missing or wrong")
        raise _name_decommissioned(record.name or req.name, record)
    who = f"host {req.name} (instance {req.instance_id or '-'})"
    if shown is Proof.NONE:
        raise Refused("unauthorized", 401, f"{who}: join token or host credential missing or wrong")
    if record.state in TERMINAL:
        raise decommissioned(record)
    if shown is Proof.EXPIRED:
        raise Refused(
            "token_expired",
            401,
            f"the join token of instance {record.instance_id} expired at its join deadline",
        )
    if shown is Proof.STALE:
        raise stale(record, now, req.name, req.peer)
    _check_identity(cluster, record, req, now)
    same_boot = bool(req.boot_id) and req.boot_id == record.boot_id
    if shown is Proof.JOIN_TOKEN and record.incarnation > 0 and not same_boot:
        # The boot that tried is in its own field, the admin's to see (http/events.py):
        # readers must not learn boot ids, which a join token turns into a takeover.
        detail = "second join with the join token from another boot"
        refusal = _refusal(now, req.name, record, "already_joined", detail, req.peer)
        refusal.data["boot_id"] = req.boot_id[:64]
        raise Refused(
            "already_joined",
            409,
            f"host {record.name} (instance {record.instance_id or '-'}) already joined; a "
            "rejoin must carry its host credential",
            record=[refusal],
            host=record.name,
            instance_id=record.instance_id,
        )
    return record, [_accepted(now, req, record)]


def _check_identity(cluster: Cluster, record: Host, req: JoinRequest, now: float) -> None:
    if record.instance_id and req.instance_id != record.instance_id:
        if not req.instance_id:
            raise Refused(
                "instance_id_required",
                409,
                f"host {req.name} is instance {record.instance_id}: the join must carry it",
            )
        raise Refused(
            "duplicate",
            409,
            f"host name {req.name} belongs to instance {record.instance_id}, not {req.instance_id}",
            host=record.name or record.expected_name,
            instance_id=record.instance_id,
        )
    if record.name and not same_name(record.name, req.name) and record.state is not HostState.LOST:
        raise Refused(
            "duplicate",
            409,
            f"instance {record.instance_id} already joined as {record.name}; "
            f"{req.name} cannot claim it",
            # The bearer proved this record (its join token, its credential): the real host
            # after a thief joined under another name, or the thief after it. Recorded, so
            # the operator sees the takeover, as with a second join under the same name.
            record=[_refusal(now, req.name, record, "duplicate", f"join as {req.name}", req.peer)],
            host=record.name,
            instance_id=record.instance_id,
        )
    other = cluster.by_name(req.name)
    if other is None or other.key == record.key:
        return
    if other.state not in TERMINAL:
        raise Refused(
            "duplicate",
            409,
            f"host name {req.name} is in use by instance {other.instance_id or '-'}",
            host=other.name,
            instance_id=other.instance_id,
        )
    if not same_name(record.expected_name, req.name):
        raise _name_decommissioned(req.name, other)


def _name_decommissioned(name: str, gone: Host) -> Refused:
    return Refused(
        "name_decommissioned",
        409,
        f"host name {name} was decommissioned with instance {gone.instance_id or '-'}; "
        "a new instance may take it only when it is expected under that name",
    )


def _join_new(
    cluster: Cluster, cfg: ClusterConfig, now: float, req: JoinRequest
) -> tuple[Host, list[Fact]]:
    if proof(None, cfg, req.token, now) is Proof.NONE:
        raise Refused("unauthorized", 401, "join token missing or wrong")
    if cfg.unmatched_joins is UnmatchedJoins.REFUSE:
        raise Refused(
            "unmatched",
            403,
            f"host {req.name} (instance {req.instance_id or '-'}) matches no expected "
            "instance and this cluster refuses unmatched joins",
        )
    key = f"host:{req.name}"  # a host name has no colon: never an instance id
    host = Host(key=key, state=HostState.OPEN, template="default")
    joined = _joined(now, req, host, "default", False, req.provider, req.instance_id)
    return host, [joined]


def _accepted(now: float, req: JoinRequest, record: Host) -> Fact:
    if record.state in WAITING:
        # The provider the provisioner named, else the one the agent says it runs on.
        provider = record.provider or req.provider[:253]
        return _joined(now, req, record, record.template, True, provider, record.instance_id)
    if record.state is HostState.LOST:
        joined = _joined(
            now,
            req,
            record,
            record.template,
            record.provisioned,
            record.provider,
            record.instance_id,
            why="rejoined after loss",
            code=Reason.REJOINED_AFTER_LOSS,
        )
        joined.data["state"] = returned_state(record).value  # the state it was lost in
        return joined
    return fact(
        "rejoined",
        now,
        req.name,
        key=record.key,
        boot_id=req.boot_id,
        addresses=list(req.addresses),
        agent_version=req.agent_version,
        incarnation=record.incarnation + 1,
        credential_hash=req.issue,
        worker_hash=req.issue_worker,
        code=Reason.AGENT_RECONNECTED,
    )


def _joined(
    now: float,
    req: JoinRequest,
    record: Host,
    template: str,
    provisioned: bool,
    provider: str,
    instance_id: str,
    why: str = "",
    code: Reason | None = None,
) -> Fact:
    data: dict[str, Any] = dict(
        key=record.key,
        name=req.name,
        instance_id=instance_id,
        template=template,
        provisioned=provisioned,
        provider=provider,
        boot_id=req.boot_id,
        addresses=list(req.addresses),
        roles=list(req.roles),
        resources=dict(req.resources),
        agent_version=req.agent_version,
        incarnation=record.incarnation + 1,
        credential_hash=req.issue,
        worker_hash=req.issue_worker,
    )
    if why:
        data["why"] = why
    data["code"] = (
        code or (Reason.JOINED_PROVISIONED if provisioned else Reason.JOINED_UNPROVISIONED)
    ).value
    return Fact("joined", now, req.name, data)


def _refusal(now: float, by: str, record: Host, why: str, detail: str, peer: str) -> Fact:
    where = f" from {peer}" if peer else ""
    return fact(
        "refused",
        now,
        by,
        key=record.key,
        why=why,
        detail=f"{detail}{where}",
        code=refusal(why),
    )


def stale(record: Host, now: float, by: str, peer: str) -> Refused:
    return Refused(
        "stale_incarnation",
        409,
        f"host {record.name} (instance {record.instance_id or '-'}) presented the credential "
        f"of an earlier incarnation; incarnation {record.incarnation} holds the current one",
        record=[_refusal(now, by, record, "stale_incarnation", "earlier credential", peer)],
        host=record.name,
        instance_id=record.instance_id,
        incarnation=record.incarnation,
    )


def speaker(
    cluster: Cluster,
    now: float,
    name: str,
    token: str,
    instance_id: str = "",
    peer: str = "",
    worker: bool = False,
) -> tuple[Host, list[Fact]]:
    """The host a heartbeat, watch or job report speaks for, and the facts its bearer makes
    due (a renewed credential presented for the first time); Refused unless the bearer is the
    host's current credential (or, for `worker` calls, the worker credential of its join). A
    decommissioned host's credential gets the 410 refusal."""
    if not token:
        raise Refused("unauthorized", 401, f"host credential for {name[:80]} missing: join first")
    host = cluster.by_name(name) if names.is_host_name(name) else None
    unknown = Refused(
        "unknown_credential", 401, f"no host {name[:80]} holds this credential: join again"
    )
    if host is None:
        raise _gone_or(unknown, cluster, name, instance_id, token)
    facts: list[Fact] = []
    if worker and credentials.matches(token, host.worker_hash):
        pass  # the worker's credential of this join: its watch and job reports
    elif credentials.matches(token, host.next_credential_hash):
        facts.append(fact("confirmed", now, name, key=host.key, code=Reason.CREDENTIAL_CONFIRMED))
    elif not credentials.matches(token, host.credential_hash):
        if not any(credentials.matches(token, past) for past in host.past_credentials):
            raise _gone_or(unknown, cluster, name, instance_id, token)
        if host.state not in TERMINAL:
            raise stale(host, now, name, peer)
    if instance_id and instance_id != host.instance_id:
        raise _gone_or(unknown, cluster, name, instance_id, token)
    if host.state in TERMINAL:
        raise decommissioned(host)
    return host, facts


def _gone_or(
    refusal: Refused, cluster: Cluster, name: str, instance_id: str, token: str
) -> Refused:
    old = gone(cluster, name, instance_id, token)
    return decommissioned(old) if old is not None else refusal


def renew(host: Host, now: float, sealed: str, boot_id: str = "", agent_version: str = "") -> Fact:
    """A new credential for an agent that (re)started: its copy on any other disk (an image,
    a clone) becomes stale once this host presents the new one. `boot_id` is the boot the
    agent runs in (a reboot resumes here, not by a join); `agent_version` the version it
    says it is (an upgraded agent restarts and renews: a rolling upgrade shows here)."""
    data: dict[str, Any] = dict(
        key=host.key,
        incarnation=host.incarnation + 1,
        credential_hash=sealed,
        code=Reason.CREDENTIAL_RENEWED,
    )
    if boot_id:
        data["boot_id"] = boot_id
    if agent_version:
        data["agent_version"] = agent_version
    return fact("renewed", now, host.name, **data)
