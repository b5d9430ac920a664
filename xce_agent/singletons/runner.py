"""Singleton components: each runs only while this host holds its lease at the controller.

One lease holder machine (lease_holder.py) per singleton component, driven here with the
reactor's monotonic clock and timers; requests go out on one worker thread per lease so a
slow controller never blocks the event loop. A singleton runs under its fence (fence.py),
which gets every deadline the holder computes through a pipe and stops the component by
itself if the agent cannot.

The holder is this agent run (`session`, random per run): a restarted agent does not take
over what the previous run held, whose component may still be running until its deadline.
It adopts nothing either: a singleton component left by a previous run is stopped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from xce_agent.core import lease_holder as lh
from xce_agent.core.singleton_holds import SingletonHold
from xce_agent.metrics.leases import LeaseCounts, SingletonSample, count
from xce_agent.singletons import fence
from xce_agent.supervision import machine as m
from xce_agent.supervision.event_queue import EventQueue
from xce_agent.supervision.reactor import Reactor, TimerHandle
from xce_agent.supervision.spec import ComponentSpec
from xce_protocol.reasons import Reason

log = logging.getLogger(__name__)

_UP = (m.Phase.STARTING, m.Phase.RUNNING, m.Phase.STOPPING)
_GAVE_UP = (m.Phase.FATAL, m.Phase.EXITED, m.Phase.HELD)  # supervision will not restart it


def fenced(spec: ComponentSpec) -> ComponentSpec:
    """The spec the supervisor runs: a singleton's command under its fence."""
    if spec.singleton is None:
        return spec
    wrapper = [
        sys.executable,
        "-m",
        "xce_agent.singletons.fence",
        "--stop-signal",
        str(spec.stop_signal),
    ]
    wrapper += ["--stop-timeout", f"{spec.stop_timeout:g}", "--"]
    return replace(spec, command=(*wrapper, *spec.command))


class LeaseCalls(Protocol):
    """The controller's lease endpoints, as the holder machine's events. Called on a worker
    thread; must return within `timeout` seconds and never raise."""

    def acquire(
        self, lease: str, session: str, ttl: float, timeout: float, sent: float
    ) -> lh.Event: ...
    def release(self, lease: str, session: str, timeout: float) -> None: ...


class Components(Protocol):
    """What the singletons need of supervision: events straight to a component's machine
    (its start and stop commands are what ask the singletons)."""

    def post(self, name: str, event: m.Event) -> None: ...
    def set_env(self, name: str, env: Mapping[str, str], fds: tuple[int, ...]) -> None: ...


@dataclass
class _Lease:
    """The I/O side of one holder: its timer, its fence pipe, its request thread."""

    name: str
    terms: lh.Terms
    state: lh.HolderState
    timer: TimerHandle | None = None
    pipe: tuple[int, int] | None = None
    jobs: queue.Queue[Callable[[], None] | None] | None = None
    thread: threading.Thread | None = None
    counts: LeaseCounts = field(default_factory=LeaseCounts)


class Singletons:
    def __init__(
        self,
        specs: Iterable[ComponentSpec],
        components: Components,
        reactor: Reactor,
        calls: LeaseCalls,
    ) -> None:
        self.session = secrets.token_hex(8)
        self.components = components
        self.reactor = reactor
        self.calls = calls
        self.leases: dict[str, _Lease] = {}
        # An action (a start) may report back (the component is up) before the actions of
        # the event that caused it are all done.
        self._events: EventQueue[lh.Event] = EventQueue(self._apply)
        self.barred = ""  # why no lease can be held here any more (the host was decommissioned)
        self.on_change: Callable[[], None] = lambda: None  # what metrics show changed
        for spec in specs:
            if spec.singleton is not None:
                terms = lh.Terms.of(spec.singleton, spec.stop_timeout)
                self.leases[spec.name] = _Lease(spec.name, terms, lh.HolderState())

    def __contains__(self, name: str) -> bool:
        return name in self.leases

    def holds(self, name: str) -> bool:
        return self.leases[name].state.phase is lh.Phase.HOLDING

    # --- from the agent ---------------------------------------------------------------
    def want(self, name: str, reason: str) -> None:
        if not self.barred:
            self._post(name, lh.Want(reason))

    def bar(self, reason: str) -> None:
        """The host was decommissioned: no hold can be renewed, no lease granted again. Stop
        every singleton now, not at its hold's deadline, and stop asking (each request was
        refused, every ttl/3, for as long as the agent ran)."""
        if self.barred:
            return
        self.barred = reason
        for name in self.leases:
            self._post(name, lh.Unwant(reason))

    def unwant(self, name: str, reason: str) -> None:
        self._post(name, lh.Unwant(reason))

    def component_changed(self, name: str, cstate: m.ComponentState) -> None:
        lease = self.leases.get(name)
        if lease is None:
            return
        up = cstate.phase in _UP
        if cstate.phase in _GAVE_UP and lease.state.phase is lh.Phase.HOLDING:
            # It will not run here until an operator starts it again: let another host.
            why = f"{cstate.phase.value}: {cstate.reason or 'not restarted'}; lease given back"
            self._post(name, lh.ComponentDown())
            self._post(name, lh.Unwant(why))
            return
        if up == (not lease.state.down):
            if up and cstate.phase is m.Phase.STARTING:
                self._post(name, lh.ComponentUp())  # a restart: its new fence needs a line
            return
        self._post(name, lh.ComponentUp() if up else lh.ComponentDown())

    def waiting(self, name: str) -> str:
        """Why a singleton asked to start is not running yet; "" if it may run."""
        lease = self.leases.get(name)
        if lease is None or lease.state.phase is lh.Phase.HOLDING:
            return ""
        if self.barred:
            return f"never starts here: {self.barred}"
        detail = f" (last answer: {lease.state.detail})" if lease.state.detail else ""
        return f"starts once this host holds lease {lease.terms.lease}{detail}"

    def releasing(self) -> bool:
        """A lease is still to be given back (a graceful stop waits for it)."""
        return any(le.state.phase is lh.Phase.RELEASING for le in self.leases.values())

    def status(self) -> tuple[SingletonHold, ...]:
        """Each singleton's hold, for `xce-agent status`."""
        return tuple(self._hold(name, le) for name, le in self.leases.items())

    def _hold(self, name: str, lease: _Lease) -> SingletonHold:
        state = lease.state
        detail, code = state.detail, state.code
        if state.phase is lh.Phase.IDLE:  # the last answer is history; why nothing is asked
            barred = Reason.REFUSED_DECOMMISSIONED.value
            detail, code = (self.barred, barred) if self.barred else ("", code)
        return SingletonHold(name, lease.terms.lease, state.phase.value, state.token, detail, code)

    def samples(self) -> tuple[SingletonSample, ...]:
        return tuple(
            SingletonSample(
                name, le.terms.lease, le.state.phase.value, le.state.code, le.state.token, le.counts
            )
            for name, le in self.leases.items()
        )

    def close(self, wait: float = 2.0) -> None:
        """The agent exits: let the request threads finish what they have (a release) for
        up to `wait` seconds. The fence pipes stay open until the process ends, so each
        fence keeps the last deadline it was given."""
        threads = []
        for lease in self.leases.values():
            if lease.timer is not None:
                lease.timer.cancel()
            if lease.jobs is not None:
                lease.jobs.put(None)
            if lease.thread is not None:
                threads.append(lease.thread)
        end = time.monotonic() + wait
        for thread in threads:
            thread.join(max(0.0, end - time.monotonic()))

    # --- the machine ------------------------------------------------------------------
    def _post(self, name: str, event: lh.Event) -> None:
        self._events.post(name, event)

    def _apply(self, name: str, event: lh.Event) -> None:
        lease = self.leases[name]
        now = self.reactor.clock.monotonic()
        before, counted = lease.state, lease.counts
        lease.state, actions = lh.step(lease.terms, before, event, now)
        lease.counts = count(counted, before, event, lease.state)
        code = {"reason_code": lease.state.code, "component": name}
        if lease.state.phase is not before.phase:
            log.info(
                "%s: lease %s %s -> %s (%s)",
                name,
                lease.terms.lease,
                before.phase.value,
                lease.state.phase.value,
                getattr(event, "reason", "") or lease.state.detail,
                extra=code,
            )
        elif isinstance(event, lh.Failed) and lease.state.detail != before.detail:
            log.warning("%s: lease %s: %s", name, lease.terms.lease, lease.state.detail, extra=code)
        for action in actions:
            self._perform(lease, action, now)
        self._schedule(lease)
        seen = (before.phase, before.code, before.token, counted)
        if seen != (lease.state.phase, lease.state.code, lease.state.token, lease.counts):
            self.on_change()

    def _schedule(self, lease: _Lease) -> None:
        if lease.timer is not None:
            lease.timer.cancel()
            lease.timer = None
        when = lh.next_deadline(lease.state)
        if when is not None:
            lease.timer = self.reactor.call_at(when, lambda: self._post(lease.name, lh.Tick()))

    def _perform(self, lease: _Lease, action: lh.Action, now: float) -> None:
        if isinstance(action, lh.Ask):
            timeout = lh.request_timeout(lease.terms, lease.state, now)
            terms, session = lease.terms, self.session

            def ask() -> None:
                event = self.calls.acquire(terms.lease, session, terms.ttl, timeout, now)
                self.reactor.call_soon_threadsafe(lambda: self._post(lease.name, event))

            self._submit(lease, ask)
        elif isinstance(action, lh.Start):
            self._new_pipe(lease, action.token, action.valid_until)
            self.components.post(lease.name, m.Start(f"holds lease {lease.terms.lease}"))
        elif isinstance(action, lh.Extend):
            self._tell_fence(lease, action.token, action.valid_until)
        elif isinstance(action, lh.Stop):
            code = {"reason_code": action.code.value, "component": lease.name}
            log.warning("%s: stopping: %s", lease.name, action.reason, extra=code)
            self.components.post(lease.name, m.Stop(action.reason, action.code))
        else:
            name, session, limit = lease.terms.lease, self.session, lease.terms.renew_every
            self._submit(lease, lambda: self.calls.release(name, session, limit))

    def _submit(self, lease: _Lease, job: Callable[[], None]) -> None:
        if lease.jobs is None:
            jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
            lease.jobs = jobs
            lease.thread = threading.Thread(
                target=_work, args=(jobs,), name=f"lease-{lease.name}", daemon=True
            )
            lease.thread.start()
        lease.jobs.put(job)

    # --- the fence pipe ---------------------------------------------------------------
    def _new_pipe(self, lease: _Lease, token: int, valid_until: float) -> None:
        """One pipe per hold: a fence never mixes the deadlines of two grants."""
        self._close_pipe(lease)
        read, write = os.pipe()
        os.set_blocking(write, False)
        lease.pipe = (read, write)
        env = {fence.FD_ENV: str(read), fence.NAME_ENV: lease.terms.lease}
        env[fence.AGENT_ENV] = str(os.getpid())
        self.components.set_env(lease.name, env, (read,))
        self._tell_fence(lease, token, valid_until)

    def _tell_fence(self, lease: _Lease, token: int, valid_until: float) -> None:
        if lease.pipe is None:
            return
        read, write = lease.pipe
        data = fence.line(token, valid_until)
        try:
            os.write(write, data)
        except BlockingIOError:
            # Full: no fence has read for a long while. What it has not read is older than
            # this line; drop it (we hold the read end too) and write again.
            with contextlib.suppress(BlockingIOError):
                os.set_blocking(read, False)
                while os.read(read, 65536):
                    pass
            with contextlib.suppress(BlockingIOError):
                os.write(write, data)

    def _close_pipe(self, lease: _Lease) -> None:
        if lease.pipe is not None:
            for fd in lease.pipe:
                os.close(fd)
            lease.pipe = None


def _work(jobs: queue.Queue[Callable[[], None] | None]) -> None:
    while True:
        job = jobs.get()
        if job is None:
            return
        try:
            job()
        except Exception:  # a request must never end the lease's thread
            log.exception("lease request failed")
