"""The API's answer to a commit whose outcome is unknown (store.base.OutcomeUnknown): its own
code and status, a message that never says nothing was changed, counted as refusals are."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI

from xce_controller.http.errors import install_errors
from xce_controller.store.base import OutcomeUnknown, StorageUnavailable
from xce_protocol import replicas
from xce_protocol.reasons import Reason


@dataclass(frozen=True)
class Got:
    status_code: int
    headers: dict[str, str]
    body: Any


class Counted:
    """What the metrics are told (metrics.refused)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def refused(self, endpoint: str, code: str) -> None:
        self.calls.append((endpoint, code))


def _post(app: FastAPI, path: str) -> Got:
    """One request straight into the ASGI app (no server, no test client's transport)."""
    sent: list[MutableMapping[str, Any]] = []
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 9),
        "server": ("127.0.0.1", 80),
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    data = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Got(start["status"], headers, json.loads(data))


def _app(exc: Exception) -> tuple[FastAPI, list[tuple[str, str]]]:
    app = FastAPI()
    install_errors(app)
    app.state.metrics = counted = Counted()

    @app.post("/v1/jobs")
    async def submit() -> dict[str, Any]:
        raise exc

    return app, counted.calls


def test_an_unknown_outcome_says_it_may_be_stored_and_never_moves_on() -> None:
    app, refused = _app(OutcomeUnknown("did not answer within 5s"))
    r = _post(app, "/v1/jobs")
    assert r.status_code == 500, r.body
    body = r.body
    assert body["code"] == Reason.REFUSED_OUTCOME_UNKNOWN.value == "refused_outcome_unknown"
    assert body["error"] == "outcome_unknown" and body["protocol"]
    assert "may have been stored" in body["message"] and "within 5s" in body["message"]
    assert "nothing was changed" not in body["message"]
    assert "retry-after" not in r.headers  # no "come back later": read the state first
    assert refused == [("/v1/jobs", "refused_outcome_unknown")]
    # No client of the protocol sends it to another replica, by status or by code.
    assert not replicas.moves_on(r.status_code, replicas.code_of(body))
    assert not replicas.moves_on(503, replicas.code_of(body))


def test_a_storage_outage_is_answered_as_before() -> None:
    app, refused = _app(StorageUnavailable("database or disk is full"))
    r = _post(app, "/v1/jobs")
    assert r.status_code == 503 and r.headers["retry-after"] == "5"
    assert r.body["code"] == "refused_storage_unavailable"
    assert r.body["message"].endswith("; nothing was changed")
    assert refused == [("/v1/jobs", "refused_storage_unavailable")]
    assert replicas.moves_on(r.status_code, replicas.code_of(r.body))


@pytest.mark.parametrize("body", [None, [], {"code": 5}, {"code": "refused_storage_unavailable"}])
def test_only_that_code_keeps_a_gateway_status_where_it_was(body: Any) -> None:
    assert replicas.moves_on(503, replicas.code_of(body))
