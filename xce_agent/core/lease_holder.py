"""Holding the lease of one singleton component: a pure machine.

`step(terms, state, event, now)` returns the next state and the actions the agent must carry
out; `now` is monotonic seconds, and the machine never reads a clock. The component may run
only while the phase is HOLDING, and HOLDING ends at `valid_until`: the send time of the last
request the controller granted, plus the TTL, minus the margin (the component's stop timeout
plus a guard). The controller counts the TTL from when the request arrived, which is later,
so a component stopped at `valid_until` is dead before anyone else can be granted the lease.
Renewals go out every ttl/3 from the send time of the last granted one; a failed renewal is
retried quickly until `valid_until`.

The same deadline is handed to the component's fence process (singletons/fence.py), which
stops the component by itself if the agent dies or stops: the agent is not the only line of defence.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Union

from xce_agent.supervision.spec import SingletonSpec
from xce_protocol.reasons import Reason


@dataclass(frozen=True)
class Terms:
    lease: str
    ttl: float
    margin: float  # the component is stopped this long before the lease could expire

    @classmethod
    def of(cls, spec: SingletonSpec, stop_timeout: float) -> Terms:
        return cls(spec.lease, spec.ttl, stop_timeout + spec.guard)

    @property
    def renew_every(self) -> float:
        return self.ttl / 3

    @property
    def retry_every(self) -> float:
        return max(self.ttl / 20, 0.05)

    def valid_until(self, sent_at: float) -> float:
        return sent_at + self.ttl - self.margin


class Phase(str, enum.Enum):
    IDLE = "idle"  # not wanted: nothing held, nothing asked
    SEEKING = "seeking"  # wanted: asking for the lease until it is granted
    HOLDING = "holding"  # granted and renewed in time: the component may run
    RELEASING = "releasing"  # no longer wanted: the component stops, then the lease goes back


@dataclass(frozen=True)
class HolderState:
    phase: Phase = Phase.IDLE
    token: int = 0  # the fencing token of the latest grant
    valid_until: float = 0.0  # HOLDING ends here (monotonic)
    next_at: float | None = None  # when to send the next request
    asking: float | None = None  # send time of the request in flight
    renewing: bool = False  # that request was sent while holding (a renewal)
    down: bool = True  # the component is not running (as supervision last said)
    detail: str = ""  # the last answer or failure, for status and logs
    code: str = ""  # its reason code (xce_protocol.reasons), for status and metrics


# --- events -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Want:
    reason: str


@dataclass(frozen=True)
class Unwant:
    reason: str


@dataclass(frozen=True)
class Tick:
    """Time passed; sent at `next_deadline`."""


@dataclass(frozen=True)
class Granted:
    sent_at: float
    token: int


@dataclass(frozen=True)
class Denied:
    """The controller says another holder has the lease (for `retry_in` seconds more)."""

    sent_at: float
    detail: str
    retry_in: float = 0.0


@dataclass(frozen=True)
class Failed:
    """No usable answer: unreachable, timed out, not joined yet, any other refusal."""

    sent_at: float
    detail: str


@dataclass(frozen=True)
class ComponentUp:
    pass


@dataclass(frozen=True)
class ComponentDown:
    pass


Event = Union[Want, Unwant, Tick, Granted, Denied, Failed, ComponentUp, ComponentDown]

# --- actions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    """Send an acquire (or renewal) now; its answer comes back with `now` as sent_at."""


@dataclass(frozen=True)
class Start:
    token: int
    valid_until: float


@dataclass(frozen=True)
class Extend:
    """Tell the component's fence its new deadline."""

    token: int
    valid_until: float


@dataclass(frozen=True)
class Stop:
    reason: str
    code: Reason = Reason.COMPONENT_STOPPED


@dataclass(frozen=True)
class Release:
    pass


Action = Union[Ask, Start, Extend, Stop, Release]
Step = tuple[HolderState, tuple[Action, ...]]


def next_deadline(state: HolderState) -> float | None:
    times = []
    if state.next_at is not None and state.asking is None:
        times.append(state.next_at)
    if state.phase is Phase.HOLDING:
        times.append(state.valid_until)
    return min(times) if times else None


def request_timeout(terms: Terms, state: HolderState, now: float) -> float:
    """How long the request sent now may take: an answer after `valid_until` is of no use."""
    if state.phase is Phase.HOLDING:
        return max(0.05, min(terms.renew_every, state.valid_until - now))
    return terms.renew_every


def step(terms: Terms, state: HolderState, event: Event, now: float) -> Step:
    if isinstance(event, Want):
        return _want(state, now)
    if isinstance(event, Unwant):
        return _unwant(state, event.reason)
    if isinstance(event, (Granted, Denied, Failed)):
        if event.sent_at != state.asking:
            return state, ()  # the answer to a request this state no longer waits for
        state = replace(state, asking=None)
        if isinstance(event, Granted):
            return _due(terms, *_granted(terms, state, event, now), now)
        if isinstance(event, Denied):
            return _due(terms, *_denied(terms, state, event, now), now)
        return _due(terms, *_failed(terms, state, event, now), now)
    if isinstance(event, ComponentUp):
        return _up(terms, state)
    if isinstance(event, ComponentDown):
        return _down(state)
    return _due(terms, state, (), now)


def _due(terms: Terms, state: HolderState, actions: tuple[Action, ...], now: float) -> Step:
    """What time makes due: the end of a hold, the next request."""
    if state.phase is Phase.HOLDING and now >= state.valid_until:
        why = (
            f"lease {terms.lease} not renewed within {terms.ttl - terms.margin:g}s of the "
            f"last granted request ({state.detail})"
        )
        lapsed = Reason.LEASE_NOT_RENEWED
        state = replace(state, phase=Phase.SEEKING, next_at=now, detail=why, code=lapsed.value)
        actions = (*actions, Stop(why, lapsed))
    wanted = state.phase in (Phase.SEEKING, Phase.HOLDING)
    if wanted and state.asking is None and state.next_at is not None and now >= state.next_at:
        state = replace(state, asking=now, next_at=None, renewing=state.phase is Phase.HOLDING)
        actions = (*actions, Ask())
    return state, actions


def _want(state: HolderState, now: float) -> Step:
    if state.phase in (Phase.IDLE, Phase.RELEASING):
        # Releasing: the component is on its way down; if the lease is still ours the next
        # grant is a renewal and the component starts again.
        wanted = replace(state, phase=Phase.SEEKING, next_at=now, code=Reason.LEASE_WANTED.value)
        if wanted.asking is None:
            return replace(wanted, asking=now, next_at=None, renewing=False), (Ask(),)
        return wanted, ()
    return state, ()


def _unwant(state: HolderState, reason: str) -> Step:
    if state.phase is Phase.HOLDING:
        given = replace(state, next_at=None, code=Reason.LEASE_RELEASED.value)
        if state.down:
            return replace(given, phase=Phase.IDLE), (Stop(reason), Release())
        return replace(given, phase=Phase.RELEASING), (Stop(reason),)
    if state.phase is Phase.SEEKING:
        return replace(state, phase=Phase.IDLE, next_at=None), ()
    return state, ()


def _granted(
    terms: Terms, state: HolderState, ev: Granted, now: float
) -> tuple[HolderState, tuple[Action, ...]]:
    valid = terms.valid_until(ev.sent_at)
    detail = f"held with token {ev.token}"
    if state.phase in (Phase.IDLE, Phase.RELEASING):
        if state.phase is Phase.IDLE or state.down:
            given = Reason.LEASE_RELEASED.value
            return replace(state, phase=Phase.IDLE, token=ev.token, code=given), (Release(),)
        return replace(state, token=ev.token), ()  # released once the component is down
    if state.phase is Phase.HOLDING and ev.token != state.token:
        why = f"lease {terms.lease} was granted again with token {ev.token}: the hold lapsed"
        lost = Reason.LEASE_LOST
        seeking = replace(state, phase=Phase.SEEKING, next_at=now, detail=why, code=lost.value)
        return seeking, (Stop(why, lost),)
    if valid <= now:  # the answer came too late to run on
        late = f"grant of token {ev.token} arrived after its own deadline"
        failed = Reason.LEASE_REQUEST_FAILED.value
        return replace(state, next_at=now, detail=late, code=failed), ()
    renewed = replace(
        state,
        token=ev.token,
        valid_until=max(valid, state.valid_until if state.phase is Phase.HOLDING else 0.0),
        next_at=ev.sent_at + terms.renew_every,
        detail=detail,
        code=Reason.LEASE_GRANTED.value,
    )
    if state.phase is Phase.HOLDING:
        return renewed, (Extend(ev.token, renewed.valid_until),)
    return replace(renewed, phase=Phase.HOLDING), (Start(ev.token, renewed.valid_until),)


def _denied(
    terms: Terms, state: HolderState, ev: Denied, now: float
) -> tuple[HolderState, tuple[Action, ...]]:
    wait = min(terms.renew_every, max(terms.retry_every, ev.retry_in))
    held = Reason.REFUSED_LEASE_HELD.value
    if state.phase is Phase.HOLDING:
        why, code = f"lease {terms.lease} {ev.detail}", Reason.LEASE_LOST
        lost = replace(state, phase=Phase.SEEKING, next_at=now + wait, detail=why, code=code.value)
        return lost, (Stop(why, code),)
    if state.phase is Phase.SEEKING:
        return replace(state, next_at=now + wait, detail=ev.detail, code=held), ()
    return replace(state, detail=ev.detail), ()


def _failed(
    terms: Terms, state: HolderState, ev: Failed, now: float
) -> tuple[HolderState, tuple[Action, ...]]:
    failed = replace(state, detail=ev.detail, code=Reason.LEASE_REQUEST_FAILED.value)
    if state.phase is Phase.HOLDING:
        return replace(failed, next_at=now + terms.retry_every), ()
    if state.phase is Phase.SEEKING:
        return replace(failed, next_at=now + terms.renew_every), ()
    return replace(state, detail=ev.detail), ()


def _up(terms: Terms, state: HolderState) -> Step:
    up = replace(state, down=False)
    if state.phase is Phase.HOLDING:
        return up, (Extend(state.token, state.valid_until),)  # a new fence needs its deadline
    if state.phase is Phase.RELEASING:
        return up, ()
    return up, (Stop(f"lease {terms.lease} is not held by this agent", Reason.LEASE_NOT_HELD),)


def _down(state: HolderState) -> Step:
    down = replace(state, down=True)
    if state.phase is Phase.RELEASING:
        return replace(down, phase=Phase.IDLE, code=Reason.LEASE_RELEASED.value), (Release(),)
    return down, ()
