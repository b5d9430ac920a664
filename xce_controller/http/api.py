"""The controller's REST API, version 1 (`/v1`): the app, assembled from one router per
resource (routes/). See docs/protocol.md and docs/openapi.json.

Parameters are declared as defaults (`= HOST_CREDENTIAL`), not with Annotated, and the
lifespan goes on the router where FastAPI takes none: Debian 12's FastAPI 0.92 has neither.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI

from xce_controller.http import observe as observe_api
from xce_controller.http.auth import viewer
from xce_controller.http.errors import install_errors
from xce_controller.http.fast import FastPath, Served
from xce_controller.http.limits import BodyLimit
from xce_controller.http.routes import agents, health, hosts, jobs, leases, power, provisioning
from xce_controller.service import Controller
from xce_protocol.protocol import PROTOCOL


def _with_lifespan(ctl: Controller, **options: Any) -> FastAPI:
    """The app, starting the controller's timers with the server. Debian 12's FastAPI 0.92
    takes no lifespan (and its Starlette deprecates startup handlers): there the lifespan goes
    on the app's router, which is where FastAPI's newer releases put it too."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ctl.start()
        yield
        await ctl.stop()

    parameters = inspect.signature(FastAPI.__init__).parameters
    if "telemetry" in parameters:
        # FastAPI's own OpenTelemetry (newer releases) looks up the global providers on every
        # request, environment lookups included (seen in a heartbeat's profile); the
        # controller's metrics are its own.
        options["telemetry"] = {"tracing": False, "metrics": False, "logs": False}
    if "lifespan" in parameters:
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
    # First added, so innermost: inside the body limit and the latency metrics.
    app.state.fast_path = Served()
    app.add_middleware(FastPath, api=app, ctl=ctl, served=app.state.fast_path)
    observe_api.install(app, ctl, viewer)
    app.add_middleware(BodyLimit, limit=lambda: ctl.cfg.max_request_body, protocol=PROTOCOL)

    install_errors(app)

    for resource in (health, agents, leases, provisioning, power, hosts, jobs):
        resource.install(app, ctl)
    return app
