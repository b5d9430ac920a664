"""The provisioner's decisions: a pure function of records, machines, journal and time.

`plan(view, now)` returns the actions that move each machine of the inventory toward what
its controller record says, given the machine's observed power and the effect journal (the
power steps the controller stores, whoever wrote them). Nothing here does I/O.

Each step carries out one decision: the record's state and the time it entered it
(`decommissioned@1764612345.123456`). A step is written ahead (`begun`) before its request
goes to the BMC, and is only ever asked again for the same decision after its settle time
passed (counted from when this process first saw it) without the machine reaching the
state it asked for. So a restart or a lease takeover re-drives a step that was begun and
not finished, and a step in flight is not sent twice: the new holder waits its settle time
first. The ladders:

* expected, off: `on`.
* decommissioned, lost (both on the to-return list), returned: `shutdown` (graceful), then
  `force_off` once the graceful timeout passed after the BMC took the shutdown (one only
  begun is asked again first), then (to-return states) `ack`, which tells the controller
  the instance is back.
* overdue: `cycle` once (repair step 1); still overdue `repair_wait` after it: `shutdown`,
  `force_off`, `ack` as above (repair step 2).
* open, closed, draining: nothing. A record in a state the operator excluded is never
  powered off; a machine that is not in the inventory is never touched.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Union

from xce_protocol.reasons import Reason
from xce_provisioner.drivers.base import Power, Request

TO_RETURN = ("decommissioned", "lost", "overdue")
OFF_STATES = ("decommissioned", "lost", "returned")
LIVE = ("expected", "open", "closed")  # counted as warm


class Phase(str, enum.Enum):
    BEGUN = "begun"
    ISSUED = "issued"
    CONFIRMED = "confirmed"
    FAILED = "failed"
    GAVE_UP = "gave_up"


IN_FLIGHT = (Phase.BEGUN, Phase.ISSUED)


@dataclass(frozen=True)
class Step:
    decision: str
    action: str
    phase: Phase
    attempt: int = 1
    code: str = ""

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.decision, self.action, self.attempt)


@dataclass(frozen=True)
class Record:
    """A provisioned record as the controller shows it (GET /v1/provisioned)."""

    instance_id: str
    state: str
    decision: str
    jobs_running: int = 0
    steps: tuple[Step, ...] = ()


@dataclass(frozen=True)
class Machine:
    name: str  # the host name it joins as
    instance_id: str
    template: str
    driver: str
    system: str


@dataclass(frozen=True)
class Policy:
    graceful_timeout: float = 60.0
    settle_timeout: float = 30.0  # a power change the BMC accepted shows by then
    retry_wait: float = 5.0  # after a failed request
    attempts: int = 3  # of each request, before the step gives up
    repair_wait: float = 300.0  # after the power cycle of an overdue machine
    exclude_states: tuple[str, ...] = ()  # records in these states are never powered off
    keep_warm: int = 0  # expect machines until this many are expected or joined
    join_deadline: float | None = None  # of what keep_warm expects
    idle_after: float | None = None  # open with no job this long: decommissioned (None: off)


@dataclass(frozen=True)
class View:
    machines: tuple[Machine, ...]
    records: Mapping[str, Record]  # by instance id
    power: Mapping[str, Power]  # by machine name: the last reading
    seen: Mapping[tuple[str, str, int], float]  # step key -> when this process first saw it
    policy: Policy = field(default_factory=Policy)
    idle_since: Mapping[str, float] = field(default_factory=dict)  # instance id -> open, no job


# --- actions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Act:
    """Write `begun`, send `request` to the machine's BMC, write `issued` (or `failed`)."""

    machine: Machine
    decision: str
    action: str
    request: Request
    attempt: int
    code: Reason


@dataclass(frozen=True)
class Note:
    """Write a step's outcome (confirmed, gave_up) without a request."""

    machine: Machine
    decision: str
    action: str
    phase: Phase
    attempt: int
    code: Reason


@dataclass(frozen=True)
class Ack:
    """Tell the controller the instance is back (POST /v1/to-return/ID/ack)."""

    machine: Machine
    decision: str


@dataclass(frozen=True)
class Expect:
    """Record the machine as expected (keep_warm)."""

    machine: Machine


@dataclass(frozen=True)
class Retire:
    """Decommission an idle machine's record (the idle policy); its drain, then the power
    off ladder, follow from the record's next states."""

    machine: Machine
    decision: str
    why: str


@dataclass(frozen=True)
class Blocked:
    """A power off the policy forbids: said once per decision (log, metric)."""

    machine: Machine
    decision: str
    code: Reason
    why: str


Action = Union[Act, Note, Ack, Expect, Retire, Blocked]

_REQUEST = {
    "on": Request.ON,
    "shutdown": Request.SHUTDOWN,
    "force_off": Request.FORCE_OFF,
    "cycle": Request.CYCLE,
}
_TARGET = {"on": Power.ON, "shutdown": Power.OFF, "force_off": Power.OFF}


def plan(view: View, now: float) -> list[Action]:
    actions: list[Action] = []
    for machine in view.machines:
        record = view.records.get(machine.instance_id)
        if record is not None:
            actions.extend(_machine(view, machine, record, now))
    actions.extend(_warm(view))
    actions.extend(_idle(view, now))
    return actions


def _machine(view: View, m: Machine, r: Record, now: float) -> list[Action]:
    power = view.power.get(m.name, Power.UNKNOWN)
    if power is Power.UNKNOWN:
        return []  # no reading (the BMC failed, or a change in between): wait for one
    steps = [s for s in r.steps if s.decision == r.decision]
    earlier = _outcomes(m, r, power)
    if earlier:
        return earlier
    if r.state == "expected":
        return _ladder(view, m, r, steps, power, now, ("on",), Reason.POWER_ON_EXPECTED)
    if r.state == "overdue":
        return _overdue(view, m, r, steps, power, now)
    if r.state in OFF_STATES:
        return _off(view, m, r, steps, power, now, Reason.POWER_OFF_RETURN)
    return []


def _outcomes(m: Machine, r: Record, power: Power) -> list[Action]:
    """Steps of earlier decisions still in flight (the record moved on: the machine that was
    powered on joined): confirmed once their power state shows, never asked again. Only a
    decision's last step: a shutdown the forced off came after did not power it off."""
    last: dict[str, Step] = {}
    for step in r.steps:
        if step.decision != r.decision and step.action in _TARGET:
            last[step.decision] = step
    return [
        Note(m, s.decision, s.action, Phase.CONFIRMED, s.attempt, Reason.POWER_CONFIRMED)
        for s in last.values()
        if s.phase in IN_FLIGHT and power is _TARGET[s.action]
    ]


def _overdue(
    view: View, m: Machine, r: Record, steps: list[Step], power: Power, now: float
) -> list[Action]:
    cycle = [s for s in steps if s.action == "cycle"]
    if not cycle:
        return [Act(m, r.decision, "cycle", Request.CYCLE, 1, Reason.POWER_CYCLE_OVERDUE)]
    last = cycle[-1]
    if last.phase is Phase.FAILED:
        return _again(view, m, r, last, now, Reason.POWER_CYCLE_OVERDUE)
    since = view.seen.get(last.key)
    if since is None or now - since < view.policy.repair_wait:
        return []
    return _off(view, m, r, steps, power, now, Reason.POWER_OFF_OVERDUE)


def _off(
    view: View, m: Machine, r: Record, steps: list[Step], power: Power, now: float, code: Reason
) -> list[Action]:
    if r.state in view.policy.exclude_states or r.jobs_running > 0:
        if power is Power.OFF:
            return []
        why = f"{r.state} is excluded" if r.jobs_running == 0 else "jobs run there"
        return [Blocked(m, r.decision, Reason.POWER_OFF_EXCLUDED, why)]
    done = _ladder(view, m, r, steps, power, now, ("shutdown", "force_off"), code)
    if done or power is not Power.OFF:
        return done
    return [Ack(m, r.decision)] if r.state in TO_RETURN else []


def _ladder(
    view: View,
    m: Machine,
    r: Record,
    steps: list[Step],
    power: Power,
    now: float,
    actions: tuple[str, ...],
    code: Reason,
) -> list[Action]:
    """The next step of a ladder of requests toward one power state ([] once it holds)."""
    target = _TARGET[actions[0]]
    mine = [s for s in steps if s.action in actions]
    if not mine:
        return (
            []
            if power is target
            else [Act(m, r.decision, actions[0], _REQUEST[actions[0]], 1, code)]
        )
    last = mine[-1]
    if last.phase is Phase.CONFIRMED or last.phase is Phase.GAVE_UP:
        return []
    if power is target:
        return [
            Note(m, r.decision, last.action, Phase.CONFIRMED, last.attempt, Reason.POWER_CONFIRMED)
        ]
    if last.phase is Phase.FAILED:
        return _again(view, m, r, last, now, code)
    since = view.seen.get(last.key)
    wait = view.policy.settle_timeout
    if last.action == "shutdown":
        wait = view.policy.graceful_timeout
    if since is None or now - since < wait:
        return []
    if last.action == "shutdown" and "force_off" in actions and last.phase is Phase.ISSUED:
        return [Act(m, r.decision, "force_off", Request.FORCE_OFF, 1, Reason.POWER_OFF_FORCED)]
    # A shutdown only begun may never have left (the run ended, or the write's answer was
    # lost, between its `begun` and its request): asked again, gracefully, before any force.
    if last.attempt >= view.policy.attempts:
        return [Note(m, r.decision, last.action, Phase.GAVE_UP, last.attempt, Reason.POWER_GAVE_UP)]
    return [Act(m, r.decision, last.action, _REQUEST[last.action], last.attempt + 1, code)]


def _again(view: View, m: Machine, r: Record, last: Step, now: float, code: Reason) -> list[Action]:
    """A request the BMC failed: again after the retry wait, up to the attempts."""
    since = view.seen.get(last.key)
    if since is None or now - since < view.policy.retry_wait:
        return []
    if last.attempt >= view.policy.attempts:
        return [Note(m, r.decision, last.action, Phase.GAVE_UP, last.attempt, Reason.POWER_GAVE_UP)]
    return [Act(m, r.decision, last.action, _REQUEST[last.action], last.attempt + 1, code)]


def _warm(view: View) -> list[Action]:
    """keep_warm: expect one more machine while fewer than that are expected or joined."""
    if view.policy.keep_warm <= 0:
        return []
    warm = sum(
        1
        for m in view.machines
        if (r := view.records.get(m.instance_id)) is not None and r.state in LIVE
    )
    if warm >= view.policy.keep_warm:
        return []
    for m in view.machines:
        r = view.records.get(m.instance_id)
        if r is None or (r.state == "returned" and view.power.get(m.name) is Power.OFF):
            return [Expect(m)]
    return []


def idle(record: Record) -> bool:
    """What the idle policy counts as idle: open (not closed by anyone), no job there."""
    return record.state == "open" and record.jobs_running == 0


def _idle(view: View, now: float) -> list[Action]:
    """The idle policy: decommission machines open with no job for `idle_after`, while more
    than `keep_warm` are warm; one a pass, so the count is read again before the next."""
    after = view.policy.idle_after
    if after is None:
        return []
    warm = [m for m in view.machines if (r := view.records.get(m.instance_id)) and r.state in LIVE]
    if len(warm) <= view.policy.keep_warm:
        return []
    for m in warm:
        r = view.records[m.instance_id]
        since = view.idle_since.get(m.instance_id)
        if idle(r) and since is not None and now - since >= after:
            return [Retire(m, r.decision, f"idle for {after:g}s (idle_after)")]
    return []
