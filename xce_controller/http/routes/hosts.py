"""The admin's view and control of hosts: list, show, open, close, decommission."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from xce_controller.core.model import AdminAction
from xce_controller.http.auth import ADMIN_OR_READER, ADMIN_ROLE, ERRORS
from xce_controller.http.schemas import ControlBody, DecommissionBody, HostDetail
from xce_controller.http.views import host_detail
from xce_controller.service import Controller


def install(api: FastAPI, ctl: Controller) -> None:
    """Add this resource's routes to the app (on the app itself: FastAPI's included routers
    hide their routes from the metrics' and errors' route lookup on newer releases)."""

    @api.get("/v1/hosts", response_model=list[HostDetail], responses=ERRORS)
    async def hosts(all: bool = False, by: str = ADMIN_OR_READER) -> list[dict[str, Any]]:
        return [host_detail(ctl, h) for h in ctl.listed_hosts(all)]

    @api.get("/v1/hosts/{name}", response_model=HostDetail, responses=ERRORS)
    async def host(name: str, by: str = ADMIN_OR_READER) -> dict[str, Any]:
        return host_detail(ctl, ctl.find_host(name))

    @api.post("/v1/hosts/{name}/open", response_model=HostDetail, responses=ERRORS)
    async def open_host(name: str, body: ControlBody, by: str = ADMIN_ROLE) -> dict[str, Any]:
        return host_detail(ctl, ctl.control(name, AdminAction.OPEN, "admin", why=body.reason))

    @api.post("/v1/hosts/{name}/close", response_model=HostDetail, responses=ERRORS)
    async def close_host(name: str, body: ControlBody, by: str = ADMIN_ROLE) -> dict[str, Any]:
        return host_detail(ctl, ctl.control(name, AdminAction.CLOSE, "admin", why=body.reason))

    @api.post("/v1/hosts/{name}/decommission", response_model=HostDetail, responses=ERRORS)
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
        return host_detail(ctl, host)
