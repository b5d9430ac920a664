"""Who may call what in the API: the bearer schemes each operation names, and the checks.

Each operation names the bearer it takes, so the OpenAPI document says it and the
authorization-matrix test (tests/integration/test_authorization.py) checks it. Every token
comparison is constant-time (credentials.same).
"""

from __future__ import annotations

from typing import Any, Optional

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from xce_controller.core import credentials
from xce_controller.core import lifecycle as lc
from xce_controller.http import sessions
from xce_controller.http.schemas import ErrorBody

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 403, 404, 409, 410, 413, 422, 503)
}

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


def token_of(creds: Bearer) -> str:
    return creds.credentials.strip() if creds is not None else ""


ADMIN_BEARER = Depends(ADMIN)
PROVISIONER_BEARER = Depends(PROVISIONER)
READ_BEARER = Depends(READ)
JOIN_BEARER = Depends(JOIN)
HOST_CREDENTIAL = Depends(HOST)
WORKER_CREDENTIAL = Depends(WORKER)


def _admin(request: Request, creds: Bearer = ADMIN_BEARER) -> str:
    cfg = request.app.state.controller.cfg
    token = token_of(creds)
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
    token = token_of(creds)
    if credentials.same(token, cfg.provisioner_token):
        return "provisioner"
    if credentials.same(token, cfg.admin_token):
        return "admin"
    if _reads(request, token):
        return "reader"
    raise lc.Refused("unauthorized", 401, "provisioner or admin token missing or wrong")


def viewer(
    request: Request,
    admin: Bearer = ADMIN_BEARER,
    read: Bearer = READ_BEARER,
) -> str:
    """The admin or read-only token, as a bearer or the status page's cookie."""
    token = token_of(admin)
    ctl = request.app.state.controller
    role = sessions.viewer_role(ctl, request, f"Bearer {token}" if token else None)
    if not role and credentials.same(token, ctl.cfg.provisioner_token):
        raise lc.Refused("forbidden", 403, "the provisioner token cannot read this")
    if not role:
        raise lc.Refused("unauthorized", 401, "admin or read-only token missing or wrong")
    return role


def _admin_or_reader(
    request: Request, creds: Bearer = ADMIN_BEARER, read: Bearer = READ_BEARER
) -> str:
    """A read (GET): the admin token or the read-only one, both named in the OpenAPI."""
    return _admin(request, creds)


def _provisioner_or_reader(
    request: Request,
    creds: Bearer = PROVISIONER_BEARER,
    admin: Bearer = ADMIN_BEARER,
    read: Bearer = READ_BEARER,
) -> str:
    return _provisioner(request, creds, admin)


ADMIN_ROLE = Depends(_admin)
PROVISIONER_ROLE = Depends(_provisioner)
ADMIN_OR_READER = Depends(_admin_or_reader)  # the GETs the read-only token may make
PROVISIONER_OR_READER = Depends(_provisioner_or_reader)
