"""The controller's collector policy: short passes as often as the load needs, cycles freed."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_lifecycle import CFG
from xce_controller import collector
from xce_controller.collector import MAX_PERIOD, MIN_PERIOD, PAUSE_BUDGET, next_period
from xce_controller.service import Controller
from xce_controller.store.sqlite import Store


def test_a_costly_pass_shortens_the_period_at_once_to_the_budget() -> None:
    # 30 ms for a second of survivors: ten passes a second of about 3 ms each.
    assert next_period(1.0, 10 * PAUSE_BUDGET) == pytest.approx(0.1)


def test_the_period_never_goes_below_its_floor() -> None:
    assert next_period(0.1, 100.0) == MIN_PERIOD


def test_cheap_passes_lengthen_the_period_at_most_twofold_up_to_once_a_second() -> None:
    period = MIN_PERIOD
    seen = []
    for _ in range(10):
        period = next_period(period, PAUSE_BUDGET / 1000)
        seen.append(period)
    assert seen[0] == pytest.approx(2 * MIN_PERIOD)
    assert all(b <= 2 * a + 1e-12 for a, b in zip(seen, seen[1:]))
    assert seen[-1] == MAX_PERIOD


def test_a_pass_that_took_no_measurable_time_lengthens_the_period() -> None:
    assert next_period(0.2, 0.0) == pytest.approx(0.4)


def test_a_pass_at_the_budget_keeps_the_period() -> None:
    assert next_period(0.25, PAUSE_BUDGET) == pytest.approx(0.25)


@pytest.fixture
def restore_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


class Node:
    def __init__(self) -> None:
        self.me = self


@pytest.mark.usefixtures("restore_gc")
def test_a_pass_frees_young_cycles_and_freezes_what_lives() -> None:
    dead = Node()
    gone = weakref.ref(dead)
    del dead  # a cycle: only the collector can free it
    alive = [Node()]
    assert gone() is not None
    took = collector.freeze_young()
    assert gone() is None  # collected, not frozen for ever
    assert gc.get_freeze_count() > 0 and alive
    assert gc.get_threshold()[2] == 1 << 30  # the full pass never runs on its own
    assert took >= 0.0


def test_the_controller_freezes_as_often_as_the_passes_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pauses = [10 * PAUSE_BUDGET, 10 * PAUSE_BUDGET, PAUSE_BUDGET / 100, PAUSE_BUDGET / 100]
    calls: list[float] = []

    async def main() -> Controller:
        loop = asyncio.get_running_loop()
        enough = asyncio.Event()

        def freeze_young() -> float:
            calls.append(loop.time())
            if len(calls) == len(pauses):
                enough.set()
            return pauses[min(len(calls), len(pauses)) - 1]

        monkeypatch.setattr(collector, "freeze_young", freeze_young)
        ctl = Controller(CFG, Store(tmp_path / "db"))
        ctl.tune_gc = True
        ctl.start()
        await asyncio.wait_for(enough.wait(), 30)
        await ctl.stop()
        return ctl

    ctl = asyncio.run(main())
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    # 1 s -> 0.1 s at once (10x the budget), 0.05 s (the floor), then 0.1 s again (doubled).
    assert gaps[0] >= 0.1 - 0.01 and gaps[1] >= MIN_PERIOD - 0.01 and gaps[2] >= 0.1 - 0.01
    assert ctl._freeze_period == pytest.approx(0.2)
    assert ctl._freezer is not None and ctl._freezer.cancelled()  # stop ends the freezes
