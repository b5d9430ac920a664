"""The provisioner's view of its machines and its power reports (`/v1/provisioned`).

The reference provisioner (xce_provisioner) reads every provisioned record here, whatever
its state (the to-return list alone does not show a returned record whose machine still runs),
reports each power step, which becomes a fact (its effect journal, and what `xcecli why`
tells), and decommissions an instance of its own that it found idle. All take the
provisioner token or the admin token. See docs/provisioner.md.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Optional

from fastapi import Depends, FastAPI, Query, Request
from pydantic import BaseModel, Field

from xce_controller.admin_verbs import Held
from xce_controller.core import power
from xce_controller.core.lifecycle import Refused
from xce_controller.core.model import Host
from xce_controller.http.auth import ERRORS, PROVISIONER_OR_READER, PROVISIONER_ROLE
from xce_controller.http.pydantic_versions import Strict, json_numbers, text
from xce_controller.service import Controller
from xce_protocol import names

STEPS_SHOWN = 16
# A call under a lease other than a step (whose body carries it): the provisioner's read,
# expect, retire and ack take `?lease=&token=`, with the same bounds as a step's body.
LEASE = Query("", max_length=64)
TOKEN = Query(0, ge=0, le=names.LEASE_TOKEN_MAX)


def held_lease(request: Request, lease: str = LEASE, token: int = TOKEN) -> Held:
    """The lease a call names in its query, read strictly: a fence is no place for a parser's
    leniency (the last of two `token=` winning, " 2" read as 2)."""
    query = request.query_params
    if len(query.getlist("lease")) > 1 or len(query.getlist("token")) > 1:
        raise Refused("bad_request", 422, "lease and token: at most once each")
    raw = query.get("token")
    if raw is not None and not names.is_lease_token(raw):
        raise Refused("bad_request", 422, f"token: expected a decimal integer, got {raw[:40]!r}")
    return lease, token


HELD = Depends(held_lease)
STEP_PATTERN = r"^[a-z_]{1,16}$"
DECISION_PATTERN = r"^[a-z]{1,16}@[0-9.]{1,32}$"


class PowerStepBody(BaseModel):
    at: float
    decision: str
    action: str
    phase: str
    attempt: int
    code: str
    why: str
    token: int


class ProvisionedRecord(BaseModel):
    instance_id: str
    key: str
    name: str = Field(description="the joined host name, else the expected one")
    state: str
    template: str
    decision: str = Field(description="STATE@TIME of the change that put it in its state")
    jobs_running: int
    power: list[PowerStepBody] = Field(description="the newest power steps, oldest first")
    reason: str
    code: str = ""


class PowerBody(Strict):
    decision: str = text(max_length=64, pattern=DECISION_PATTERN)
    action: str = text(max_length=16, pattern=STEP_PATTERN)
    phase: str = text(max_length=16, pattern=STEP_PATTERN)
    attempt: int = Field(1, ge=1, le=1000)
    code: str = text("", max_length=64)
    why: str = text("", max_length=500)
    lease: str = text("", max_length=64)
    # 2**53: exact as a JSON number, so the published maximum is the one enforced.
    token: int = Field(0, ge=0, le=2**53)
    check_numbers = json_numbers("attempt", "token", integer=True)


class RetireBody(Strict):
    reason: str = text("", max_length=512)
    drain_timeout: Optional[float] = Field(None, ge=0, le=30 * 86400)
    check_numbers = json_numbers("drain_timeout", integer=False)


def decision(host: Host) -> str:
    """The decision a record's state stands on: its state and when it entered it."""
    at = host.history[-1].at if host.history else (host.expected_at or 0.0)
    return f"{host.state.value}@{at:.6f}"


def record(ctl: Controller, host: Host) -> dict[str, Any]:
    return {
        "instance_id": host.instance_id,
        "key": host.key,
        "name": host.name or host.expected_name,
        "state": host.state.value,
        "template": host.template,
        "decision": decision(host),
        "jobs_running": len(ctl.cluster.jobs_on(host.key)),
        "power": [asdict(step) for step in host.power[-STEPS_SHOWN:]],
        "reason": host.reason,
        "code": host.history[-1].code if host.history else "",
    }


def install(api: FastAPI, ctl: Controller) -> None:
    """Add these routes to the app (on the app itself, as the other resources do)."""

    @api.get("/v1/provisioned", response_model=list[ProvisionedRecord], responses=ERRORS)
    async def provisioned(
        held: Held = HELD, by: str = PROVISIONER_OR_READER
    ) -> list[dict[str, Any]]:
        return [record(ctl, h) for h in ctl.provisioned_hosts(*held)]

    @api.post(
        "/v1/provisioned/{instance_id}/power", response_model=ProvisionedRecord, responses=ERRORS
    )
    async def power_step(
        instance_id: str, body: PowerBody, request: Request, by: str = PROVISIONER_ROLE
    ) -> dict[str, Any]:
        if {"lease", "token"} & set(request.query_params):
            # Ignored, it would leave a step its caller meant to fence unfenced.
            raise Refused("bad_request", 422, "a power step names its lease in its body")
        if not names.is_instance_id(instance_id):
            raise Refused("not_found", 404, f"no instance {instance_id[:80]!r}")  # names none
        report = power.PowerReport(
            instance_id=instance_id,
            decision=body.decision,
            action=body.action,
            phase=body.phase,
            attempt=body.attempt,
            code=body.code,
            why=body.why,
            lease=body.lease,
            token=body.token,
        )
        return record(ctl, ctl.power_step(by, report))

    @api.post(
        "/v1/provisioned/{instance_id}/decommission",
        response_model=ProvisionedRecord,
        responses=ERRORS,
    )
    async def retire(
        instance_id: str,
        body: RetireBody,
        held: Held = HELD,
        by: str = PROVISIONER_ROLE,
    ) -> dict[str, Any]:
        why = body.reason or "decommissioned by the provisioner"
        return record(ctl, ctl.retire(by, instance_id, why, body.drain_timeout, held))
