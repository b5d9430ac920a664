"""`GET /healthz`: the cheap check a load balancer (HAProxy) sends each replica every second.

It needs no token and touches no store: 200 while this process serves, with whether its store
takes writes at the moment (for people and monitoring: a replica whose writes fail answers
them 503 itself, and agents move on from a 503); 503 once it is stopping, so a balancer takes
it out of rotation before it goes.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from xce_controller.http.schemas import HealthAnswer
from xce_controller.service import Controller
from xce_protocol.protocol import PROTOCOL


def install(api: FastAPI, ctl: Controller) -> None:
    @api.get(
        "/healthz",
        response_model=HealthAnswer,
        responses={503: {"model": HealthAnswer, "description": "stopping"}},
    )
    async def healthz() -> JSONResponse:
        storage = "unavailable" if ctl.storage_down else "ok"
        status = "stopping" if ctl.stopping else "ok"
        body = {"protocol": PROTOCOL, "status": status, "storage": storage}
        return JSONResponse(body, status_code=503 if ctl.stopping else 200)
