"""The provisioner's calls to the controller, with the provisioner token (docs/provisioner.md).

One `_call` on a requests session: every transport failure and every answer that is not the
one expected becomes a `ControllerError` (with the controller's error kind when it gave one),
so the runner has one failure to handle, whatever the controller (or something in its place)
answers. Every call is bounded: the answer in `timeout` from the connection to its last byte,
and in size (drivers/bounded.py); a redirect is refused, so the token goes nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

from xce_provisioner.config import ControllerSettings
from xce_provisioner.drivers.bounded import BoundedAdapter
from xce_provisioner.plan import Machine, Phase, Record, Step

ANSWER_LIMIT = 8 * 1024 * 1024


class ControllerError(Exception):
    def __init__(self, message: str, kind: str = "", status: int = 0) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


@dataclass(frozen=True)
class Lease:
    name: str = ""  # "" when it runs without one (a test, a one-host cluster)
    token: int = 0


class ControllerClient:
    def __init__(self, settings: ControllerSettings, token: str, lease: Lease) -> None:
        self.settings = settings
        self.lease = lease
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {token}"
        adapter = BoundedAdapter(settings.timeout, ANSWER_LIMIT)
        self._session.mount("https://", adapter)
        self._session.mount("http://", adapter)
        self._verify: bool | str = str(settings.ca_file) if settings.ca_file else True

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        url = f"{self.settings.url}{path}"
        try:
            answer = self._session.request(
                method,
                url,
                json=body,
                params=params,
                timeout=self.settings.timeout,
                verify=self._verify,
                allow_redirects=False,
            )
            data = answer.json() if answer.content else None
        except (requests.RequestException, ValueError, RecursionError) as exc:
            raise ControllerError(f"{method} {path}: {exc}") from None
        if answer.status_code >= 300:
            kind = data.get("error", "") if isinstance(data, dict) else ""
            text = data.get("message", "") if isinstance(data, dict) else answer.reason
            raise ControllerError(
                f"{method} {path}: {answer.status_code} {text}", kind, answer.status_code
            )
        return data

    def _under_lease(self) -> dict[str, Any] | None:
        """Every call but a step (whose body carries it) names the lease in its query: the
        controller refuses a token that is no longer its grant (`stale_lease`), so a holder
        that lost the lease learns it at its next call and changes nothing with it."""
        if not self.lease.name:
            return None
        return {"lease": self.lease.name, "token": self.lease.token}

    def records(self) -> dict[str, Record]:
        data = self._call("GET", "/v1/provisioned", params=self._under_lease())
        if not isinstance(data, list):
            raise ControllerError("GET /v1/provisioned: expected a list")
        return {r.instance_id: r for r in (_record("GET /v1/provisioned", d) for d in data)}

    def step(
        self,
        instance_id: str,
        decision: str,
        action: str,
        phase: Phase,
        attempt: int,
        code: str,
        why: str = "",
    ) -> Record:
        body = {
            "decision": decision,
            "action": action,
            "phase": phase.value,
            "attempt": attempt,
            "code": code,
            "why": why[:500],
            "lease": self.lease.name,
            "token": self.lease.token,
        }
        path = f"/v1/provisioned/{instance_id}/power"
        return _record(f"POST {path}", self._call("POST", path, body))

    def ack(self, instance_id: str) -> None:
        self._call("POST", f"/v1/to-return/{instance_id}/ack", params=self._under_lease())

    def retire(self, instance_id: str, why: str) -> None:
        path = f"/v1/provisioned/{instance_id}/decommission"
        self._call("POST", path, {"reason": why}, self._under_lease())

    def expect(self, machine: Machine, deadline: float | None) -> None:
        body: dict[str, Any] = {
            "instance_id": machine.instance_id,
            "template": machine.template,
            "expected_name": machine.name,
        }
        if deadline is not None:
            body["deadline_in"] = deadline
        self._call("POST", "/v1/expected", body, self._under_lease())

    def close(self) -> None:
        self._session.close()


def _record(what: str, d: Any) -> Record:
    """A record of the controller's answer; ControllerError when it is none."""
    try:
        return _parse(d)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ControllerError(f"{what}: malformed record ({type(exc).__name__}: {exc})") from None


def _parse(d: Any) -> Record:
    steps = tuple(
        Step(s["decision"], s["action"], Phase(s["phase"]), int(s["attempt"]), str(s["code"]))
        for s in d["power"]
    )
    return Record(
        instance_id=str(d["instance_id"]),
        state=str(d["state"]),
        decision=str(d["decision"]),
        jobs_running=int(d["jobs_running"]),
        steps=steps,
    )
