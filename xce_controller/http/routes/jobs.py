"""The admin's jobs: submit, list, cancel; and the templates with how many hosts use each."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from xce_controller.http.auth import ADMIN_OR_READER, ADMIN_ROLE, ERRORS
from xce_controller.http.schemas import JobBody, SubmitBody, TemplateUse
from xce_controller.http.views import job_view
from xce_controller.service import Controller


def install(api: FastAPI, ctl: Controller) -> None:
    """Add this resource's routes to the app (on the app itself: FastAPI's included routers
    hide their routes from the metrics' and errors' route lookup on newer releases)."""

    @api.post("/v1/jobs", response_model=JobBody, status_code=201, responses=ERRORS)
    async def submit(body: SubmitBody, by: str = ADMIN_ROLE) -> dict[str, Any]:
        return job_view(ctl, ctl.submit("admin", body.command, body.slots, body.host))

    @api.get("/v1/jobs", response_model=list[JobBody], responses=ERRORS)
    async def jobs(by: str = ADMIN_OR_READER) -> list[dict[str, Any]]:
        return [job_view(ctl, j) for j in sorted(ctl.cluster.jobs.values(), key=lambda j: j.id)]

    @api.post("/v1/jobs/{job_id}/cancel", response_model=JobBody, responses=ERRORS)
    async def cancel(job_id: int, by: str = ADMIN_ROLE) -> dict[str, Any]:
        ctl.cancel(job_id, "admin")
        return job_view(ctl, ctl.cluster.jobs[job_id])

    @api.get("/v1/templates", response_model=list[TemplateUse], responses=ERRORS)
    async def templates(by: str = ADMIN_OR_READER) -> list[dict[str, Any]]:
        uses = ctl.template_uses()
        return [
            {**t.to_json(), "hosts": uses.get(name, 0)}
            for name, t in sorted(ctl.cfg.templates.items())
        ]
