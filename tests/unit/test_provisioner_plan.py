"""xce_provisioner.plan: each guarantee of its docstring, stepped through on a fake clock."""

from __future__ import annotations

from dataclasses import replace

from xce_protocol.reasons import Reason
from xce_provisioner.drivers.base import Power, Request
from xce_provisioner.plan import (
    Ack,
    Act,
    Action,
    Blocked,
    Expect,
    Machine,
    Note,
    Phase,
    Policy,
    Record,
    Retire,
    Step,
    View,
    plan,
)

M1 = Machine("node1", "rf-1", "small", "lab", "/redfish/v1/Systems/1")
M2 = Machine("node2", "rf-2", "small", "lab", "/redfish/v1/Systems/2")
POLICY = Policy(graceful_timeout=60, settle_timeout=30, retry_wait=5, attempts=3, repair_wait=300)


def view(
    state: str,
    power: Power,
    steps: tuple[Step, ...] = (),
    seen: dict[tuple[str, str, int], float] | None = None,
    policy: Policy = POLICY,
    jobs: int = 0,
    decision: str = "",
) -> View:
    decision = decision or f"{state}@100.000000"
    record = Record("rf-1", state, decision, jobs, steps)
    return View((M1,), {"rf-1": record}, {"node1": power}, seen or {}, policy)


def step(action: str, phase: Phase, attempt: int = 1, decision: str = "") -> Step:
    return Step(decision or "expected@100.000000", action, phase, attempt)


def off_step(action: str, phase: Phase, attempt: int = 1) -> Step:
    return Step("decommissioned@100.000000", action, phase, attempt)


def only(actions: list[Action]) -> Action:
    assert len(actions) == 1, actions
    return actions[0]


def test_an_expected_machine_that_is_off_is_powered_on_keyed_by_its_decision() -> None:
    act = only(plan(view("expected", Power.OFF), 0))
    assert isinstance(act, Act)
    assert (act.decision, act.action, act.request, act.attempt) == (
        "expected@100.000000",
        "on",
        Request.ON,
        1,
    )
    assert act.code is Reason.POWER_ON_EXPECTED


def test_an_expected_machine_that_is_on_already_is_left_alone() -> None:
    assert plan(view("expected", Power.ON), 0) == []


def test_a_step_in_flight_is_not_asked_again_before_its_settle_time() -> None:
    begun = (step("on", Phase.ISSUED),)
    key = ("expected@100.000000", "on", 1)
    assert plan(view("expected", Power.OFF, begun, {key: 10.0}), 39.9) == []
    again = only(plan(view("expected", Power.OFF, begun, {key: 10.0}), 40.0))
    assert isinstance(again, Act) and again.attempt == 2


def test_a_step_begun_by_another_holder_and_not_yet_seen_here_waits_too() -> None:
    """A takeover: the journal shows `begun`, this process has no time for it yet (the
    shell stamps it when it first reads it): nothing is sent."""
    assert plan(view("expected", Power.OFF, (step("on", Phase.BEGUN),)), 1000.0) == []


def test_a_step_whose_power_shows_is_confirmed() -> None:
    note = only(plan(view("expected", Power.ON, (step("on", Phase.ISSUED),)), 0))
    assert isinstance(note, Note)
    assert (note.phase, note.code) == (Phase.CONFIRMED, Reason.POWER_CONFIRMED)


def test_a_step_gives_up_after_its_attempts() -> None:
    steps = (step("on", Phase.ISSUED, 3),)
    note = only(plan(view("expected", Power.OFF, steps, {("expected@100.000000", "on", 3): 0}), 31))
    assert isinstance(note, Note) and note.phase is Phase.GAVE_UP
    gave_up = (*steps, step("on", Phase.GAVE_UP, 3))
    assert plan(view("expected", Power.OFF, gave_up, {}), 1e6) == [], "left to the operator"


def test_a_failed_request_is_retried_after_the_retry_wait() -> None:
    steps = (step("on", Phase.FAILED),)
    seen = {("expected@100.000000", "on", 1): 0.0}
    assert plan(view("expected", Power.OFF, steps, seen), 4.9) == []
    again = only(plan(view("expected", Power.OFF, steps, seen), 5.0))
    assert isinstance(again, Act) and again.attempt == 2


def test_no_reading_no_action() -> None:
    assert plan(view("expected", Power.UNKNOWN), 0) == []
    assert plan(view("decommissioned", Power.UNKNOWN), 0) == []


def test_a_decommissioned_machine_shuts_down_then_is_forced_off_then_returned() -> None:
    first = only(plan(view("decommissioned", Power.ON), 0))
    assert isinstance(first, Act) and first.request is Request.SHUTDOWN
    assert first.code is Reason.POWER_OFF_RETURN
    issued = (off_step("shutdown", Phase.ISSUED),)
    seen = {("decommissioned@100.000000", "shutdown", 1): 0.0}
    assert plan(view("decommissioned", Power.ON, issued, seen), 59) == []
    forced = only(plan(view("decommissioned", Power.ON, issued, seen), 60))
    assert isinstance(forced, Act) and forced.request is Request.FORCE_OFF
    assert forced.code is Reason.POWER_OFF_FORCED
    done = (*issued, off_step("force_off", Phase.ISSUED))
    confirm = only(plan(view("decommissioned", Power.OFF, done, seen), 61))
    assert isinstance(confirm, Note) and confirm.action == "force_off"
    confirmed = (*done, off_step("force_off", Phase.CONFIRMED))
    ack = only(plan(view("decommissioned", Power.OFF, confirmed, seen), 62))
    assert isinstance(ack, Ack)


def test_a_shutdown_only_begun_is_asked_again_gracefully_before_any_force() -> None:
    """Its request may never have left: forcing the machine off then would skip the
    graceful shutdown the journal says was begun."""
    begun = (off_step("shutdown", Phase.BEGUN),)
    seen = {("decommissioned@100.000000", "shutdown", 1): 0.0}
    assert plan(view("decommissioned", Power.ON, begun, seen), 59) == []
    again = only(plan(view("decommissioned", Power.ON, begun, seen), 60))
    assert isinstance(again, Act) and again.request is Request.SHUTDOWN and again.attempt == 2
    issued = (*begun, off_step("shutdown", Phase.BEGUN, 2), off_step("shutdown", Phase.ISSUED, 2))
    seen[("decommissioned@100.000000", "shutdown", 2)] = 60.0
    forced = only(plan(view("decommissioned", Power.ON, issued, seen), 120))
    assert isinstance(forced, Act) and forced.request is Request.FORCE_OFF


def test_a_returned_record_s_forced_off_is_what_is_confirmed_not_its_shutdown() -> None:
    """The record moved on (acked: returned) with both steps still in flight: the power off
    was the forced one's; the shutdown it came after is not written as confirmed."""
    steps = (off_step("shutdown", Phase.ISSUED), off_step("force_off", Phase.ISSUED))
    note = only(plan(view("returned", Power.OFF, steps, decision="returned@200.000000"), 0))
    assert isinstance(note, Note) and (note.action, note.phase) == ("force_off", Phase.CONFIRMED)


def test_a_decommissioned_machine_that_is_off_already_is_returned_at_once() -> None:
    assert isinstance(only(plan(view("decommissioned", Power.OFF), 0)), Ack)


def test_a_returned_machine_still_on_is_powered_off_and_not_acked_again() -> None:
    act = only(plan(view("returned", Power.ON), 0))
    assert isinstance(act, Act) and act.request is Request.SHUTDOWN
    assert plan(view("returned", Power.OFF), 0) == []


def test_an_excluded_state_is_never_powered_off_nor_returned() -> None:
    policy = Policy(exclude_states=("lost",))
    blocked = only(plan(view("lost", Power.ON, policy=policy), 0))
    assert isinstance(blocked, Blocked) and blocked.code is Reason.POWER_OFF_EXCLUDED
    assert plan(view("lost", Power.OFF, policy=policy), 0) == []


def test_a_host_with_jobs_is_never_powered_off() -> None:
    blocked = only(plan(view("returned", Power.ON, jobs=1), 0))
    assert isinstance(blocked, Blocked)


def test_joined_hosts_are_left_alone_whatever_their_power() -> None:
    for state in ("open", "closed", "draining"):
        for power in (Power.ON, Power.OFF):
            assert plan(view(state, power), 0) == []


def test_an_overdue_machine_is_cycled_once_then_powered_off_and_returned() -> None:
    d = "overdue@100.000000"
    cycle = only(plan(view("overdue", Power.ON), 0))
    assert isinstance(cycle, Act) and cycle.request is Request.CYCLE
    assert cycle.code is Reason.POWER_CYCLE_OVERDUE
    cycled = (Step(d, "cycle", Phase.ISSUED),)
    seen = {(d, "cycle", 1): 0.0}
    assert plan(view("overdue", Power.ON, cycled, seen), 299) == [], "one cycle, then wait"
    off = only(plan(view("overdue", Power.ON, cycled, seen), 300))
    assert isinstance(off, Act) and off.request is Request.SHUTDOWN
    assert off.code is Reason.POWER_OFF_OVERDUE
    done = (*cycled, Step(d, "shutdown", Phase.CONFIRMED))
    assert isinstance(only(plan(view("overdue", Power.OFF, done, seen), 301)), Ack)


def test_a_step_of_an_earlier_decision_is_confirmed_once_its_power_shows() -> None:
    """Powered on, the machine joined before the provisioner saw it on: the step's outcome
    is still written, and nothing else is asked."""
    steps = (step("on", Phase.ISSUED),)
    note = only(plan(view("open", Power.ON, steps, decision="open@110.000000"), 0))
    assert isinstance(note, Note) and note.decision == "expected@100.000000"
    assert plan(view("open", Power.OFF, steps, decision="open@110.000000"), 1e6) == []


def test_machines_outside_the_inventory_and_machines_without_records_are_not_touched() -> None:
    records = {
        "rf-9": Record("rf-9", "expected", "expected@1.000000"),
        "rf-1": Record("rf-1", "open", "open@1.000000"),
    }
    v = View((M1, M2), records, {"node1": Power.OFF, "node2": Power.OFF}, {}, POLICY)
    assert plan(v, 0) == []


def test_keep_warm_expects_one_machine_a_pass_and_is_off_by_default() -> None:
    v = View((M1, M2), {}, {"node1": Power.OFF, "node2": Power.OFF}, {}, POLICY)
    assert plan(v, 0) == []
    warm = View((M1, M2), {}, v.power, {}, Policy(keep_warm=2))
    assert plan(warm, 0) == [Expect(M1)]
    one = {"rf-1": Record("rf-1", "expected", "expected@1.000000")}
    assert plan(View((M1, M2), one, v.power, {}, Policy(keep_warm=2)), 0)[-1] == Expect(M2)
    assert plan(View((M1, M2), one, v.power, {}, Policy(keep_warm=1)), 0) == [
        Act(M1, "expected@1.000000", "on", Request.ON, 1, Reason.POWER_ON_EXPECTED)
    ]


def idle_view(now_idle_since: float | None, keep_warm: int = 0, jobs: int = 0) -> View:
    records = {
        "rf-1": Record("rf-1", "open", "open@1.000000", jobs),
        "rf-2": Record("rf-2", "open", "open@1.000000", 1),
    }
    since = {"rf-1": now_idle_since} if now_idle_since is not None else {}
    policy = Policy(idle_after=60, keep_warm=keep_warm)
    power = {"node1": Power.ON, "node2": Power.ON}
    return View((M1, M2), records, power, {}, policy, since)


def test_the_idle_policy_decommissions_a_machine_open_with_no_job_for_idle_after() -> None:
    assert plan(idle_view(0.0), 59) == []
    retire = only(plan(idle_view(0.0), 60))
    assert isinstance(retire, Retire) and retire.machine == M1
    assert plan(idle_view(None), 1e6) == [], "not seen idle yet"
    assert plan(idle_view(0.0, jobs=1), 1e6) == [], "a job runs there"


def test_the_idle_policy_keeps_keep_warm_machines_and_is_off_by_default() -> None:
    assert plan(idle_view(0.0, keep_warm=2), 1e6) == []
    off = replace(idle_view(0.0), policy=Policy())
    assert plan(off, 1e6) == []
