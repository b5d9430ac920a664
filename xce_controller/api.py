"""The controller's REST API, version 1 (`/v1`). See docs/protocol.md and docs/openapi.json.

Parameters are declared as defaults (`= AUTHORIZATION`), not with Annotated, and the
lifespan falls back to startup/shutdown handlers: Debian 12's FastAPI 0.92 has neither.
"""

from __future__ import annotations

import contextlib
import hmac
import inspect
from collections.abc import AsyncIterator
from typing import Any, Optional

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from xce_controller import jobs as jobmodel
from xce_controller import lifecycle as lc
from xce_controller import notices, observe_api
from xce_controller.codec import host_to_json, job_to_json
from xce_controller.model import TERMINAL, AdminAction, Host, HostState, Job, JobEvent
from xce_controller.pydantic_versions import dump
from xce_controller.schemas import (
    ControlBody,
    DecommissionBody,
    ErrorBody,
    ExpectBody,
    HeartbeatBody,
    HostAnswer,
    HostDetail,
    InfoAnswer,
    JobBody,
    JobReportBody,
    JoinAnswer,
    JoinBody,
    NoticeBody,
    SubmitBody,
    TemplateUse,
    WatchAnswer,
)
from xce_controller.service import PROTOCOL, Controller
from xce_controller.store import StorageUnavailable
from xce_protocol.notices import BadNotice, notice_from_wire
from xce_protocol.reasons import Reason, refusal

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 403, 404, 409, 410, 422, 503)
}


def _bearer(authorization: Optional[str]) -> str:
    if authorization and authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return ""


AUTHORIZATION = Header(None)


def _admin(request: Request, authorization: Optional[str] = AUTHORIZATION) -> str:
    cfg = request.app.state.controller.cfg
    presented = _bearer(authorization)
    if hmac.compare_digest(presented, cfg.admin_token):
        return "admin"
    # The read-only token reads (a dashboard, `xcecli why`) and changes nothing.
    if (
        request.method == "GET"
        and cfg.read_token
        and hmac.compare_digest(presented, cfg.read_token)
    ):
        return "reader"
    raise lc.Refused("unauthorized", 401, "admin token missing or wrong")


ADMIN = Depends(_admin)
SINCE = Query(0, ge=0)
WATCH_TIMEOUT = Query(30.0, ge=0, le=300)
INSTANCE_ID = Query("", max_length=253)


def _allowed(app: FastAPI, path: str) -> list[str]:
    methods: set[str] = set()
    for route in app.routes:
        if isinstance(route, APIRoute) and route.path_regex.match(path):
            methods |= route.methods or set()
    return sorted(methods)


def _lifespan(ctl: Controller) -> dict[str, Any]:
    """Start the controller's timers with the server: a lifespan where FastAPI has one."""
    if "lifespan" in inspect.signature(FastAPI.__init__).parameters:

        @contextlib.asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncIterator[None]:
            ctl.start()
            yield
            await ctl.stop()

        return {"lifespan": lifespan}
    return {"on_startup": [ctl.start], "on_shutdown": [ctl.stop]}


def create_app(ctl: Controller) -> FastAPI:
    app = FastAPI(
        **_lifespan(ctl),
        title="XCE reference controller",
        version=PROTOCOL,
        description="Elastic-host lifecycle: expected hosts, joins, drain, decommission.",
    )

    app.state.controller = ctl
    observe_api.install(app, ctl)

    @app.exception_handler(lc.Refused)
    async def refused(request: Request, exc: lc.Refused) -> JSONResponse:
        observe_api.refused(request, exc.code.value)
        body = {
            "error": exc.kind,
            "code": exc.code.value,
            "message": exc.message,
            "protocol": PROTOCOL,
            **exc.details,
        }
        return JSONResponse(body, status_code=exc.status)

    @app.exception_handler(StorageUnavailable)
    async def storage(request: Request, exc: StorageUnavailable) -> JSONResponse:
        code = Reason.REFUSED_STORAGE_UNAVAILABLE.value
        observe_api.refused(request, code)
        body = {
            "error": "storage_unavailable",
            "code": code,
            "message": f"the controller cannot store changes: {exc.cause}; nothing was changed",
            "protocol": PROTOCOL,
        }
        return JSONResponse(body, status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        # Logged with its traceback by the server; the client gets the same JSON shape.
        body = {"error": "internal", "message": f"{type(exc).__name__}", "protocol": PROTOCOL}
        return JSONResponse(body, status_code=500)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kinds = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}
        kind = kinds.get(exc.status_code, "error")
        code = refusal(kind).value
        observe_api.refused(request, code)
        body = {"error": kind, "code": code, "message": str(exc.detail), "protocol": PROTOCOL}
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # one path may be served by several routes
            headers["Allow"] = ", ".join(_allowed(app, request.url.path))
        return JSONResponse(body, status_code=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        code = Reason.REFUSED_BAD_REQUEST.value
        observe_api.refused(request, code)
        body = {
            "error": "bad_request",
            "code": code,
            "message": "; ".join(problems),
            "protocol": PROTOCOL,
        }
        return JSONResponse(body, status_code=422)

    def answer(host: Host) -> dict[str, Any]:
        notice = None
        if host.notice is not None:
            notice = {
                "kind": host.notice.kind,
                "event_id": host.notice.event_id,
                "deadline": host.notice.deadline,
                "drained": notices.drained(ctl.cluster, host),
            }
        return {
            "notice": notice,
            "protocol": PROTOCOL,
            "host": host.name,
            "instance_id": host.instance_id,
            "state": host.state.value,
            "reason": host.reason,
            "version": ctl.host_version.get(host.key, ctl.cluster.version),
            "heartbeat_interval": ctl.cfg.heartbeat_interval,
            "host_loss_grace": ctl.cfg.host_loss_grace,
        }

    def job(j: Job) -> dict[str, Any]:
        data = job_to_json(j)
        placed = ctl.cluster.hosts.get(j.assigned)
        data["assigned_host"] = placed.name if placed is not None else ""
        return data

    def detail(host: Host) -> dict[str, Any]:
        data = host_to_json(host)
        data.pop("token_hash")
        data.pop("boot_id")
        data.pop("resources")
        data["last_seen"] = ctl.seen.get(host.key)
        data["jobs_running"] = len(ctl.cluster.jobs_on(host.key))
        data["report"] = ctl.reports.get(host.key)
        return data

    @app.get("/v1/info", response_model=InfoAnswer)
    async def info() -> dict[str, Any]:
        return {
            "protocol": PROTOCOL,
            "heartbeat_interval": ctl.cfg.heartbeat_interval,
            "host_loss_grace": ctl.cfg.host_loss_grace,
            "unmatched_joins": ctl.cfg.unmatched_joins.value,
            "templates": sorted(ctl.cfg.templates),
        }

    @app.post("/v1/join", response_model=JoinAnswer, responses=ERRORS)
    async def join(body: JoinBody, authorization: Optional[str] = AUTHORIZATION) -> dict[str, Any]:
        req = lc.JoinRequest(
            name=body.host,
            instance_id=body.instance_id,
            template=body.template,
            provider=body.provider,
            addresses=tuple(body.addresses),
            boot_id=body.boot_id,
            roles=tuple(body.roles),
            resources=body.resources,
            token=_bearer(authorization),
        )
        host = ctl.join(req)
        template = ctl.cfg.templates.get(host.template) or ctl.cfg.templates["default"]
        return {
            **answer(host),
            "status": "accepted",
            "key": host.key,
            "provisioned": host.provisioned,
            "template": template.to_json(),
        }

    @app.post("/v1/hosts/{name}/heartbeat", response_model=HostAnswer, responses=ERRORS)
    async def heartbeat(
        name: str, body: HeartbeatBody, authorization: Optional[str] = AUTHORIZATION
    ) -> dict[str, Any]:
        report = dump(body)
        ctl.record_report(name, body.instance_id, report)
        host = ctl.agent_host(name, body.instance_id, _bearer(authorization))
        return answer(ctl.heartbeat(host, report))

    @app.post("/v1/hosts/{name}/notice", response_model=HostAnswer, responses=ERRORS)
    async def notice(
        name: str, body: NoticeBody, authorization: Optional[str] = AUTHORIZATION
    ) -> dict[str, Any]:
        try:
            received = notice_from_wire(dump(body, exclude={"protocol", "instance_id"}))
        except BadNotice as exc:
            raise lc.Refused("bad_request", 422, str(exc)) from None
        host = ctl.agent_host(name, body.instance_id, _bearer(authorization))
        return answer(ctl.notice(host, received))

    @app.get("/v1/hosts/{name}/watch", response_model=WatchAnswer, responses=ERRORS)
    async def watch(
        name: str,
        since: int = SINCE,
        timeout: float = WATCH_TIMEOUT,
        instance_id: str = INSTANCE_ID,
        authorization: Optional[str] = AUTHORIZATION,
    ) -> dict[str, Any]:
        host = ctl.agent_host(name, instance_id, _bearer(authorization))
        host = await ctl.watch(host, since, timeout)
        if host.state in TERMINAL:
            raise lc.decommissioned(host)
        jobs = [job(j) for j in ctl.cluster.watched_jobs(host.key)]
        return {**answer(host), "jobs": jobs}

    @app.post("/v1/hosts/{name}/jobs/{job_id}/{event}", response_model=JobBody, responses=ERRORS)
    async def job_event(
        name: str,
        job_id: int,
        event: str,
        body: JobReportBody,
        authorization: Optional[str] = AUTHORIZATION,
    ) -> dict[str, Any]:
        if event not in {e.value for e in JobEvent}:
            raise lc.Refused("not_found", 404, f"unknown job event {event!r}")
        host = ctl.agent_host(name, "", _bearer(authorization))
        report = JobEvent(event)
        ctl.commit(
            jobmodel.job_report(ctl.cluster, ctl.clock(), host, job_id, report, body.exit_code)
        )
        return job(ctl.cluster.jobs[job_id])

    @app.post("/v1/expected", response_model=HostDetail, status_code=201, responses=ERRORS)
    async def expect(body: ExpectBody, by: str = ADMIN) -> dict[str, Any]:
        now = ctl.clock()
        deadline = now + body.deadline_in if body.deadline_in else None
        ctl.commit(
            lc.expect(
                ctl.cluster,
                ctl.cfg,
                now,
                "provisioner",
                body.instance_id,
                body.template,
                body.expected_name,
                body.expected_address,
                deadline,
                body.provider,
                body.join_token,
            )
        )
        return detail(ctl.cluster.hosts[body.instance_id])

    @app.get("/v1/expected", response_model=list[HostDetail], responses=ERRORS)
    async def expected(by: str = ADMIN) -> list[dict[str, Any]]:
        wanted = (HostState.EXPECTED, HostState.OVERDUE)
        return [detail(h) for h in ctl.cluster.hosts.values() if h.state in wanted]

    @app.get("/v1/to-return", response_model=list[HostDetail], responses=ERRORS)
    async def to_return(by: str = ADMIN) -> list[dict[str, Any]]:
        return [detail(h) for h in lc.to_return(ctl.cluster)]

    @app.post("/v1/to-return/{instance_id}/ack", response_model=HostDetail, responses=ERRORS)
    async def ack(instance_id: str, by: str = ADMIN) -> dict[str, Any]:
        ctl.commit(lc.ack_return(ctl.cluster, ctl.clock(), "provisioner", instance_id))
        return detail(ctl.cluster.hosts[instance_id])

    @app.get("/v1/hosts", response_model=list[HostDetail], responses=ERRORS)
    async def hosts(all: bool = False, by: str = ADMIN) -> list[dict[str, Any]]:
        hidden = () if all else TERMINAL
        shown = [h for h in ctl.cluster.hosts.values() if h.state not in hidden]
        return [detail(h) for h in sorted(shown, key=lambda h: h.name or h.key)]

    @app.get("/v1/hosts/{name}", response_model=HostDetail, responses=ERRORS)
    async def host(name: str, by: str = ADMIN) -> dict[str, Any]:
        return detail(ctl.find_host(name))

    @app.post("/v1/hosts/{name}/open", response_model=HostDetail, responses=ERRORS)
    async def open_host(name: str, body: ControlBody, by: str = ADMIN) -> dict[str, Any]:
        return detail(ctl.control(name, AdminAction.OPEN, "admin", why=body.reason))

    @app.post("/v1/hosts/{name}/close", response_model=HostDetail, responses=ERRORS)
    async def close_host(name: str, body: ControlBody, by: str = ADMIN) -> dict[str, Any]:
        return detail(ctl.control(name, AdminAction.CLOSE, "admin", why=body.reason))

    @app.post("/v1/hosts/{name}/decommission", response_model=HostDetail, responses=ERRORS)
    async def decommission(name: str, body: DecommissionBody, by: str = ADMIN) -> dict[str, Any]:
        host = ctl.control(
            name,
            AdminAction.DECOMMISSION,
            "admin",
            drain_timeout=body.drain_timeout,
            policy=body.policy,
            why=body.reason,
        )
        return detail(host)

    @app.post("/v1/jobs", response_model=JobBody, status_code=201, responses=ERRORS)
    async def submit(body: SubmitBody, by: str = ADMIN) -> dict[str, Any]:
        facts = jobmodel.submit(
            ctl.cluster, ctl.clock(), "admin", body.command, body.slots, body.host
        )
        job_id = int(facts[0].data["id"])
        ctl.commit(facts)
        return job(ctl.cluster.jobs[job_id])

    @app.get("/v1/jobs", response_model=list[JobBody], responses=ERRORS)
    async def jobs(by: str = ADMIN) -> list[dict[str, Any]]:
        return [job(j) for j in sorted(ctl.cluster.jobs.values(), key=lambda j: j.id)]

    @app.post("/v1/jobs/{job_id}/cancel", response_model=JobBody, responses=ERRORS)
    async def cancel(job_id: int, by: str = ADMIN) -> dict[str, Any]:
        ctl.cancel(job_id, "admin")
        return job(ctl.cluster.jobs[job_id])

    @app.get("/v1/templates", response_model=list[TemplateUse], responses=ERRORS)
    async def templates(by: str = ADMIN) -> list[dict[str, Any]]:
        uses: dict[str, int] = {}
        for h in ctl.cluster.hosts.values():
            if h.state not in TERMINAL:
                uses[h.template] = uses.get(h.template, 0) + 1
        return [
            {**t.to_json(), "hosts": uses.get(name, 0)}
            for name, t in sorted(ctl.cfg.templates.items())
        ]

    return app
