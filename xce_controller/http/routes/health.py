"""`GET /healthz`: the cheap check a load balancer (HAProxy) sends each replica every second.

It needs no token and touches no store: 200 while this process serves, with whether its store
takes writes at the moment (for people and monitoring: a replica whose writes fail answers
them 503 itself, and agents move on from a 503); 503 once it is stopping, so a balancer takes
it out of rotation before it goes, and 503 while a replica is isolated (cut off from its
database, it answers heartbeats 503: replicas.Replica.heard), so a balancer sends its hosts
to a replica whose heartbeats the others hear.
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
        responses={503: {"model": HealthAnswer, "description": "stopping, or isolated"}},
    )
    async def healthz() -> JSONResponse:
        isolated = ctl.replica is not None and ctl.replica.isolated()
        storage = "unavailable" if ctl.storage_down or isolated else "ok"
        status = "stopping" if ctl.stopping else "isolated" if isolated else "ok"
        body = {"protocol": PROTOCOL, "status": status, "storage": storage}
        return JSONResponse(body, status_code=200 if status == "ok" else 503)
