"""Relaying the provider's notices to the controller, in order, on one thread.

A notice is worth most before its deadline, so it is retried with the link's backoff while
the controller is unreachable, until accepted, refused (a 4xx: it would be refused again),
or `GIVE_UP` and its deadline (up to a day ahead) have passed. Active and ended notices of
one event arrive in the order seen.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from xce_agent.controller.link import Client
from xce_agent.core.answers import retry_delay
from xce_protocol.notices import Notice
from xce_protocol.protocol import PROTOCOL, Answer, Outcome

log = logging.getLogger(__name__)

GIVE_UP = 300.0
MAX_RETRY = 86400.0  # a deadline days ahead (scheduled maintenance) is retried for a day


def retry_for(notice: Notice, now: float) -> float:
    """How long to keep relaying a notice the controller cannot take yet: at least GIVE_UP,
    and until its deadline (up to a day), so a maintenance announced an hour ahead is not
    dropped by a controller outage of a few minutes."""
    if notice.deadline is None:
        return GIVE_UP
    return min(MAX_RETRY, max(GIVE_UP, notice.deadline - now))


def notice_payload(notice: Notice, instance_id: str) -> dict[str, Any]:
    return {"protocol": PROTOCOL, "instance_id": instance_id, **notice.to_wire()}


class NoticeSender:
    def __init__(
        self,
        client: Client,
        instance_id: str,
        cap: float = 10.0,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.client = client
        self.instance_id = instance_id
        self.cap = cap
        self.rand = rand
        self.stopped = threading.Event()
        self._queue: queue.Queue[Notice | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="controller-notices", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def send(self, notice: Notice) -> None:
        self._queue.put(notice)

    def stop(self) -> None:
        self.stopped.set()
        self._queue.put(None)

    def _run(self) -> None:
        while not self.stopped.is_set():
            notice = self._queue.get()
            if notice is None:
                return
            self._deliver(notice)

    def _deliver(self, notice: Notice) -> None:
        payload = notice_payload(notice, self.instance_id)
        started = time.monotonic()
        limit = retry_for(notice, time.time())
        attempt = 0
        while not self.stopped.is_set():
            answer = self.client.notice(payload)
            if answer.outcome is Outcome.ACCEPTED:
                log.info(
                    "controller took the %s notice (%s): host %s",
                    notice.kind.value,
                    notice.state.value,
                    answer.detail,
                )
                return
            joining = answer.outcome is Outcome.REFUSED and _not_joined(answer)
            final = (Outcome.REFUSED, Outcome.DECOMMISSIONED, Outcome.INCOMPATIBLE)
            if answer.outcome in final and not joining:
                log.warning(
                    "controller refused the %s notice: %s", notice.kind.value, answer.detail
                )
                return
            if time.monotonic() - started > limit:
                log.warning("gave up relaying the %s notice: %s", notice.kind.value, answer.detail)
                return
            self.stopped.wait(retry_delay(attempt, self.rand(), self.cap, answer.retry_after))
            attempt += 1


# Refusals that pass once the host has joined: the controller does not know the host yet, the
# agent holds no host credential yet (a notice read at boot, before the join's answer), or one
# the controller forgot (the agent is joining again). The notice is sent again after them.
NOT_JOINED = ("unknown_host", "unknown_credential", "unauthorized")


def _not_joined(answer: Answer) -> bool:
    kind = answer.body.get("error")
    if isinstance(kind, str):
        return kind in NOT_JOINED
    return any(f" {k}" in answer.detail for k in NOT_JOINED)
