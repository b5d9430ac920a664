"""The heartbeat's fast path: a thin ASGI layer in front of FastAPI's routing that answers
`POST /v1/hosts/{name}/heartbeat` itself, the agents' most frequent call (every host, every
heartbeat interval).

FastAPI spends most of a heartbeat's CPU on its own machinery: matching the request against
every route, solving the dependencies, validating the body and the answer. Here the request
is matched against the heartbeat route's own pattern only, the credential read by the same
bearer scheme the route declares (auth.HOST), the body validated by the same model
(HeartbeatBody), the decision taken by the same function (agents.heartbeat_answer) and the
answer serialised by FastAPI's own serialiser for the route's answer model: the same bytes.

Only a body the route would take as is is answered here: JSON (as FastAPI reads it), valid
for the model. Anything else (no body, another content type, bad JSON, a validation error,
a read cut off by the body limit or a disconnect) is handed to FastAPI with the body read so
far replayed, so every error is FastAPI's own answer. Refusals and storage outages are
answered and counted as the API's handlers do (errors.py). It sits inside the body limit and
the latency metrics, which see it as the route (`scope["route"]`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute, serialize_response
from starlette.requests import Request

from xce_controller.core import lifecycle as lc
from xce_controller.http.auth import HOST, token_of
from xce_controller.http.errors import STORAGE_CODE, refusal_answer, storage_answer
from xce_controller.http.routes.agents import HEARTBEAT, heartbeat_answer, peer
from xce_controller.http.schemas import HeartbeatBody
from xce_controller.service import Controller
from xce_controller.store.base import StorageUnavailable

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# What FastAPI reads as JSON without a second look; other JSON types go the long way.
JSON_TYPES = frozenset((b"application/json",))
# Newer FastAPI serialises an answer model straight to JSON bytes (pydantic's), older ones
# through json.dumps: whichever this one does, the fast path does.
_DUMP_JSON = "dump_json" in inspect.signature(serialize_response).parameters

if hasattr(HeartbeatBody, "model_validate"):
    _validate: Callable[[Any], HeartbeatBody] = HeartbeatBody.model_validate
else:  # pydantic 1
    _validate = HeartbeatBody.parse_obj


class Served:
    """How many heartbeats the fast path answered itself, refusals included
    (app.state.fast_path): what shows it is
    the one serving. `enabled` off hands every request to FastAPI: how the tests and the
    bench compare the two on one controller."""

    def __init__(self) -> None:
        self.answered = 0
        self.enabled = True


class FastPath:
    def __init__(self, app: ASGIApp, api: FastAPI, ctl: Controller, served: Served) -> None:
        self.app = app
        self.api = api
        self.ctl = ctl
        self.served = served
        self._route: APIRoute | None = None

    def route(self) -> APIRoute:
        """The heartbeat's route, found once the app has all its routes."""
        if self._route is None:
            self._route = next(
                r
                for r in self.api.routes
                if isinstance(r, APIRoute) and r.path == HEARTBEAT and "POST" in (r.methods or ())
            )
        return self._route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope.get("root_path")
            or not self.served.enabled
        ):
            await self.app(scope, receive, send)
            return
        route = self.route()
        match = route.path_regex.match(scope["path"])
        if match is None:
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        failed: BaseException | None = None
        try:
            while True:
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request" or not message.get("more_body", False):
                    break
        except Exception as exc:  # the body limit's TooLarge: FastAPI answers it
            failed = exc
        body = _taken(scope, messages) if failed is None else None
        if body is None:
            await self.app(scope, _replay(messages, failed, receive), send)
            return
        scope["route"] = route  # what FastAPI's router leaves: the latency metrics' label
        request = Request(scope)
        token = token_of(await HOST(request))
        self.served.answered += 1
        try:
            answer = await heartbeat_answer(self.ctl, match["name"], body, token, peer(request))
        except lc.Refused as exc:
            self._refused(exc.code.value)
            await refusal_answer(exc)(scope, receive, send)
            return
        except StorageUnavailable as exc:
            self._refused(STORAGE_CODE)
            await storage_answer(exc)(scope, receive, send)
            return
        response = await _answer(route, answer)
        await response(scope, receive, send)

    def _refused(self, code: str) -> None:
        metrics: Any = getattr(self.api.state, "metrics", None)
        if metrics is not None:
            metrics.refused(HEARTBEAT, code)


def _taken(scope: Scope, messages: list[Message]) -> HeartbeatBody | None:
    """The body as the route would take it, or None where FastAPI must have its say."""
    if not messages or messages[-1]["type"] != "http.request":
        return None  # the client went away while sending
    content_type = next((v for k, v in scope["headers"] if k == b"content-type"), None)
    if content_type not in JSON_TYPES:  # none at all: JSON to older FastAPI, not to newer
        return None
    raw = b"".join(m.get("body", b"") for m in messages)
    if not raw:
        return None
    try:
        return _validate(json.loads(raw))
    except Exception:  # bad JSON, a validation error: FastAPI's answer, in its shape
        return None


def _replay(messages: list[Message], failed: BaseException | None, receive: Receive) -> Receive:
    """The request's messages as FastAPI would have read them: those read, then what reading
    raised, or the client's next messages."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        if failed is not None:
            raise failed
        return await receive()

    return replayed


async def _answer(route: APIRoute, answer: dict[str, Any]) -> Response:
    """The answer as FastAPI serialises the route's answer model."""
    if _DUMP_JSON:
        content = await serialize_response(
            field=route.response_field, response_content=answer, dump_json=True
        )
        return Response(content=content, media_type="application/json")
    content = await serialize_response(field=route.response_field, response_content=answer)
    return JSONResponse(content)
