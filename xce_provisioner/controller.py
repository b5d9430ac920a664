"""The provisioner's calls to the controller, with the provisioner token (docs/provisioner.md).

One `_call` on a requests session: every transport failure and every answer that is not the
one expected becomes a `ControllerError` (with the controller's error kind when it gave one),
so the runner has one failure to handle, whatever the controller (or something in its place)
answers. Every call is bounded: the answer in `timeout` from the connection to its last byte,
and in size (drivers/bounded.py); a redirect is refused, so the token goes nowhere else.

With the controller's replicas listed, a call goes to the current one and moves on to the
next, each at most once, by the agent's rules (xce_protocol/replicas.py): on no answer at all
or a 502/503/504, never on the controller's own word nor on `refused_outcome_unknown` (the
change may be stored: the next pass reads the records back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

from xce_protocol import replicas
from xce_provisioner.config import ControllerSettings
from xce_provisioner.drivers.bounded import BoundedAdapter
from xce_provisioner.plan import Machine, Phase, Record, Step

ANSWER_LIMIT = 8 * 1024 * 1024


class ControllerError(Exception):
    def __init__(self, message: str, kind: str = "", status: int = 0, code: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status  # 0: no answer at all (a transport failure)
        self.code = code  # the answer's reason code, if it gave one


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
        self._current = 0  # the URL calls go to first (settings.urls)

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        urls = self.settings.urls
        for index in replicas.attempts(self._current, len(urls)):
            try:
                return self._call_one(urls[index], method, path, body, params)
            except ControllerError as exc:
                if not replicas.moves_on(exc.status or None, exc.code):
                    raise
                failure = exc
                self._current = replicas.after_failure(self._current, index, len(urls))
        raise failure

    def _call_one(
        self,
        base: str,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        params: dict[str, Any] | None,
    ) -> Any:
        where = f"{base}: {method} {path}" if len(self.settings.urls) > 1 else f"{method} {path}"
        try:
            answer = self._session.request(
                method,
                f"{base}{path}",
                json=body,
                params=params,
                timeout=self.settings.timeout,
                verify=self._verify,
                allow_redirects=False,
            )
        except requests.RequestException as exc:
            raise ControllerError(f"{where}: {exc}") from None
        try:
            data = answer.json() if answer.content else None
        except (requests.RequestException, ValueError, RecursionError) as exc:
            raise ControllerError(f"{where}: {exc}", status=answer.status_code) from None
        if answer.status_code >= 300:
            kind = data.get("error", "") if isinstance(data, dict) else ""
            text = data.get("message", "") if isinstance(data, dict) else answer.reason
            raise ControllerError(
                f"{where}: {answer.status_code} {text}",
                kind,
                answer.status_code,
                replicas.code_of(data),
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
