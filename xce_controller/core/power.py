"""The provisioner's power reports: each step it takes on a machine becomes a fact.

The provisioner (xce_provisioner) writes ahead: it reports a step `begun` before it calls the
machine's BMC, and `issued`, `confirmed`, `failed` or `gave_up` after. The facts are its
effect journal, kept where a provisioner that takes the lease over reads them, and they tell
the power actions in `xcecli why` and the events. Pure: the checks and the facts only.
"""

from __future__ import annotations

from dataclasses import dataclass

from xce_controller.core.lifecycle import Refused, fact
from xce_controller.core.model import Cluster, Fact
from xce_protocol.reasons import parse

ACTIONS = ("on", "shutdown", "force_off", "cycle", "ack")
PHASES = ("begun", "issued", "confirmed", "failed", "gave_up")


@dataclass(frozen=True)
class PowerReport:
    instance_id: str
    decision: str
    action: str
    phase: str
    attempt: int = 1
    code: str = ""
    why: str = ""
    lease: str = ""  # the provisioner's lease ("": it runs without one)
    token: int = 0


def check_grant(lease: str, token: int, current_token: int, live: bool) -> None:
    """A step or a read under a lease must carry the lease's current, live grant: a
    provisioner that lost its lease (and may not know it yet) is refused before it touches a
    machine. `stale_lease` unless `token` is that grant; no lease ("") is not checked, but
    a token without its lease is refused: the caller meant to be fenced and would not be."""
    if not lease:
        if token:
            # 409 as for other fields that conflict (join_token with mint_join_token): each is
            # valid alone, so the schema cannot say it.
            raise Refused("conflict", 409, f"token {token} without its lease: name the lease")
        return
    if token != current_token or not live:
        raise Refused(
            "stale_lease",
            409,
            f"lease {lease} token {token} is not the current grant "
            f"(token {current_token}{'' if live else ', not held'})",
        )


def report(cluster: Cluster, now: float, by: str, r: PowerReport) -> list[Fact]:
    """The fact of one power step; none when the same step is recorded already (a report
    repeated after a lost answer, or by a provisioner that took over)."""
    host = cluster.by_instance(r.instance_id)
    if host is None or not host.provisioned:
        raise Refused("not_found", 404, f"no provisioned instance {r.instance_id}")
    if r.action not in ACTIONS or r.phase not in PHASES:
        raise Refused("bad_request", 422, f"unknown power step {r.action} {r.phase}")
    for step in host.power:
        if (step.decision, step.action, step.phase, step.attempt) == (
            r.decision,
            r.action,
            r.phase,
            r.attempt,
        ):
            return []
    return [
        fact(
            "power",
            now,
            by,
            key=host.key,
            instance_id=host.instance_id,
            decision=r.decision,
            action=r.action,
            phase=r.phase,
            attempt=r.attempt,
            code=parse(r.code),
            why=r.why[:500],
            token=r.token,
            lease=r.lease,
        )
    ]
