"""Who may look: the admin or read-only token as a bearer, or the status page's cookie.

The browser gives the token once (a form) and keeps a value derived from it in a cookie
scoped to the page's paths, so the page's event stream needs no header. Used by the
read-only endpoints (observe.py), the status page (ui.py) and the API's viewer check (auth.py).
"""

from __future__ import annotations

import hashlib

from fastapi import Request

from xce_controller.core import credentials
from xce_controller.core import lifecycle as lc
from xce_controller.service import Controller

COOKIE = "xce_view"


def viewer_tokens(ctl: Controller) -> list[str]:
    return [t for t in (ctl.cfg.admin_token, ctl.cfg.read_token) if t]


def allowed(ctl: Controller, token: str) -> bool:
    return any(credentials.same(token, t) for t in viewer_tokens(ctl))


def session_value(token: str) -> str:
    """What the page's cookie holds: derived from the token, so a cookie that leaks is not a
    bearer token for the API."""
    return hashlib.sha256(b"xce-status-page\0" + token.encode()).hexdigest()


def signed_in(ctl: Controller, request: Request, authorization: str | None) -> bool:
    """The request carries a viewer's bearer token, or the page's cookie for one."""
    if authorization and authorization.lower().startswith("bearer "):
        return allowed(ctl, authorization[7:].strip())
    cookie = request.cookies.get(COOKIE, "")
    return any(credentials.same(cookie, session_value(t)) for t in viewer_tokens(ctl))


def check_viewer(request: Request, authorization: str | None) -> None:
    ctl: Controller = request.app.state.controller
    if not signed_in(ctl, request, authorization):
        raise lc.Refused("unauthorized", 401, "admin or read-only token missing or wrong")
