"""The controller's HTTP client for `xcecli`: one session, the replicas tried in turn.

`Client.call` is the boundary: a transport failure becomes `ControllerUnreachable` (naming
the URLs tried), a change whose outcome is unknown `OutcomeUnknown` (the controller could
not tell, or the connection broke once the change was sent), a
refusal `ControllerRefused` with the controller's own message on one line; anything else is
the answer's JSON body.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import requests
from urllib3.exceptions import NewConnectionError

from xce_controller.cli.client_errors import (
    ControllerRefused,
    ControllerUnreachable,
    Failure,
    outcome_unknown,
    sent_unanswered,
    unreachable,
)
from xce_controller.cli.client_tls import ClientTls
from xce_controller.cli.observe import printable
from xce_protocol import replicas
from xce_protocol.errors import UsageError


def controller_urls(text: str) -> list[str]:
    """--url: one URL or a comma-separated list of the controller's replicas."""
    urls = [part.strip().rstrip("/") for part in text.split(",")]
    for url in urls:
        try:
            parts = urllib.parse.urlsplit(url)
            host = parts.hostname
            parts.port  # noqa: B018  # raises for a port out of range or not a number
        except ValueError:  # an unclosed [ of an IPv6 address, a bad port
            host = None
        if not url.startswith(("http://", "https://")) or not host:
            shown = printable(url)[:200]
            raise UsageError(f"--url: expected http(s) URLs separated by commas, got {shown!r}")
    return urls


class Client:
    def __init__(
        self, url: str, token: str, timeout: float = 30.0, tls: ClientTls | None = None
    ) -> None:
        self.urls = controller_urls(url)
        self.current = 0
        self.timeout = timeout
        self.tls = tls or ClientTls()
        self.session = requests.Session()
        self.failures: list[Failure] = []  # the last request's URLs that could not serve
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    @property
    def url(self) -> str:
        return self.urls[self.current]

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.send(method, path, timeout=self.timeout, **kwargs)
        except requests.RequestException as exc:
            if method != "GET" and not _unsent(exc):
                cert = self.tls.cert is not None
                raise sent_unanswered(self.failures[-1][0], method, path, exc, cert) from None
            raise self.unreachable(exc) from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            if replicas.code_of(body) == replicas.OUTCOME_UNKNOWN:
                raise outcome_unknown(self.url, method, path)
            message = body.get("message") if isinstance(body, dict) else None
            if not message:  # not the controller's problem document: a proxy, another service
                said = printable(response.text)[:200] or "empty"
                raise ControllerRefused(
                    f"{response.status_code} {printable(response.reason or '')[:80]} from "
                    f"{self.url}: not a controller's answer: {said}"
                )
            line = printable(str(message))[:300]  # one line: control characters escaped
            if response.status_code == 401 and "Authorization" not in self.session.headers:
                line += " (no token given: --token-file, $XCE_ADMIN_TOKEN_FILE or --token)"
            raise ControllerRefused(f"{response.status_code}: {line}")
        return body

    def move_on(self) -> None:
        """The next URL from now on: the current one broke off an answer it had begun (a
        stream of events), and the read goes on from another."""
        self.current = (self.current + 1) % len(self.urls)

    def unreachable(self, exc: requests.RequestException) -> ControllerUnreachable:
        """The error for `exc`: the URLs the request tried when it ended the last send, else
        (a stream cut after its answer) the URL that answered."""
        tried = self.failures if self.failures and self.failures[-1][1] is exc else []
        return unreachable(tried or [(self.url, exc)], self.tls.cert is not None)

    def send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """The answer of the first URL that can serve, trying each once from the current
        one (replicas.moves_on); the last URL's answer or failure when none can. The URLs
        tried that could not serve are in `failures`."""
        order = replicas.attempts(self.current, len(self.urls))
        kwargs.update(self.tls.request_options())
        self.failures = []
        for index in order:
            last = index == order[-1]
            try:
                response = self.session.request(method, self.urls[index] + path, **kwargs)
            except requests.RequestException as exc:
                self.failures.append((self.urls[index], exc))
                # A change whose connection broke once sent may have been made: not sent again.
                if last or (method != "GET" and not _unsent(exc)):
                    raise
                continue
            if last or not replicas.moves_on(response.status_code, _code(response)):
                self.current = index
                return response
            self.failures.append((self.urls[index], response.status_code))
            response.close()
        raise AssertionError("unreachable: the last URL answers or raises")


def _code(response: requests.Response) -> str:
    """The code of an answer that could send the request on (a 5xx: a small body; a stream's
    answer, a 200, is never read here)."""
    if response.status_code < 500:
        return ""
    try:
        return replicas.code_of(response.json())
    except ValueError:  # a proxy's page
        return ""


def _unsent(exc: requests.RequestException) -> bool:
    """The request never reached a server: no connection could be made, or TLS failed in
    the handshake, before any of the request was sent."""
    if isinstance(exc, (requests.ConnectTimeout, requests.exceptions.SSLError)):
        return True
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(exc, requests.ConnectionError) and isinstance(reason, NewConnectionError)
