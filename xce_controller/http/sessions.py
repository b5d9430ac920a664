"""Who may look: the admin or read-only token as a bearer, or the status page's session.

The browser gives the token once (a form) and keeps a random session id in a cookie scoped
to the page's paths (ui_sessions.py), so the page's event stream needs no header. Used by
the read-only endpoints (observe.py), the status page (ui.py) and the API's viewer check
(auth.py).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Request

from xce_controller.core import credentials
from xce_controller.core import lifecycle as lc
from xce_controller.http.ui_sessions import Sessions
from xce_controller.service import Controller

COOKIE = "xce_session"


def viewer_tokens(ctl: Controller) -> dict[str, str]:
    """The token of each role that may view: admin and reader."""
    return {"admin": ctl.cfg.admin_token, "reader": ctl.cfg.read_token}


def role_of(ctl: Controller, token: str) -> str:
    """The viewing role `token` is ("" for none)."""
    return next((r for r, t in viewer_tokens(ctl).items() if credentials.same(token, t)), "")


def allowed(ctl: Controller, token: str) -> bool:
    return bool(role_of(ctl, token))


def store(request: Request) -> Sessions:
    """The app's sessions (observe.install makes them)."""
    found: Sessions = request.app.state.sessions
    return found


def viewer_role(ctl: Controller, request: Request, authorization: str | None) -> str:
    """The role a request views as: by a bearer token, else by the page's session cookie;
    "" for none."""
    if authorization and authorization.lower().startswith("bearer "):
        return role_of(ctl, authorization[7:].strip())
    return store(request).role(request.cookies.get(COOKIE, ""), viewer_tokens(ctl))


def still_viewing(ctl: Controller, request: Request, role: str) -> Callable[[], bool]:
    """Whether the caller of a stream still views as `role`: a changed token, an ended or
    expired session ends its stream too, not only its next request."""
    authorization = request.headers.get("authorization")
    return lambda: viewer_role(ctl, request, authorization) == role


def signed_in(ctl: Controller, request: Request, authorization: str | None) -> bool:
    """The request carries a viewer's bearer token, or the page's session for one."""
    return bool(viewer_role(ctl, request, authorization))


def check_viewer(request: Request, authorization: str | None) -> None:
    ctl: Controller = request.app.state.controller
    if not signed_in(ctl, request, authorization):
        bearer = authorization or ""
        token = bearer[7:].strip() if bearer.lower().startswith("bearer ") else ""
        if token and credentials.same(token, ctl.cfg.provisioner_token):  # as the API's reads
            raise lc.Refused("forbidden", 403, "the provisioner token cannot read this")
        raise lc.Refused("unauthorized", 401, "admin or read-only token missing or wrong")
