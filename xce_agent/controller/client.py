"""HTTP to the controller: bounded requests, every failure turned into a protocol Answer.

Joins carry the join token (`auth_headers`, the configured one) or, without one, the host
credential; every other call carries the host credential the last join issued (`credential`,
set by the link), never the join token.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from xce_agent import __version__
from xce_agent.config.agent import ControllerConfig
from xce_agent.controller.bounded_http import HttpFailure, Inflight, Target, request
from xce_agent.controller.credential import HostCredential
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
    ) -> None:
        self.config = config
        self.me = me
        self.target = Target.from_url(config.url)
        self.auth_headers = auth_headers or token_headers(config.token)
        self.credential: HostCredential | None = None
        self.tls: ssl.SSLContext | None = None
        if self.target.tls:
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
        try:
            reply = request(
                self.target, method, path, headers, body, budget, self.tls, self.inflight
            )
        except HttpFailure as exc:
            return Answer(Outcome.RETRY, str(exc))
        if 300 <= reply.status < 400:
            where = f" to {reply.location[:120]}" if reply.location else ""
            return Answer(Outcome.RETRY, f"HTTP {reply.status} redirect{where}: not followed")
        return classify(reply.status, reply.body, self.me, reply.retry_after)

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
        self.inflight.abort_all()
