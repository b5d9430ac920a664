"""The read-only status page: `/ui` (counts, hosts, to-return), `/ui/hosts/NAME` (a host's
story and timeline) and `/ui/events` (the events stream as Server-Sent Events, which the page
follows to refresh itself). Rendering is in ui_render; this module is the HTTP side.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from html import escape
from typing import Any, Optional
from urllib.parse import parse_qs

from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

from xce_controller.core import lifecycle as lc
from xce_controller.core.codec import host_to_json
from xce_controller.core.fleet import fleet_timeline
from xce_controller.core.model import Host
from xce_controller.core.story import story
from xce_controller.http import ui_render as r
from xce_controller.http.events import MAX_SEQ, EventHub
from xce_controller.http.sessions import (
    COOKIE,
    role_of,
    signed_in,
    still_viewing,
    store,
    viewer_role,
)
from xce_controller.http.ui_chart import fleet_svg
from xce_controller.http.ui_sessions import SESSION_TTL, same_origin
from xce_controller.service import Controller

# The page's own script and style only; nothing inline, nothing from elsewhere.
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
MAX_FORM = 4096
STEPS = 120  # of the fleet's picture, whatever its window


# Nothing a page needs, or may show.
HIDDEN = (
    *("token_hash", "credential_hash", "next_credential_hash", "worker_hash"),
    *("past_credentials", "boot_id", "resources"),
)


def view(ctl: Controller, host: Host) -> dict[str, Any]:
    data = host_to_json(host)
    for secret in HIDDEN:
        data.pop(secret, None)
    data["jobs_running"] = len(ctl.cluster.jobs_on(host.key))
    return data


def page_number(text: str) -> int:
    """A page number as an address bar may hold it: anything else is the first page (an HTML
    page, not the API's JSON 422), as an unknown window is the default one."""
    return int(text) if text.isdigit() and 1 <= int(text) <= 1_000_000 else 1


def install_ui(app: FastAPI, ctl: Controller, hub: EventHub) -> None:
    # The picture changes with the cluster or when its window moves a step: every open page
    # refreshes after each commit, and they all share one drawing.
    drawn: dict[str, tuple[tuple[int, int], str]] = {}

    def fleet_picture(hosts: list[Host], now: float, window: float) -> str:
        key = (ctl.cluster.version, int(now // (window / STEPS)))
        cached = drawn.get(str(window))
        if cached is None or cached[0] != key:
            end = (key[1] + 1) * (window / STEPS)  # the end of the current step
            cached = (key, fleet_svg(fleet_timeline(hosts, end, window, STEPS)))
            drawn[str(window)] = cached
        return cached[1]

    def html(text: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(text, status_code=status, headers=HEADERS)

    @app.get("/ui/app.js", include_in_schema=False)
    async def script() -> Response:
        return Response(r.JS, media_type="text/javascript", headers=HEADERS)

    @app.get("/ui/app.css", include_in_schema=False)
    async def style() -> Response:
        return Response(r.CSS, media_type="text/css", headers=HEADERS)

    @app.get("/ui/login", include_in_schema=False)
    async def login_form() -> HTMLResponse:
        return html(r.login_page())

    @app.post("/ui/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        if not same_origin(request.headers.get("origin"), request.headers.get("host")):
            return html(r.login_page("Sign in from this page, not another site's."), 403)
        wait = store(request).attempt(request.client.host if request.client else "")
        if wait:
            page = html(r.login_page("Too many attempts: wait a minute and try again."), 429)
            page.headers["Retry-After"] = str(max(1, round(wait)))
            return page
        body = await request.body()
        fields = parse_qs(body[:MAX_FORM].decode("utf-8", "replace"))
        token = (fields.get("token") or [""])[0].strip()
        role = role_of(ctl, token)
        if not role:
            return html(r.login_page("That token is not the admin or read-only token."), 401)
        answer = RedirectResponse("/ui", status_code=303)
        answer.set_cookie(
            COOKIE,
            store(request).open(role, token),
            max_age=int(SESSION_TTL),
            httponly=True,
            samesite="strict",
            path="/ui",
            secure=request.url.scheme == "https",
        )
        return answer

    @app.post("/ui/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        # SameSite=strict keeps other sites' posts from carrying the cookie here.
        store(request).close(request.cookies.get(COOKIE, ""))
        answer = RedirectResponse("/ui/login", status_code=303)
        answer.delete_cookie(COOKIE, path="/ui")
        return answer

    @app.get("/ui", include_in_schema=False)
    async def overview(
        request: Request,
        state: str = Query("", max_length=32),
        template: str = Query("", max_length=253),
        q: str = Query("", max_length=253),
        everything: str = Query("", alias="all", max_length=8),
        window: str = Query("", max_length=8),
        page: str = Query("1", max_length=16),
        part: str = Query("", max_length=8),
        authorization: Optional[str] = Header(None),
    ) -> Response:
        if not signed_in(ctl, request, authorization):
            return RedirectResponse("/ui/login", status_code=303)
        now = ctl.clock()
        window = window if window in r.WINDOWS else ""
        hosts = sorted(ctl.cluster.hosts.values(), key=lambda h: h.name or h.key)
        main = r.overview(
            [view(ctl, h) for h in hosts],
            [view(ctl, h) for h in lc.to_return(ctl.cluster)],
            ctl.cfg.templates,
            {
                "state": state,
                "template": template,
                "q": q,
                "all": "1" if everything else "",
                "window": window,
            },
            now,
            fleet_picture(hosts, now, r.WINDOWS[window or "6h"]),
            page_number(page),
        )
        return html(main if part == "main" else r.page("XCE hosts", main, hub.last_seq()))

    @app.get("/ui/hosts/{name}", include_in_schema=False)
    async def host_page(
        request: Request,
        name: str,
        part: str = Query("", max_length=8),
        authorization: Optional[str] = Header(None),
    ) -> Response:
        if not signed_in(ctl, request, authorization):
            return RedirectResponse("/ui/login", status_code=303)
        try:
            host = ctl.find_host(name)
        except lc.Refused as exc:  # a page with nothing to follow: it does not poll a 404
            status = 404 if exc.status == 404 else 409
            return html(r.still_page("XCE: no such host", f"<p>{escape(exc.message)}</p>"), status)
        events = [e for e in await _host_events(hub, host.key) if e["key"] == host.key]
        data = view(ctl, host)
        main = r.timeline(data, story(data, events, ctl.clock()), events)
        if part == "main":
            return html(main)
        return html(r.page(f"XCE: {name}", main, hub.last_seq(), host=name))

    @app.get("/ui/events", include_in_schema=False)
    async def sse(
        request: Request,
        since: int = Query(0, ge=0, le=MAX_SEQ),
        host: str = Query("", max_length=253),
        authorization: Optional[str] = Header(None),
        last_event_id: Optional[str] = Header(None),
    ) -> Response:
        role = viewer_role(ctl, request, authorization)
        if not role:
            raise lc.Refused("unauthorized", 401, "sign in at /ui/login")
        since = max(since, _resume_id(last_event_id))
        return StreamingResponse(
            _sse(hub, since, host, role == "admin", still_viewing(ctl, request, role)),
            media_type="text/event-stream",
            headers=HEADERS,
        )


def _resume_id(header: Optional[str]) -> int:
    """The Last-Event-ID an EventSource sends when it resumes after a drop; 0 (from the
    page's own cursor) for anything that is not a sequence number we could have sent."""
    if not header or len(header) > 19 or not (header.isascii() and header.isdigit()):
        return 0  # str.isdigit() alone accepts "²", which int() refuses
    return min(int(header), MAX_SEQ)


async def _host_events(hub: EventHub, name: str) -> list[dict[str, Any]]:
    return [e async for e in hub.stream(0, name, follow=False) if e is not None]


async def _sse(
    hub: EventHub, since: int, host: str, admin: bool, allowed: Callable[[], bool]
) -> AsyncIterator[bytes]:
    yield b"retry: 2000\n\n"
    async for body in hub.stream(since, host, follow=True, admin=admin, allowed=allowed):
        if body is None:
            yield b": keepalive\n\n"
        else:
            yield f"id: {body['seq']}\ndata: {json.dumps(body, sort_keys=True)}\n\n".encode()
