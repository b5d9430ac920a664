"""The join deadline on a running agent: the timer, the record on disk, the action.

Drives the machine of join_deadline.py with the reactor's timers and the wall clock (the
deadline spans agent restarts and reboots, so it is a wall-clock time kept on disk), read
once at start and moved on by the monotonic clock within a run. Giving up runs on a thread:
telling the controller and the action may take a while, and the agent keeps trying to join
meanwhile (an action that is not a poweroff leaves it running).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from xce_agent.config.agent import AgentConfig
from xce_agent.controller import join_deadline as jd
from xce_agent.controller.credential import CredentialStore
from xce_agent.controller.join_action import ActionRun
from xce_agent.supervision.boot import kernel_boot_id
from xce_agent.supervision.reactor import Reactor, TimerHandle
from xce_protocol.reasons import Reason

log = logging.getLogger(__name__)


class Runner(Protocol):
    """Runs the action (join_action.ActionRun; a recorder in tests)."""

    def __call__(self, argv: tuple[str, ...]) -> str: ...

    def close(self) -> None: ...


class JoinGuard:
    def __init__(
        self,
        config: AgentConfig,
        reactor: Reactor,
        why: Callable[[], str],
        host: str,
        run: Runner | None = None,
        wall: Callable[[], float] = time.time,
        boot_id: Callable[[], str] = kernel_boot_id,
    ) -> None:
        self.config = config
        self.reactor = reactor
        self.why = why  # the last refusal or failure, as the agent's state says
        self.host = host
        self.run: Runner = run or ActionRun()
        self.wall = wall
        self.boot_id = boot_id  # the kernel's: its monotonic clock is the one of this boot
        self._anchor = (0.0, 0.0)  # (wall, monotonic) at start: see now()
        self.record: jd.JoinRecord | None = None
        self.watch = jd.Watch(None)
        self._timer: TimerHandle | None = None
        self.thread: threading.Thread | None = None
        self.on_change: Callable[[], None] = lambda: None  # what metrics show changed

    def start(self) -> None:
        inst = self.config.instance
        if inst.join_deadline is None or self.config.controller is None:
            return
        self._anchor = (self.wall(), self.reactor.clock.monotonic())
        held = CredentialStore(self.config.state_directory).peek()
        joined_before = held is not None and held.instance_id == inst.id
        kernel = self.boot_id()
        boot = (kernel, self.reactor.clock.monotonic()) if kernel else None
        self.record = jd.load(self.config.state_directory, inst.id, self.now(), joined_before, boot)
        self.watch = jd.watch_of(self.record, inst.join_deadline)
        due = jd.next_due(self.watch)
        if due is not None:
            left = max(0.0, due - self.now())
            log.info("join deadline in %.0fs unless the controller accepts this host", left)
            self._timer = self.reactor.call_later(left, self._due)
        self.on_change()

    def now(self) -> float:
        """The wall clock read at start, moved on by the monotonic clock: the deadline spans
        reboots so it is a wall-clock time, but within a run a clock stepped back (or
        forward) must not put it off (the timer fired and found it not yet due) or bring it
        forward."""
        wall, mono = self._anchor
        return wall + (self.reactor.clock.monotonic() - mono)

    def metrics(self) -> tuple[float | None, bool | None]:
        """(the deadline while it is pending, whether the agent gave up); (None, None)
        without a deadline."""
        if self.record is None:
            return None, None
        return jd.next_due(self.watch), self.watch.acted

    def accepted(self) -> None:
        self._post(jd.Accepted())

    def close(self) -> None:
        """The agent stops: no timer, and an action still running goes with it."""
        self._cancel()
        self.run.close()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _due(self) -> None:
        self._post(jd.Due(self.why()))

    def _post(self, event: jd.Event) -> None:
        if self.record is None:
            return
        self.watch, actions = jd.step(self.watch, event, self.now())
        for action in actions:
            if isinstance(action, jd.Remember):
                self._keep(replace(self.record, joined=True))
                self._cancel()
            else:
                self._keep(replace(self.record, gave_up_at=self.now()))
                self._give_up(action.why)

    def _keep(self, record: jd.JoinRecord) -> None:
        self.record = record
        jd.save(self.config.state_directory, record)

    def _give_up(self, why: str) -> None:
        inst = self.config.instance
        assert inst.join_deadline is not None and inst.on_join_timeout is not None
        action = inst.on_join_timeout
        log.error(
            "not accepted by the controller within %gs of this instance's first start "
            "(last: %s): %s",
            inst.join_deadline,
            why or "no answer",
            jd.describe_action(action),
            extra={"reason_code": Reason.JOIN_DEADLINE_PASSED},
        )
        self.on_change()

        def work() -> None:
            log.warning("join deadline: %s", self._tell(why))
            if action.kind != "none":
                log.warning("join deadline: %s", self.run(action.argv()))

        self.thread = threading.Thread(target=work, name="join-deadline", daemon=True)
        self.thread.start()

    def _tell(self, why: str) -> str:
        """Tell the controller this instance gives up joining; what became of it."""
        assert self.config.controller is not None
        from xce_agent.controller.client import ControllerClient  # only with a controller
        from xce_protocol.protocol import Identity

        action = self.config.instance.on_join_timeout
        me = Identity(self.host, self.config.instance.id)
        client = ControllerClient(self.config.controller, me)
        try:
            answer = client.gave_up(why, action.kind if action else "")
        finally:
            client.close()
        return f"told the controller: {answer.outcome.value} {answer.detail}".strip()
