"""The agents' fast path: a thin ASGI layer in front of FastAPI's routing that answers
`POST /v1/hosts/{name}/heartbeat` and `GET /v1/hosts/{name}/watch` itself, the agents' most
frequent calls (every host, every heartbeat interval; every watch's end, and the next).

FastAPI spends most of such a call's CPU on its own machinery: matching the request against
every route, solving the dependencies, validating the parameters, the body and the answer.
Here the request is matched against the route's own pattern only, the credential read by
the same bearer scheme the route declares (auth.HOST), a heartbeat's body validated by the
same model (HeartbeatBody), the decision taken by the same function as the route's
(agents.heartbeat_answer, agents.watch_answer) and the answer serialised as the route does
(FastAPI's own serialiser for the heartbeat's answer model): the same bytes.

Only what the route would take as is is answered here. A heartbeat: a JSON body (as FastAPI
reads it) valid for the model. A watch: its query in its plain form (`since`, `timeout`,
`instance_id`, each at most once, digits and name characters, nothing escaped), which
FastAPI's checks read the same way. Anything else (no body, another content type, bad JSON,
a validation error, a read cut off by the body limit or a disconnect, another query) is
handed to FastAPI, a body read so far replayed, so every such error is FastAPI's own answer.
Refusals and storage outages are answered and counted as the API's handlers do (errors.py).
It sits inside the body limit and the latency metrics, which see it as the route
(`scope["route"]`), and inside the replicas' catch-up.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute, serialize_response
from starlette.requests import Request

from xce_controller.core import lifecycle as lc
from xce_controller.http.auth import HOST, token_of
from xce_controller.http.errors import refusal_answer, storage_answer, storage_code
from xce_controller.http.routes.agents import (
    HEARTBEAT,
    WATCH,
    heartbeat_answer,
    peer,
    watch_answer,
)
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
# The watch's query in its plain form: what FastAPI reads the same way (see above).
_QUERY = {
    b"since": re.compile(rb"[0-9]{1,18}"),
    b"timeout": re.compile(rb"[0-9]{1,3}(\.[0-9]{1,6})?"),
    b"instance_id": re.compile(rb"[A-Za-z0-9._:-]{0,253}"),
}
WATCH_TIMEOUT_MAX = 300.0  # the route's `le`; its `ge` (0) the pattern keeps

if hasattr(HeartbeatBody, "model_validate"):
    _validate: Callable[[Any], HeartbeatBody] = HeartbeatBody.model_validate
else:  # pydantic 1
    _validate = HeartbeatBody.parse_obj


class Served:
    """How many calls the fast path answered itself, refusals included (app.state.fast_path):
    what shows it is the one serving. `enabled` off hands every request to FastAPI: how the
    tests and the bench compare the two on one controller."""

    def __init__(self) -> None:
        self.answered = 0
        self.enabled = True


class FastPath:
    def __init__(self, app: ASGIApp, api: FastAPI, ctl: Controller, served: Served) -> None:
        self.app = app
        self.api = api
        self.ctl = ctl
        self.served = served
        self._routes: dict[str, APIRoute] = {}

    def route(self, method: str, path: str) -> APIRoute:
        """The app's route, found once the app has all its routes."""
        found = self._routes.get(path)
        if found is None:
            found = next(
                r
                for r in self.api.routes
                if isinstance(r, APIRoute) and r.path == path and method in (r.methods or ())
            )
            self._routes[path] = found
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path") and self.served.enabled:
            method = scope["method"]
            if method == "POST":
                route = self.route(method, HEARTBEAT)
                match = route.path_regex.match(scope["path"])
                if match is not None:
                    await self._heartbeat(route, match["name"], scope, receive, send)
                    return
            elif method == "GET":
                route = self.route(method, WATCH)
                match = route.path_regex.match(scope["path"])
                query = _watch_query(scope["query_string"]) if match is not None else None
                if match is not None and query is not None:
                    since, timeout, instance_id = query

                    def decide(token: str, who: str) -> Coroutine[Any, Any, dict[str, Any]]:
                        name = match["name"]
                        return watch_answer(self.ctl, name, since, timeout, instance_id, token, who)

                    await self._answer(route, decide, scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _heartbeat(
        self, route: APIRoute, name: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
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

        def decide(token: str, who: str) -> Coroutine[Any, Any, dict[str, Any]]:
            return heartbeat_answer(self.ctl, name, body, token, who)

        await self._answer(route, decide, scope, receive, send)

    async def _answer(
        self,
        route: APIRoute,
        decide: Callable[[str, str], Coroutine[Any, Any, dict[str, Any]]],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """Decide with the caller's credential and answer as the route and its handlers do."""
        scope["route"] = route  # what FastAPI's router leaves: the latency metrics' label
        request = Request(scope)
        self.served.answered += 1
        try:
            answer = await decide(token_of(await HOST(request)), peer(request))
        except lc.Refused as exc:
            self._refused(route.path, exc.code.value)
            await refusal_answer(exc)(scope, receive, send)
            return
        except StorageUnavailable as exc:
            self._refused(route.path, storage_code(exc))
            await storage_answer(exc)(scope, receive, send)
            return
        response = await _serialized(route, answer)
        await response(scope, receive, send)

    def _refused(self, endpoint: str, code: str) -> None:
        metrics: Any = getattr(self.api.state, "metrics", None)
        if metrics is not None:
            metrics.refused(endpoint, code)


def _watch_query(raw: bytes) -> tuple[int, float, str] | None:
    """since, timeout and instance_id from a plain query; None for FastAPI to read."""
    values: dict[bytes, bytes] = {}
    for item in raw.split(b"&") if raw else ():
        key, equals, value = item.partition(b"=")
        pattern = _QUERY.get(key)
        if not equals or pattern is None or key in values or pattern.fullmatch(value) is None:
            return None
        values[key] = value
    timeout = float(values.get(b"timeout", b"30"))
    if timeout > WATCH_TIMEOUT_MAX:
        return None
    return int(values.get(b"since", b"0")), timeout, values.get(b"instance_id", b"").decode()


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


async def _serialized(route: APIRoute, answer: dict[str, Any]) -> Response:
    """The answer as the route gives it: the watch's as built (its route answers a
    JSONResponse), the heartbeat's as FastAPI serialises the route's answer model."""
    if route.path == WATCH:
        return JSONResponse(answer)
    if _DUMP_JSON:
        content = await serialize_response(
            field=route.response_field, response_content=answer, dump_json=True
        )
        return Response(content=content, media_type="application/json")
    content = await serialize_response(field=route.response_field, response_content=answer)
    return JSONResponse(content)
