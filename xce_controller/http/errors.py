"""The API's answers to errors: one JSON shape (error, code, message, protocol) for a refusal,
a storage outage, a change whose outcome is unknown, a bad request, an unknown path or method,
and an internal error.

Each refusal is counted by its reason code (observe.refused) before it is answered.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from xce_controller.core import lifecycle as lc
from xce_controller.http import observe as observe_api
from xce_controller.store.base import OutcomeUnknown, StorageUnavailable
from xce_protocol.protocol import PROTOCOL
from xce_protocol.reasons import Reason, refusal


def _allowed(app: FastAPI, path: str) -> list[str]:
    methods: set[str] = set()
    for route in app.routes:
        if isinstance(route, APIRoute) and route.path_regex.match(path):
            methods |= route.methods or set()
    return sorted(methods)


STORAGE_CODE = Reason.REFUSED_STORAGE_UNAVAILABLE.value
UNKNOWN_CODE = Reason.REFUSED_OUTCOME_UNKNOWN.value


def refusal_answer(exc: lc.Refused) -> JSONResponse:
    """A refusal's answer (its count is the caller's): the handler's and the fast path's."""
    body = {
        "error": exc.kind,
        "code": exc.code.value,
        "message": exc.message,
        "protocol": PROTOCOL,
        **exc.details,
    }
    return JSONResponse(body, status_code=exc.status)


def storage_code(exc: StorageUnavailable) -> str:
    """The code a storage failure is answered and counted with."""
    return UNKNOWN_CODE if isinstance(exc, OutcomeUnknown) else STORAGE_CODE


def storage_answer(exc: StorageUnavailable) -> JSONResponse:
    """A storage failure's answer (its count is the caller's, as storage_code)."""
    if isinstance(exc, OutcomeUnknown):
        # 500, not 503: every client (older ones too) and a proxy's retry-on-503 send a 503
        # to another replica, which would make a change that may be stored a second time.
        # No Retry-After: it is no "come back later", the caller reads the state first.
        body = {
            "error": "outcome_unknown",
            "code": UNKNOWN_CODE,
            "message": "the change may have been stored: the controller lost its database "
            f"connection after the commit was sent ({exc.cause}); read the state back "
            "(from any replica) before sending the change again",
            "protocol": PROTOCOL,
        }
        return JSONResponse(body, status_code=500)
    body = {
        "error": "storage_unavailable",
        "code": STORAGE_CODE,
        "message": f"the controller cannot store changes: {exc.cause}; nothing was changed",
        "protocol": PROTOCOL,
    }
    return JSONResponse(body, status_code=503, headers={"Retry-After": "5"})


def install_errors(app: FastAPI) -> None:
    """Answer every error of `app` in the API's shape."""

    @app.exception_handler(lc.Refused)
    async def refused(request: Request, exc: lc.Refused) -> JSONResponse:
        observe_api.refused(request, exc.code.value)
        return refusal_answer(exc)

    @app.exception_handler(StorageUnavailable)
    async def storage(request: Request, exc: StorageUnavailable) -> JSONResponse:
        observe_api.refused(request, storage_code(exc))
        return storage_answer(exc)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        # Logged with its traceback by the server; the client gets the same JSON shape.
        body = {"error": "internal", "message": f"{type(exc).__name__}", "protocol": PROTOCOL}
        return JSONResponse(body, status_code=500)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kinds = {
            400: "bad_request",
            404: "not_found",
            405: "method_not_allowed",
            413: "too_large",
        }
        kind = kinds.get(exc.status_code, "error")
        code = refusal(kind).value
        observe_api.refused(request, code)
        body = {"error": kind, "code": code, "message": str(exc.detail), "protocol": PROTOCOL}
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # one path may be served by several routes
            headers["Allow"] = ", ".join(_allowed(app, request.url.path))
        return JSONResponse(body, status_code=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        code = Reason.REFUSED_BAD_REQUEST.value
        observe_api.refused(request, code)
        body = {
            "error": "bad_request",
            "code": code,
            "message": "; ".join(problems),
            "protocol": PROTOCOL,
        }
        return JSONResponse(body, status_code=422)
