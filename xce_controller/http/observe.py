"""What the controller shows about itself: `/metrics`, `/v1/events` and the status page.

All read-only. They take the admin token, or the read-only token (`auth.read_token`) that
a dashboard, a Prometheus scraper or an operator's browser can hold without being able to
change anything. The browser gives the token once (a form) and keeps a random session id in a
cookie scoped to the page's paths (ui_sessions.py), so the page's event stream needs no
header.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Optional

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.responses import Response, StreamingResponse

from xce_controller.http.events import MAX_SEQ, EventHub, Page
from xce_controller.http.metrics import LatencyMiddleware, Metrics
from xce_controller.http.schemas import ErrorBody
from xce_controller.http.sessions import check_viewer, still_viewing
from xce_controller.http.ui import install_ui
from xce_controller.http.ui_sessions import Sessions
from xce_controller.service import Controller
from xce_controller.store.base import StorageUnavailable
from xce_protocol.times import times_to_rfc3339

log = logging.getLogger(__name__)

NDJSON = "application/x-ndjson"


def install(app: FastAPI, ctl: Controller, viewer: Callable[..., str]) -> None:
    """Add metrics, the events stream and the status page to the API app. `viewer` is the
    API's check of the admin or read-only token, so the OpenAPI document names both."""
    metrics = Metrics(ctl)
    hub = EventHub(ctl)
    app.state.metrics = metrics
    app.state.events = hub
    app.state.sessions = Sessions()
    app.add_middleware(LatencyMiddleware, metrics=metrics, routes=lambda: app.routes)

    @app.get("/metrics", include_in_schema=False)
    async def scrape(request: Request, authorization: Optional[str] = Header(None)) -> Response:
        check_viewer(request, authorization)
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4")

    @app.get(
        "/v1/events",
        response_class=StreamingResponse,
        responses={
            200: {"content": {NDJSON: {}}, "description": "one JSON event per line"},
            **{code: {"model": ErrorBody} for code in (401, 413, 422, 503)},
        },
    )
    async def events(
        request: Request,
        since: int = Query(
            0, ge=0, le=MAX_SEQ, description="only events after this sequence number"
        ),
        host: str = Query("", max_length=253, description="only events about this host"),
        follow: bool = Query(False, description="keep the stream open for new events"),
        by: str = Depends(viewer),
    ) -> StreamingResponse:
        """Committed facts as newline-delimited JSON, oldest first; with `follow`, each new
        one as it is committed (an idle stream sends a blank line every 15 s)."""
        admin = by == "admin"  # boot ids are the admin's to see (events.ADMIN_ONLY)
        allowed = still_viewing(ctl, request, by)
        # Read before the status line: a store that cannot be read is answered 503 here (a
        # client moves on to another replica) rather than a 200 whose stream breaks off.
        first = hub.page(since, host)
        return StreamingResponse(
            _ndjson(hub, since, first, host, follow, admin, allowed), media_type=NDJSON
        )

    install_ui(app, ctl, hub)


async def _ndjson(
    hub: EventHub,
    since: int,
    first: Page,
    host: str,
    follow: bool,
    admin: bool,
    allowed: Callable[[], bool],
) -> AsyncIterator[bytes]:
    stream = hub.stream(since, host, follow, admin=admin, allowed=allowed, first=first)
    try:
        async for body in stream:
            if body is None:
                yield b"\n"
                continue
            # Protocol 1.2: its times, and those of its data, as RFC 3339 (the status page,
            # which reads the same stream in process, keeps seconds).
            yield (json.dumps(times_to_rfc3339(body), sort_keys=True) + "\n").encode()
    except StorageUnavailable as exc:
        if not follow:
            raise  # a read with an end: broken off, so its reader does not take it as whole
        # A follower reconnects from its last event, as after a restart: ended, not broken.
        log.warning("events stream ended: the store cannot be read (%s)", exc)


def refused(request: Request, kind: str) -> None:
    """Count a refusal (the API's handler of lc.Refused calls this)."""
    metrics: Any = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        from xce_controller.http.metrics import route_of

        metrics.refused(route_of(request.app.routes, request.scope), kind)
