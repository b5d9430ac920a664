"""The shell of a planned stop (core/planned_stop.py): the `stop` notice, the bound, the end.

Runs on the event loop. The notice goes out on its own thread, bounded by the drain's bound;
the bound is a reactor timer, so neither a silent controller nor a hung request holds the
stop past it. The components are stopped once, by `stop_components`, whichever end comes
first: the notice's answer says drained or not taken, a later answer (heartbeat, watch) says
drained, the bound passes, or the operator asks again without a drain.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from xce_agent.controller.side import ControllerSide
from xce_agent.core import planned_stop as ps
from xce_agent.core.membership import MembershipState
from xce_agent.supervision.reactor import Reactor, TimerHandle
from xce_protocol.notices import Notice, NoticeKind
from xce_protocol.protocol import Answer, Outcome

log = logging.getLogger(__name__)
PAST_THE_BOUND = 1.0  # seconds the notice's request may outlast the drain's bound


class PlannedStop:
    def __init__(
        self,
        reactor: Reactor,
        side: ControllerSide,
        instance_id: str,
        stop_components: Callable[[str], None],
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._reactor = reactor
        self._side = side
        self._instance_id = instance_id
        self._stop_components = stop_components
        self._wall = wall
        self.event_id = ""
        self._timer: TimerHandle | None = None
        self._reason = ""
        self._draining = False
        self.told = False  # the controller took the stop notice: it waits for a last report
        self.status: ps.Draining | None = None  # what the state saves while a drain is on
        self.on_change: Callable[[], None] = lambda: None  # the status changed

    def draining(self) -> bool:
        """The components wait for the drain: the agent must not end yet."""
        return self._draining

    def begin(self, member: MembershipState, seconds: float, reason: str) -> None:
        """Drain first when `seconds` > 0 and the host is joined, else stop at once. A second
        request during a drain ends it at once only when it asks for no drain."""
        if self._draining:
            if seconds <= 0:
                self.end("asked again, without a drain")
            return
        why = ps.why_not_drain(member, seconds)
        if why:
            log.info("stopping the components without a drain: %s", why)
            self._stop_components(reason)
            return
        self._reason, self._draining = reason, True
        now = self._wall()
        self.event_id = f"agent-stop-{now:.3f}"
        notice = Notice(NoticeKind.STOP, "agent", self.event_id, now + seconds)
        self.status = ps.Draining(now, seconds, self.event_id, reason)
        self.on_change()
        log.info("planned stop: telling the controller, then draining for up to %gs", seconds)
        self._timer = self._reactor.call_later(
            seconds, lambda: self.end(f"the drain's bound of {seconds:g}s passed")
        )
        self._send(notice, seconds)

    def _send(self, notice: Notice, seconds: float) -> None:
        from xce_agent.controller.notice_sender import notice_payload

        payload: dict[str, Any] = notice_payload(notice, self._instance_id)
        client = self._side.open_link().client
        # A second past the bound: when the bound comes first, its timer ends the drain and
        # says so, never the notice's own timeout firing at the same instant (a silent
        # controller then read as one that "did not take it", depending on which ran first).
        budget = min(client.config.timeout, seconds + PAST_THE_BOUND)

        def send() -> None:
            try:
                answer = client.notice(payload, budget)
            except Exception as exc:  # never the stop's problem: it goes on without a drain
                log.exception("planned stop: the notice failed")
                answer = Answer(Outcome.RETRY, f"{type(exc).__name__}")
            self._reactor.call_soon_threadsafe(lambda: self._answered(answer))

        threading.Thread(target=send, name="controller-planned-stop", daemon=True).start()

    def _answered(self, answer: Answer) -> None:
        said = ps.verdict(answer.outcome, answer.body, self.event_id)
        self.told = said is not ps.Verdict.STOP_NOW
        if not self._draining:
            return  # the bound passed first, or the operator asked again
        if said is ps.Verdict.DRAINED:
            self.end("the controller says the host runs no job")
        elif said is ps.Verdict.STOP_NOW:
            self.end(f"the controller did not take it ({answer.detail or answer.outcome.value})")
        else:
            log.info("planned stop: the controller closed the host; waiting for its jobs")

    def drained(self, event_id: str) -> None:
        """A controller answer says the host is drained for `event_id`."""
        if self._draining and event_id == self.event_id:
            self.end("the controller says the host's jobs are done")

    def end(self, why: str) -> None:
        """Stop the components now, if a drain is waited for."""
        if not self._draining:
            return
        self._draining = False
        self.status = None
        self.on_change()
        if self._timer is not None:
            self._timer.cancel()
        log.info("planned stop: %s; stopping the components", why)
        self._stop_components(self._reason)
