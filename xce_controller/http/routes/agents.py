"""What an agent calls: join, join-timeout, heartbeat, notice, watch and its job reports."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response

from xce_controller.core import lifecycle as lc
from xce_controller.core.model import TERMINAL
from xce_controller.http.auth import (
    ERRORS,
    HOST_CREDENTIAL,
    JOIN_BEARER,
    WORKER_CREDENTIAL,
    Bearer,
    token_of,
)
from xce_controller.http.pydantic_versions import dump
from xce_controller.http.schemas import (
    GaveUpAnswer,
    GaveUpBody,
    HeartbeatBody,
    HostAnswer,
    InfoAnswer,
    JobBody,
    JobReportBody,
    JoinAnswer,
    JoinBody,
    NoticeBody,
    WatchAnswer,
)
from xce_controller.http.views import agent_answer, job_view
from xce_controller.service import Controller
from xce_protocol.notices import BadNotice, notice_from_wire
from xce_protocol.protocol import PROTOCOL

SINCE = Query(0, ge=0)
WATCH_TIMEOUT = Query(30.0, ge=0, le=300)
INSTANCE_ID = Query("", max_length=253)


def peer(request: Request) -> str:
    return request.client.host if request.client else ""


HEARTBEAT = "/v1/hosts/{name}/heartbeat"
WATCH = "/v1/hosts/{name}/watch"


async def heartbeat_answer(
    ctl: Controller, name: str, body: HeartbeatBody, token: str, peer: str
) -> dict[str, Any]:
    """The heartbeat's decision and answer, for the route and for the fast path (fast.py)
    alike. A coroutine, so a Controller method that comes to wait stays one change here."""
    report = dump(body, exclude={"renew"})
    host = ctl.reporting_host(name, body.instance_id, token, peer, report)
    if not body.renew:
        return agent_answer(ctl, ctl.heartbeat(host, report))
    host, secret = ctl.renew(ctl.heartbeat(host, report), body.boot_id, body.agent_version)
    return {**agent_answer(ctl, host), "credential": secret, "incarnation": host.incarnation}


async def watch_answer(
    ctl: Controller, name: str, since: int, timeout: float, instance_id: str, token: str, peer: str
) -> dict[str, Any]:
    """The watch's wait and answer, for the route and for the fast path (fast.py) alike."""
    host = ctl.agent_host(name, instance_id, token, peer, True)
    host = await ctl.watch(host, since, timeout)
    if host.state in TERMINAL:
        raise lc.decommissioned(host)
    jobs = [job_view(ctl, j) for j in ctl.cluster.watched_jobs(host.key)]
    # Built from the views the model declares, answered without the model's validation:
    # a burst of watches ending together (watch_expiry.py) costs each as little as it can.
    body = {**agent_answer(ctl, host), "credential": None, "incarnation": None}
    return {**body, "jobs": jobs}


def install(api: FastAPI, ctl: Controller) -> None:
    """Add this resource's routes to the app (on the app itself: FastAPI's included routers
    hide their routes from the metrics' and errors' route lookup on newer releases)."""

    @api.get("/v1/info", response_model=InfoAnswer)
    async def info() -> dict[str, Any]:
        return {
            "protocol": PROTOCOL,
            "heartbeat_interval": ctl.cfg.heartbeat_interval,
            "host_loss_grace": ctl.cfg.host_loss_grace,
            "unmatched_joins": ctl.cfg.unmatched_joins.value,
            "templates": sorted(ctl.cfg.templates),
        }

    @api.post("/v1/join", response_model=JoinAnswer, responses=ERRORS)
    async def join(
        request: Request,
        body: JoinBody,
        token: Bearer = JOIN_BEARER,
        credential: Bearer = HOST_CREDENTIAL,
    ) -> dict[str, Any]:
        req = lc.JoinRequest(
            name=body.host,
            instance_id=body.instance_id,
            template=body.template,
            provider=body.provider,
            addresses=tuple(body.addresses),
            boot_id=body.boot_id,
            roles=tuple(body.roles),
            resources=dict(body.resources),
            agent_version=body.agent_version,
            token=token_of(token),
            peer=peer(request),
        )
        host, secret, worker = ctl.join(req)
        template = ctl.cfg.templates.get(host.template) or ctl.cfg.templates["default"]
        return {
            **agent_answer(ctl, host),
            "status": "accepted",
            "key": host.key,
            "provisioned": host.provisioned,
            "template": template.to_json(),
            "credential": secret,
            "worker_credential": worker,
            "incarnation": host.incarnation,
        }

    @api.post("/v1/join-timeout", response_model=GaveUpAnswer, responses=ERRORS)
    async def join_timeout(
        request: Request, body: GaveUpBody, token: Bearer = JOIN_BEARER
    ) -> dict[str, Any]:
        req = lc.JoinRequest(
            name=body.host, instance_id=body.instance_id, token=token_of(token), peer=peer(request)
        )
        why = f"{body.reason} ({body.action})" if body.action else body.reason
        record = ctl.gave_up(req, why)
        return {
            "protocol": PROTOCOL,
            "host": body.host,
            "instance_id": record.instance_id,
            "state": record.state.value,
            "reason": record.reason,
        }

    @api.post(HEARTBEAT, response_model=HostAnswer, responses=ERRORS)
    async def heartbeat(
        request: Request, name: str, body: HeartbeatBody, credential: Bearer = HOST_CREDENTIAL
    ) -> dict[str, Any]:
        # Served by fast.py in front of FastAPI; this route declares it (OpenAPI) and answers
        # what the fast path hands on (a body it does not take as is: errors, other types).
        return await heartbeat_answer(ctl, name, body, token_of(credential), peer(request))

    @api.post("/v1/hosts/{name}/notice", response_model=HostAnswer, responses=ERRORS)
    async def notice(
        request: Request, name: str, body: NoticeBody, credential: Bearer = HOST_CREDENTIAL
    ) -> dict[str, Any]:
        host = ctl.agent_host(name, body.instance_id, token_of(credential), peer(request))
        try:
            received = notice_from_wire(dump(body, exclude={"protocol", "instance_id"}))
        except BadNotice as exc:
            raise lc.Refused("bad_request", 422, str(exc)) from None
        return agent_answer(ctl, ctl.notice(host, received))

    @api.get(WATCH, response_model=WatchAnswer, responses=ERRORS)
    async def watch(
        request: Request,
        name: str,
        since: int = SINCE,
        timeout: float = WATCH_TIMEOUT,
        instance_id: str = INSTANCE_ID,
        credential: Bearer = HOST_CREDENTIAL,
        worker: Bearer = WORKER_CREDENTIAL,
    ) -> Response:
        # Served by fast.py too, for the queries it reads as this route does.
        token = token_of(credential)
        answer = await watch_answer(ctl, name, since, timeout, instance_id, token, peer(request))
        return JSONResponse(answer)

    @api.post("/v1/hosts/{name}/jobs/{job_id}/{event}", response_model=JobBody, responses=ERRORS)
    async def job_event(
        request: Request,
        name: str,
        job_id: int,
        event: str,
        body: JobReportBody,
        credential: Bearer = HOST_CREDENTIAL,
        worker: Bearer = WORKER_CREDENTIAL,
    ) -> dict[str, Any]:
        host = ctl.agent_host(name, "", token_of(credential), peer(request), True)
        return job_view(ctl, ctl.job_report(host, job_id, event, body.exit_code))
