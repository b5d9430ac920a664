"""Singleton leases: a host acquires, renews and releases; an admin lists them."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Query, Request

from xce_controller.http.auth import (
    ADMIN_OR_READER,
    ERRORS,
    HOST_CREDENTIAL,
    Bearer,
    token_of,
)
from xce_controller.http.routes.agents import peer
from xce_controller.http.schemas import LeaseAnswer, LeaseBody
from xce_controller.service import Controller
from xce_protocol.protocol import PROTOCOL
from xce_protocol.times import times_to_rfc3339

LEASE_HOST = Query(..., min_length=1, max_length=253)
LEASE_SESSION = Query(..., min_length=1, max_length=64)


def install(api: FastAPI, ctl: Controller) -> None:
    """Add this resource's routes to the app (on the app itself: FastAPI's included routers
    hide their routes from the metrics' and errors' route lookup on newer releases)."""

    @api.post("/v1/leases/{lease}", response_model=LeaseAnswer, responses=ERRORS)
    async def acquire_lease(
        request: Request, lease: str, body: LeaseBody, credential: Bearer = HOST_CREDENTIAL
    ) -> dict[str, Any]:
        host = ctl.agent_host(body.host, "", token_of(credential), peer(request))
        held = ctl.leases.acquire(lease, host.name, body.session, body.ttl, host.key)
        return {"protocol": PROTOCOL, **times_to_rfc3339(ctl.leases.describe(held))}

    @api.delete("/v1/leases/{lease}", response_model=LeaseAnswer, responses=ERRORS)
    async def release_lease(
        request: Request,
        lease: str,
        host: str = LEASE_HOST,
        session: str = LEASE_SESSION,
        credential: Bearer = HOST_CREDENTIAL,
    ) -> dict[str, Any]:
        speaker = ctl.agent_host(host, "", token_of(credential), peer(request))
        released = ctl.leases.release(lease, speaker.name, session, speaker.key)
        return {"protocol": PROTOCOL, **times_to_rfc3339(ctl.leases.describe(released))}

    @api.get("/v1/leases", response_model=list[LeaseAnswer], responses=ERRORS)
    async def list_leases(by: str = ADMIN_OR_READER) -> list[dict[str, Any]]:
        return [{"protocol": PROTOCOL, **times_to_rfc3339(le)} for le in ctl.leases.listing()]
