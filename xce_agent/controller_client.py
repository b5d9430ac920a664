"""HTTP to the controller: one session, every failure turned into a protocol Answer."""

from __future__ import annotations

import logging
from typing import Any

import requests

from xce_agent import __version__
from xce_agent.config import ControllerConfig
from xce_protocol.protocol import PROTOCOL, Answer, Identity, Outcome, classify

log = logging.getLogger(__name__)


class ControllerClient:
    def __init__(self, config: ControllerConfig, me: Identity) -> None:
        self.config = config
        self.me = me
        self.session = requests.Session()
        self.session.headers["User-Agent"] = f"xce-agent/{__version__}"
        self.session.headers["XCE-Protocol"] = PROTOCOL
        if config.token:
            self.session.headers["Authorization"] = f"Bearer {config.token}"
        self.verify: str | bool = str(config.ca_file) if config.ca_file else True

    def _call(self, method: str, path: str, timeout: float, **kwargs: Any) -> Answer:
        try:
            response = self.session.request(
                method, self.config.url + path, timeout=timeout, verify=self.verify, **kwargs
            )
        except requests.exceptions.SSLError:
            return Answer(Outcome.RETRY, "TLS failure talking to the controller")
        except requests.exceptions.Timeout:
            return Answer(Outcome.RETRY, "controller timed out")
        except requests.RequestException as exc:
            return Answer(Outcome.RETRY, f"controller unreachable ({type(exc).__name__})")
        try:
            body = response.json()
        except ValueError:
            body = None
        return classify(response.status_code, body, self.me, _retry_after(response))

    def join(self, payload: dict[str, Any]) -> Answer:
        return self._call("POST", "/v1/join", self.config.timeout, json=payload)

    def heartbeat(self, payload: dict[str, Any]) -> Answer:
        return self._call(
            "POST", f"/v1/hosts/{self.me.host}/heartbeat", self.config.timeout, json=payload
        )

    def watch(self, since: int, wait: float) -> Answer:
        params = {"since": since, "timeout": wait, "instance_id": self.me.instance_id}
        return self._call(
            "GET", f"/v1/hosts/{self.me.host}/watch", wait + self.config.timeout, params=params
        )

    def close(self) -> None:
        self.session.close()


def _retry_after(response: requests.Response) -> float | None:
    value = response.headers.get("Retry-After", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 <= seconds <= 3600 else None
