"""The controller's lease endpoints for the singletons: answers turned into holder events.

Only a well-formed grant of this lease to this agent run counts as held; a `lease_held`
refusal is another holder; everything else (unreachable, garbage, not joined yet) is a
failure, which the holder machine retries until its deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from xce_agent.core import lease_holder as lh
from xce_protocol.protocol import Answer, Outcome

if TYPE_CHECKING:  # an agent without a controller never loads the HTTP code
    from xce_agent.controller.client import ControllerClient
    from xce_agent.controller.credential import HostCredential


class HttpLeaseCalls:
    """Requests on a client of their own (a link that replaces its threads cuts only its own
    requests), with the host credential the link holds now."""

    def __init__(
        self,
        client: Callable[[], ControllerClient | None],
        credential: Callable[[], HostCredential | None],
    ) -> None:
        self.client = client
        self.credential = credential

    def _ready(self) -> ControllerClient | None:
        client, credential = self.client(), self.credential()
        if client is None or credential is None:
            return None
        client.credential = credential
        return client

    def acquire(
        self, lease: str, session: str, ttl: float, timeout: float, sent: float
    ) -> lh.Event:
        client = self._ready()
        if client is None:
            return lh.Failed(sent, "not joined yet: no host credential")
        body = {"host": client.me.host, "session": session, "ttl": ttl}
        return interpret(client.lease("POST", lease, timeout, body), lease, session, sent)

    def release(self, lease: str, session: str, timeout: float) -> None:
        client = self._ready()
        if client is not None:
            query = {"host": client.me.host, "session": session}
            client.lease("DELETE", lease, timeout, query=query)


def interpret(answer: Answer, lease: str, session: str, sent: float) -> lh.Event:
    body = answer.body
    if answer.outcome is Outcome.ACCEPTED:
        token = body.get("token")
        mine = body.get("lease") == lease and body.get("session") == session
        if mine and body.get("state") == "held" and _count(token):
            assert isinstance(token, int)
            return lh.Granted(sent, token)
        return lh.Failed(sent, "lease answer not for this lease and agent: ignored")
    if answer.outcome is Outcome.REFUSED and body.get("error") == "lease_held":
        left = body.get("expires_in")
        wait = float(left) if isinstance(left, (int, float)) and 0 <= left <= 3600 else 0.0
        return lh.Denied(sent, answer.detail, wait)
    return lh.Failed(sent, answer.detail or answer.outcome.value)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
