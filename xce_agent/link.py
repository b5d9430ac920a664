"""The agent's link to the controller: join with backoff, heartbeat, and the watch long-poll.

Runs on two threads so a slow controller never blocks supervision; every result is handed to
the event loop through `post`, where the agent acts on it. Stopping is immediate: waits are
on a threading.Event.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
from collections.abc import Callable
from typing import Any, Protocol

from xce_agent.controller_client import ControllerClient
from xce_protocol.protocol import Answer, Outcome, number, template_of

log = logging.getLogger(__name__)

WATCH_WAIT = 30.0


class LinkHandler(Protocol):
    """Called on the event loop's thread."""

    def joined(self, body: dict[str, Any]) -> None: ...
    def contact(self, ok: bool, detail: str) -> None: ...
    def decommissioned(self, reason: str, body: dict[str, Any]) -> None: ...
    def confirmed_active(self) -> None: ...


def retry_delay(attempt: int, rand: float, cap: float, retry_after: float | None) -> float:
    """Jittered exponential delay (1 s doubling, +/-50 %), capped; Retry-After wins if longer."""
    base = min(cap, 2.0 ** min(attempt, 16))
    delay = min(cap, base * (0.5 + rand))
    if retry_after is not None:
        delay = max(delay, min(retry_after, 3600.0))
    return delay


class ControllerLink:
    def __init__(
        self,
        client: ControllerClient,
        handler: LinkHandler,
        post: Callable[[Callable[[], None]], None],
        join_payload: Callable[[], dict[str, Any]],
        heartbeat_payload: Callable[[], dict[str, Any]],
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.client = client
        self.handler = handler
        self.post = post
        self.join_payload = join_payload
        self.heartbeat_payload = heartbeat_payload
        self.rand = rand
        self.stopped = threading.Event()
        self.interval = 10.0
        self.grace = 60.0
        self.version = 0
        self._threads: list[threading.Thread] = []
        self._gone = False  # a decommission was received: nothing more to say

    def start(self) -> None:
        self._spawn(self._main, "controller-link")

    def stop(self) -> None:
        self.stopped.set()
        self.client.close()

    def final_report(self) -> None:
        """Tell the controller once that the worker is stopped, then fall silent."""

        def report() -> None:
            self.client.heartbeat(self.heartbeat_payload())
            self.stop()

        self._spawn(report, "controller-final-report")

    def confirm(self) -> None:
        """Ask the controller now whether this host is still wanted (worker exit code)."""
        self._spawn(self._confirm, "controller-confirm")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _cap(self) -> float:
        # Below the host-loss grace, so a host that was only briefly cut off rejoins in time.
        return max(1.0, min(self.client.config.max_retry_delay, self.grace / 2))

    def _main(self) -> None:
        while not self.stopped.is_set():
            if not self._join():
                return
            self._spawn(self._watch, "controller-watch")
            if not self._heartbeats():
                return

    def _join(self) -> bool:
        attempt = 0
        while not self.stopped.is_set():
            answer = self.client.join(self.join_payload())
            if answer.outcome is Outcome.ACCEPTED and template_of(answer.body) is None:
                answer = Answer(Outcome.RETRY, "join answer without a usable template")
            if answer.outcome is Outcome.ACCEPTED:
                self.interval = number(answer.body, "heartbeat_interval", self.interval)
                self.grace = number(answer.body, "host_loss_grace", self.grace)
                version = answer.body.get("version")
                self.version = version if isinstance(version, int) else 0
                self.post(functools.partial(self.handler.joined, answer.body))
                return True
            if self._final(answer):
                return False
            self._report(answer)
            self.stopped.wait(retry_delay(attempt, self.rand(), self._cap(), answer.retry_after))
            attempt += 1
        return False

    def _heartbeats(self) -> bool:
        """Heartbeat until stopped (False) or the controller forgot us (True: join again)."""
        while not self.stopped.wait(self.interval * (0.9 + 0.2 * self.rand())):
            answer = self.client.heartbeat(self.heartbeat_payload())
            if self._final(answer):
                return False
            if answer.outcome is Outcome.REFUSED and "unknown_host" in answer.detail:
                log.warning("controller no longer knows this host: joining again")
                return True
            self._report(answer)
        return False

    def _watch(self) -> None:
        attempt = 0
        while not self.stopped.is_set() and not self._gone:
            answer = self.client.watch(self.version, WATCH_WAIT)
            if self._final(answer):
                return
            if answer.outcome is Outcome.ACCEPTED:
                attempt = 0
                version = answer.body.get("version")
                if isinstance(version, int) and version >= self.version:
                    self.version = version
                continue
            self.stopped.wait(retry_delay(attempt, self.rand(), self._cap(), answer.retry_after))
            attempt += 1

    def _confirm(self) -> None:
        attempt = 0
        while not self.stopped.is_set() and not self._gone:
            answer = self.client.heartbeat(self.heartbeat_payload())
            if self._final(answer):
                return
            if answer.outcome is Outcome.ACCEPTED:
                self.post(self.handler.confirmed_active)
                return
            self._report(answer)
            self.stopped.wait(retry_delay(attempt, self.rand(), self._cap(), answer.retry_after))
            attempt += 1

    def _final(self, answer: Answer) -> bool:
        """Act on a decommission; True when the link has nothing more to do."""
        if answer.outcome is Outcome.DECOMMISSIONED:
            if not self._gone:
                self._gone = True
                self.post(lambda: self.handler.decommissioned(answer.detail, answer.body))
            return True
        return self.stopped.is_set()

    def _report(self, answer: Answer) -> None:
        ok = answer.outcome is Outcome.ACCEPTED
        if not ok:
            log.debug("controller contact failed: %s", answer.detail)
        self.post(lambda: self.handler.contact(ok, answer.detail))
