"""Held watches end spread out, and a burst of expiries leaves the loop to other work."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path

from xce_controller import watch_expiry as we
from xce_controller.core import lifecycle as lc
from xce_controller.core.config import ClusterConfig, Template
from xce_controller.service import Controller
from xce_controller.store.sqlite import Store

BURST = 5000  # watches begun in the same second, as after a controller restart


def test_holds_are_a_random_share_of_what_was_asked() -> None:
    draws = iter([0.0, 1.0, 0.5])
    expiries = we.Expiries(rand=lambda: next(draws))
    assert [expiries.hold(30.0) for _ in range(3)] == [18.0, 30.0, 24.0]


def test_a_first_hold_is_within_what_was_asked() -> None:
    low, high = we.HOLD_SHARE
    corners = [we.first_hold(30.0, u, v) for u in (0.0, 1.0) for v in (0.0, 1.0)]
    assert corners == [0.0, 30.0 * low, 0.0, 30.0 * high]
    rng = random.Random(7)  # noqa: S311 - reproducible draws
    holds = [we.Expiries(rand=rng.random).hold(30.0, first=True) for _ in range(10_000)]
    assert min(holds) >= 0.0 and max(holds) <= 30.0 * high
    # The residual of a hold under way: its mean is E[H^2] / 2 E[H], 12.25 s for 18-30 s.
    assert abs(sum(holds) / len(holds) - 12.25) < 0.3


def ends_per_second(first_round: bool, hosts: int = 5000, seconds: int = 90) -> Counter[int]:
    """When the watches of `hosts` agents that all asked for 30 s at the same instant end,
    round after round (each re-watches at once on its connection)."""
    expiries = we.Expiries(rand=random.Random(3).random)  # noqa: S311 - reproducible
    ends: Counter[int] = Counter()
    for _ in range(hosts):
        at = expiries.hold(30.0, first=first_round)
        while at < seconds:
            ends[int(at)] += 1
            at += expiries.hold(30.0)
    return ends


def test_watches_begun_together_end_at_the_steady_rate_from_the_first_round() -> None:
    """Before: each first hold was 60-100 % of 30 s, so the burst ended within 12 s at twice
    the steady rate, and that peak recurred, smoothed, in the rounds after."""
    low, high = we.HOLD_SHARE
    steady = 5000 / (30.0 * (low + high) / 2)  # ends per second once the fleet is spread
    assert max(ends_per_second(first_round=True).values()) < 1.25 * steady
    assert max(ends_per_second(first_round=False).values()) > 1.8 * steady  # the old peak


def test_a_round_starts_with_a_host_s_first_watch_or_one_after_a_pause() -> None:
    now = [100.0]
    expiries = we.Expiries(clock=lambda: now[0])
    assert expiries.first("h1", held=False)  # never watched (a restart, a new host)
    expiries.answered("h1")
    now[0] += 1.0
    assert not expiries.first("h1", held=False)  # its agent re-watching
    assert expiries.first("h1", held=True)  # a second watch beside one held: a new agent
    now[0] += we.REWATCH
    assert expiries.first("h1", held=False)  # back after a pause


def test_the_controller_holds_a_round_s_first_watch_for_a_residual_share(tmp_path: Path) -> None:
    cfg = ClusterConfig(templates={"default": Template("default")}, join_token="join-token-0123")
    ctl = Controller(cfg, Store(tmp_path / "db"))
    host, _, _ = ctl.join(lc.JoinRequest(name="h1", instance_id="i-1", token=cfg.join_token))
    seen: list[bool] = []

    def hold(asked: float, first: bool = False) -> float:
        seen.append(first)
        return 0.001

    ctl.expiries.hold = hold  # type: ignore[method-assign]

    async def main() -> None:
        for _ in range(2):
            await ctl.watch(host, ctl.host_version.get(host.key, 0), 30.0)

    asyncio.run(main())
    assert seen == [True, False]


def test_a_burst_of_expiries_lets_other_callbacks_run_between_slices() -> None:
    """Before: every watch of a burst was answered before the loop read anything else."""

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        expiries = we.Expiries(rand=lambda: 1.0)
        futures = [loop.create_future() for _ in range(BURST)]
        for fut in futures:
            expiries.add(fut, 0.05)
        seen: list[int] = []

        def probe() -> None:  # a heartbeat's read, ready when the burst began
            seen.append(sum(f.done() for f in futures))

        futures[0].add_done_callback(lambda _: loop.call_soon(probe))
        await asyncio.gather(*futures)
        return seen[0], expiries.released

    during, released = asyncio.run(main())
    assert released == BURST  # every watch ended
    assert during <= BURST // 10, during  # a slice or two, not the whole burst


def test_a_watch_done_before_its_hold_is_left_alone_and_close_ends_the_rest() -> None:
    async def main() -> tuple[bool, bool, int]:
        loop = asyncio.get_running_loop()
        expiries = we.Expiries()
        early, late = loop.create_future(), loop.create_future()
        expiries.add(early, 0.01)
        expiries.add(late, 60.0)
        early.set_result(None)  # its host changed
        await asyncio.sleep(0.05)
        expiries.close()
        return early.done(), late.done(), expiries.released

    assert asyncio.run(main()) == (True, True, 0)
