"""What the provisioner calls: expect an instance, list the expected, the to-return list and
its acknowledgement. A provisioner under a lease sends it (`?lease=&token=`) with its expect
and its ack, and the controller refuses a grant that is no longer current (`stale_lease`)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from xce_controller.admin_verbs import Expectation, Held
from xce_controller.http.auth import ERRORS, PROVISIONER_OR_READER, PROVISIONER_ROLE
from xce_controller.http.routes.power import HELD
from xce_controller.http.schemas import ExpectAnswer, ExpectBody, HostDetail
from xce_controller.http.views import host_detail
from xce_controller.service import Controller


def install(api: FastAPI, ctl: Controller) -> None:
    """Add this resource's routes to the app (on the app itself: FastAPI's included routers
    hide their routes from the metrics' and errors' route lookup on newer releases)."""

    @api.post("/v1/expected", response_model=ExpectAnswer, status_code=201, responses=ERRORS)
    async def expect(
        body: ExpectBody, held: Held = HELD, by: str = PROVISIONER_ROLE
    ) -> dict[str, Any]:
        wanted = Expectation(
            instance_id=body.instance_id,
            template=body.template,
            name=body.expected_name,
            address=body.expected_address,
            deadline_in=body.deadline_in,
            provider=body.provider,
            join_token=body.join_token,
            mint_join_token=body.mint_join_token,
        )
        host, minted = ctl.expect(by, wanted, held)
        return {**host_detail(ctl, host), **({"join_token": minted} if minted else {})}

    @api.get("/v1/expected", response_model=list[HostDetail], responses=ERRORS)
    async def expected(by: str = PROVISIONER_OR_READER) -> list[dict[str, Any]]:
        return [host_detail(ctl, h) for h in ctl.expected_hosts()]

    @api.get("/v1/to-return", response_model=list[HostDetail], responses=ERRORS)
    async def to_return(by: str = PROVISIONER_OR_READER) -> list[dict[str, Any]]:
        return [host_detail(ctl, h) for h in ctl.to_return()]

    @api.post("/v1/to-return/{instance_id}/ack", response_model=HostDetail, responses=ERRORS)
    async def ack(
        instance_id: str, held: Held = HELD, by: str = PROVISIONER_ROLE
    ) -> dict[str, Any]:
        return host_detail(ctl, ctl.ack_return(by, instance_id, held))
