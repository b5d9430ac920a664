"""The agent's link to the controller: join with backoff, heartbeat, and the watch long-poll.

Two long-lived threads, so a slow controller never blocks supervision: the membership loop
(join, or resume with the stored host credential, then heartbeats; join again after `401
unknown_credential` or `404 unknown_host`) and the watch loop (one long-poll at a time while
joined, never more than one per host). The link decides nothing
about the worker: every result becomes a membership event handed to the event loop through
`post`, where the agent steps its membership machine.

Nothing the controller sends can stop a loop or make it spin: every request is bounded (see
bounded_http), every exception is caught, logged and retried, every interval the controller
publishes is clamped, and watch cycles keep a minimum gap. Each loop also declares, before
each cycle, by when it will have finished it; `check_threads` (called by the agent's timer)
reports a loop that overran and replaces its thread (link_loops.py runs the threads).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from xce_agent.config.agent import ControllerConfig
from xce_agent.controller import farewell
from xce_agent.controller.credential import CredentialStore, HostCredential, from_answer, unusable
from xce_agent.controller.link_loops import Loop, Loops
from xce_agent.core import membership as ms
from xce_agent.core.answers import (
    RETRY_AFTER_MAX,
    clamp,
    labelled,
    notice_events,
    retry_delay,
    template_doc,
    unknown,
    version_of,
)
from xce_protocol.protocol import CREDENTIALS_SINCE, Answer, Identity, Outcome, template_of

__all__ = ["RETRY_AFTER_MAX", "Client", "ControllerLink", "clamp", "retry_delay"]

log = logging.getLogger(__name__)

WATCH_WAIT = 30.0
# Each watch asks for WATCH_WAIT +/- this share, drawn afresh: agents that start together (a
# controller restart reconnects them all in a second) would otherwise stay in phase, their
# long-polls ending in the same second every 30 s, for as long as they run.
WATCH_JITTER = 0.2
MIN_WATCH_GAP = 0.5  # between the starts of two watch requests, however fast they are answered
HEARTBEAT_BOUNDS = (1.0, 300.0)
GRACE_BOUNDS = (5.0, 86400.0)
DEFAULT_INTERVAL = 10.0
DEFAULT_GRACE = 60.0
SLACK = 10.0  # a cycle may overrun its own bound by this before the watchdog acts


class Client(Protocol):
    config: ControllerConfig
    me: Identity
    credential: HostCredential | None

    def join(self, payload: dict[str, Any]) -> Answer: ...
    def heartbeat(self, payload: dict[str, Any], timeout: float | None = None) -> Answer: ...
    def notice(self, payload: dict[str, Any], timeout: float | None = None) -> Answer: ...
    def watch(self, since: int, wait: float) -> Answer: ...
    def close(self) -> None: ...


class ControllerLink:
    def __init__(
        self,
        client: Client,
        post: Callable[[ms.Event], None],
        join_payload: Callable[[], dict[str, Any]],
        heartbeat_payload: Callable[[], dict[str, Any]],
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        credentials: CredentialStore | None = None,
    ) -> None:
        self.client = client
        self.credentials = credentials  # where a credential the controller issues is kept
        self.post = post
        self.join_payload = join_payload
        self.heartbeat_payload = heartbeat_payload
        self.rand = rand
        self.clock = clock
        self.wall = wall
        self.stopped = threading.Event()
        self.joined = threading.Event()  # the watch runs only while joined
        self._wake = threading.Event()  # a confirmation was asked for
        self._confirming = False  # a confirmation is outstanding (until a heartbeat is taken)
        self._confirm_now = False  # ... and its first heartbeat goes out without waiting
        self.interval = DEFAULT_INTERVAL
        self.grace = DEFAULT_GRACE
        self.version = 0
        self._gone = False  # a decommission was received: nothing more to say
        self._lock = threading.Lock()
        self._loops = Loops(self.clock, self._bound, self._live, self._failed)
        self._loops.add("membership", self._membership_loop)
        self._loops.add("watch", self._watch_loop)
        self.cycles = {"membership": 0, "watch": 0}  # completed cycles, for tests and status

    # --- control (any thread) ---------------------------------------------------------
    def start(self) -> None:
        for loop in self._loops.values():
            self._loops.spawn(loop)

    def stop(self) -> None:
        self.stopped.set()
        self._wake.set()
        self.joined.set()  # release a watch loop waiting for the join
        self.client.close()

    def confirm(self) -> None:
        """Ask the controller now whether this host is still wanted (worker exit code)."""
        self._confirming = True
        self._confirm_now = True
        self._wake.set()

    def report_now(self) -> None:
        """Heartbeat now instead of at the next interval (a worker just gave up)."""
        self._wake.set()

    def final_report(self) -> None:
        """Tell the controller once that the worker is stopped, then fall silent."""
        farewell.final_report(self.client, self.heartbeat_payload, self.stop)

    def announce_shutdown(self, notice_payload: dict[str, Any], budget: float) -> None:
        """The shutdown notice and final report, then ShutdownAnnounced (farewell.py)."""
        farewell.announce_shutdown(
            self.client, notice_payload, self.heartbeat_payload, budget, self.clock, self.post
        )

    def check_threads(self) -> list[str]:
        """Replace every loop that overran its cycle's bound; what was replaced, for the log."""
        replaced = []
        for loop, past in self._loops.overdue():
            detail = f"link {loop.name} thread stuck for {past + SLACK:.0f}s: replaced at " + (
                time.strftime("%H:%M:%S", time.localtime(self.wall()))
            )
            log.error("controller %s", detail)
            self.client.close()  # cut the stuck request, if it is one
            self._loops.spawn(loop)
            self.post(ms.LinkStalled(detail))
            replaced.append(loop.name)
        return replaced

    # --- threads ----------------------------------------------------------------------
    def _live(self) -> bool:
        return not self.stopped.is_set() and not self._gone

    def _failed(self, loop: Loop, exc: Exception, failures: int) -> None:
        """A cycle raised: logged, told as a lost contact, retried after a backoff."""
        log.exception("controller link %s: unexpected error; retrying", loop.name)
        self.post(ms.ContactLost(f"link error ({type(exc).__name__}): retrying"))
        self._wait(loop, retry_delay(failures, self.rand(), self._cap(), None))

    def _wait(self, loop: Loop, seconds: float, event: threading.Event | None = None) -> bool:
        """Sleep up to `seconds` (declared as this cycle's bound); True if woken early."""
        return self._loops.wait(loop, seconds, event or self.stopped)

    def _bound(self, wait: float) -> float:
        return wait + WATCH_WAIT * (1 + WATCH_JITTER) + 2 * self.client.config.timeout + SLACK

    def watch_wait(self) -> float:
        """How long the next watch asks the controller to hold it (WATCH_JITTER)."""
        return WATCH_WAIT * (1 + WATCH_JITTER * (2 * self.rand() - 1))

    def _cap(self) -> float:
        # Below the host-loss grace, so a host that was only briefly cut off rejoins in time.
        return max(1.0, min(self.client.config.max_retry_delay, self.grace / 2))

    # --- membership loop: join, then heartbeat until told to join again ---------------
    def _membership_loop(self, generation: int) -> None:
        loop = self._loops["membership"]
        resumed = self._resume(loop, generation) if self.client.credential is not None else False
        if resumed is None:
            return
        attempt = 0
        while not resumed and self._loops.current(loop, generation):
            self._loops.arm(loop)
            answer = self._join()
            self.cycles["membership"] += 1
            if answer is None:
                break
            if self._final(answer):
                return
            self._wait(loop, retry_delay(attempt, self.rand(), self._cap(), answer.retry_after))
            attempt += 1
        while self._loops.current(loop, generation):
            self._wake.clear()
            # Only the first heartbeat of a confirmation skips the wait: retrying a failed one
            # at once would spin against an unreachable controller.
            if not self._confirm_now:
                self._wait(loop, self.interval * (0.9 + 0.2 * self.rand()), self._wake)
            self._confirm_now = False
            if not self._loops.current(loop, generation):
                return
            self._loops.arm(loop)
            rejoin = self._heartbeat()
            self.cycles["membership"] += 1
            if rejoin:
                return

    def _resume(self, loop: Loop, generation: int) -> bool | None:
        """Carry on with the stored credential (an agent restart, a reboot): True once the
        controller takes it, False when it does not know it (join), None: stop.

        The heartbeat asks for a renewal: the controller issues the next incarnation's
        credential, so a copy of this state directory elsewhere (an image, a clone) is stale
        from the moment this host presents the new one."""
        attempt = 0
        while self._loops.current(loop, generation):
            self._loops.arm(loop)
            answer = self.client.heartbeat({**self.heartbeat_payload(), "renew": True})
            self.cycles["membership"] += 1
            if self._final(answer):
                return None
            if answer.outcome is Outcome.ACCEPTED and unusable(answer.body, joining=False):
                why = unusable(answer.body, joining=False)
                answer = Answer(Outcome.RETRY, f"renewal answer {why}: ignored")
            if answer.outcome is Outcome.ACCEPTED:
                self._keep(answer.body)
                host, state = self._joined(answer.body)
                self.post(ms.Resumed(host, state))
                return True
            if unknown(answer):
                self._forget()
                return False
            self._report(answer, "host credential")
            self._wait(loop, retry_delay(attempt, self.rand(), self._cap(), answer.retry_after))
            attempt += 1
        return None

    def _keep(self, body: dict[str, Any]) -> bool:
        """Store the credential an answer issued; False when it carries none."""
        me = self.client.me
        previous = self.client.credential
        cred = from_answer(body, me.host, me.instance_id, self.client.config.url, previous)
        if cred is None:
            return False
        if self.credentials is not None:
            try:
                self.credentials.save(cred)
            except OSError as exc:  # kept in memory: this run goes on, a restart joins again
                log.error("cannot save the host credential: %s", exc.strerror)
        self.client.credential = cred
        return True

    def _forget(self) -> None:
        log.warning("controller does not know this host's credential: joining again")
        self.client.credential = None
        self.joined.clear()
        if self.credentials is not None:
            self.credentials.clear()

    def _join(self) -> Answer | None:
        """One join; None once joined, else the answer that was not an acceptance."""
        answer = self.client.join(self.join_payload())
        if answer.outcome is Outcome.ACCEPTED and template_of(answer.body) is None:
            answer = Answer(Outcome.RETRY, "join answer without a usable template")
        if answer.outcome is Outcome.ACCEPTED and "credential" in answer.body:
            why = unusable(answer.body, joining=True)
            if why:  # taken, it would make every later request fail inside the agent
                answer = Answer(Outcome.RETRY, f"join answer {why}: ignored")
        if answer.outcome is Outcome.ACCEPTED and not self._keep(answer.body):
            answer = Answer(
                Outcome.RETRY,
                f"controller (protocol {answer.body.get('protocol')}) issues no host "
                f"credential: this agent needs protocol {CREDENTIALS_SINCE} or later",
            )
        if answer.outcome is not Outcome.ACCEPTED:
            if answer.outcome is not Outcome.DECOMMISSIONED:
                which = "join token" if self.client.config.token else "join"
                self._report(answer, which)
            return answer
        host, state = self._joined(answer.body)
        doc = template_doc(answer.body, self.client.config.url, self.interval)
        self.post(ms.Joined(host, state, doc))
        return None

    def _joined(self, body: dict[str, Any]) -> tuple[str, str]:
        """Accepted (a join, a resumed credential): the watch may start; the host and state."""
        self._accept_intervals(body)
        self.version = version_of(body) or 0
        self.joined.set()
        return str(body.get("host", "")), str(body.get("state", ""))

    def _heartbeat(self) -> bool:
        """One heartbeat; True when the controller forgot this host (join again)."""
        confirming = self._confirming
        answer = self.client.heartbeat(self.heartbeat_payload())
        if self._final(answer):
            return False
        if unknown(answer):
            self._forget()
            return True
        if answer.outcome is Outcome.ACCEPTED:
            self._accept_intervals(answer.body)
            self._drained(answer.body)
            if confirming:
                self._confirming = False
                self.post(ms.ConfirmedActive())
        self._report(answer, "host credential")
        if answer.outcome is not Outcome.ACCEPTED and answer.retry_after is not None:
            self._wait(self._loops["membership"], min(answer.retry_after, RETRY_AFTER_MAX))
        return False

    def _accept_intervals(self, body: dict[str, Any]) -> None:
        if "heartbeat_interval" in body:
            interval = self._published(body, "heartbeat_interval", self.interval, HEARTBEAT_BOUNDS)
            if interval != self.interval:
                self.interval = interval
                self._wake.set()  # a heartbeat waiting out the old interval starts over
        if "host_loss_grace" in body:
            self.grace = self._published(body, "host_loss_grace", self.grace, GRACE_BOUNDS)

    def _published(
        self, body: dict[str, Any], key: str, current: float, bounds: tuple[float, float]
    ) -> float:
        value = clamp(body[key], current, bounds)
        if value != current and value != body[key]:
            log.warning("controller published %s=%r: using %gs", key, body[key], value)
        return value

    def _drained(self, body: dict[str, Any]) -> None:
        for event in notice_events(body):
            self.post(event)

    # --- watch loop -------------------------------------------------------------------
    def _watch_loop(self, generation: int) -> None:
        loop = self._loops["watch"]
        attempt = 0
        while self._loops.current(loop, generation):
            if not self.joined.is_set():
                self._wait(loop, 1.0, self.joined)
                continue
            started = self.clock()
            self._loops.arm(loop)
            answer = self.client.watch(self.version, self.watch_wait())
            if self._final(answer) or not self._loops.current(loop, generation):
                return
            self.cycles["watch"] += 1
            delay = 0.0
            if answer.outcome is Outcome.ACCEPTED:
                attempt = 0
                self._accept_intervals(answer.body)
                self._drained(answer.body)
                version = version_of(answer.body)
                # The controller's latest word, not the largest ever seen: one wrong version
                # must not hold every later watch past the changes it waits for.
                if version is not None:
                    self.version = version
            else:
                delay = retry_delay(attempt, self.rand(), self._cap(), answer.retry_after)
                attempt += 1
            # However fast the controller answers, watch cycles keep a minimum gap.
            gap = max(delay, MIN_WATCH_GAP - (self.clock() - started))
            if gap > 0:
                self._wait(loop, gap)

    # --- results ----------------------------------------------------------------------
    def _final(self, answer: Answer) -> bool:
        """Act on a decommission; True when the link has nothing more to do."""
        if answer.outcome is Outcome.DECOMMISSIONED:
            with self._lock:
                first = not self._gone
                self._gone = True
            if first:
                instance = str(answer.body.get("instance_id", ""))
                self.post(ms.Decommissioned(instance, answer.detail))
            return True
        return self.stopped.is_set()

    def _report(self, answer: Answer, which: str = "") -> None:
        answer = labelled(answer, which)
        until = None
        if answer.retry_after is not None and answer.outcome is not Outcome.ACCEPTED:
            until = self.wall() + min(answer.retry_after, RETRY_AFTER_MAX)
        if answer.outcome is Outcome.ACCEPTED:
            self.post(ms.ContactOk(answer.detail))
        elif answer.outcome is Outcome.REFUSED:
            log.warning("controller refused: %s", answer.detail)
            self.post(ms.Refused(answer.detail, until))
        else:
            log.debug("controller contact failed: %s", answer.detail)
            self.post(ms.ContactLost(answer.detail, until))
