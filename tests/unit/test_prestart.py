"""The pre-start invariant's parts: a deferred start (machine), the intent in the state
file, the writer's synchronous save, and the search for live copies with real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from xce_agent.components.prestart import live_copies, stop_copies, ticks_now
from xce_agent.errors import UnexpectedEvent
from xce_agent.state import AgentState, StartIntent, StateStore, StateWriter
from xce_agent.supervision import machine as m
from xce_agent.supervision.boot import boot_id, boot_time
from xce_agent.supervision.identity import observe, start_ticks
from xce_agent.supervision.process import MARK_COMPONENT, MARK_OWNER
from xce_agent.supervision.spec import ComponentSpec, RestartSpec
from xce_protocol.reasons import Reason

SPEC = ComponentSpec(
    name="w", command=("/bin/true",), restart=RestartSpec(give_up_starts=3, give_up_window=60.0)
)


def test_a_deferred_start_backs_off_longer_each_time_and_is_never_a_crash_loop() -> None:
    state = m.step(SPEC, m.ComponentState(), m.Start(), 0.0).state
    delays = []
    for n in range(12):  # far more than give_up_starts: a full disk is no crash loop
        state = m.step(SPEC, state, m.Deferred("disk full"), float(n * 100)).state
        assert state.phase is m.Phase.BACKOFF and state.code == Reason.STATE_UNWRITABLE
        assert state.deadline is not None
        delays.append(state.deadline - n * 100)
        after = m.step(SPEC, state, m.Timer(), state.deadline)
        assert after.actions == (m.Spawn(),) and after.state.phase is m.Phase.STARTING
        state = after.state
    assert delays[0] == m.DEFER_FIRST and delays[1] == 2 * m.DEFER_FIRST
    assert max(delays) == m.DEFER_MAX and state.starts == ()
    running = m.step(SPEC, state, m.Spawned(7), 2000.0).state
    assert running.phase is m.Phase.RUNNING and running.deferrals == 0
    # A deferral comes only while starting; one whose start was stopped meanwhile stops.
    with pytest.raises(UnexpectedEvent):
        m.step(SPEC, running, m.Deferred("late"), 2001.0)
    starting = m.step(SPEC, m.ComponentState(), m.Start(), 0.0).state
    stopped = m.step(SPEC, starting, m.Stop(), 0.1).state
    halted = m.step(SPEC, stopped, m.Deferred("disk full"), 0.2).state
    assert halted.phase is m.Phase.STOPPED and halted.code == Reason.STATE_UNWRITABLE


def test_start_intents_survive_the_state_file_and_bad_ones_are_dropped() -> None:
    intent = StartIntent("worker", "b00t", 1234, "/var/lib/xce-agent")
    data = AgentState(starting=(intent,)).to_json()
    assert AgentState.from_json(json.loads(json.dumps(data))).starting == (intent,)
    data["starting"] = [
        {"name": "../x", "boot_id": "b", "after_ticks": 1, "owner": ""},
        {"name": "w", "boot_id": "b", "after_ticks": "1", "owner": ""},
        {"name": "w", "extra": 1},
        "junk",
    ]
    assert AgentState.from_json(data).starting == ()
    del data["starting"]  # written by an agent before intents
    assert AgentState.from_json(data).starting == ()


class FlakyStore(StateStore):
    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.fail = True

    def save(self, state: AgentState) -> None:
        if self.fail:
            raise OSError(28, "No space left on device")
        super().save(state)


def test_save_now_says_whether_the_state_reached_the_disk(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path)
    writer = StateWriter(store)
    try:
        assert "No space left on device" in writer.save_now(AgentState(instance_id="a"))
        assert not store.path.exists()
        store.fail = False
        assert writer.save_now(AgentState(instance_id="b")) == ""
        assert store.load() == AgentState(instance_id="b")
    finally:
        writer.close()


@pytest.fixture
def marked(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process started as component `w` of the agent of `tmp_path`, in its own session."""
    env = {**os.environ, MARK_COMPONENT: "w", MARK_OWNER: str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print(flush=True); time.sleep(60)"],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # it has exec'd: its identity and environment are its own
    yield proc
    proc.kill()
    proc.wait()
    proc.stdout.close()


def test_a_live_copy_is_found_by_its_identity_or_its_start_intent_and_stopped(
    tmp_path: Path, marked: subprocess.Popen[bytes]
) -> None:
    owner = str(tmp_path)
    identity = observe(marked.pid)
    assert identity.ticks == start_ticks(marked.pid) > 0
    found = live_copies("w", [identity], [], owner, watched=[])
    assert [c.pid for c in found] == [marked.pid]
    assert live_copies("w", [identity], [], owner, watched=[marked.pid]) == []
    assert live_copies("other", [identity], [], owner, watched=[]) == []  # not its marks
    assert live_copies("w", [identity], [], "/elsewhere", watched=[]) == []  # another agent's
    # No identity saved: the intent written before the start finds it, an intent written
    # after its start does not.
    before = StartIntent("w", boot_id(), identity.ticks - 1, owner)
    assert [c.pid for c in live_copies("w", [], [before], owner, [])] == [marked.pid]
    after = StartIntent("w", boot_id(), ticks_now() + 100, owner)
    assert live_copies("w", [], [after], owner, []) == []
    assert live_copies("w", [], [StartIntent("w", "other boot", 0, owner)], owner, []) == []
    assert stop_copies(found) == []
    assert marked.wait(timeout=5) == -9


def other_view(boot: str) -> str:
    """This boot's id as the other view of a container shows it: nspawn's own kernel id from
    a shell, the kernel's from a service with a private /proc/sys; PID 1 is the same."""
    _, sep, init = boot.partition("+")
    return f"00000000-0000-0000-0000-000000000000{sep}{init}"


def test_a_copy_recorded_by_an_agent_with_the_other_view_of_the_boot_is_still_found(
    tmp_path: Path, marked: subprocess.Popen[bytes]
) -> None:
    """The agent's unit reads one boot id, a root shell in the same container another: an
    agent started by hand must still know the unit's agent's worker (never start a second)."""
    owner = str(tmp_path)
    identity = observe(marked.pid)
    assert identity.boot_time == boot_time() > 0  # recorded, else the views cannot be told
    seen_elsewhere = replace(identity, boot_id=other_view(identity.boot_id))
    assert [c.pid for c in live_copies("w", [seen_elsewhere], [], owner, [])] == [marked.pid]
    intent = StartIntent("w", other_view(boot_id()), identity.ticks - 1, owner, boot_time())
    assert [c.pid for c in live_copies("w", [], [intent], owner, [])] == [marked.pid]
    # A reboot moves the boot time: then the record is another boot's.
    rebooted = replace(seen_elsewhere, boot_time=boot_time() - 3600)
    assert live_copies("w", [rebooted], [], owner, []) == []
    data = AgentState(starting=(intent,)).to_json()
    assert AgentState.from_json(json.loads(json.dumps(data))).starting == (intent,)


def test_an_unmarked_process_with_the_exact_identity_is_left_alone(tmp_path: Path) -> None:
    """A stranger (a state forged with its identity) is never signalled, unless it sits in
    the component's cgroup."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        identity = observe(proc.pid)
        assert live_copies("w", [identity], [], str(tmp_path), []) == []
        intent = StartIntent("w", boot_id(), 0, str(tmp_path))
        assert live_copies("w", [], [intent], str(tmp_path), []) == []
        in_cgroup = live_copies("w", [identity], [], str(tmp_path), [], lambda p: True)
        assert [c.pid for c in in_cgroup] == [proc.pid]
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
