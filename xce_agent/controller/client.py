"""HTTP to the controller: bounded requests, every failure turned into a protocol Answer.

With several URLs (`controller.url` as a list of replicas) each request goes to the current
one and, when it cannot serve, on to the next (xce_protocol/replicas.py says when); the
credentials are the cluster's, the same at every URL. An answer saying the outcome of the
change is unknown (the replica lost its database at the commit) stays where it was: the link
retries it there at its own pace, every call of the agent being one it may repeat.

Joins carry the join token (`auth_headers`, the configured one) or, without one, the host
credential; every other call carries the host credential the last join issued (`credential`,
set by the link), never the join token.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from xce_agent import __version__
from xce_agent.config.agent import ControllerConfig
from xce_agent.controller.bounded_http import HttpFailure, Inflight, Reply, Target, request
from xce_agent.controller.credential import HostCredential
from xce_protocol import replicas
from xce_protocol.protocol import PROTOCOL, Answer, Identity, Outcome, classify

log = logging.getLogger(__name__)


def token_headers(token: str | None) -> Callable[[], Mapping[str, str]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return lambda: headers


class ControllerClient:
    def __init__(
        self,
        config: ControllerConfig,
        me: Identity,
        auth_headers: Callable[[], Mapping[str, str]] | None = None,
        send: Callable[..., Reply] = request,  # bounded_http.request; tests pass a fake
    ) -> None:
        self.config = config
        self._send = send
        self.me = me
        self.urls = config.urls
        self.targets = tuple(Target.from_url(url) for url in self.urls)
        self._current = 0  # the URL requests go to first (shared by the link's threads)
        self._answered = 0  # the URL that last answered, to log a move once
        self._failed: list[int] = []  # the URLs moved away from since, for that log line
        self._lock = threading.Lock()
        self._aborts = 0  # close() calls: a cut request is not tried elsewhere
        self.auth_headers = auth_headers or token_headers(config.token)
        self.credential: HostCredential | None = None
        self.tls: ssl.SSLContext | None = None
        if any(target.tls for target in self.targets):
            cafile = str(config.ca_file) if config.ca_file else None
            self.tls = ssl.create_default_context(cafile=cafile)
            cert, key = config.client_cert_file, config.client_key_file
            if cert and key:
                try:  # checked with the config; a file changed since shows as a TLS failure
                    self.tls.load_cert_chain(str(cert), str(key))
                except (OSError, ssl.SSLError) as exc:
                    log.error("cannot load the client certificate %s: %s", cert, exc)
        self.inflight = Inflight()
        self._headers = {
            "User-Agent": f"xce-agent/{__version__}",
            "XCE-Protocol": PROTOCOL,
            "Accept": "application/json",
        }

    @property
    def url(self) -> str:
        """The URL requests go to now."""
        return self.urls[self._current]

    def _host_headers(self) -> Mapping[str, str]:
        cred = self.credential
        return {"Authorization": f"Bearer {cred.secret}"} if cred is not None else {}

    def _call(
        self,
        method: str,
        path: str,
        budget: float,
        payload: Any = None,
        auth: Mapping[str, str] | None = None,
    ) -> Answer:
        headers = {**self._headers, **(self._host_headers() if auth is None else auth)}
        body = None
        if payload is not None:
            body = json.dumps(payload).encode()
            headers["Content-Type"] = "application/json"
        deadline = time.monotonic() + budget
        with self._lock:
            order = replicas.attempts(self._current, len(self.targets))
            aborts = self._aborts
        answer = Answer(Outcome.RETRY, "no controller URL")
        for tried, index in enumerate(order, start=1):
            remaining = budget if tried == 1 else deadline - time.monotonic()
            answer, moves = self._attempt(index, method, path, headers, body, remaining)
            if not moves:
                self._answered_by(index)
                return answer
            with self._lock:
                if aborts != self._aborts:  # cut: stopping, or a stuck thread being replaced
                    return answer
                moved = replicas.after_failure(self._current, index, len(self.targets))
                if moved != self._current:  # this failure moved the link (not another's)
                    self._failed.append(index)
                self._current = moved
            if not replicas.another_try(deadline - time.monotonic(), tried, len(self.targets)):
                break
        return answer

    def _attempt(
        self,
        index: int,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes | None,
        budget: float,
    ) -> tuple[Answer, bool]:
        """One request to one URL: the answer, and whether it sends the request on."""
        target = self.targets[index]
        tls = self.tls if target.tls else None
        try:
            reply = self._send(target, method, path, headers, body, budget, tls, self.inflight)
        except HttpFailure as exc:
            where = f" ({self.urls[index]})" if len(self.urls) > 1 else ""
            return Answer(Outcome.RETRY, f"{exc}{where}"), replicas.moves_on(None)
        moves = replicas.moves_on(reply.status, replicas.code_of(reply.body))
        if 300 <= reply.status < 400:
            where = f" to {reply.location[:120]}" if reply.location else ""
            detail = f"HTTP {reply.status} redirect{where}: not followed"
            return Answer(Outcome.RETRY, detail), moves
        return classify(reply.status, reply.body, self.me, reply.retry_after), moves

    def _answered_by(self, index: int) -> None:
        """Log a move once, when the URL requests now go to first answers, naming the URLs
        whose failures moved the link there. A late answer from a URL already left (a watch
        that was out while a heartbeat failed elsewhere) is no move."""
        with self._lock:
            if index != self._current:
                return
            moved = index != self._answered
            failed = [self.urls[i] for i in dict.fromkeys(self._failed) if i != index]
            self._answered, self._failed = index, []
        if moved and failed:
            log.warning(
                "controller: now at %s (%s could not serve)", self.urls[index], ", ".join(failed)
            )

    def join(self, payload: dict[str, Any]) -> Answer:
        auth = self.auth_headers() or self._host_headers()
        return self._call("POST", "/v1/join", self.config.timeout, payload, auth)

    def heartbeat(self, payload: dict[str, Any], timeout: float | None = None) -> Answer:
        path = f"/v1/hosts/{self.me.host}/heartbeat"
        return self._call(
            "POST", path, self.config.timeout if timeout is None else timeout, payload
        )

    def notice(self, payload: dict[str, Any], timeout: float | None = None) -> Answer:
        path = f"/v1/hosts/{self.me.host}/notice"
        return self._call(
            "POST", path, self.config.timeout if timeout is None else timeout, payload
        )

    def watch(self, since: int, wait: float) -> Answer:
        query = urlencode({"since": since, "timeout": wait, "instance_id": self.me.instance_id})
        path = f"/v1/hosts/{self.me.host}/watch?{query}"
        return self._call("GET", path, wait + self.config.timeout)

    def gave_up(self, reason: str, action: str) -> Answer:
        """This instance gives up joining (its join deadline passed): with the join token."""
        body = {"host": self.me.host, "instance_id": self.me.instance_id, "reason": reason[:500]}
        body["action"] = action
        auth = self.auth_headers()
        return self._call("POST", "/v1/join-timeout", self.config.timeout, body, auth)

    def lease(
        self,
        method: str,
        name: str,
        budget: float,
        payload: dict[str, Any] | None = None,
        query: dict[str, str] | None = None,
    ) -> Answer:
        """Acquire or renew (POST), or release (DELETE) a lease; `name` is a lease name."""
        path = f"/v1/leases/{name}" + (f"?{urlencode(query)}" if query else "")
        return self._call(method, path, budget, payload)

    def close(self) -> None:
        """Cut every request in progress (the link is stopping or replacing a thread)."""
        with self._lock:
            self._aborts += 1
        self.inflight.abort_all()
