"""The controller's REST API, version 1 (`/v1`). See docs/protocol.md and docs/openapi.json.

Parameters are declared as defaults (`= HOST_CREDENTIAL`), not with Annotated, and the
lifespan goes on the router where FastAPI takes none: Debian 12's FastAPI 0.92 has neither.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Query, Request

from xce_controller.core import credentials, notices
from xce_controller.core import jobs as jobmodel
from xce_controller.core import lifecycle as lc
from xce_controller.core.codec import host_to_json, job_to_json
from xce_controller.core.model import TERMINAL, AdminAction, Host, HostState, Job, JobEvent
from xce_controller.http import observe as observe_api
from xce_controller.http import provisioner as provisioner_api
from xce_controller.http.auth import (
    ADMIN_ROLE,
    ERRORS,
    HOST_CREDENTIAL,
    JOIN_BEARER,
    PROVISIONER_ROLE,
    WORKER_CREDENTIAL,
    Bearer,
    token_of,
    viewer,
)
from xce_controller.http.errors import install_errors
from xce_controller.http.limits import BodyLimit
from xce_controller.http.pydantic_versions import dump
from xce_controller.http.schemas import (
    ControlBody,
    DecommissionBody,
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
from xce_protocol.notices import BadNotice, notice_from_wire

SINCE = Query(0, ge=0)
WATCH_TIMEOUT = Query(30.0, ge=0, le=300)
INSTANCE_ID = Query("", max_length=253)
LEASE_HOST = Query(..., min_length=1, max_length=253)
LEASE_SESSION = Query(..., min_length=1, max_length=64)


def _peer(request: Request) -> str:
    return request.client.host if request.client else ""


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
    observe_api.install(app, ctl, viewer)
    provisioner_api.install(app, ctl)
    app.add_middleware(BodyLimit, limit=lambda: ctl.cfg.max_request_body, protocol=PROTOCOL)

    install_errors(app)

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
            token=token_of(token),
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
            name=body.host, instance_id=body.instance_id, token=token_of(token), peer=_peer(request)
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
            host = ctl.agent_host(name, body.instance_id, token_of(credential), _peer(request))
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
        host = ctl.agent_host(name, body.instance_id, token_of(credential), _peer(request))
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
        host = ctl.agent_host(name, instance_id, token_of(credential), _peer(request), True)
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
        host = ctl.agent_host(name, "", token_of(credential), _peer(request), True)
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
        host = ctl.agent_host(body.host, "", token_of(credential), _peer(request))
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
        speaker = ctl.agent_host(host, "", token_of(credential), _peer(request))
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
