"""An agent that gave up joining by its own deadline (instance.join_deadline) says so.

Its instance is about to power off (or run its configured action): the record it would have
joined as is marked overdue with the agent's reason, so the provisioner sees why and returns
it. The bearer is the join token the instance was given (expired or not: it proves which
instance speaks); a record that joined once is never marked by this.
"""

from __future__ import annotations

from xce_controller.core.config import ClusterConfig
from xce_controller.core.joining import WAITING, Proof, proof, record_for
from xce_controller.core.lifecycle import CONTROLLER, JoinRequest, Refused, fact
from xce_controller.core.model import Cluster, Fact, Host
from xce_protocol.reasons import Reason


def gave_up(
    cluster: Cluster, cfg: ClusterConfig, now: float, req: JoinRequest, reason: str
) -> tuple[Host, list[Fact]]:
    record = record_for(cluster, req)
    who = f"host {req.name} (instance {req.instance_id or '-'})"
    if record is None:
        raise Refused("not_found", 404, f"{who}: no expected instance to give up")
    if req.instance_id and record.instance_id and record.instance_id != req.instance_id:
        # Found by its expected name: another instance's record, which its join would not
        # have taken either (409 duplicate); marked overdue, a booting instance was returned.
        why = f"{who}: no expected instance to give up ({req.name} is {record.instance_id}'s)"
        raise Refused("not_found", 404, why)
    if proof(record, cfg, req.token, now) not in (Proof.JOIN_TOKEN, Proof.EXPIRED):
        raise Refused("unauthorized", 401, f"{who}: join token missing or wrong")
    if record.state not in WAITING or record.incarnation > 0:
        raise Refused("conflict", 409, f"{who}: its record is {record.state.value}, not waiting")
    if record.history and record.history[-1].code == Reason.JOIN_GAVE_UP:
        return record, []  # said before: each repeat added a fact, without bound
    why = f"agent gave up joining: {reason}" if reason else "agent gave up joining"
    code = Reason.JOIN_GAVE_UP
    overdue = fact("state", now, CONTROLLER, key=record.key, state="overdue", why=why, code=code)
    return record, [overdue]
