"""The controller's clock: intervals follow the monotonic clock, whatever the wall clock does."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_lifecycle import CFG
from xce_controller.clock import SteadyClock
from xce_controller.core import lifecycle as lc
from xce_controller.core.model import HostState
from xce_controller.service import Controller
from xce_controller.store.sqlite import Store


class Fake:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_wall_steps_do_not_move_the_clock() -> None:
    wall, mono = Fake(1_000_000.0), Fake(5.0)
    clock = SteadyClock(wall, mono)
    assert clock() == 1_000_000.0
    wall.now += 3600.0  # NTP steps the wall clock an hour forward
    mono.now += 2.0
    assert clock() == 1_000_002.0
    wall.now -= 7200.0  # and back
    mono.now += 1.0
    assert clock() == 1_000_003.0


def test_a_wall_clock_step_does_not_make_hosts_lost(tmp_path: Path) -> None:
    wall, mono = Fake(1_000_000.0), Fake(5.0)
    ctl = Controller(CFG, Store(tmp_path / "db"), SteadyClock(wall, mono))
    host, _, _ = ctl.join(lc.JoinRequest(name="n1", token=ctl.cfg.join_token))
    wall.now += 3600.0  # longer than the 30 s grace
    mono.now += 1.0
    assert ctl.due(host, ctl.clock()) == []  # read from the wall: lost, its jobs requeued
    mono.now += 31.0  # a real silence is still a loss
    assert [f.data["state"] for f in ctl.due(host, ctl.clock())] == [HostState.LOST.value]


def test_the_controller_reads_the_wall_clock_only_at_its_start(tmp_path: Path) -> None:
    ctl = Controller(CFG, Store(tmp_path / "db"))
    assert isinstance(ctl.clock, SteadyClock)
