"""The controller's REST API, version 1 (`/v1`). See docs/protocol.md and docs/openapi.json.

Parameters are declared as defaults (`= HOST_CREDENTIAL`), not with Annotated, and the
lifespan goes on the router where FastAPI takes none: Debian 12's FastAPI 0.92 has neither.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator
from typing import Any, Optional

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from xce_controller import credentials, notices, observe_api
from xce_controller import jobs as jobmodel
from xce_controller import lifecycle as lc
from xce_controller.codec import host_to_json, job_to_json
from xce_controller.limits import BodyLimit
from xce_controller.model import TERMINAL, AdminAction, Host, HostState, Job, JobEvent
from xce_controller.pydantic_versions import dump
from xce_controller.schemas import (
    ControlBody,
    DecommissionBody,
    ErrorBody,
    ExpectAnswer,
    ExpectBody,
    GaveUpAnswer,
    GaveUpBody,
    HeartbeatBody,
    HostAnswer,
    HostDetail,
    InfoAnswer,
    JobBody,
    JobReportBody,
    JoinAnswer,
    JoinBody,
    LeaseAnswer,
    LeaseBody,
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
    code: {"model": ErrorBody} for code in (400, 401, 403, 404, 409, 410, 413, 422, 503)
}

# Who may call what: each operation names the bearer it takes, so the OpenAPI document says
# it and the authorization-matrix test (tests/integration/test_authorization.py) checks it.
ADMIN = HTTPBearer(
    auto_error=False,
    scheme_name="AdminToken",
    description="auth.admin_token: admin calls and the provisioner's",
)
PROVISIONER = HTTPBearer(
    auto_error=False,
    scheme_name="ProvisionerToken",
    description="auth.provisioner_token: expect, expected, to-return, ack",
)
JOIN = HTTPBearer(
    auto_error=False,
    scheme_name="JoinToken",
    description="a per-instance join token (single use, expires at the join deadline) or "
    "auth.join_token: joins only",
)
HOST = HTTPBearer(
    auto_error=False,
    scheme_name="HostCredential",
    description="the credential the join answer issued (renewed when the agent starts): "
    "this host's calls only",
)
READ = HTTPBearer(
    auto_error=False,
    scheme_name="ReadToken",
    description="auth.read_token: reads only (GETs, /v1/events, /metrics, the status page)",
)
WORKER = HTTPBearer(
    auto_error=False,
    scheme_name="WorkerCredential",
    description="the worker credential the join answer issued: this host's watch and job "
    "reports only",
)
Bearer = Optional[HTTPAuthorizationCredentials]


def _token(creds: Bearer) -> str:
    return creds.credentials.strip() if creds is not None else ""


ADMIN_BEARER = Depends(ADMIN)
PROVISIONER_BEARER = Depends(PROVISIONER)
READ_BEARER = Depends(READ)
JOIN_BEARER = Depends(JOIN)
HOST_CREDENTIAL = Depends(HOST)
WORKER_CREDENTIAL = Depends(WORKER)


def _admin(request: Request, creds: Bearer = ADMIN_BEARER) -> str:
    cfg = request.app.state.controller.cfg
    token = _token(creds)
    if credentials.same(token, cfg.admin_token):
        return "admin"
    if _reads(request, token):
        return "reader"
    if credentials.same(token, cfg.provisioner_token):
        raise lc.Refused("forbidden", 403, "the provisioner token cannot make admin calls")
    raise lc.Refused("unauthorized", 401, "admin token missing or wrong")


def _reads(request: Request, token: str) -> bool:
    """The read-only token reads (a dashboard, `xcecli why`) and changes nothing: on any
    other method it is no token at all."""
    cfg = request.app.state.controller.cfg
    return request.method == "GET" and credentials.same(token, cfg.read_token)


def _provisioner(
    request: Request,
    creds: Bearer = PROVISIONER_BEARER,
    admin: Bearer = ADMIN_BEARER,
) -> str:
    cfg = request.app.state.controller.cfg
    token = _token(creds)
    if credentials.same(token, cfg.provisioner_token):
        return "provisioner"
    if credentials.same(token, cfg.admin_token):
        return "admin"
    if _reads(request, token):
        return "reader"
    raise lc.Refused("unauthorized", 401, "provisioner or admin token missing or wrong")


def _viewer(
    request: Request,
    admin: Bearer = ADMIN_BEARER,
    read: Bearer = READ_BEARER,
) -> str:
    """The admin or read-only token, as a bearer or the status page's cookie."""
    token = _token(admin)
    ctl = request.app.state.controller
    if not observe_api.signed_in(ctl, request, f"Bearer {token}" if token else None):
        raise lc.Refused("unauthorized", 401, "admin or read-only token missing or wrong")
    return "admin" if credentials.same(token, ctl.cfg.admin_token) else "reader"


ADMIN_ROLE = Depends(_admin)
PROVISIONER_ROLE = Depends(_provisioner)
SINCE = Query(0, ge=0)
WATCH_TIMEOUT = Query(30.0, ge=0, le=300)
INSTANCE_ID = Query("", max_length=253)
LEASE_HOST = Query(..., min_length=1, max_length=253)
LEASE_SESSION = Query(..., min_length=1, max_length=64)


def _peer(request: Request) -> str:
    return request.client.host if request.client else ""


def _allowed(app: FastAPI, path: str) -> list[str]:
    methods: set[str] = set()
    for route in app.routes:
        if isinstance(route, APIRoute) and route.path_regex.match(path):
            methods |= route.methods or set()
    return sorted(methods)


def _with_lifespan(ctl: Controller, **options: Any) -> FastAPI:
    """The app, starting the controller's timers with the server. Debian 12's FastAPI 0.92
    takes no lifespan (and its Starlette deprecates startup handlers): there the lifespan goes
    on the app's router, which is where FastAPI's newer releases put it too."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ctl.start()
        yield
        await ctl.stop()

    if "lifespan" in inspect.signature(FastAPI.__init__).parameters:
        return FastAPI(lifespan=lifespan, **options)
    app = FastAPI(**options)
    app.router.lifespan_context = lifespan
    return app


def create_app(ctl: Controller) -> FastAPI:
    app = _with_lifespan(
        ctl,
        title="XCE reference controller",
        version=PROTOCOL,
        description="Elastic-host lifecycle: expected hosts, joins, drain, decommission.",
    )

    app.state.controller = ctl
    observe_api.install(app, ctl, _viewer)
    app.add_middleware(BodyLimit, limit=ctl.cfg.max_request_body, protocol=PROTOCOL)

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
        kinds = {
            400: "bad_request",
            404: "not_found",
            405: "method_not_allowed",
            413: "too_large",
        }
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
        secrets = ("token_hash", "credential_hash", "next_credential_hash", "past_credentials")
        for secret in (*secrets, "worker_hash"):
            data.pop(secret)
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
            token=_token(token),
            peer=_peer(request),
        )
        host, secret, worker = ctl.join(req)
        template = ctl.cfg.templates.get(host.template) or ctl.cfg.templates["default"]
        return {
            **answer(host),
            "status": "accepted",
            "key": host.key,
            "provisioned": host.provisioned,
            "template": template.to_json(),
            "credential": secret,
            "worker_credential": worker,
            "incarnation": host.incarnation,
        }

    @app.post("/v1/join-timeout", response_model=GaveUpAnswer, responses=ERRORS)
    async def join_timeout(
        request: Request, body: GaveUpBody, token: Bearer = JOIN_BEARER
    ) -> dict[str, Any]:
        req = lc.JoinRequest(
            name=body.host, instance_id=body.instance_id, token=_token(token), peer=_peer(request)
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

    @app.post("/v1/hosts/{name}/heartbeat", response_model=HostAnswer, responses=ERRORS)
    async def heartbeat(
        request: Request, name: str, body: HeartbeatBody, credential: Bearer = HOST_CREDENTIAL
    ) -> dict[str, Any]:
        report = dump(body, exclude={"renew"})
        try:
            host = ctl.agent_host(name, body.instance_id, _token(credential), _peer(request))
        except lc.Refused as refused:
            if refused.kind == "decommissioned":  # the credential was checked: keep its word
                gone = ctl.cluster.by_name(name)
                if gone is not None:
                    ctl.record_report(gone, report)
            raise
        if not body.renew:
            return answer(ctl.heartbeat(host, report))
        host, secret = ctl.renew(ctl.heartbeat(host, report), body.boot_id)
        return {**answer(host), "credential": secret, "incarnation": host.incarnation}

    @app.post("/v1/hosts/{name}/notice", response_model=HostAnswer, responses=ERRORS)
    async def notice(
        request: Request, name: str, body: NoticeBody, credential: Bearer = HOST_CREDENTIAL
    ) -> dict[str, Any]:
        host = ctl.agent_host(name, body.instance_id, _token(credential), _peer(request))
        try:
            received = notice_from_wire(dump(body, exclude={"protocol", "instance_id"}))
        except BadNotice as exc:
            raise lc.Refused("bad_request", 422, str(exc)) from None
        return answer(ctl.notice(host, received))

    @app.get("/v1/hosts/{name}/watch", response_model=WatchAnswer, responses=ERRORS)
    async def watch(
        request: Request,
        name: str,
        since: int = SINCE,
        timeout: float = WATCH_TIMEOUT,
        instance_id: str = INSTANCE_ID,
        credential: Bearer = HOST_CREDENTIAL,
        worker: Bearer = WORKER_CREDENTIAL,
    ) -> dict[str, Any]:
        host = ctl.agent_host(name, instance_id, _token(credential), _peer(request), True)
        host = await ctl.watch(host, since, timeout)
        if host.state in TERMINAL:
            raise lc.decommissioned(host)
        jobs = [job(j) for j in ctl.cluster.watched_jobs(host.key)]
        return {**answer(host), "jobs": jobs}

    @app.post("/v1/hosts/{name}/jobs/{job_id}/{event}", response_model=JobBody, responses=ERRORS)
    async def job_event(
        request: Request,
        name: str,
        job_id: int,
        event: str,
        body: JobReportBody,
        credential: Bearer = HOST_CREDENTIAL,
        worker: Bearer = WORKER_CREDENTIAL,
    ) -> dict[str, Any]:
        host = ctl.agent_host(name, "", _token(credential), _peer(request), True)
        if event not in {e.value for e in JobEvent}:
            raise lc.Refused("not_found", 404, f"unknown job event {event!r}")
        report = JobEvent(event)
        ctl.commit(
            jobmodel.job_report(ctl.cluster, ctl.clock(), host, job_id, report, body.exit_code)
        )
        return job(ctl.cluster.jobs[job_id])

    @app.post("/v1/leases/{lease}", response_model=LeaseAnswer, responses=ERRORS)
    async def acquire_lease(
        request: Request, lease: str, body: LeaseBody, credential: Bearer = HOST_CREDENTIAL
    ) -> dict[str, Any]:
        host = ctl.agent_host(body.host, "", _token(credential), _peer(request))
        held = ctl.leases.acquire(lease, host.name, body.session, body.ttl, host.key)
        return {"protocol": PROTOCOL, **ctl.leases.describe(held)}

    @app.delete("/v1/leases/{lease}", response_model=LeaseAnswer, responses=ERRORS)
    async def release_lease(
        request: Request,
        lease: str,
        host: str = LEASE_HOST,
        session: str = LEASE_SESSION,
        credential: Bearer = HOST_CREDENTIAL,
    ) -> dict[str, Any]:
        speaker = ctl.agent_host(host, "", _token(credential), _peer(request))
        released = ctl.leases.release(lease, speaker.name, session, speaker.key)
        return {"protocol": PROTOCOL, **ctl.leases.describe(released)}

    @app.get("/v1/leases", response_model=list[LeaseAnswer], responses=ERRORS)
    async def list_leases(by: str = ADMIN_ROLE) -> list[dict[str, Any]]:
        return [{"protocol": PROTOCOL, **le} for le in ctl.leases.listing()]

    @app.post("/v1/expected", response_model=ExpectAnswer, status_code=201, responses=ERRORS)
    async def expect(body: ExpectBody, by: str = PROVISIONER_ROLE) -> dict[str, Any]:
        now = ctl.clock()
        deadline = now + body.deadline_in if body.deadline_in else None
        if body.join_token and body.mint_join_token:
            raise lc.Refused("conflict", 409, "join_token and mint_join_token: one of them")
        token = credentials.mint() if body.mint_join_token else body.join_token
        if any(
            credentials.same(token, t) for t in (ctl.cfg.admin_token, ctl.cfg.provisioner_token)
        ):
            raise lc.Refused("conflict", 409, "a join token must differ from the role tokens")
        ctl.commit(
            lc.expect(
                ctl.cluster,
                ctl.cfg,
                now,
                by,
                body.instance_id,
                body.template,
                body.expected_name,
                body.expected_address,
                deadline,
                body.provider,
                token,
            )
        )
        minted = {"join_token": token} if body.mint_join_token else {}
        return {**detail(ctl.cluster.hosts[body.instance_id]), **minted}

    @app.get("/v1/expected", response_model=list[HostDetail], responses=ERRORS)
    async def expected(by: str = PROVISIONER_ROLE) -> list[dict[str, Any]]:
        wanted = (HostState.EXPECTED, HostState.OVERDUE)
        return [detail(h) for h in ctl.cluster.hosts.values() if h.state in wanted]

    @app.get("/v1/to-return", response_model=list[HostDetail], responses=ERRORS)
    async def to_return(by: str = PROVISIONER_ROLE) -> list[dict[str, Any]]:
        return [detail(h) for h in lc.to_return(ctl.cluster)]

    @app.post("/v1/to-return/{instance_id}/ack", response_model=HostDetail, responses=ERRORS)
    async def ack(instance_id: str, by: str = PROVISIONER_ROLE) -> dict[str, Any]:
        ctl.commit(lc.ack_return(ctl.cluster, ctl.clock(), by, instance_id))
        return detail(ctl.cluster.hosts[instance_id])

    @app.get("/v1/hosts", response_model=list[HostDetail], responses=ERRORS)
    async def hosts(all: bool = False, by: str = ADMIN_ROLE) -> list[dict[str, Any]]:
        hidden = () if all else TERMINAL
        shown = [h for h in ctl.cluster.hosts.values() if h.state not in hidden]
        return [detail(h) for h in sorted(shown, key=lambda h: h.name or h.key)]

    @app.get("/v1/hosts/{name}", response_model=HostDetail, responses=ERRORS)
    async def host(name: str, by: str = ADMIN_ROLE) -> dict[str, Any]:
        return detail(ctl.find_host(name))

    @app.post("/v1/hosts/{name}/open", response_model=HostDetail, responses=ERRORS)
    async def open_host(name: str, body: ControlBody, by: str = ADMIN_ROLE) -> dict[str, Any]:
        return detail(ctl.control(name, AdminAction.OPEN, "admin", why=body.reason))

    @app.post("/v1/hosts/{name}/close", response_model=HostDetail, responses=ERRORS)
    async def close_host(name: str, body: ControlBody, by: str = ADMIN_ROLE) -> dict[str, Any]:
        return detail(ctl.control(name, AdminAction.CLOSE, "admin", why=body.reason))

    @app.post("/v1/hosts/{name}/decommission", response_model=HostDetail, responses=ERRORS)
    async def decommission(
        name: str, body: DecommissionBody, by: str = ADMIN_ROLE
    ) -> dict[str, Any]:
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
    async def submit(body: SubmitBody, by: str = ADMIN_ROLE) -> dict[str, Any]:
        facts = jobmodel.submit(
            ctl.cluster, ctl.clock(), "admin", body.command, body.slots, body.host
        )
        job_id = int(facts[0].data["id"])
        ctl.commit(facts)
        return job(ctl.cluster.jobs[job_id])

    @app.get("/v1/jobs", response_model=list[JobBody], responses=ERRORS)
    async def jobs(by: str = ADMIN_ROLE) -> list[dict[str, Any]]:
        return [job(j) for j in sorted(ctl.cluster.jobs.values(), key=lambda j: j.id)]

    @app.post("/v1/jobs/{job_id}/cancel", response_model=JobBody, responses=ERRORS)
    async def cancel(job_id: int, by: str = ADMIN_ROLE) -> dict[str, Any]:
        ctl.cancel(job_id, "admin")
        return job(ctl.cluster.jobs[job_id])

    @app.get("/v1/templates", response_model=list[TemplateUse], responses=ERRORS)
    async def templates(by: str = ADMIN_ROLE) -> list[dict[str, Any]]:
        uses: dict[str, int] = {}
        for h in ctl.cluster.hosts.values():
            if h.state not in TERMINAL:
                uses[h.template] = uses.get(h.template, 0) + 1
        return [
            {**t.to_json(), "hosts": uses.get(name, 0)}
            for name, t in sorted(ctl.cfg.templates.items())
        ]

    return app
